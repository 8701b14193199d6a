// relpos._relpos_ext's experiment functions: each builds its spec from
// plain values, runs it with the GIL released and returns the result's
// JSON text (ExperimentResult::ToJson, CompareResult::ToJson). Only the thin
// layer: python/relpos/experiment.py checks the arguments and parses the
// JSON.
#include "experiment_ext.h"

#include <cstdint>
#include <string>
#include <tuple>
#include <vector>

#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include "relpos/lab/compare.h"
#include "relpos/lab/experiment.h"

namespace nb = nanobind;

namespace relpos {
namespace {

// (section, key, value) triples.
using Settings = std::vector<std::tuple<std::string, std::string, std::string>>;
// (name, settings, checkpoint folder or "").
using Runs = std::vector<std::tuple<std::string, Settings, std::string>>;

// The base configuration: the defaults (or the sweep's) with the JSON
// document {"model": {...}, "train": {...}} merged over them.
ExperimentConfig Base(const std::string& json, ExperimentConfig defaults) {
  if (!json.empty()) defaults.MergeJson(json, "base");
  return defaults;
}

std::vector<SettingValue> Values(const Settings& settings) {
  std::vector<SettingValue> out;
  for (const auto& [section, key, value] : settings) {
    out.push_back({section, key, value});
  }
  return out;
}

std::string Run(const ExperimentSpec& spec, const std::string& out_dir,
                const std::string& json_file) {
  nb::gil_scoped_release release;
  ExperimentOptions options;
  options.out_dir = out_dir;
  options.json_file = json_file;
  return RunExperiment(spec, options).ToJson();
}

std::string RunExperimentJson(const std::string& base, const Runs& runs,
                              const std::vector<int64_t>& lengths,
                              int64_t sequences, const std::string& out_dir,
                              const std::string& json_file) {
  ExperimentSpec spec;
  spec.base = Base(base, ExperimentConfig());
  for (const auto& [name, settings, checkpoint] : runs) {
    spec.runs.push_back(
        {.name = name, .settings = Values(settings), .checkpoint = checkpoint});
  }
  spec.lengths = lengths;
  spec.sequences_per_length = sequences;
  return Run(spec, out_dir, json_file);
}

std::string RunSweepJson(const std::string& base,
                         const std::vector<int64_t>& ks,
                         const std::vector<std::string>& terms,
                         int64_t terms_k,
                         const std::vector<int64_t>& longer_lengths,
                         int64_t sequences, const std::string& out_dir) {
  ExperimentSpec spec =
      SweepExperiment(Base(base, SweepDefaults()),
                      {.ks = ks,
                       .terms = terms,
                       .terms_k = terms_k,
                       .longer_lengths = longer_lengths});
  spec.sequences_per_length = sequences;
  return Run(spec, out_dir, out_dir.empty() ? "" : "sweep.json");
}

std::string RunDemoJson(const std::vector<std::string>& positions,
                        int64_t steps, uint64_t seed, int threads,
                        int64_t sequences, const std::string& out_dir) {
  ExperimentSpec spec = DemoExperiment({.positions = positions,
                                        .steps = steps,
                                        .seed = seed,
                                        .threads = threads,
                                        .sequences = sequences});
  if (out_dir.empty()) {  // nowhere for the checkpoints
    for (ExperimentRun& run : spec.runs) run.checkpoint.clear();
  }
  return Run(spec, out_dir, out_dir.empty() ? "" : "results.json");
}

std::string RunCompareJson(const std::string& base,
                           const std::vector<std::string>& tasks,
                           const std::vector<std::string>& positions,
                           const std::vector<uint64_t>& seeds,
                           const std::vector<int64_t>& extra_lengths,
                           int64_t sequences, const std::string& out_dir) {
  CompareSpec spec;
  spec.base = Base(base, ExperimentConfig());
  spec.tasks = tasks;
  spec.positions = positions;
  spec.seeds = seeds;
  spec.extra_lengths = extra_lengths;
  spec.sequences_per_length = sequences;
  nb::gil_scoped_release release;
  CompareOptions options;
  options.out_dir = out_dir;
  return RunCompare(spec, options).ToJson();
}

}  // namespace

void BindExperiment(nb::module_& m) {
  m.def("run_experiment", &RunExperimentJson, nb::arg("base"),
        nb::arg("runs"), nb::arg("lengths"), nb::arg("sequences"),
        nb::arg("out_dir"), nb::arg("json_file"),
        "Internal: relpos::RunExperiment. Use relpos.experiment.run.");
  m.def("run_sweep", &RunSweepJson, nb::arg("base"), nb::arg("ks"),
        nb::arg("terms"), nb::arg("terms_k"), nb::arg("longer_lengths"),
        nb::arg("sequences"), nb::arg("out_dir"),
        "Internal: relpos::SweepExperiment. Use relpos.experiment.sweep.");
  m.def("run_demo", &RunDemoJson, nb::arg("positions"), nb::arg("steps"),
        nb::arg("seed"), nb::arg("threads"), nb::arg("sequences"),
        nb::arg("out_dir"),
        "Internal: relpos::DemoExperiment. Use relpos.experiment.demo.");
  m.def("run_compare", &RunCompareJson, nb::arg("base"), nb::arg("tasks"),
        nb::arg("positions"), nb::arg("seeds"), nb::arg("extra_lengths"),
        nb::arg("sequences"), nb::arg("out_dir"),
        "Internal: relpos::RunCompare. Use relpos.experiment.compare.");
}

}  // namespace relpos

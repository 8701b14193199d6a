// The experiment runner: a list of runs of one base configuration, each
// trained, evaluated on the same lengths and held-out examples, and
// inspected. `relpos demo` and `relpos sweep` are two such lists
// (DemoExperiment, SweepExperiment; docs/training.md), and every cell of
// `relpos compare`'s grid is trained and evaluated by the same code
// (compare.h). From Python: relpos.experiment.
//
//   relpos::ExperimentSpec spec;
//   spec.base.Set("train", "task", "local_difference");
//   spec.runs = {{.name = "k=4", .settings = {{"model", "max_distance", "4"}}},
//                {.name = "k=16", .settings = {{"model", "max_distance", "16"}}}};
//   spec.lengths = {8, 16, 32};
//   relpos::ExperimentResult r = relpos::RunExperiment(spec);
//   r.runs[1].accuracy_longer_lengths;
#ifndef RELPOS_LAB_EXPERIMENT_H_
#define RELPOS_LAB_EXPERIMENT_H_

#include <csignal>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "relpos/lab/config.h"
#include "relpos/lab/training.h"

namespace relpos {

// One setting as ExperimentConfig::Set takes it: a JSON key or a
// shorthand's flag ("--terms"), and its value as text.
struct SettingValue {
  std::string section, key, value;
};

struct ExperimentRun {
  std::string name;                    // in progress lines, tables and JSON
  std::vector<SettingValue> settings;  // set over the base, in order
  // The folder of its checkpoint inside ExperimentOptions::out_dir (one
  // path component); empty: not saved.
  std::string checkpoint;
};

// The most runs one experiment plans.
inline constexpr int64_t kMaxExperimentRuns = 10000;

struct ExperimentSpec {
  ExperimentConfig base;  // shared settings
  std::vector<ExperimentRun> runs;
  // Evaluated at these task size parameters (for task translate: the upper
  // ends of source-word buckets, as compare.h describes).
  std::vector<int64_t> lengths;
  int64_t sequences_per_length = 128;
  int64_t eval_batch_size = 64;
  int eval_threads = 0;  // 0: each run's training thread count
};

struct ExperimentRunResult {
  std::string name, checkpoint;
  std::vector<SettingValue> settings;
  ExperimentConfig config;  // resolved
  int64_t parameters = 0;
  TrainSummary train;
  double eval_seconds = 0;
  std::vector<LengthMetrics> by_length;  // one per spec.lengths
  // Means over the evaluated lengths inside the training range (<= its
  // longest length) and beyond it; NaN where no length is.
  double accuracy_train_lengths = 0, accuracy_longer_lengths = 0;
  double sequence_accuracy_train_lengths = 0,
         sequence_accuracy_longer_lengths = 0;
  // The share of the model's relative-table rows that training left
  // (almost) untouched, by relpos inspect's rule (inspect.h); < 0 for a
  // model without tables.
  double untrained_row_share = -1;
};

struct ExperimentResult {
  std::string task, metric;
  int64_t train_min_length = 0, train_max_length = 0;
  std::vector<int64_t> lengths;
  int64_t sequences_per_length = 0;
  ExperimentConfig base;  // as given (not resolved)
  std::vector<ExperimentRunResult> runs;  // the finished ones, in order
  bool interrupted = false;  // stopped: runs.size() runs finished
  double seconds = 0;        // wall time of the call
  // {"task", "metric", "train_lengths", "eval_lengths",
  //  "sequences_per_length", "train_config", "model_config", "runs": [...],
  //  "interrupted", "wall_seconds"} (docs/training.md).
  std::string ToJson() const;
};

struct ExperimentOptions {
  // Checkpoints of the runs that name one, and `json_file`, go here. The
  // folder is created once every run is known to be valid and locked for
  // the call (a second writer gets IoError). Empty: nothing is written.
  std::string out_dir;
  // Rewritten (atomically) in out_dir after every finished run; empty: none.
  std::string json_file;
  // Training and evaluation progress; each run's label is "[i/n] name".
  ProgressOptions progress;
  // Polled during training and between runs: nonzero stops the experiment
  // (the run being trained keeps its checkpoint, if it has one, and is not
  // in the result).
  const volatile std::sig_atomic_t* stop_flag = nullptr;
  // After every finished run, with its index + 1 and the number of runs.
  std::function<void(const ExperimentRunResult&, int64_t done, int64_t total)>
      on_run;
};

// The configuration of one run (resolved): the base with the run's
// settings. InvalidArgument naming the setting for a bad value.
ExperimentConfig ExperimentRunConfig(const ExperimentSpec& spec,
                                     const ExperimentRun& run);

// Checks everything first (at least one run and at most kMaxExperimentRuns,
// names and checkpoint folders unique, every run's configuration, the
// lengths, that every run fits in memory; out_dir is not touched before),
// then trains, evaluates and inspects run after run.
ExperimentResult RunExperiment(const ExperimentSpec& spec,
                               const ExperimentOptions& options = {});
// The checks RunExperiment makes first, without training or writing
// anything: for failing before a caller prints or prepares.
void CheckExperiment(const ExperimentSpec& spec,
                     const ExperimentOptions& options = {});

// Shaw et al.'s ablations on one task (`relpos sweep`): one run per k in
// `ks` with both relative terms (their Table 3), then one per term setting
// of `terms` at k = terms_k (Table 4) unless already listed; evaluated at
// about 4 lengths over the training range (step max(1, (hi - lo) / 3)) and
// at `longer_lengths` (default hi+1 .. 3 hi, step max(1, hi / 2)).
struct SweepAxes {
  std::vector<int64_t> ks = {0, 1, 2, 4, 16, 64};
  std::vector<std::string> terms = {"both", "key", "value", "neither"};
  int64_t terms_k = 16;
  std::vector<int64_t> longer_lengths;  // empty: the default
};
ExperimentSpec SweepExperiment(const ExperimentConfig& base,
                               const SweepAxes& axes);
// The sweep's defaults under the caller's settings: 400 steps, warm-up 40,
// lr 2e-3, position relative.
ExperimentConfig SweepDefaults();

// `relpos demo` (docs/training.md, "The demo"): local_difference trained on
// lengths 8-16 for `steps` steps (batch 32, lr 2e-3), one run per scheme
// of `positions` (checkpoint folder: the name as given), evaluated at
// lengths 4, 8, ..., 64.
struct DemoSettings {
  std::vector<std::string> positions = {"sinusoidal", "relative"};
  int64_t steps = 1500;
  uint64_t seed = 0;
  int threads = 1;
  int64_t sequences = 256;
};
ExperimentSpec DemoExperiment(const DemoSettings& settings);
// The demo's table name of a scheme: "absolute (sinusoidal)",
// "relative (k=16)", "no positions", ...
std::string DemoRunName(const std::string& position);

}  // namespace relpos

#endif  // RELPOS_LAB_EXPERIMENT_H_

// `relpos sweep`: Shaw et al.'s ablations on one task. Trains one
// relative-position model per clipping distance k (both terms), then one per
// term setting (key only, value only, neither) at a fixed k, and prints a
// table of accuracy inside and beyond the training lengths, with the share
// of table rows each run left untrained (relpos inspect's rule,
// docs/inspect.md): the reason a k beyond the training distances fails
// beyond them.
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <system_error>
#include <vector>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "cli/signals.h"
#include "relpos/lab/config.h"
#include "relpos/error.h"
#include "relpos/lab/files.h"
#include "relpos/lab/inspect.h"
#include "relpos/lab/model.h"
#include "relpos/lab/training.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

struct SweepFlags {
  ExperimentFlags exp;
  std::string ks = "0,1,2,4,16,64";
  std::string terms = "both,key,value,neither";
  int64_t terms_k = 16;
  std::string eval_lengths;  // default: see RunSweep
  int64_t sequences = 128;
  std::string out;  // optional: sweep.json goes here
  bool json = false;
};

struct Run {
  int64_t k;
  std::string terms;
};

std::vector<int64_t> ParseKs(const std::string& spec) {
  std::vector<int64_t> ks;
  for (const std::string& item : SplitList(spec)) {
    RELPOS_CLI_CHECK(
        !item.empty() && item.size() <= 6 &&
            item.find_first_not_of("0123456789") == std::string::npos,
        "--ks must be a comma list of integers in [0, 65536] (got '" << spec
                                                                     << "')");
    const int64_t k = std::stoll(item);
    RELPOS_CLI_CHECK(k <= 65536,
                     "--ks: k must be in [0, 65536] (got " << k << ")");
    ks.push_back(k);
  }
  return ks;
}

std::vector<std::string> ParseTerms(const std::string& spec) {
  std::vector<std::string> terms = SplitList(spec);
  for (const std::string& item : terms) {
    ExperimentConfig probe;
    probe.Set("model", "--terms", item, "--terms-list");  // checks the name
  }
  return terms;
}

// The base config with one run's k and terms, resolved (so a bad k is
// refused before any training).
ExperimentConfig RunConfig(const ExperimentConfig& base, const Run& r) {
  ExperimentConfig c = base;
  c.Set("model", "max_distance", std::to_string(r.k), "--ks");
  c.Set("model", "--terms", r.terms, "--terms-list");
  c.Resolve();
  return c;
}

// Every k with both terms (Shaw et al. Table 3), then the other term
// settings at k = terms_k (Table 4).
std::vector<Run> SweepRuns(const SweepFlags& f) {
  std::vector<Run> runs;
  const std::vector<int64_t> ks = ParseKs(f.ks);
  const std::vector<std::string> terms = ParseTerms(f.terms);
  for (int64_t k : ks) runs.push_back({k, "both"});
  for (const std::string& t : terms) {
    bool have = false;
    for (const Run& r : runs) have |= r.k == f.terms_k && r.terms == t;
    if (!have) runs.push_back({f.terms_k, t});
  }
  return runs;
}

// Evaluation lengths: a few inside the training range [lo, hi], and by
// default beyond it up to 3x the longest.
struct SweepLengths {
  std::string in_spec, beyond_spec;
  std::vector<int64_t> beyond, all;
};

SweepLengths MakeSweepLengths(const SweepFlags& f, int64_t lo, int64_t hi) {
  SweepLengths sl;
  sl.in_spec =
      FormatLengthRange(lo, hi) + ":" +
      std::to_string(std::max<int64_t>(1, (hi - lo) / 3));
  sl.beyond_spec =
      f.eval_lengths.empty()
          ? std::to_string(hi + 1) + "-" + std::to_string(3 * hi) + ":" +
                std::to_string(std::max<int64_t>(1, hi / 2))
          : f.eval_lengths;
  const std::vector<int64_t> in_lengths =
      ParseLengths(sl.in_spec, "train lengths");
  sl.beyond =
      ParseLengths(sl.beyond_spec, "--eval-lengths");
  sl.all = in_lengths;
  sl.all.insert(sl.all.end(), sl.beyond.begin(), sl.beyond.end());
  std::sort(sl.all.begin(), sl.all.end());
  sl.all.erase(std::unique(sl.all.begin(), sl.all.end()), sl.all.end());
  return sl;
}

// --out (optional, for sweep.json): an existing writable folder, or one
// created in an existing writable parent.
// Checks, creates and locks --out (one writer per folder).
std::unique_ptr<FolderLock> PrepareOutDir(const std::string& out) {
  std::error_code ec;
  const fs::path p(out);
  if (!fs::exists(p, ec)) {
    fs::path parent = p.parent_path();
    if (parent.empty()) parent = ".";
    RELPOS_CLI_CHECK(
        fs::is_directory(parent, ec) &&
            access(parent.c_str(), W_OK | X_OK) == 0,
        "--out " << Quoted(out)
                 << ": parent folder is missing or not writable");
    fs::create_directory(p, ec);
    if (ec) throw IoError("--out " + Quoted(out) + ": " + ec.message());
  } else {
    RELPOS_CLI_CHECK(
        fs::is_directory(p, ec) && access(out.c_str(), W_OK | X_OK) == 0,
        "--out " << Quoted(out) << " is not a writable folder");
  }
  return std::make_unique<FolderLock>(out);
}

// Mean token accuracy over lengths <= hi, and mean token and sequence
// accuracy over the longer ones.
std::tuple<double, double, double> Means(const std::vector<LengthMetrics>& res,
                                         int64_t hi) {
  double in_acc = 0, out_acc = 0, out_seq = 0;
  int n_in = 0, n_out = 0;
  for (const auto& x : res) {
    if (x.length <= hi) {
      in_acc += x.token_accuracy;
      ++n_in;
    } else {
      out_acc += x.token_accuracy;
      out_seq += x.sequence_accuracy;
      ++n_out;
    }
  }
  in_acc /= std::max(n_in, 1);
  out_acc /= std::max(n_out, 1);
  out_seq /= std::max(n_out, 1);
  return {in_acc, out_acc, out_seq};
}

// Share of all relative-table rows that the run left untrained (by
// Inspect's default rule); < 0 when the model has no tables (k = 0 has one
// row, "neither" none).
double UntrainedShare(const Model& model) {
  const Inspection in = Inspect(model);
  int64_t rows = 0, untrained = 0;
  for (const TableInspection& t : in.tables) {
    rows += t.rows;
    untrained += t.untrained_rows;
  }
  return rows > 0 && in.has_signal
             ? static_cast<double>(untrained) / static_cast<double>(rows)
             : -1.0;
}

// The sweep's own defaults (docs/training.md): shorter runs than train's.
ExperimentConfig SweepDefaults() {
  ExperimentConfig defaults;
  defaults.SetDefault("train", "steps", "400");
  defaults.SetDefault("train", "warmup_steps", "40");
  defaults.SetDefault("train", "lr", "2e-3");
  defaults.SetDefault("model", "position", "relative");
  return defaults;
}

void RunSweep(SweepFlags& f, std::ostream& out) {
  const ExperimentConfig base = f.exp.Build(SweepDefaults());
  const DataInfo data = DescribeData(base);

  const std::vector<Run> runs = SweepRuns(f);
  std::vector<ExperimentConfig> configs;
  for (const Run& r : runs) configs.push_back(RunConfig(base, r));

  // Evaluation lengths: a few inside the training range, and by default
  // beyond it up to 3x the longest.
  const int64_t lo = std::stoll(base.Get("train", "train_min_length")),
                hi = std::stoll(base.Get("train", "train_max_length"));
  const SweepLengths sl = MakeSweepLengths(f, lo, hi);
  const std::string& in_spec = sl.in_spec;
  const std::string& beyond_spec = sl.beyond_spec;
  const std::vector<int64_t>& beyond = sl.beyond;
  const std::vector<int64_t>& all_lengths = sl.all;
  AsFlag("--eval-lengths", "lengths",
         [&] { CheckEvalLengths(base, all_lengths); });

  std::unique_ptr<FolderLock> lock;
  if (!f.out.empty()) lock = PrepareOutDir(f.out);

  std::cerr << "sweep: task " << base.Get("train", "task") << ", "
            << runs.size() << " runs of " << base.Get("train", "steps")
            << " steps, train lengths " << FormatLengthRange(lo, hi)
            << ", longer lengths "
            << beyond.front() << "-" << beyond.back() << "\n";
  ScopedStopSignals signals;
  nlohmann::ordered_json rows = nlohmann::ordered_json::array();
  std::string table =
      "    k  terms     params  train_loss  acc@train  acc@longer  "
      "seq@longer  untrained\n";
  for (size_t i = 0; i < runs.size(); ++i) {
    Training training(configs[i]);
    const TrainSummary r = training.Run(
        {.progress = {.out = &std::cerr,
                      .mode = f.exp.progress(),
                      .label = "[" + std::to_string(i + 1) + "/" +
                               std::to_string(runs.size()) + "] k=" +
                               std::to_string(runs[i].k) + " " +
                               runs[i].terms},
         .stop_flag = signals.flag()});
    if (r.interrupted) {
      std::cerr << "sweep: stopped by signal " << signals.signal_number()
                << "\n";
      signals.Reraise();
      return;
    }
    const std::vector<LengthMetrics> res =
        Evaluate(training.model(),
                 {.lengths = all_lengths, .sequences_per_length = f.sequences});
    const auto [in_acc, out_acc, out_seq] = Means(res, hi);
    const double untrained = UntrainedShare(training.model());
    char share[32] = "        -";
    if (untrained >= 0) std::snprintf(share, sizeof share, "%9.4f", untrained);
    char line[160];
    std::snprintf(line, sizeof line,
                  "%5lld  %-7s  %8lld  %10.4f  %9.4f  %10.4f  %10.4f  %s\n",
                  static_cast<long long>(runs[i].k), runs[i].terms.c_str(),
                  static_cast<long long>(training.model().NumParameters()),
                  r.final_loss, in_acc, out_acc, out_seq, share);
    table += line;
    nlohmann::ordered_json acc = nlohmann::ordered_json::object();
    for (const auto& x : res) acc[std::to_string(x.length)] = x.token_accuracy;
    rows.push_back({{"k", runs[i].k},
                    {"terms", runs[i].terms},
                    {"parameters", training.model().NumParameters()},
                    {"final_train_loss", r.final_loss},
                    {"accuracy_train_lengths", in_acc},
                    {"accuracy_longer_lengths", out_acc},
                    {"sequence_accuracy_longer_lengths", out_seq},
                    {"untrained_row_share",
                     untrained >= 0 ? nlohmann::ordered_json(untrained)
                                    : nlohmann::ordered_json(nullptr)},
                    {"accuracy_by_length", acc},
                    {"train_seconds", r.seconds}});
  }
  nlohmann::ordered_json j = {{"task", base.Get("train", "task")},
                              {"train_lengths", {lo, hi}},
                              {"eval_lengths", all_lengths},
                              {"sequences_per_length", f.sequences},
                              {"train_config", nlohmann::ordered_json::parse(
                                                   base.ToJson())["train"]},
                              {"model_config", nlohmann::ordered_json::parse(
                                                   base.ToJson())["model"]},
                              {"runs", rows}};
  if (!f.out.empty()) {
    WriteFileAtomically((fs::path(f.out) / "sweep.json").string(),
                        j.dump(2) + "\n");
  }
  if (f.json) {
    out << j.dump() << "\n";
    return;
  }
  out << "task " << base.Get("train", "task") << ": " << data.metric
      << ", trained on lengths " << FormatLengthRange(lo, hi)
      << "; acc@train = mean over lengths " << in_spec << ", acc@longer over "
      << beyond_spec << "; untrained = share of table rows with (almost) no "
      << "gradient (relpos inspect)\n"
      << table;
}

}  // namespace

void AddSweepVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<SweepFlags>();
  CLI::App* sub = app.add_subcommand(
      "sweep",
      "Shaw et al.'s ablations: clipping distance k and key/value terms");
  flags->exp.Add(sub, FlagGroups{.position = false, .config_file = true},
                 SweepDefaults());
  flags->exp.ShowDefault("--warmup-steps", "min(40, steps/10)");
  sub->add_option("--ks", flags->ks, "Clipping distances to try (both terms)");
  sub->add_option("--terms-list", flags->terms,
                  "Term settings to try at --terms-k: both,key,value,neither");
  sub->add_option("--terms-k", flags->terms_k, "k for the term ablation")
      ->check(CLI::Range(int64_t{0}, int64_t{65536}));
  sub->add_option("--eval-lengths", flags->eval_lengths,
                  "Longer lengths to test (default: max+1 .. 3*max)");
  sub->add_option("--sequences", flags->sequences,
                  "Evaluation sequences per length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--out", flags->out, "Folder for sweep.json (optional)");
  sub->add_flag("--json", flags->json,
                "Print one JSON object instead of the table");
  sub->callback([flags, &out] { RunSweep(*flags, out); });
}

}  // namespace relpos::cli

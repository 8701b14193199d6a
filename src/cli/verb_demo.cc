// `relpos demo`: the README's first command. Trains an absolute-position
// (sinusoidal, by default) and a relative-position model on the same short
// sequences, evaluates both on lengths up to 4x the longest training length,
// prints a table of accuracy per length and writes results.json, accuracy.svg
// and both checkpoints into the output folder (docs/training.md, "The demo").
#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <string>
#include <system_error>
#include <vector>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "cli/signals.h"
#include "cli/svg_plot.h"
#include "relpos/lab/config.h"
#include "relpos/lab/experiment.h"
#include "relpos/lab/files.h"
#include "relpos/lab/training.h"
#include "relpos/schemes.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

// The demo's settings have their home in the library (DemoExperiment); the
// verb prints the table and draws the plot.
struct DemoFlags {
  std::string out = "relpos-demo";
  DemoSettings settings;
  std::string progress = "auto";
  std::string positions = "sinusoidal,relative";
};

std::string Fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

// Right-aligned in the table's 21-character columns.
std::string Column(const std::string& text) {
  return "  " +
         std::string(std::max<int>(0, 21 - static_cast<int>(text.size())),
                     ' ') +
         text;
}

// The table: one row per length, one column per model; then the means
// inside and beyond the training range, per token and per sequence (a
// sequence counts only if every output is right).
void PrintTable(const ExperimentResult& r,
                const std::function<int64_t(int64_t)>& tokens,
                std::ostream& out) {
  const int64_t hi = r.train_max_length;
  out << "\nper-token accuracy on the output positions ("
      << r.sequences_per_length << " sequences per length; chance = 0.25):\n";
  out << "length  tokens";
  for (const ExperimentRunResult& m : r.runs) out << Column(m.name);
  out << "\n";
  for (size_t i = 0; i < r.lengths.size(); ++i) {
    char head[32];
    std::snprintf(head, sizeof head, "%6lld  %6lld",
                  static_cast<long long>(r.lengths[i]),
                  static_cast<long long>(tokens(r.lengths[i])));
    out << head;
    for (const ExperimentRunResult& m : r.runs) {
      out << Column(Fixed(m.by_length[i].token_accuracy, 3));
    }
    if (r.lengths[i] > hi) out << "   longer than trained";
    if (r.lengths[i] == hi) out << "   <- longest training length";
    out << "\n";
  }
  out << "\nmeans over lengths <= " << hi << " (trained) and > " << hi
      << " (longer):\n";
  for (int row = 0; row < 4; ++row) {
    const bool beyond = row % 2 == 1, sequences = row >= 2;
    std::string label = std::string(sequences ? "seq acc" : "token acc") +
                        (beyond ? " >" : " <=") + std::to_string(hi);
    label += std::string(label.size() < 14 ? 14 - label.size() : 0, ' ');
    out << label;
    for (const ExperimentRunResult& m : r.runs) {
      const double mean =
          sequences ? (beyond ? m.sequence_accuracy_longer_lengths
                              : m.sequence_accuracy_train_lengths)
                    : (beyond ? m.accuracy_longer_lengths
                              : m.accuracy_train_lengths);
      out << Column(Fixed(mean, 3));
    }
    out << "\n";
  }
}

// accuracy.svg: accuracy against length, one line per model.
std::string DemoPlot(const ExperimentResult& r) {
  std::vector<PlotSeries> series;
  for (const ExperimentRunResult& m : r.runs) {
    PlotSeries s{m.name, {}};
    for (const LengthMetrics& x : m.by_length) {
      s.points.emplace_back(static_cast<double>(x.length), x.token_accuracy);
    }
    series.push_back(std::move(s));
  }
  PlotOptions po;
  po.title = "relpos demo: " + r.task + ", trained on lengths " +
             FormatLengthRange(r.train_min_length, r.train_max_length);
  po.x_label = "length (input symbols)";
  po.y_label = "per-token accuracy";
  po.train_max_x = static_cast<double>(r.train_max_length);
  return RenderSvg(series, po);
}

void RunDemo(DemoFlags& f, std::ostream& out) {
  f.settings.positions = SplitList(f.positions);
  const ExperimentSpec spec =
      AsFlag("--positions", "position", [&] { return DemoExperiment(f.settings); });
  ExperimentOptions options;
  options.out_dir = f.out;
  options.json_file = "results.json";
  options.progress.out = &std::cerr;
  options.progress.mode = f.progress;
  AsFlag("--positions", "position", [&] {
    AsFlag("--positions", "runs", [&] { CheckExperiment(spec, options); });
  });
  CheckOutDir(f.out, /*refuse_checkpoint=*/false);
  const ExperimentConfig& base = spec.base;
  const DataInfo data = DescribeData(base);
  auto tokens = [&](int64_t length) { return SequenceLength(base, length); };
  const int64_t lo = std::stoll(base.Get("train", "train_min_length")),
                hi = std::stoll(base.Get("train", "train_max_length"));

  out << "relpos demo: does a model trained on short sequences keep working on "
         "longer ones?\n"
      << "task " << base.Get("train", "task") << ": " << data.metric
      << "; the answer at each output position depends only on the tokens 1 "
         "and 3 places back.\n"
      << "training on lengths " << lo << "-" << hi << " (" << tokens(lo) << "-"
      << tokens(hi) << " tokens), " << f.settings.steps
      << " steps each; testing on lengths " << spec.lengths.front() << "-"
      << spec.lengths.back() << " (up to " << tokens(spec.lengths.back())
      << " tokens)\n"
      << std::flush;

  ScopedStopSignals signals;
  options.stop_flag = signals.flag();
  const ExperimentResult r = RunExperiment(spec, options);
  if (r.interrupted) {
    const ExperimentRun& stopped = spec.runs.at(r.runs.size());
    std::cerr << "demo: stopped by signal " << signals.signal_number()
              << " while training " << stopped.name
              << "; its checkpoint is in "
              << (fs::path(f.out) / stopped.checkpoint).string() << "\n";
    signals.Reraise();
    return;
  }
  PrintTable(r, tokens, out);

  const fs::path svg_path = fs::path(f.out) / "accuracy.svg";
  WriteFileAtomically(svg_path.string(), DemoPlot(r));
  out << "\nwrote " << (fs::path(f.out) / "results.json").string() << ", "
      << svg_path.string() << " and the checkpoints";
  for (const ExperimentRunResult& m : r.runs) {
    out << " " << (fs::path(f.out) / m.checkpoint).string();
  }
  const int threads = f.settings.threads;
  out << "\ntotal time " << FormatDuration(r.seconds) << " (" << threads
      << (threads == 1 ? " thread" : " threads") << ")\n";
}

}  // namespace

void AddDemoVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* sub = app.add_subcommand(
      "demo",
      "Train absolute- and relative-position models on short sequences, test "
      "them on longer ones, print the table, write results.json + plot");
  sub->add_option("--out", flags->out, "Output folder");
  sub->add_option("--steps", flags->settings.steps, "Training steps per model")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  sub->add_option("--seed", flags->settings.seed,
                  "Seed of initialisation and data");
  sub->add_option("--threads", flags->settings.threads, "OpenMP threads")
      ->check(CLI::Range(1, 1024))
      ->default_str("1");
  AddProgressFlag(sub, &flags->progress);
  sub->add_option("--positions", flags->positions,
                  "Position schemes to compare, comma-separated (any "
                  "--position scheme: " +
                      SchemeNameList() +
                      "; learned and none are slower to train)");
  sub->add_option("--sequences", flags->settings.sequences,
                  "Evaluation sequences per length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->callback([flags, &out] { RunDemo(*flags, out); });
}

}  // namespace relpos::cli

// `relpos demo`: the README's first command. Trains an absolute-position
// (sinusoidal, by default) and a relative-position model on the same short
// sequences, evaluates both on lengths up to 4x the longest training length,
// prints a table of accuracy per length and writes results.json, accuracy.svg
// and both checkpoints into the output folder (docs/training.md, "The demo").
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <functional>
#include <iostream>
#include <memory>
#include <optional>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "cli/signals.h"
#include "cli/svg_plot.h"
#include "relpos/lab/config.h"
#include "relpos/lab/files.h"
#include "relpos/lab/model.h"
#include "relpos/lab/training.h"
#include "relpos/schemes.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

// The demo's experiment, chosen by trying the candidates (docs/training.md):
// local_difference's answers depend only on the tokens 1 and 3 positions
// back, so a model that knows relative offsets can solve it at any length,
// while one that learned what "position 17" means has nothing to go on past
// the positions it saw.
constexpr const char* kDemoTask = "local_difference";
constexpr int64_t kDemoTrainMin = 8, kDemoTrainMax = 16;
constexpr const char* kDemoEvalLengths = "4-64:4";
constexpr int64_t kDemoSteps = 1500;
constexpr int64_t kDemoSequences = 256;

struct DemoFlags {
  std::string out = "relpos-demo";
  int64_t steps = kDemoSteps;
  uint64_t seed = 0;
  int threads = 0;
  std::string progress = "auto";
  std::string positions = "sinusoidal,relative";
  int64_t sequences = kDemoSequences;
};

struct DemoModel {
  std::string name;    // "absolute (learned)"
  std::string folder;  // checkpoint folder inside --out (the scheme's name)
  ExperimentConfig config;
};

// The table's name of a scheme, by where the registry says it acts: at the
// input (absolute), inside attention (relative) or nowhere.
std::string DemoName(const std::string& position) {
  const Scheme& scheme = FindScheme(position);
  if (scheme.sides.empty()) return "no positions";
  // Shaw's scheme as the demo's model has it (k = 16).
  if (scheme.id == SchemeId::kShaw) return "relative (k=16)";
  if (scheme.ActsOn(SchemeSide::kInput)) return "absolute (" + position + ")";
  return "relative (" + position + ")";
}

// The demo's run: `train` is the shared training setup, `position` the
// scheme. The model is the default one (d_model 64, 4 heads, 2 layers,
// d_ff 256, k = 16) with a 256-row learned table.
ExperimentConfig DemoConfig(const ExperimentConfig& train,
                            const std::string& position) {
  ExperimentConfig c = train;
  c.Set("model", "max_len", "256");
  c.Set("model", "position", position, "--positions");
  c.Set("model", "arch", "encoder");
  c.Resolve();
  return c;
}

std::string Fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

int DemoThreads(const DemoFlags& f) { return f.threads > 0 ? f.threads : 1; }

// The training run both models share.
ExperimentConfig DemoTrainConfig(const DemoFlags& f) {
  ExperimentConfig tc;
  tc.Set("train", "task", kDemoTask);
  tc.Set("train", "--train-lengths",
         FormatLengthRange(kDemoTrainMin, kDemoTrainMax));
  tc.Set("train", "steps", std::to_string(f.steps), "--steps");
  tc.Set("train", "batch_size", "32");
  tc.Set("train", "lr", "2e-3");
  tc.Set("train", "warmup_steps",
         std::to_string(std::min<int64_t>(80, f.steps / 10)));
  tc.Set("train", "seed", std::to_string(f.seed));
  tc.Set("train", "threads", std::to_string(DemoThreads(f)));
  tc.Set("train", "checkpoint_every", "0");
  return tc;
}

// The table: one row per length, one column per model; then the means
// inside and beyond the training range.
void PrintTable(const std::vector<DemoModel>& models,
                const std::vector<std::vector<LengthMetrics>>& all,
                const std::vector<int64_t>& lengths, int64_t sequences,
                const std::function<int64_t(int64_t)>& tokens,
                std::ostream& out) {
  out << "\nper-token accuracy on the output positions (" << sequences
      << " sequences per length; chance = 0.25):\n";
  std::string header = "length  tokens";
  for (const DemoModel& m : models) {
    std::string name = m.name;
    header +=
        "  " +
        std::string(std::max<int>(0, 21 - static_cast<int>(name.size())), ' ') +
        name;
  }
  out << header << "\n";
  for (size_t i = 0; i < lengths.size(); ++i) {
    char head[32];
    std::snprintf(head, sizeof head, "%6lld  %6lld",
                  static_cast<long long>(lengths[i]),
                  static_cast<long long>(tokens(lengths[i])));
    std::string row = head;
    for (size_t k = 0; k < models.size(); ++k) {
      const std::string v = Fixed(all[k][i].token_accuracy, 3);
      row += "  " + std::string(21 - v.size(), ' ') + v;
    }
    if (lengths[i] > kDemoTrainMax) row += "   longer than trained";
    if (lengths[i] == kDemoTrainMax) row += "   <- longest training length";
    out << row << "\n";
  }
  // Summary: means inside and beyond the training range, per-token and
  // per-sequence (a sequence counts only if every output is right).
  out << "\nmeans over lengths <= " << kDemoTrainMax << " (trained) and > "
      << kDemoTrainMax << " (longer):\n";
  for (int row = 0; row < 4; ++row) {
    const bool beyond = row % 2 == 1, sequences = row >= 2;
    std::string label = std::string(sequences ? "seq acc" : "token acc") +
                        (beyond ? " >" : " <=") + std::to_string(kDemoTrainMax);
    label += std::string(label.size() < 14 ? 14 - label.size() : 0, ' ');
    out << label;
    for (size_t k = 0; k < models.size(); ++k) {
      double sum = 0;
      int n = 0;
      for (const auto& x : all[k]) {
        if ((x.length > kDemoTrainMax) != beyond) continue;
        sum += sequences ? x.sequence_accuracy : x.token_accuracy;
        ++n;
      }
      const std::string v = Fixed(n ? sum / n : 0.0, 3);
      out << "  " << std::string(21 - v.size(), ' ') << v;
    }
    out << "\n";
  }

}

// accuracy.svg: accuracy against length, one line per model.
std::string DemoPlot(const std::vector<DemoModel>& models,
                     const std::vector<std::vector<LengthMetrics>>& all) {
  std::vector<PlotSeries> series;
  for (size_t k = 0; k < models.size(); ++k) {
    PlotSeries s{models[k].name, {}};
    for (const auto& x : all[k]) {
      s.points.emplace_back(static_cast<double>(x.length), x.token_accuracy);
    }
    series.push_back(std::move(s));
  }
  PlotOptions po;
  po.title = std::string("relpos demo: ") + kDemoTask +
             ", trained on lengths " + std::to_string(kDemoTrainMin) + "-" +
             std::to_string(kDemoTrainMax);
  po.x_label = "length (input symbols)";
  po.y_label = "per-token accuracy";
  po.train_max_x = static_cast<double>(kDemoTrainMax);
  return RenderSvg(series, po);
}

// Trains one model (checkpoint in --out/<scheme>) and evaluates it at every
// length; its entry of results.json goes to `json`. Nothing when a signal
// stopped the training (its checkpoint is kept and the signal re-raised).
std::optional<std::vector<LengthMetrics>> TrainAndEvaluate(
    const DemoModel& m, const std::string& label, const DemoFlags& f,
    const std::vector<int64_t>& lengths, ScopedStopSignals& signals,
    nlohmann::ordered_json* json) {
  constexpr int64_t kEvalBatch = 64;
  Training training(m.config);
  const std::string checkpoint = (fs::path(f.out) / m.folder).string();
  TrainOptions options;
  options.checkpoint_dir = checkpoint;
  options.progress = {.out = &std::cerr, .mode = f.progress,
                      .label = label + " train"};
  options.stop_flag = signals.flag();
  const TrainSummary r = training.Run(options);
  if (r.interrupted) {
    std::cerr << "demo: stopped by signal " << signals.signal_number()
              << " while training " << m.name << "; its checkpoint is in "
              << checkpoint << "\n";
    signals.Reraise();
    return std::nullopt;
  }
  const auto eval_start = std::chrono::steady_clock::now();
  std::vector<LengthMetrics> res = Evaluate(
      training.model(), {.lengths = lengths,
                         .sequences_per_length = f.sequences,
                         .batch_size = kEvalBatch,
                         .threads = DemoThreads(f),
                         .progress = {.out = &std::cerr, .mode = f.progress,
                                      .label = label + " eval"}});
  const double eval_s = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - eval_start)
                            .count();
  nlohmann::ordered_json acc = nlohmann::ordered_json::object(),
                         seq = nlohmann::ordered_json::object(),
                         loss = nlohmann::ordered_json::object();
  for (const auto& x : res) {
    acc[std::to_string(x.length)] = x.token_accuracy;
    seq[std::to_string(x.length)] = x.sequence_accuracy;
    loss[std::to_string(x.length)] = x.loss;
  }
  const ExperimentConfig& trained = training.config();
  json->push_back({
      {"name", m.name},
      {"position", trained.Get("model", "position")},
      {"max_distance", std::stoll(trained.Get("model", "max_distance"))},
      {"checkpoint", m.folder},
      {"parameters", training.model().NumParameters()},
      {"final_train_loss", r.final_loss},
      {"train_seconds", r.seconds},
      {"eval_seconds", eval_s},
      {"accuracy_by_length", acc},
      {"sequence_accuracy_by_length", seq},
      {"loss_by_length", loss},
      {"model_config",
       nlohmann::ordered_json::parse(trained.ToJson())["model"]},
  });
  return res;
}

void RunDemo(const DemoFlags& f, std::ostream& out) {
  const auto wall_start = std::chrono::steady_clock::now();
  const ExperimentConfig tc = DemoTrainConfig(f);
  const int threads = DemoThreads(f);
  const std::vector<int64_t> lengths =
      ParseLengths(kDemoEvalLengths, "eval lengths");
  std::vector<DemoModel> models;
  for (const std::string& name : SplitList(f.positions)) {
    for (const DemoModel& m : models) {
      RELPOS_CLI_CHECK(m.folder != name,
                       "--positions lists '" << name << "' twice");
    }
    models.push_back({DemoName(name), name, DemoConfig(tc, name)});
    CheckEvalLengths(models.back().config, lengths);
  }
  CheckOutDir(f.out, /*refuse_checkpoint=*/false);
  std::error_code ec;
  fs::create_directories(f.out, ec);
  if (ec) throw IoError("--out " + Quoted(f.out) + ": " + ec.message());
  const FolderLock lock(f.out);  // one writer per folder
  const DataInfo data = DescribeData(tc);
  auto tokens = [&](int64_t length) { return SequenceLength(tc, length); };

  out << "relpos demo: does a model trained on short sequences keep working on "
         "longer ones?\n"
      << "task " << kDemoTask << ": " << data.metric
      << "; the answer at each output position depends only on the tokens 1 "
         "and "
         "3 places back.\n"
      << "training on lengths " << kDemoTrainMin << "-" << kDemoTrainMax << " ("
      << tokens(kDemoTrainMin) << "-" << tokens(kDemoTrainMax) << " tokens), "
      << f.steps
      << " steps each; testing on lengths " << lengths.front() << "-"
      << lengths.back() << " (up to " << tokens(lengths.back())
      << " tokens)\n"
      << std::flush;

  ScopedStopSignals signals;
  nlohmann::ordered_json results_models = nlohmann::ordered_json::array();
  std::vector<std::vector<LengthMetrics>> all;
  for (size_t k = 0; k < models.size(); ++k) {
    const DemoModel& m = models[k];
    const std::string label = "[" + std::to_string(k + 1) + "/" +
                              std::to_string(models.size()) + "] " + m.name;
    std::optional<std::vector<LengthMetrics>> res = TrainAndEvaluate(
        m, label, f, lengths, signals, &results_models);
    if (!res) return;  // stopped by a signal
    all.push_back(std::move(*res));
  }

  PrintTable(models, all, lengths, f.sequences, tokens, out);

  // results.json and the plot, each written atomically.
  const double wall_s = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - wall_start)
                            .count();
  nlohmann::ordered_json results = {
      {"task", kDemoTask},
      {"metric", data.metric},
      {"train_lengths", {kDemoTrainMin, kDemoTrainMax}},
      {"eval_lengths", lengths},
      {"sequences_per_length", f.sequences},
      {"train_config", nlohmann::ordered_json::parse(tc.ToJson())["train"]},
      {"models", results_models},
      {"wall_seconds", wall_s},
  };
  const fs::path json_path = fs::path(f.out) / "results.json";
  WriteFileAtomically(json_path.string(), results.dump(2) + "\n");

  const fs::path svg_path = fs::path(f.out) / "accuracy.svg";
  WriteFileAtomically(svg_path.string(), DemoPlot(models, all));

  out << "\nwrote " << json_path.string() << ", " << svg_path.string()
      << " and the checkpoints";
  for (const DemoModel& m : models)
    out << " " << (fs::path(f.out) / m.folder).string();
  out << "\ntotal time " << FormatDuration(wall_s) << " (" << threads
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
  sub->add_option("--steps", flags->steps, "Training steps per model")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  sub->add_option("--seed", flags->seed, "Seed of initialisation and data");
  sub->add_option("--threads", flags->threads, "OpenMP threads")
      ->check(CLI::Range(1, 1024))
      ->default_str("1");
  AddProgressFlag(sub, &flags->progress);
  sub->add_option("--positions", flags->positions,
                  "Position schemes to compare, comma-separated (any "
                  "--position scheme: " +
                      SchemeNameList() +
                      "; learned and none are slower to train)");
  sub->add_option("--sequences", flags->sequences,
                  "Evaluation sequences per length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->callback([flags, &out] { RunDemo(*flags, out); });
}

}  // namespace relpos::cli

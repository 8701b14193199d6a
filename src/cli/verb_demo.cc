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
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <system_error>
#include <vector>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "core/check.h"
#include "io/file_io.h"
#include "train/checkpoint.h"
#include "train/progress.h"
#include "train/signals.h"
#include "train/svg_plot.h"
#include "train/evaluation.h"
#include "train/lengths.h"
#include "train/trainer.h"

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
  std::string folder;  // checkpoint folder inside --out
  model::ModelConfig config;
};

model::ModelConfig DemoModelConfig(model::PositionScheme position) {
  model::ModelConfig m;
  m.d_model = 64;
  m.heads = 4;
  m.layers = 2;
  m.d_ff = 256;
  m.max_len = 256;
  m.position = position;
  m.max_distance = 16;
  return m;
}


std::string DemoName(model::PositionScheme p) {
  switch (p) {
    case model::PositionScheme::kNone:
      return "no positions";
    case model::PositionScheme::kSinusoidal:
      return "absolute (sinusoidal)";
    case model::PositionScheme::kLearned:
      return "absolute (learned)";
    case model::PositionScheme::kRelative:
      return "relative (k=16)";
  }
  return "?";
}

std::vector<std::string> SplitList(const std::string& s) {
  std::vector<std::string> items;
  size_t start = 0;
  while (start <= s.size()) {
    const size_t end = std::min(s.find(',', start), s.size());
    items.push_back(s.substr(start, end - start));
    start = end + 1;
  }
  return items;
}

std::string Fixed(double v, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, v);
  return buf;
}

void RunDemo(const DemoFlags& f, std::ostream& out) {
  const auto wall_start = std::chrono::steady_clock::now();
  train::TrainConfig tc;
  tc.data.task = kDemoTask;
  tc.train_min_length = kDemoTrainMin;
  tc.train_max_length = kDemoTrainMax;
  tc.steps = f.steps;
  tc.batch_size = 32;
  tc.lr = 2e-3;
  tc.warmup_steps = std::min<int64_t>(80, f.steps / 10);
  tc.seed = f.seed;
  tc.threads = f.threads > 0 ? f.threads : 1;
  tc.checkpoint_every = 0;
  train::Validate(tc);
  const std::vector<int64_t> lengths =
      train::ParseLengths(kDemoEvalLengths, "eval lengths");
  std::vector<DemoModel> models;
  for (const std::string& name : SplitList(f.positions)) {
    const model::PositionScheme scheme = model::ParsePositionScheme(name);
    for (const DemoModel& m : models) {
      RELPOS_CHECK_ARG(m.config.position != scheme,
                       "--positions lists '" << name << "' twice");
    }
    models.push_back({DemoName(scheme), name, DemoModelConfig(scheme)});
  }
  const std::unique_ptr<train::DataSource> data =
      train::MakeDataSource(tc.data);
  for (const DemoModel& m : models) {
    model::ModelConfig c = m.config;
    c.vocab_size = data->vocab_size();
    model::Validate(c);
    train::CheckModelAndData(c, tc, *data);
    train::CheckEvalLengths(c, *data, lengths);
  }
  CheckOutDir(f.out, /*refuse_checkpoint=*/false);
  std::error_code ec;
  fs::create_directories(f.out, ec);
  if (ec) RELPOS_THROW(IoError, "--out '" << f.out << "': " << ec.message());

  const train::ProgressMode mode = ParseProgressMode(f.progress);

  out << "relpos demo: does a model trained on short sequences keep working on "
         "longer ones?\n"
      << "task " << kDemoTask << ": " << data->metric_description()
      << "; the answer at each output position depends only on the tokens 1 "
         "and "
         "3 places back.\n"
      << "training on lengths " << kDemoTrainMin << "-" << kDemoTrainMax << " ("
      << data->SequenceLength(kDemoTrainMin) << "-"
      << data->SequenceLength(kDemoTrainMax) << " tokens), " << f.steps
      << " steps each; testing on lengths " << lengths.front() << "-"
      << lengths.back() << " (up to " << data->SequenceLength(lengths.back())
      << " tokens)\n"
      << std::flush;

  train::ScopedStopSignals signals;
  train::EvalConfig ec_cfg;
  ec_cfg.lengths = lengths;
  ec_cfg.sequences_per_length = f.sequences;
  ec_cfg.batch_size = 64;

  nlohmann::ordered_json results_models = nlohmann::ordered_json::array();
  std::vector<std::vector<train::LengthResult>> all;
  for (size_t k = 0; k < models.size(); ++k) {
    const DemoModel& m = models[k];
    const std::string label = "[" + std::to_string(k + 1) + "/" +
                              std::to_string(models.size()) + "] " + m.name;
    train::Trainer trainer(m.config, tc);
    train::RunOptions opts;
    opts.checkpoint_dir = (fs::path(f.out) / m.folder).string();
    opts.progress_out = &std::cerr;
    opts.progress_mode = mode;
    opts.label = label + " train";
    opts.stop_flag = signals.flag();
    const train::RunResult r = trainer.Run(opts);
    if (r.interrupted) {
      std::cerr << "demo: stopped by signal " << signals.signal_number()
                << " while training " << m.name << "; its checkpoint is in "
                << opts.checkpoint_dir << "\n";
      signals.Reraise();
      return;
    }
    const auto eval_start = std::chrono::steady_clock::now();
    train::Progress progress(
        std::cerr, label + " eval",
        static_cast<int64_t>(lengths.size()) *
            ((f.sequences + ec_cfg.batch_size - 1) / ec_cfg.batch_size),
        mode);
    std::vector<train::LengthResult> res =
        train::EvaluateByLength(trainer.model(), *data, ec_cfg, &progress);
    progress.Finish();
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
    results_models.push_back({
        {"name", m.name},
        {"position", model::ToString(trainer.model_config().position)},
        {"max_distance", trainer.model_config().max_distance},
        {"checkpoint", m.folder},
        {"parameters", trainer.model().NumParameters()},
        {"final_train_loss", r.final_loss},
        {"train_seconds", r.seconds},
        {"eval_seconds", eval_s},
        {"accuracy_by_length", acc},
        {"sequence_accuracy_by_length", seq},
        {"loss_by_length", loss},
        {"model_config", model::ToJson(trainer.model_config())},
    });
    all.push_back(std::move(res));
  }

  // The table: one row per length, one column per model.
  out << "\nper-token accuracy on the output positions (" << f.sequences
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
                  static_cast<long long>(data->SequenceLength(lengths[i])));
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

  // results.json and the plot, each written atomically.
  const double wall_s = std::chrono::duration<double>(
                            std::chrono::steady_clock::now() - wall_start)
                            .count();
  nlohmann::ordered_json results = {
      {"task", kDemoTask},
      {"metric", data->metric_description()},
      {"train_lengths", {kDemoTrainMin, kDemoTrainMax}},
      {"eval_lengths", lengths},
      {"sequences_per_length", f.sequences},
      {"train_config", train::ToJson(tc)},
      {"models", results_models},
      {"wall_seconds", wall_s},
  };
  const fs::path json_path = fs::path(f.out) / "results.json";
  io::AtomicWriteFile(json_path.string(), results.dump(2) + "\n");

  std::vector<train::PlotSeries> series;
  for (size_t k = 0; k < models.size(); ++k) {
    train::PlotSeries s{models[k].name, {}};
    for (const auto& x : all[k]) {
      s.points.emplace_back(static_cast<double>(x.length), x.token_accuracy);
    }
    series.push_back(std::move(s));
  }
  train::PlotOptions po;
  po.title = std::string("relpos demo: ") + kDemoTask +
             ", trained on lengths " + std::to_string(kDemoTrainMin) + "-" +
             std::to_string(kDemoTrainMax);
  po.x_label = "length (input symbols)";
  po.y_label = "per-token accuracy";
  po.train_max_x = static_cast<double>(kDemoTrainMax);
  const fs::path svg_path = fs::path(f.out) / "accuracy.svg";
  io::AtomicWriteFile(svg_path.string(), train::RenderSvg(series, po));

  out << "\nwrote " << json_path.string() << ", " << svg_path.string()
      << " and the checkpoints";
  for (const DemoModel& m : models)
    out << " " << (fs::path(f.out) / m.folder).string();
  out << "\ntotal time " << train::FormatDuration(wall_s) << " (" << tc.threads
      << (tc.threads == 1 ? " thread" : " threads") << ")\n";
}

}  // namespace

void AddDemoVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<DemoFlags>();
  CLI::App* sub = app.add_subcommand(
      "demo",
      "Train absolute- and relative-position models on short sequences, test "
      "them on longer ones, print the table, write results.json + plot");
  sub->add_option("--out", flags->out, "Output folder (default: relpos-demo)");
  sub->add_option("--steps", flags->steps, "Training steps per model")
      ->check(CLI::Range(int64_t{1}, int64_t{1'000'000}));
  sub->add_option("--seed", flags->seed, "Seed of initialisation and data");
  sub->add_option("--threads", flags->threads, "OpenMP threads (default 1)")
      ->check(CLI::Range(1, 1024));
  AddProgressFlag(sub, &flags->progress);
  sub->add_option("--positions", flags->positions,
                  "Position schemes to compare, comma-separated (default "
                  "sinusoidal,relative; learned and none are slower to train)");
  sub->add_option("--sequences", flags->sequences,
                  "Evaluation sequences per length (default 256)")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->callback([flags, &out] { RunDemo(*flags, out); });
}

}  // namespace relpos::cli

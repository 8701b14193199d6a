// `relpos eval DIR --lengths SPEC [--json]`: accuracy of a checkpoint per
// sequence length (docs/training.md).
#include <cstdio>
#include <iostream>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>

#include "cli/cli_common.h"
#include "cli/experiment_flags.h"
#include "relpos/lab/config.h"
#include "relpos/lab/files.h"
#include "relpos/lab/model.h"
#include "relpos/lab/training.h"

namespace relpos::cli {
namespace {

struct EvalFlags {
  std::string dir, lengths;
  bool json = false;
  int64_t sequences = 128, batch_size = 64;
  uint64_t seed = kDefaultEvalSeed;
  int threads = 0;
  std::string progress = "auto";
};

void RunEval(const EvalFlags& f, std::ostream& out) {
  // Validate the cheap things first: a bad --lengths needs no checkpoint.
  const std::vector<int64_t> lengths = ParseLengths(f.lengths, "--lengths");
  Model model = Model::Load(f.dir);
  const ExperimentConfig& c = model.config();
  const std::vector<LengthMetrics> results =
      AsFlag("--lengths", "lengths", [&] {
        return Evaluate(model, {.lengths = lengths,
                                .sequences_per_length = f.sequences,
                                .batch_size = f.batch_size,
                                .seed = f.seed,
                                .threads = f.threads,
                                .progress = {.out = &std::cerr,
                                             .mode = f.progress,
                                             .label = "eval"}});
      });
  const DataInfo data = DescribeData(c);
  const std::string& metric = data.metric;
  const int64_t train_max = std::stoll(c.Get("train", "train_max_length"));
  if (f.json) {
    nlohmann::ordered_json acc = nlohmann::ordered_json::object(),
                           seq = nlohmann::ordered_json::object(),
                           loss = nlohmann::ordered_json::object(),
                           bits = nlohmann::ordered_json::object();
    for (const auto& r : results) {
      const std::string key = std::to_string(r.length);
      acc[key] = r.token_accuracy;
      seq[key] = r.sequence_accuracy;
      loss[key] = r.loss;
      bits[key] = r.bits_per_token;
    }
    nlohmann::ordered_json j = {
        {"checkpoint", PathText(f.dir)},
        {"task", c.Get("train", "task")},
        {"position", c.Get("model", "position")},
        {"max_distance", std::stoll(c.Get("model", "max_distance"))},
        {"arch", c.Get("model", "arch")},
        {"step", model.step()},
        {"train_lengths",
         {std::stoll(c.Get("train", "train_min_length")), train_max}},
        {"sequences_per_length", f.sequences},
        {"metric", metric},
        {"accuracy_by_length", acc},
        {"sequence_accuracy_by_length", seq},
        {"loss_by_length", loss},
        // Bits per token; for lm, bits per byte of held-out text.
        {"bits_by_length", bits},
    };
    out << j.dump() << "\n";
    return;
  }
  out << "checkpoint " << PathText(f.dir) << ": task " << c.Get("train", "task")
      << ", position " << PositionLabel(c) << ", step " << model.step()
      << ", trained on lengths " << c.Get("train", "--train-lengths") << "\n"
      << "data: " << data.source << "\n"
      << "metric: " << metric << ", " << f.sequences
      << " sequences per length\n";
  // Bits per token: for lm (a token is a byte) the held-out bits per byte.
  const bool lm = c.Get("train", "task") == "lm";
  out << "length  tokens  accuracy  seq_accuracy    loss  "
      << (lm ? "bits/byte" : "bits/token") << "\n";
  for (const auto& r : results) {
    char line[160];
    std::snprintf(
        line, sizeof line, "%6lld  %6lld  %8.4f  %12.4f  %6.4f  %9.4f%s\n",
        static_cast<long long>(r.length),
        static_cast<long long>(r.sequence_length), r.token_accuracy,
        r.sequence_accuracy, r.loss, r.bits_per_token,
        r.length > train_max ? "  (longer than trained)" : "");
    out << line;
  }
}

}  // namespace

void AddEvalVerb(CLI::App& app, std::ostream& out) {
  auto flags = std::make_shared<EvalFlags>();
  CLI::App* sub = app.add_subcommand(
      "eval", "Accuracy of a checkpoint at each sequence length");
  sub->add_option("dir", flags->dir, "Checkpoint folder (from relpos train)")
      ->required();
  sub->add_option("--lengths", flags->lengths,
                  "Lengths: N, A-B, A-B:STEP or a comma list of these")
      ->required();
  sub->add_flag("--json", flags->json,
                "Print one JSON object (accuracy_by_length, "
                "sequence_accuracy_by_length, loss_by_length)");
  sub->add_option("--sequences", flags->sequences, "Sequences per length")
      ->check(CLI::Range(int64_t{1}, int64_t{1} << 20));
  sub->add_option("--batch-size", flags->batch_size, "Sequences per batch")
      ->check(CLI::Range(int64_t{1}, int64_t{65536}));
  AddSeedOption(sub, "--seed", &flags->seed,
                "Seed of the evaluation examples (the default is the fixed "
                "evaluation seed, the same for every model)");
  sub->add_option("--threads", flags->threads,
                  "OpenMP threads")
      ->check(CLI::Range(1, 1024))
      ->default_str("the checkpoint's");
  AddProgressFlag(sub, &flags->progress);
  sub->callback([flags, &out] { RunEval(*flags, out); });
}

}  // namespace relpos::cli

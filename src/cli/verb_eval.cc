// `relpos eval DIR --lengths SPEC [--json]`: accuracy of a checkpoint per
// sequence length (docs/training.md); for a translation checkpoint, BLEU
// and chrF of beam search on the held-out split per source-length bucket
// (docs/translation.md).
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
#include "relpos/lab/translation.h"

namespace relpos::cli {
namespace {

struct EvalFlags {
  std::string dir, lengths;
  bool json = false;
  int64_t sequences = 128, batch_size = 64;
  // Task translate: beam search on the held-out split.
  int64_t beam = 4, max_sentences = 0;
  double max_len_ratio = 2.0;
  uint64_t seed = kDefaultEvalSeed;
  int threads = 0;
  std::string compute_type = "float32";
  std::string progress = "auto";
};

// The fields every `relpos eval --json` object starts with.
nlohmann::ordered_json CheckpointJson(const std::string& dir, Model& model) {
  const ExperimentConfig& c = model.config();
  return {{"checkpoint", PathText(dir)},
          {"task", c.Get("train", "task")},
          {"position", c.Get("model", "position")},
          {"max_distance", std::stoll(c.Get("model", "max_distance"))},
          {"arch", c.Get("model", "arch")},
          {"step", model.step()},
          {"train_lengths",
           {std::stoll(c.Get("train", "train_min_length")),
            std::stoll(c.Get("train", "train_max_length"))}}};
}

// Task translate: BLEU and chrF of beam search on the held-out split,
// overall and per source-length bucket.
void RunTranslationEval(const EvalFlags& f, Model& model, std::ostream& out) {
  const ExperimentConfig& c = model.config();
  TranslationEvalOptions options;
  options.decode.beam_size = f.beam;
  options.decode.max_length_ratio = f.max_len_ratio;
  options.decode.compute_type = f.compute_type;
  options.max_sentences = f.max_sentences;
  options.batch_size = f.batch_size;
  options.threads = f.threads;
  options.progress = {.out = &std::cerr, .mode = f.progress,
                      .label = "translate"};
  const TranslationEvalResult r = EvaluateTranslation(model, options);
  if (f.json) {
    nlohmann::ordered_json buckets = nlohmann::ordered_json::array();
    for (const TranslationScores& s : r.scores) {
      buckets.push_back({{"bucket", s.label},
                         {"min_words", s.min_words},
                         {"max_words", s.max_words},
                         {"inside", s.inside},
                         {"sentences", s.sentences},
                         {"bleu", s.bleu},
                         {"chrf", s.chrf}});
    }
    nlohmann::ordered_json j = CheckpointJson(f.dir, model);
    j["beam"] = f.beam;
    j["sentences"] = r.hypotheses.size();
    j["skipped_too_long"] = r.skipped;
    j["seconds"] = r.seconds;
    j["scores"] = buckets;
    out << j.dump() << "\n";
    return;
  }
  out << "checkpoint " << f.dir << ": task " << c.Get("train", "task")
      << " (" << c.Get("train", "src_lang") << " -> "
      << c.Get("train", "tgt_lang") << "), position " << PositionLabel(c)
      << ", step " << model.step() << ", trained on sources of "
      << c.Get("train", "--train-lengths") << " words\n"
      << "held-out pairs: " << r.hypotheses.size() << " translated (beam "
      << f.beam << ", " << FormatDuration(r.seconds) << ")";
  if (r.skipped > 0) out << ", " << r.skipped << " longer than the model takes";
  out << "\nsource words          sentences    BLEU    chrF\n";
  for (const TranslationScores& s : r.scores) {
    char line[160];
    std::snprintf(line, sizeof line, "%-20s  %9lld  %6.2f  %6.2f\n",
                  s.label.c_str(), static_cast<long long>(s.sentences),
                  s.bleu, s.chrf);
    out << line;
  }
}

void RunEval(const EvalFlags& f, std::ostream& out) {
  // Validate the cheap things first: a bad --lengths needs no checkpoint.
  const std::vector<int64_t> lengths =
      f.lengths.empty() ? std::vector<int64_t>{}
                        : ParseLengths(f.lengths, "--lengths");
  Model model = Model::Load(f.dir);
  const ExperimentConfig& c = model.config();
  if (c.Get("train", "task") == kTranslateTaskName) {
    RELPOS_CLI_CHECK(f.lengths.empty(),
                     "--lengths: a translation checkpoint is scored per "
                     "source-length bucket; drop --lengths");
    RunTranslationEval(f, model, out);
    return;
  }
  RELPOS_CLI_CHECK(f.compute_type == "float32" ||
                       c.Get("model", "arch") == "decoder",
                   "--compute-type " << f.compute_type
                                     << " applies to decoding: a translation "
                   "checkpoint's beam search or a decoder's (task lm) cached "
                   "steps; this checkpoint's arch is "
                       << c.Get("model", "arch") << " (task "
                       << c.Get("train", "task")
                       << ": its metrics come from the float32 forward pass)");
  RELPOS_CLI_CHECK(!lengths.empty(), "--lengths is required");
  const std::vector<LengthMetrics> results =
      AsFlag("--lengths", "lengths", [&] {
        return Evaluate(model, {.lengths = lengths,
                                .sequences_per_length = f.sequences,
                                .batch_size = f.batch_size,
                                .seed = f.seed,
                                .threads = f.threads,
                                .compute_type = f.compute_type,
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
    nlohmann::ordered_json j = CheckpointJson(f.dir, model);
    j["sequences_per_length"] = f.sequences;
    j["metric"] = metric;
    j["accuracy_by_length"] = acc;
    j["sequence_accuracy_by_length"] = seq;
    j["loss_by_length"] = loss;
    // Bits per token; for lm, bits per byte of held-out text.
    j["bits_by_length"] = bits;
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
                  "Lengths: N, A-B, A-B:STEP or a comma list of these "
                  "(required, except for a translation checkpoint)");
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
  AddComputeTypeOption(sub, &flags->compute_type);
  sub->add_option("--beam", flags->beam,
                  "Translation: beam size (1: greedy)")
      ->check(CLI::Range(int64_t{1}, int64_t{4096}))
      ->capture_default_str();
  sub->add_option("--max-len-ratio", flags->max_len_ratio,
                  "Translation: at most ceil(R * source pieces) target "
                  "pieces")
      ->check(CLI::PositiveNumber)
      ->capture_default_str();
  sub->add_option("--max-sentences", flags->max_sentences,
                  "Translation: at most N held-out pairs, evenly spaced "
                  "(0: all)")
      ->check(CLI::Range(int64_t{0}, int64_t{1} << 30))
      ->capture_default_str();
  AddProgressFlag(sub, &flags->progress);
  sub->callback([flags, &out] { RunEval(*flags, out); });
}

}  // namespace relpos::cli

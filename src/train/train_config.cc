#include "train/train_config.h"

#include <nlohmann/json.hpp>
#include <string>

#include "base/check.h"
#include "model/arch.h"
#include "model/positions.h"
#include "data/tasks/text_corpus.h"
#include "train/lengths.h"

namespace relpos::train {
namespace {

constexpr const char* kWhat = "train config";
constexpr double kMaxSteps = 1e9;

using io::Field;
using io::Range;
using io::Setting;

// What the run trains on: the task or corpus and the training lengths.
std::vector<Setting<TrainConfig>> DataSettings() {
  using C = TrainConfig;
  const double max_size = static_cast<double>(kMaxTaskSize);
  return {
      Field<C>("task", "--task",
               "A synthetic task, a source-target task s2s_* (seq2seq; "
               "docs/tasks.md), 'lm' (byte-level "
               "language modelling) or 'translate' (docs/translation.md)",
               [](C& c) -> auto& { return c.data.task; }),
      io::WithDefaultNote(
          Field<C>("corpus_path", "--corpus",
                   "Task lm: a text file, or a directory walked recursively "
                   "(held-out split by file; docs/tasks.md). Task translate: "
                   "a locale tree (default /usr/share/locale), a folder of "
                   ".mo/.po files or a TSV file",
                   [](C& c) -> auto& { return c.data.corpus_path; }),
          "generated text"),
      Field<C>("corpus_pattern", "--corpus-pattern",
               "Task lm, directory corpus: glob on file names, e.g. '*.py'",
               [](C& c) -> auto& { return c.data.corpus_pattern; }),
      Field<C>("corpus_max_bytes", "--corpus-max-bytes",
               "Task lm: most bytes read from --corpus (a larger file is "
               "truncated; a directory stops reading files)",
               [](C& c) -> auto& { return c.data.corpus_max_bytes; },
               Range{static_cast<double>(tasks::TextCorpus::kMinBytes),
                     double(int64_t{1} << 30)}),
      Field<C>("corpus_seed", "--corpus-seed",
               "Task lm: seed of the generated text",
               [](C& c) -> auto& { return c.data.corpus_seed; }),
      Field<C>("corpus_bytes", "--corpus-bytes",
               "Task lm: size of the generated text",
               [](C& c) -> auto& { return c.data.corpus_bytes; },
               Range{static_cast<double>(tasks::TextCorpus::kMinBytes),
                     double(int64_t{1} << 30)}),
      Field<C>("src_lang", "--src-lang",
               "Task translate: the source language ('en' is a catalog's "
               "msgid side; docs/translation.md)",
               [](C& c) -> auto& { return c.data.src_lang; }),
      Field<C>("tgt_lang", "--tgt-lang",
               "Task translate: the target language",
               [](C& c) -> auto& { return c.data.tgt_lang; }),
      Field<C>("sentencepiece_size", "--sentencepiece-size",
               "Task translate: pieces of the SentencePiece vocabulary "
               "trained on the training split (the model's vocab_size)",
               [](C& c) -> auto& { return c.data.sentencepiece_size; },
               Range{16, double(1 << 20)}),
      Field<C>("train_min_length", "", "Shortest training length",
               &C::train_min_length, Range{1, max_size}),
      Field<C>("train_max_length", "", "Longest training length",
               &C::train_max_length, Range{1, max_size}),
      io::Words<C>(
          "", "--train-lengths",
          "Range A-B of training lengths (task size parameter); sets "
          "train_min_length and train_max_length",
          {},
          [](const C& c) {
            return FormatLengthRange(c.train_min_length, c.train_max_length);
          },
          [](C& c, const std::string& text, const std::string& name) {
            const auto [lo, hi] = ParseLengthRange(text, name, kMaxTaskSize);
            c.train_min_length = lo;
            c.train_max_length = hi;
          }),
  };
}

// How the run trains: the updates, AdamW, seeds, threads, checkpoints.
std::vector<Setting<TrainConfig>> OptimiserSettings() {
  using C = TrainConfig;
  return {
      Field<C>("steps", "--steps", "Optimiser updates", &C::steps,
               Range{1, kMaxSteps}),
      Field<C>("batch_size", "--batch-size", "Sequences per update",
               &C::batch_size, Range{1, 65536}),
      Field<C>("lr", "--lr", "Peak learning rate", &C::lr,
               Range{.lo = 0, .hi = 10, .lo_open = true}),
      io::WithDefaultNote(
          Field<C>("warmup_steps", "--warmup-steps",
                   "Linear warm-up updates (at most steps)", &C::warmup_steps,
                   Range{0, kMaxSteps}),
          "min(100, steps/10)"),
      Field<C>("min_lr_ratio", "--min-lr-ratio",
               "Final learning rate as a fraction of the peak (cosine floor)",
               &C::min_lr_ratio, Range{0, 1}),
      Field<C>("beta1", "--beta1", "AdamW beta1",
               [](C& c) -> auto& { return c.adamw.beta1; },
               Range{.lo = 0, .hi = 1, .hi_open = true}),
      Field<C>("beta2", "--beta2", "AdamW beta2",
               [](C& c) -> auto& { return c.adamw.beta2; },
               Range{.lo = 0, .hi = 1, .hi_open = true}),
      Field<C>("eps", "--eps", "AdamW epsilon",
               [](C& c) -> auto& { return c.adamw.eps; },
               Range{.lo = 0, .lo_open = true}),
      Field<C>("weight_decay", "--weight-decay",
               "AdamW decoupled weight decay (weight matrices and the token "
               "embedding only)",
               [](C& c) -> auto& { return c.adamw.weight_decay; },
               Range{.lo = 0, .hi = 1, .hi_open = true}),
      Field<C>("clip_norm", "--clip-norm",
               "Global gradient-norm clip (0: off)", &C::clip_norm,
               Range{.lo = 0}),
      io::WithDefaultNote(
          io::OmitAtDefault(Field<C>(
              "label_smoothing", "--label-smoothing",
              "Label smoothing eps of the training loss, as PyTorch's "
              "CrossEntropyLoss(label_smoothing) (docs/model.md)",
              &C::label_smoothing, Range{.lo = 0, .hi = 1, .hi_open = true})),
          "0.1 for seq2seq, else 0"),
      Field<C>("seed", "--seed",
               "Seed of initialisation, data order and dropout", &C::seed),
      Field<C>("threads", "--threads",
               "OpenMP threads (results are reproducible per seed and thread "
               "count)",
               &C::threads, Range{1, 1024}),
      Field<C>("checkpoint_every", "--checkpoint-every",
               "Updates between checkpoints (0: only at the end)",
               &C::checkpoint_every, Range{0, kMaxSteps}),
  };
}

// The validation curve of a translation run (docs/training.md). Omitted from
// JSON at their defaults: checkpoints written before they existed keep
// their config.json byte for byte.
std::vector<Setting<TrainConfig>> ValidationSettings() {
  using C = TrainConfig;
  return {
      io::OmitAtDefault(Field<C>(
          "eval_every", "--eval-every",
          "Task translate: updates between held-out evaluations (the loss, "
          "and BLEU of eval_bleu_sentences pairs), recorded in the "
          "checkpoint's config.json and the progress line; also after the "
          "last update (0: off)",
          &C::eval_every, Range{0, kMaxSteps})),
      io::OmitAtDefault(Field<C>(
          "eval_bleu_sentences", "--eval-bleu-sentences",
          "Task translate, with eval_every: held-out pairs translated (beam "
          "4, spread as relpos eval --max-sentences takes them) for the BLEU "
          "of each evaluation (0: the loss only)",
          &C::eval_bleu_sentences, Range{0, double(1 << 20)})),
      io::OmitAtDefault(Field<C>(
          "patience", "--patience",
          "Task translate, with eval_every: stop when the held-out loss has "
          "not improved for this many evaluations in a row (0: never)",
          &C::patience, Range{0, kMaxSteps})),
  };
}

std::vector<Setting<TrainConfig>> MakeTrainSettings() {
  std::vector<Setting<TrainConfig>> settings = DataSettings();
  for (Setting<TrainConfig>& s : OptimiserSettings()) {
    settings.push_back(std::move(s));
  }
  for (Setting<TrainConfig>& s : ValidationSettings()) {
    settings.push_back(std::move(s));
  }
  return settings;
}

}  // namespace

const std::vector<io::Setting<TrainConfig>>& TrainSettings() {
  static const std::vector<io::Setting<TrainConfig>> settings =
      MakeTrainSettings();
  return settings;
}

nlohmann::json ToJson(const TrainConfig& c) {
  return io::SettingsToJson(TrainSettings(), c);
}

TrainConfig TrainConfigFromJson(const nlohmann::json& j) {
  TrainConfig c;
  io::SettingsFromJson(TrainSettings(), j, kWhat, &c);
  Validate(c);
  return c;
}

ScheduleConfig MakeSchedule(const TrainConfig& c) {
  return ScheduleConfig{.peak_lr = c.lr,
                        .warmup_steps = c.warmup_steps,
                        .total_steps = c.steps,
                        .min_lr_ratio = c.min_lr_ratio};
}

void Validate(const TrainConfig& c) {
  io::ValidateSettings(TrainSettings(), c, kWhat);
  RELPOS_CHECK_ARG(!c.data.task.empty(), "train config field 'task' must not be empty");
  RELPOS_CHECK_ARG(c.train_min_length <= c.train_max_length,
                   "train length range " << c.train_min_length << "-"
                                         << c.train_max_length
                                         << " is reversed");
  RELPOS_CHECK_ARG(c.eval_every == 0 || c.data.task == "translate",
                   "train config field 'eval_every' (--eval-every) is for "
                   "task translate (got task '"
                       << c.data.task << "')");
  RELPOS_CHECK_ARG(c.eval_every == 0 ||
                       c.steps / c.eval_every <= kMaxValidationEvaluations,
                   "train config field 'eval_every' (--eval-every) "
                       << c.eval_every << " asks for "
                       << c.steps / c.eval_every << " evaluations over "
                       << c.steps << " steps; at most "
                       << kMaxValidationEvaluations
                       << " are kept (choose a larger interval)");
  RELPOS_CHECK_ARG(c.patience == 0 || c.eval_every > 0,
                   "train config field 'patience' (--patience) needs "
                   "eval_every > 0 (--eval-every N): it counts held-out "
                   "evaluations");
  RELPOS_CHECK_ARG(c.warmup_steps <= c.steps,
                   "train config field 'warmup_steps' must be at most steps="
                       << c.steps << " (got " << c.warmup_steps << ")");
}

void CheckModelAndData(const model::ModelConfig& m, const TrainConfig& t,
                       const DataSource& data) {
  RELPOS_CHECK_ARG(m.vocab_size == data.vocab_size(),
                   "model vocab_size "
                       << m.vocab_size << " does not match task '"
                       << data.name() << "' (" << data.vocab_size() << ")");
  const bool pairs = data.pairs() != nullptr;
  const bool source = model::Describe(m.arch).source;
  RELPOS_CHECK_ARG(!pairs || source,
                   "task '" << data.name()
                            << "' maps a source to a target and needs arch "
                               "seq2seq (got "
                            << model::ToString(m.arch) << ")");
  RELPOS_CHECK_ARG(pairs || !source,
                   "arch seq2seq needs a source-target task (s2s_copy, "
                   "s2s_reverse, s2s_duplicate, s2s_difference, translate); "
                   "task '"
                       << data.name() << "' is not one");
  RELPOS_CHECK_ARG(t.train_min_length >= data.min_length() &&
                       t.train_max_length <= data.max_length(),
                   "train lengths "
                       << t.train_min_length << "-" << t.train_max_length
                       << " must be within [" << data.min_length() << ", "
                       << data.max_length() << "] for task '" << data.name()
                       << "'");
  const int64_t longest = data.SequenceLength(t.train_max_length);
  RELPOS_CHECK_ARG(
      !model::HasLearnedInputTable(m) || longest <= m.scheme.max_len,
      "learned positions: max_len " << m.scheme.max_len
                                    << " is shorter than the longest "
                                       "training sequence ("
                                    << longest << " tokens)");
}

}  // namespace relpos::train

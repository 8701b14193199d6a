// What a training run is configured by (TrainConfig, with its settings
// declared once in TrainSettings()) and what a resumed run must restore
// (TrainState). JSON, validation, command-line flags and docs/settings.md
// derive from TrainSettings().
#ifndef RELPOS_SRC_TRAIN_TRAIN_CONFIG_H_
#define RELPOS_SRC_TRAIN_TRAIN_CONFIG_H_

#include <cstdint>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "base/io/settings.h"
#include "relpos/train/results.h"
#include "model/transformer.h"
#include "train/data_source.h"
#include "train/optimizer.h"

namespace relpos::train {

struct TrainConfig {
  DataConfig data;
  int64_t train_min_length = 8, train_max_length = 16;
  int64_t steps = 1000;
  int64_t batch_size = 32;
  double lr = 1e-3;            // peak learning rate
  int64_t warmup_steps = 100;  // linear warm-up, then cosine decay
  double min_lr_ratio = 0.1;   // final lr = lr * min_lr_ratio
  AdamWConfig adamw;
  double clip_norm = 1.0;  // global gradient-norm clip; 0 = off
  // Label smoothing of the training loss (model::BasicTransformer::
  // set_label_smoothing); relpos::ExperimentConfig::Resolve makes it 0.1
  // for seq2seq models unless it is given.
  double label_smoothing = 0.0;
  uint64_t seed = 0;       // initialisation, data order and dropout
  int threads = 1;         // OpenMP threads; part of the determinism key
  int64_t checkpoint_every = 500;  // steps between checkpoints; 0 = end only
  // Task translate: the validation curve (trainer.h, ValidationPoint):
  // updates between held-out evaluations (0: none), held-out pairs whose
  // beam-4 BLEU each evaluation adds (0: the loss only), and the number of
  // evaluations in a row without a lower held-out loss that stops the run
  // (0: never).
  int64_t eval_every = 0;
  int64_t eval_bleu_sentences = 200;
  int64_t patience = 0;
};

// The most evaluations eval_every may ask for over the run's steps
// (steps / eval_every): the curve is kept in config.json.
inline constexpr int64_t kMaxValidationEvaluations = 2048;

// Every setting of TrainConfig, in the order of docs/settings.md.
const std::vector<io::Setting<TrainConfig>>& TrainSettings();

nlohmann::json ToJson(const TrainConfig& config);
// Missing fields keep their defaults; unknown fields and wrong JSON types are
// FormatError naming the field; values are then checked by Validate.
TrainConfig TrainConfigFromJson(const nlohmann::json& json);
// InvalidArgument naming the first bad field and its value.
void Validate(const TrainConfig& config);
ScheduleConfig MakeSchedule(const TrainConfig& config);

// The label smoothing a seq2seq model trains with unless told otherwise:
// 0.1, as Vaswani et al. and Shaw et al. (the other architectures: 0).
inline constexpr double kSeq2seqLabelSmoothing = 0.1;

// Checks that the model config and the data fit: the vocabulary, pair data
// exactly for seq2seq models, train lengths within the data's range, and
// for learned absolute positions the longest training sequence within
// max_len.
void CheckModelAndData(const model::ModelConfig& model,
                       const TrainConfig& train, const DataSource& data);

// Everything a resumed run needs besides parameters and optimiser moments.
struct TrainState {
  int64_t step = 0;  // updates done so far
  uint64_t data_rng = 0, dropout_rng = 0;
  // The validation curve so far (TrainConfig::eval_every), and the step at
  // which the patience rule stopped the run (-1: it did not).
  std::vector<relpos::ValidationPoint> validation;
  int64_t stopped_early_step = -1;
};

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_TRAIN_CONFIG_H_

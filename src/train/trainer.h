// The training loop of relpos's small transformer (AdamW, warm-up + cosine
// schedule, gradient clipping), with checks for non-finite values, progress
// output, periodic checkpoints and stopping at a step boundary. The pieces
// it runs on live beside it: train_config.h (settings), data_source.h,
// batching.h, evaluation.h, checkpoint.h; seeds and threads come from
// base/rng.h and base/threads.h.
//
// Determinism: every random draw comes from relpos::Rng streams derived from
// TrainConfig::seed (initialisation, data, dropout) and, for evaluation, from
// EvalConfig::seed; reductions in the optimiser run in a fixed order. For a
// given seed and thread count the losses, parameters and checkpoints are
// bitwise reproducible, and a run resumed from a checkpoint continues exactly
// as the uninterrupted run would have (docs/training.md).
#ifndef RELPOS_SRC_TRAIN_TRAINER_H_
#define RELPOS_SRC_TRAIN_TRAINER_H_

#include <csignal>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "train/data_source.h"
#include "base/rng.h"
#include "base/threads.h"
#include "train/optimizer.h"
#include "train/progress.h"
#include "train/signal_stats.h"
#include "train/train_config.h"
#include "train/validation.h"

namespace relpos::train {

// A point of the validation curve (TrainConfig::eval_every): the public
// API's (relpos/train/results.h).
using relpos::ValidationPoint;

struct StepRecord {
  int64_t step = 0;  // the update's index (0-based)
  float loss = 0;
  double grad_norm = 0, lr = 0;
  int64_t tokens = 0;  // valid tokens in the batch
};

struct RunOptions {
  // Where checkpoints go (every checkpoint_every steps, at the end, and when
  // stopped); empty: no checkpoints.
  std::string checkpoint_dir;
  // Progress bar / log lines (nullptr: none).
  std::ostream* progress_out = nullptr;
  ProgressMode progress_mode = ProgressMode::kAuto;
  std::string label = "train";
  // Polled after every step; nonzero stops the run at a step boundary (a
  // signal handler sets it: see signals.h).
  const volatile std::sig_atomic_t* stop_flag = nullptr;
  // Stop (as if interrupted, with a checkpoint) once this many updates are
  // done; < 0: run to TrainConfig::steps. For tests of resume.
  int64_t stop_at_step = -1;
  // Called after every update.
  std::function<void(const StepRecord&)> on_step;
  // With TrainConfig::eval_every and eval_bleu_sentences > 0: adds the BLEU
  // to a validation point whose step and held-out loss are set (the API
  // passes EvaluateTranslation; it must draw none of the training's random
  // numbers). Null: the curve has the loss only.
  std::function<void(ValidationPoint*)> score_bleu;
};

struct RunResult {
  int64_t final_step = 0;
  bool completed = false;         // reached TrainConfig::steps
  bool interrupted = false;       // stopped by the flag or stop_at_step
  // Stopped by TrainConfig::patience (in this call, or already in the run
  // it resumed: then nothing is trained); final_step is where.
  bool stopped_early = false;
  std::vector<StepRecord> steps;  // the updates this call made
  double seconds = 0;
  double final_loss = 0;  // mean loss over the last min(100, steps) updates
};

class Trainer {
 public:
  // A fresh run. `model_config.vocab_size` and `.seed` are overwritten from
  // the data and TrainConfig::seed; the arch is kept as given.
  Trainer(const model::ModelConfig& model_config, const TrainConfig& config);
  ~Trainer();
  Trainer(Trainer&&) noexcept;

  // Resumes the run saved in `dir` (validated: see checkpoint.h).
  static Trainer Resume(const std::string& dir);

  // Trains until TrainConfig::steps (or the stop flag / stop_at_step).
  // Throws NumericalError naming the step and the quantity when the loss, a
  // gradient or a parameter becomes NaN/Inf; no checkpoint is written after
  // the last good one.
  RunResult Run(const RunOptions& options);

  // Writes a checkpoint of the current state (checkpoint.h); a no-op if this
  // trainer already saved this step to `dir`.
  void Save(const std::string& dir);

  model::Transformer& model() { return *model_; }
  const model::ModelConfig& model_config() const { return model_->config(); }
  const TrainConfig& config() const { return config_; }
  const DataSource& data() const { return *data_; }
  const TrainState& state() const { return state_; }
  // The relative tables' training signal so far (signal_stats.h); saved
  // with every checkpoint and restored by Resume.
  const SignalStats& signal() const { return signal_; }
  // Changes the total number of steps (resume with a longer or shorter run).
  // The cosine schedule follows the new total, so the continuation is no
  // longer the one an uninterrupted run of the old length would take.
  // InvalidArgument naming the setting 'steps' if below the step reached.
  void set_total_steps(int64_t steps);

 private:
  Trainer() = default;
  void InitOptimizer();
  // The one report of a non-finite loss, gradient or parameter: throws
  // NumericalError "training stopped at step N: <what>; <where the last good
  // checkpoint is>".
  [[noreturn]] void StopNonFinite(int64_t step, const std::string& what) const;
  // One update: batch, forward + backward, clip, AdamW; the loss, gradient
  // and parameters are checked for NaN/Inf.
  StepRecord Step(Rng& data_rng, Rng& dropout_rng,
                  const ScheduleConfig& schedule);
  // Whether to write a checkpoint after the update that reached state_.step.
  bool CheckpointDue(const RunOptions& options, bool stopping) const;
  // Whether the validation curve takes a point after the update that
  // reached state_.step: every eval_every updates and after the last.
  bool ValidationDue() const;
  // Measures a point (held-out loss, BLEU through options.score_bleu) and
  // appends it to state_.validation; true if the patience rule now stops
  // the run (state_.stopped_early_step is set).
  bool AddValidationPoint(const RunOptions& options, Progress* progress);

  TrainConfig config_;
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<AdamW> optimizer_;
  TrainState state_;
  std::vector<RelativeTable> tables_;  // RelativeTables(model config)
  SignalStats signal_;
  std::unique_ptr<HeldOutSet> held_out_;  // built at the first point
  std::string last_saved_dir_;
  int64_t last_saved_step_ = -1;
};

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_TRAINER_H_

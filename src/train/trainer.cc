#include "train/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <filesystem>
#include <system_error>

#include "base/check.h"
#include "base/io/file_io.h"
#include "train/batching.h"
#include "train/checkpoint.h"
#include "model/memory_plan.h"

namespace relpos::train {
namespace {

// Stream ids under TrainConfig::seed.
constexpr uint64_t kInitStream = 1, kDataStream = 2, kDropoutStream = 3;

// Decoupled weight decay goes where the model declares it with each
// parameter (BasicParameter::decay: the weight matrices and the token
// embedding; not biases, LayerNorm gains or position tables, whose rarely
// seen rows decay would pull to zero for no benefit).
std::vector<ParamSlot> Slots(model::Transformer& model) {
  std::vector<ParamSlot> slots;
  for (model::Parameter& p : model.parameters()) {
    slots.push_back({std::span<float>(p.value), std::span<const float>(p.grad),
                     p.decay});
  }
  return slots;
}

// Name of the first tensor holding a non-finite value (value or grad), or "".
std::string FirstNonFinite(const model::Transformer& model, bool grads) {
  for (const model::Parameter& p : model.parameters()) {
    for (float x : grads ? p.grad : p.value) {
      if (!std::isfinite(x)) return p.name;
    }
  }
  return "";
}

// Mean of the last 100 losses: what progress shows (a single batch's loss
// is too noisy to read) and RunResult::final_loss.
class RecentLoss {
 public:
  void Add(float loss) {
    recent_.push_back(loss);
    sum_ += loss;
    if (recent_.size() > kWindow) {
      sum_ -= recent_.front();
      recent_.pop_front();
    }
  }
  // Running mean, cheap, for display.
  double Running() const {
    return recent_.empty() ? 0.0 : sum_ / static_cast<double>(recent_.size());
  }
  // Recomputed as a plain mean (the running sum drifts by rounding over long
  // runs).
  double Exact() const {
    double sum = 0;
    for (float x : recent_) sum += x;
    return recent_.empty() ? 0.0 : sum / static_cast<double>(recent_.size());
  }

 private:
  static constexpr size_t kWindow = 100;
  std::deque<float> recent_;
  double sum_ = 0;
};

// Finishes the progress display however Run ends (an error included), so
// the message that follows starts on its own line.
struct ProgressCloser {
  Progress* progress;
  ~ProgressCloser() {
    if (progress) progress->Finish();
  }
};

// The planner's verdict on a run of `m` on `data`, before anything of the
// model is allocated.
void CheckTrainingFits(const model::ModelConfig& m, const TrainConfig& c,
                       const DataSource& data) {
  CheckMemory(PlanTraining(m, c.batch_size,
                           data.SequenceLength(c.train_max_length),
                           c.threads));
}

bool StopRequested(const RunOptions& options, int64_t step) {
  return (options.stop_flag && *options.stop_flag != 0) ||
         step == options.stop_at_step;
}

}  // namespace

Trainer::Trainer(const model::ModelConfig& model_config,
                 const TrainConfig& config)
    : config_(config) {
  Validate(config_);
  data_ = MakeDataSource(config_.data);
  // Task translate: the vocabulary just trained (or given) goes into every
  // checkpoint as sentencepiece.model.
  config_.data.vocabulary = data_->vocabulary();
  model::ModelConfig m = model_config;
  m.vocab_size = data_->vocab_size();
  m.seed = base::DeriveSeed(config_.seed, kInitStream);
  model::Validate(m);
  CheckModelAndData(m, config_, *data_);
  CheckTrainingFits(m, config_, *data_);
  base::SetThreads(config_.threads);
  model_ = std::make_unique<model::Transformer>(m);
  model_->set_label_smoothing(config_.label_smoothing);
  state_.step = 0;
  state_.data_rng = base::DeriveSeed(config_.seed, kDataStream);
  state_.dropout_rng = base::DeriveSeed(config_.seed, kDropoutStream);
  tables_ = RelativeTables(m);
  signal_ = MakeSignalStats(m, /*first_step=*/0);
  InitOptimizer();
}

Trainer::~Trainer() = default;
Trainer::Trainer(Trainer&&) noexcept = default;

void Trainer::InitOptimizer() {
  std::vector<int64_t> sizes;
  for (const model::Parameter& p : model_->parameters())
    sizes.push_back(p.numel());
  optimizer_ = std::make_unique<AdamW>(config_.adamw, std::move(sizes));
}

void Trainer::set_total_steps(int64_t steps) {
  TrainConfig c = config_;
  c.steps = steps;
  c.warmup_steps = std::min(c.warmup_steps, steps);
  Validate(c);
  RELPOS_CHECK_ARG(
      steps >= state_.step,
      "steps " << steps << " is below the checkpoint's step " << state_.step);
  config_ = c;
}

Trainer Trainer::Resume(const std::string& dir) {
  // The run's configuration first: whether it fits is known before the
  // tensor files are read.
  {
    const Checkpoint head = ReadCheckpointConfig(dir);
    const std::unique_ptr<DataSource> data =
        MakeDataSource(head.train_config.data);
    CheckModelAndData(head.model_config, head.train_config, *data);
    CheckTrainingFits(head.model_config, head.train_config, *data);
  }
  Checkpoint ck =
      ReadCheckpoint(dir, /*with_optimizer=*/true, /*with_signal=*/true);
  Trainer t;
  t.config_ = ck.train_config;
  t.data_ = MakeDataSource(t.config_.data);
  CheckModelAndData(ck.model_config, t.config_, *t.data_);
  base::SetThreads(t.config_.threads);
  t.model_ = std::make_unique<model::Transformer>(ck.model_config);
  t.model_->set_label_smoothing(t.config_.label_smoothing);
  SetParameters(ck.parameters, dir, *t.model_);
  t.InitOptimizer();
  const size_t n = t.model_->parameters().size();
  std::vector<std::vector<float>> m(n), v(n);
  for (size_t i = 0; i < n; ++i) {
    m[i] = std::move(ck.optimizer[i].data);
    v[i] = std::move(ck.optimizer[n + i].data);
  }
  t.optimizer_->SetState(ck.state.step, std::move(m), std::move(v));
  t.state_ = ck.state;
  t.tables_ = RelativeTables(ck.model_config);
  // A checkpoint from before the statistics existed: count from here on.
  t.signal_ = ck.signal ? std::move(*ck.signal)
                        : MakeSignalStats(ck.model_config, ck.state.step);
  t.last_saved_dir_ = dir;
  t.last_saved_step_ = ck.state.step;
  return t;
}

void Trainer::Save(const std::string& dir) {
  if (dir == last_saved_dir_ && state_.step == last_saved_step_) return;
  Checkpoint ck;
  ck.model_config = model_->config();
  ck.train_config = config_;
  ck.state = state_;
  ck.parameters = GetParameters(*model_);
  ck.signal = signal_;
  const auto& params = model_->parameters();
  for (int pass = 0; pass < 2; ++pass) {
    for (size_t i = 0; i < params.size(); ++i) {
      io::NamedTensor t;
      t.name = (pass == 0 ? "exp_avg." : "exp_avg_sq.") + params[i].name;
      t.shape = params[i].shape;
      t.data = pass == 0 ? optimizer_->m(i) : optimizer_->v(i);
      ck.optimizer.push_back(std::move(t));
    }
  }
  WriteCheckpoint(dir, ck);
  last_saved_dir_ = dir;
  last_saved_step_ = state_.step;
}

void Trainer::StopNonFinite(int64_t step, const std::string& what) const {
  const std::string where =
      last_saved_step_ < 0
          ? "no checkpoint was written"
          : "the last good checkpoint (step " +
                std::to_string(last_saved_step_) + ") is kept in " +
                last_saved_dir_;
  RELPOS_THROW(NumericalError,
               "training stopped at step " << step << ": " << what << "; "
                                           << where);
}

StepRecord Trainer::Step(Rng& data_rng, Rng& dropout_rng,
                         const ScheduleConfig& schedule) {
  const int64_t step = state_.step;
  const model::Batch batch =
      MakeTrainBatch(*data_, config_.batch_size, config_.train_min_length,
                     config_.train_max_length, data_rng);
  model::Metrics metrics;
  const float loss = model_->ForwardBackward(batch, dropout_rng, &metrics);
  if (!std::isfinite(loss)) {
    StopNonFinite(step, "the loss is " + std::to_string(loss));
  }
  std::vector<ParamSlot> slots = Slots(*model_);
  const double norm = GradNorm(slots);
  if (!std::isfinite(norm)) {
    StopNonFinite(step, "the gradient of '" +
                            FirstNonFinite(*model_, /*grads=*/true) +
                            "' holds NaN or Inf");
  }
  const double lr = LearningRate(schedule, step);
  optimizer_->Step(slots, lr, ClipScale(norm, config_.clip_norm));
  if (const std::string bad = FirstNonFinite(*model_, /*grads=*/false);
      !bad.empty()) {
    StopNonFinite(step,
                  "parameter '" + bad + "' became NaN or Inf after the update");
  }
  // The update stands: count it (the optimiser leaves the grads as they are).
  AccumulateSignal(batch, *model_, tables_, &signal_);
  state_.step = step + 1;
  state_.data_rng = data_rng.state();
  state_.dropout_rng = dropout_rng.state();
  int64_t batch_tokens = 0;
  for (int64_t n : batch.lengths) batch_tokens += n;
  return StepRecord{step, loss, norm, lr, batch_tokens};
}

bool Trainer::ValidationDue() const {
  return config_.eval_every > 0 && (state_.step % config_.eval_every == 0 ||
                                    state_.step == config_.steps);
}

bool Trainer::AddValidationPoint(const RunOptions& options,
                                 Progress* progress) {
  if (!held_out_) {
    // Batches of the training batch's size and tokens.
    held_out_ = std::make_unique<HeldOutSet>(
        *data_, model_->config(), config_.batch_size,
        data_->SequenceLength(config_.train_max_length));
  }
  ValidationPoint p;
  p.step = state_.step;
  p.loss = held_out_->Loss(*model_);
  p.pairs = held_out_->pairs();
  if (!std::isfinite(p.loss)) {
    StopNonFinite(state_.step,
                  "the held-out loss is " + std::to_string(p.loss));
  }
  if (config_.eval_bleu_sentences > 0 && options.score_bleu) {
    options.score_bleu(&p);
    base::SetThreads(config_.threads);  // whatever the search used
  }
  std::vector<ValidationPoint>& curve = state_.validation;
  curve.push_back(p);
  // The first lowest loss, and the evaluations since it.
  size_t best = 0;
  for (size_t i = 1; i < curve.size(); ++i) {
    if (curve[i].loss < curve[best].loss) best = i;
  }
  const int64_t since = static_cast<int64_t>(curve.size() - 1 - best);
  const bool stop = config_.patience > 0 && since >= config_.patience &&
                    state_.step < config_.steps;
  if (stop) state_.stopped_early_step = state_.step;
  if (progress) {
    char note[160];
    std::snprintf(note, sizeof note, "held-out loss %.4f", p.loss);
    std::string text = note;
    if (p.bleu_sentences > 0) {
      std::snprintf(note, sizeof note, " BLEU %.2f", p.bleu);
      text += note;
    }
    text += " at step " + std::to_string(p.step);
    if (best + 1 != curve.size()) {
      std::snprintf(note, sizeof note, " (best %.4f at step %lld)",
                    curve[best].loss,
                    static_cast<long long>(curve[best].step));
      text += note;
    }
    if (stop) {
      text += "; stopping: no improvement in " +
              std::to_string(config_.patience) + " evaluations";
    }
    progress->Note(text);
  }
  return stop;
}

bool Trainer::CheckpointDue(const RunOptions& options, bool stopping) const {
  if (options.checkpoint_dir.empty()) return false;
  const bool periodic = config_.checkpoint_every > 0 &&
                        state_.step % config_.checkpoint_every == 0;
  return periodic || state_.step == config_.steps || stopping;
}

RunResult Trainer::Run(const RunOptions& options) {
  RunResult result;
  const ScheduleConfig schedule = MakeSchedule(config_);
  const int64_t until = options.stop_at_step >= 0
                            ? std::min(options.stop_at_step, config_.steps)
                            : config_.steps;
  base::SetThreads(config_.threads);
  // A checkpoint (or a caller) could hand us non-finite parameters: refuse
  // them before spending any compute.
  if (const std::string bad = FirstNonFinite(*model_, /*grads=*/false);
      !bad.empty()) {
    StopNonFinite(state_.step,
                  "parameter '" + bad + "' holds NaN or Inf before the step");
  }

  // A run the patience rule stopped is finished: resuming it trains
  // nothing.
  if (state_.stopped_early_step >= 0) {
    result.final_step = state_.step;
    result.stopped_early = true;
    return result;
  }

  std::unique_ptr<Progress> progress;
  if (options.progress_out) {
    progress = std::make_unique<Progress>(*options.progress_out, options.label,
                                          config_.steps, options.progress_mode);
    progress->SetStart(state_.step);
  }
  const ProgressCloser closer{progress.get()};
  // One writer per checkpoint folder for the whole run (a second run into
  // it gets IoError; reentrant, so a caller holding the lock already is
  // fine). A folder that the first save creates is locked after that save.
  io::FolderLock lock;
  bool locked = false;
  auto lock_folder = [&] {
    std::error_code ec;
    if (locked || options.checkpoint_dir.empty() ||
        !std::filesystem::is_directory(options.checkpoint_dir, ec)) {
      return;
    }
    lock = io::FolderLock(options.checkpoint_dir);
    locked = true;
  };
  lock_folder();
  Rng data_rng(state_.data_rng), dropout_rng(state_.dropout_rng);
  int64_t tokens_total = 0;
  RecentLoss recent;
  const auto start = std::chrono::steady_clock::now();
  while (state_.step < until) {
    const StepRecord rec = Step(data_rng, dropout_rng, schedule);
    tokens_total += rec.tokens;
    result.steps.push_back(rec);
    if (options.on_step) options.on_step(rec);
    recent.Add(rec.loss);
    if (progress) progress->Update(state_.step, recent.Running(), tokens_total);

    // The curve's point comes before the checkpoint that records it.
    const bool early =
        ValidationDue() && AddValidationPoint(options, progress.get());
    const bool stop = early || StopRequested(options, state_.step);
    if (CheckpointDue(options, stop)) {
      Save(options.checkpoint_dir);
      lock_folder();
    }
    if (early) {
      result.stopped_early = true;
      break;
    }
    if (stop && state_.step < config_.steps) {
      result.interrupted = true;
      break;
    }
  }
  if (progress) progress->Finish();
  result.final_step = state_.step;
  result.completed = state_.step >= config_.steps;
  result.seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  result.final_loss = recent.Exact();
  if (!options.checkpoint_dir.empty() && result.completed)
    Save(options.checkpoint_dir);
  return result;
}

}  // namespace relpos::train

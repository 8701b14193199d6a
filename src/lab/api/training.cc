// relpos::Training and relpos::Evaluate: wrap train::Trainer and
// train::EvaluateByLength.
#include "relpos/lab/training.h"

#include <algorithm>

#include "lab/api/internal.h"
#include "relpos/lab/translation.h"
#include "base/check.h"
#include "base/threads.h"
#include "train/evaluation.h"
#include "train/lengths.h"
#include "model/memory_plan.h"
#include "train/progress.h"

namespace relpos {

train::ProgressMode ProgressModeOf(const std::string& mode) {
  if (mode == "bar") return train::ProgressMode::kTerminal;
  if (mode == "lines") return train::ProgressMode::kLines;
  if (mode == "none") return train::ProgressMode::kQuiet;
  RELPOS_CHECK_ARG(mode == "auto", "progress mode must be auto, bar, lines or "
                                   "none (got '"
                                       << mode << "')");
  return train::ProgressMode::kAuto;
}

namespace {

std::unique_ptr<train::DataSource> DataOf(const ExperimentConfig& config) {
  return train::MakeDataSource(Internals(config).train.data);
}

}  // namespace

struct Training::Impl {
  explicit Impl(train::Trainer t)
      : trainer(std::move(t)), model(BorrowModel(trainer)) {}
  train::Trainer trainer;
  Model model;
};

Training::Training() = default;
Training::~Training() = default;
Training::Training(Training&&) noexcept = default;
Training& Training::operator=(Training&&) noexcept = default;

Training::Training(const ExperimentConfig& config) {
  ExperimentConfig c = config;
  c.Resolve();
  impl_ = std::make_unique<Impl>(
      train::Trainer(Internals(c).model, Internals(c).train));
}

Training Training::Resume(const std::string& dir) {
  Training t;
  t.impl_ = std::make_unique<Impl>(train::Trainer::Resume(dir));
  return t;
}

TrainSummary Training::Run(const TrainOptions& options) {
  train::RunOptions o;
  o.checkpoint_dir = options.checkpoint_dir;
  o.progress_out = options.progress.out;
  o.progress_mode = ProgressModeOf(options.progress.mode);
  o.label = options.progress.label;
  o.stop_flag = options.stop_flag;
  o.stop_at_step = options.stop_at_step;
  // The curve's BLEU: relpos eval's beam search and scores, on the same
  // evenly spaced held-out pairs as --max-sentences takes.
  const train::TrainConfig& tc = impl_->trainer.config();
  if (tc.eval_every > 0 && tc.eval_bleu_sentences > 0) {
    o.score_bleu = [this, n = tc.eval_bleu_sentences](ValidationPoint* p) {
      TranslationEvalOptions eval;
      eval.max_sentences = n;
      eval.progress.out = nullptr;
      const TranslationEvalResult r = EvaluateTranslation(impl_->model, eval);
      p->bleu = r.scores.front().bleu;  // "all"
      p->bleu_sentences = r.scores.front().sentences;
    };
  }
  const train::RunResult r = impl_->trainer.Run(o);
  return {.steps_run = static_cast<int64_t>(r.steps.size()),
          .final_step = r.final_step,
          .completed = r.completed,
          .interrupted = r.interrupted,
          .stopped_early = r.stopped_early,
          .seconds = r.seconds,
          .final_loss = r.final_loss,
          .validation = impl_->trainer.state().validation};
}

void Training::Save(const std::string& dir) { impl_->trainer.Save(dir); }

void Training::SetTotalSteps(int64_t steps) {
  impl_->trainer.set_total_steps(steps);
  Internals(Internals(impl_->model).config).train = impl_->trainer.config();
}

const ExperimentConfig& Training::config() const {
  return impl_->model.config();
}

int64_t Training::step() const { return impl_->trainer.state().step; }

Model& Training::model() { return impl_->model; }

std::vector<LengthMetrics> Evaluate(Model& model, const EvalOptions& options) {
  const ExperimentConfig& config = model.config();
  const std::unique_ptr<train::DataSource> data = DataOf(config);
  train::EvalConfig ec;
  ec.lengths = options.lengths;
  ec.sequences_per_length = options.sequences_per_length;
  ec.batch_size = options.batch_size;
  ec.seed = options.seed;
  ec.compute_type =
      model::ParseComputeType(options.compute_type, "compute_type");
  // Checked before the progress display starts.
  RELPOS_CHECK_ARG(ec.sequences_per_length >= 1 && ec.batch_size >= 1,
                   "sequences per length and batch size must be >= 1 (got "
                       << ec.sequences_per_length << ", " << ec.batch_size
                       << ")");
  train::CheckEvalLengths(Internals(config).model, *data, ec.lengths);
  const int threads =
      options.threads > 0 ? options.threads : Internals(config).train.threads;
  // One batch of the longest length must fit beside the model.
  int64_t longest = 0;
  for (int64_t n : ec.lengths) longest = std::max(longest, n);
  model::Transformer& t = FloatTransformer(model, "Evaluate");
  const model::ModelConfig& mc = t.config();
  model::MemoryPlan plan = model::PlanInference(
      mc, std::min(ec.batch_size, ec.sequences_per_length),
      data->SequenceLength(longest), threads);
  plan.resident = model::PlanModel(mc).total();
  model::CheckMemory(plan);
  base::SetThreads(threads);
  std::unique_ptr<train::Progress> progress;
  if (options.progress.out) {
    const int64_t batches =
        (ec.sequences_per_length + ec.batch_size - 1) / ec.batch_size;
    progress = std::make_unique<train::Progress>(
        *options.progress.out, options.progress.label,
        batches * static_cast<int64_t>(ec.lengths.size()),
        ProgressModeOf(options.progress.mode));
  }
  std::vector<LengthMetrics> results = train::EvaluateByLength(
      t, *data, ec, progress.get());
  if (progress) progress->Finish();
  return results;
}

void CheckEvalLengths(const ExperimentConfig& config,
                      const std::vector<int64_t>& lengths) {
  ExperimentConfig c = config;
  c.Resolve();
  train::CheckEvalLengths(Internals(c).model, *DataOf(c), lengths);
}

DataInfo DescribeData(const ExperimentConfig& config) {
  const std::unique_ptr<train::DataSource> data = DataOf(config);
  return {.name = data->name(),
          .metric = data->metric_description(),
          .source = data->source_description(),
          .vocab_size = data->vocab_size(),
          .min_length = data->min_length(),
          .max_length = data->max_length()};
}

int64_t SequenceLength(const ExperimentConfig& config, int64_t length) {
  return DataOf(config)->SequenceLength(length);
}

std::vector<std::string> TaskNames() { return train::DataTaskNames(); }

std::vector<int64_t> ParseLengths(const std::string& spec,
                                  const std::string& name) {
  return train::ParseLengths(spec, name);
}

}  // namespace relpos

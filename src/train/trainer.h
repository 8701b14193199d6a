// Training and evaluation of relpos's small transformer on the synthetic
// sequence tasks (src/tasks/task.h) or byte-level language modelling
// (src/tasks/text_corpus.h): batching, the training loop (AdamW, warm-up +
// cosine schedule, gradient clipping), checks for non-finite values,
// periodic checkpoints, and evaluation of accuracy per sequence length.
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
#include <nlohmann/json_fwd.hpp>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "core/rng.h"
#include "model/transformer.h"
#include "tasks/task.h"
#include "train/optimizer.h"
#include "train/progress.h"

namespace relpos::train {

// ---------------------------------------------------------------- lengths

// Parses a list of lengths: comma-separated items, each "N", "A-B" (every
// length from A to B) or "A-B:S" (A, A+S, ..., up to B; B itself is always
// included). Sorted, duplicates removed. InvalidArgument naming `flag` on a
// malformed item, a reversed range, a length < 1 or > `max_length`, or more
// than 4096 lengths.
std::vector<int64_t> ParseLengths(const std::string& spec,
                                  const std::string& flag,
                                  int64_t max_length = int64_t{1} << 20);
// Parses one range "A-B" (or "N" = "N-N") with 1 <= A <= B <= max_length.
std::pair<int64_t, int64_t> ParseLengthRange(const std::string& spec,
                                             const std::string& flag,
                                             int64_t max_length = int64_t{1}
                                                                  << 20);
// "8-16" / "8" (for a one-length range).
std::string FormatLengthRange(int64_t lo, int64_t hi);

// ------------------------------------------------------------------- data

// The name of the byte-level language-modelling "task".
inline constexpr const char* kLanguageModelTask = "lm";

struct DataConfig {
  std::string task = "local_difference";  // a tasks::TaskNames() name or "lm"
  // Task "lm" only: a text file; empty = relpos's generated text with
  // `corpus_seed` and `corpus_bytes`.
  std::string corpus_path;
  uint64_t corpus_seed = 0;
  int64_t corpus_bytes = int64_t{1} << 20;
};

// Every accepted task name: tasks::TaskNames() plus "lm", sorted.
std::vector<std::string> DataTaskNames();

// Examples for training and evaluation, whatever their origin.
class DataSource {
 public:
  virtual ~DataSource() = default;
  virtual std::string name() const = 0;
  virtual int32_t vocab_size() const = 0;
  // The architecture this data needs by default: the formal tasks read
  // answers at blank positions after the input (bidirectional encoder);
  // language modelling predicts the next byte (causal decoder).
  virtual model::Arch default_arch() const = 0;
  // Smallest and largest accepted size parameter `length`.
  virtual int64_t min_length() const = 0;
  virtual int64_t max_length() const = 0;
  // Tokens in an example of size `length` (tasks: input + blanks).
  virtual int64_t SequenceLength(int64_t length) const = 0;
  // One example; `held_out` selects the evaluation split where the data has
  // one (the corpus's last 10%); tasks draw from the same distribution, the
  // evaluation stream is kept apart by its seed.
  virtual tasks::Example Sample(int64_t length, bool held_out,
                                Rng& rng) const = 0;
  // "per-token accuracy over output positions" or "next-byte accuracy".
  virtual std::string metric_description() const = 0;
};

// InvalidArgument for an unknown task; IoError/FormatError for a bad corpus.
std::unique_ptr<DataSource> MakeDataSource(const DataConfig& config);

// ---------------------------------------------------------------- config

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
  uint64_t seed = 0;       // initialisation, data order and dropout
  int threads = 1;         // OpenMP threads; part of the determinism key
  int64_t checkpoint_every = 500;  // steps between checkpoints; 0 = end only
};

nlohmann::json ToJson(const TrainConfig& config);
// Missing fields keep their defaults; unknown fields and wrong JSON types are
// FormatError naming the field; values are then checked by Validate.
TrainConfig TrainConfigFromJson(const nlohmann::json& json);
// InvalidArgument naming the first bad field and its value.
void Validate(const TrainConfig& config);
ScheduleConfig MakeSchedule(const TrainConfig& config);

// Fills in what the model config takes from the data (vocab_size) and checks
// that the pair fits: train lengths within the data's range, and for learned
// absolute positions the longest training sequence within max_len.
void CheckModelAndData(const model::ModelConfig& model,
                       const TrainConfig& train, const DataSource& data);

// ----------------------------------------------------------------- batches

// A batch of `batch_size` examples whose sizes are drawn uniformly from
// [min_length, max_length], padded to the longest (pad token 0, target -1).
model::Batch MakeTrainBatch(const DataSource& data, int64_t batch_size,
                            int64_t min_length, int64_t max_length, Rng& rng);
// `count` examples of exactly size `length` (evaluation).
model::Batch MakeFixedBatch(const DataSource& data, int64_t count,
                            int64_t length, bool held_out, Rng& rng);

// -------------------------------------------------------------- evaluation

// Evaluation examples come from Rng(seed) mixed with the length, a stream
// apart from every training stream, so all models evaluated with the same
// EvalConfig see the same examples.
inline constexpr uint64_t kDefaultEvalSeed = 0x5EED0E7A1ULL;

struct EvalConfig {
  std::vector<int64_t> lengths;
  int64_t sequences_per_length = 128;
  int64_t batch_size = 64;
  uint64_t seed = kDefaultEvalSeed;
};

struct LengthResult {
  int64_t length = 0;            // the size parameter
  int64_t sequence_length = 0;   // tokens in each example
  double token_accuracy = 0;     // correct / scored positions
  double sequence_accuracy = 0;  // sequences with every scored position right
  double loss = 0;               // mean cross-entropy (nats) per scored token
  int64_t tokens = 0, sequences = 0;
};

// Checks that the model can run sequences of these lengths (InvalidArgument
// naming --lengths otherwise: beyond the learned table, beyond the corpus).
void CheckEvalLengths(const model::ModelConfig& model, const DataSource& data,
                      const std::vector<int64_t>& lengths);

// Evaluates `model` at every length; `progress` (optional) advances by one
// unit per batch.
std::vector<LengthResult> EvaluateByLength(model::Transformer& model,
                                           const DataSource& data,
                                           const EvalConfig& config,
                                           Progress* progress = nullptr);

// ------------------------------------------------------------------ trainer

// Everything a resumed run needs besides parameters and optimiser moments.
struct TrainState {
  int64_t step = 0;  // updates done so far
  uint64_t data_rng = 0, dropout_rng = 0;
};

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
};

struct RunResult {
  int64_t final_step = 0;
  bool completed = false;         // reached TrainConfig::steps
  bool interrupted = false;       // stopped by the flag or stop_at_step
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
  // Changes the total number of steps (resume with a longer or shorter run).
  // The cosine schedule follows the new total, so the continuation is no
  // longer the one an uninterrupted run of the old length would take.
  void set_total_steps(int64_t steps);

 private:
  Trainer() = default;
  void InitOptimizer();

  TrainConfig config_;
  std::unique_ptr<DataSource> data_;
  std::unique_ptr<model::Transformer> model_;
  std::unique_ptr<AdamW> optimizer_;
  TrainState state_;
  std::string last_saved_dir_;
  int64_t last_saved_step_ = -1;
};

// Sets the OpenMP thread count (threads >= 1); returns the value in force.
int SetThreads(int threads);

// Mixes a seed with a stream id (SplitMix64 finaliser): independent streams
// for initialisation, data, dropout and evaluation.
uint64_t DeriveSeed(uint64_t seed, uint64_t stream);

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_TRAINER_H_

// Training and evaluation of relpos's transformer on the synthetic tasks
// (docs/tasks.md) or byte-level language modelling (docs/training.md): AdamW
// with warm-up + cosine decay and gradient clipping, checkpoints that resume
// bit-identically, accuracy by sequence length.
//
//   relpos::ExperimentConfig c;
//   c.Set("train", "task", "reverse");
//   c.Set("train", "steps", "200");
//   relpos::Training run(c);
//   run.Run({.checkpoint_dir = "out"});
//   auto by_length = relpos::Evaluate(run.model(), {.lengths = {4, 8, 16}});
#ifndef RELPOS_LAB_TRAINING_H_
#define RELPOS_LAB_TRAINING_H_

#include <csignal>
#include <cstdint>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "relpos/lab/config.h"
#include "relpos/lab/model.h"
#include "relpos/train/results.h"

namespace relpos {

// Progress display: "auto" (a bar on a terminal, log lines otherwise), "bar",
// "lines" or "none".
struct ProgressOptions {
  std::ostream* out = nullptr;  // nullptr: no progress
  std::string mode = "auto";
  std::string label;
};

struct TrainOptions {
  // Checkpoints go here every checkpoint_every steps, at the end and when
  // stopped; empty: none.
  std::string checkpoint_dir;
  ProgressOptions progress{.label = "train"};
  // Polled after every step: nonzero stops the run at a step boundary, with
  // a checkpoint (a signal handler may set it).
  const volatile std::sig_atomic_t* stop_flag = nullptr;
  // Stop (as if interrupted) once this many updates are done; < 0: run to
  // the configured steps.
  int64_t stop_at_step = -1;
};

struct TrainSummary {
  int64_t steps_run = 0;   // updates this call made
  int64_t final_step = 0;  // updates done in all
  bool completed = false;  // reached the configured steps
  bool interrupted = false;
  // Stopped by the patience rule before the configured steps (this call or
  // the run it resumed); final_step is where.
  bool stopped_early = false;
  double seconds = 0;
  double final_loss = 0;  // mean over the last min(100, steps) updates
  // The run's validation curve so far (a resumed run's earlier points
  // included); empty without eval_every.
  std::vector<ValidationPoint> validation;
};

class Training {
 public:
  // A fresh run of `config` (resolved first).
  explicit Training(const ExperimentConfig& config);
  // Continues the run saved in `dir`.
  static Training Resume(const std::string& dir);
  ~Training();
  Training(Training&&) noexcept;
  Training& operator=(Training&&) noexcept;

  // Trains to the configured steps (or until stopped). NumericalError naming
  // the step and the tensor if anything becomes NaN/Inf.
  TrainSummary Run(const TrainOptions& options = {});
  // A checkpoint of the current state (a no-op if this step is saved there).
  void Save(const std::string& dir);
  // Changes the total number of steps (at least the current step).
  void SetTotalSteps(int64_t steps);

  const ExperimentConfig& config() const;  // resolved
  int64_t step() const;
  Model& model();  // valid while this Training lives

 private:
  Training();
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

struct EvalOptions {
  std::vector<int64_t> lengths;  // task size parameters
  int64_t sequences_per_length = 128;
  int64_t batch_size = 64;
  uint64_t seed = kDefaultEvalSeed;
  int threads = 0;  // 0: the model's training thread count
  // "float32" (the forward pass), or "int8" / "int8_a8": a decoder model's
  // (task lm) metrics from the cached decoder with int8 weights, as
  // `generate --compute-type int8` (or int8_a8) runs it (docs/generate.md,
  // "Quantized inference"); InvalidArgument for other models.
  std::string compute_type = "float32";
  ProgressOptions progress{.label = "eval"};
};

// Accuracy of `model` at each length on held-out examples of its data.
// InvalidArgument naming 'lengths' for a length the model or data cannot
// take (beyond the learned position table, outside the task's range).
std::vector<LengthMetrics> Evaluate(Model& model, const EvalOptions& options);

// The check Evaluate makes first, for a configuration before training:
// InvalidArgument naming 'lengths'.
void CheckEvalLengths(const ExperimentConfig& config,
                      const std::vector<int64_t>& lengths);

// The data a configuration trains on.
struct DataInfo {
  std::string name;    // the task, or "lm"
  std::string metric;  // what the accuracy counts
  // The task's name, or for lm the corpus: its path and what was read
  // (files, bytes, split sizes, skipped binary files, the cap).
  std::string source;
  int64_t vocab_size = 0, min_length = 0, max_length = 0;
};
DataInfo DescribeData(const ExperimentConfig& config);
// Tokens in an example of size `length` of the config's data.
int64_t SequenceLength(const ExperimentConfig& config, int64_t length);
// Every accepted task name, "lm" included.
std::vector<std::string> TaskNames();

// Lengths as the settings spell them (train_lengths, and the evaluation
// lengths of every verb): "N", "A-B", "A-B:STEP" (B always included), comma
// lists of these; sorted, unique. InvalidArgument naming `name`.
std::vector<int64_t> ParseLengths(const std::string& spec,
                                  const std::string& name);

}  // namespace relpos

#endif  // RELPOS_LAB_TRAINING_H_

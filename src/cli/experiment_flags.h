// Model and training flags shared by `relpos train`, `relpos sweep` and
// `relpos demo`, and how they combine with `--config FILE.json`:
// built-in defaults < the config file < flags given on the command line.
#ifndef RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_
#define RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "model/transformer.h"
#include "train/progress.h"
#include "train/trainer.h"

namespace relpos::cli {

// Which groups of flags a verb takes.
struct FlagGroups {
  bool position = true;  // --position, --max-distance, --terms, ...
  bool config_file = true;
};

class ExperimentFlags {
 public:
  // Registers the flags on `sub`.
  void Add(CLI::App* sub, FlagGroups groups = {});

  // The configs: defaults (`model_defaults`, `train_defaults`), then the
  // --config file, then every flag that was given. The model's arch follows
  // the task (encoder for the formal tasks, decoder for lm) unless set.
  // Validates both (InvalidArgument/FormatError naming the flag or field)
  // and the pair against the data (vocab, lengths, max_len).
  void Build(const model::ModelConfig& model_defaults,
             const train::TrainConfig& train_defaults,
             model::ModelConfig* model, train::TrainConfig* train) const;

  // True if any model/optimiser flag or --config was given (for --resume,
  // which takes its configuration from the checkpoint).
  bool AnyGiven() const;
  // Names of the given flags, in registration order (for messages).
  std::vector<std::string> GivenNames() const;
  // The raw --steps value (meaningful when "--steps" is among GivenNames()).
  int64_t steps_flag() const { return steps_; }

  train::ProgressMode progress_mode() const;

 private:
  struct Applier {
    CLI::Option* option;
    std::function<void(model::ModelConfig&, train::TrainConfig&)> apply;
  };
  template <typename T>
  CLI::Option* Bind(
      CLI::App* sub, const std::string& name, T* storage,
      const std::string& help,
      std::function<void(model::ModelConfig&, train::TrainConfig&)> apply);

  // Raw storage (a stable address for CLI11; the object lives in a
  // shared_ptr owned by the verb's callback).
  std::string task_, position_, arch_, terms_, train_lengths_, config_file_,
      corpus_, progress_ = "auto";
  int64_t max_distance_ = 0, d_model_ = 0, heads_ = 0, layers_ = 0, d_ff_ = 0,
          max_len_ = 0, steps_ = 0, batch_size_ = 0, warmup_ = 0,
          checkpoint_every_ = 0, corpus_bytes_ = 0;
  double dropout_ = 0, rel_init_scale_ = 0, lr_ = 0, min_lr_ratio_ = 0,
         beta1_ = 0, beta2_ = 0, eps_ = 0, weight_decay_ = 0, clip_norm_ = 0;
  uint64_t seed_ = 0, corpus_seed_ = 0;
  int threads_ = 0;
  bool per_head_ = false;
  CLI::Option* arch_option_ = nullptr;
  CLI::Option* config_option_ = nullptr;
  std::vector<Applier> appliers_;
};

// Applies "--terms both|key|value|neither" to `config`.
// Refuses an --out folder that cannot receive results, without creating
// anything: it must be, or be creatable as, a writable folder. With
// `refuse_checkpoint`, a folder that already holds a checkpoint is refused
// too (continuing one is what --resume is for).
void CheckOutDir(const std::string& out, bool refuse_checkpoint);

void ApplyTerms(const std::string& terms, model::ModelConfig* config);
std::string TermsName(const model::ModelConfig& config);

// Short description: "relative (k=16)", "learned", ...
std::string PositionLabel(const model::ModelConfig& config);

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_

// Model and training flags shared by `relpos train`, `relpos sweep` and
// `relpos demo`, and how they combine with `--config FILE.json`:
// built-in defaults < the config file < flags given on the command line.
#ifndef RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_
#define RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_

#include <CLI/CLI.hpp>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "io/settings.h"
#include "model/model_config.h"
#include "model/transformer.h"
#include "train/progress.h"
#include "train/train_config.h"

namespace relpos::cli {

// "--progress auto|bar|lines|none", the one spelling every verb shares.
CLI::Option* AddProgressFlag(CLI::App* sub, std::string* storage);
train::ProgressMode ParseProgressMode(const std::string& name);

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
  // The value given for `flag` ("--steps"), or "" if it was not given.
  std::string GivenText(const std::string& flag) const;

  train::ProgressMode progress_mode() const { return ParseProgressMode(progress_); }

 private:
  // One flag bound to one setting: CLI11 stores the text, Build applies it.
  struct Bound {
    CLI::Option* option = nullptr;
    std::string text;
    bool on = false;  // boolean switches
    std::function<void(model::ModelConfig&, train::TrainConfig&)> apply;
  };
  template <typename C>
  void Bind(CLI::App* sub, const io::Setting<C>& setting,
            const FlagGroups& groups);
  const Bound* Find(const std::string& flag) const;

  std::string config_file_, progress_ = "auto";
  CLI::Option* config_option_ = nullptr;
  std::deque<Bound> bound_;  // a deque: CLI11 keeps pointers to the text
};

// Refuses an --out folder that cannot receive results, without creating
// anything: it must be, or be creatable as, a writable folder. With
// `refuse_checkpoint`, a folder that already holds a checkpoint is refused
// too (continuing one is what --resume is for).
void CheckOutDir(const std::string& out, bool refuse_checkpoint);

// Short description: "relative (k=16)", "learned", ...
std::string PositionLabel(const model::ModelConfig& config);

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_

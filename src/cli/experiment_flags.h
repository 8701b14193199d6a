// Model and training flags shared by `relpos train`, `relpos sweep` and
// `relpos demo`, and how they combine with `--config FILE.json`:
// built-in defaults < the config file < flags given on the command line.
// The flags are the settings' own (relpos::ExperimentConfig::Settings()):
// a setting declared in the library is a flag here without more code.
#ifndef RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_
#define RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_

#include <CLI/CLI.hpp>
#include <deque>
#include <string>
#include <vector>

#include "relpos/lab/config.h"

namespace relpos::cli {

// "--progress auto|bar|lines|none", the one spelling every verb shares.
CLI::Option* AddProgressFlag(CLI::App* sub, std::string* storage);

// Which groups of flags a verb takes.
struct FlagGroups {
  bool position = true;  // --position, --max-distance, --terms, ...
  bool config_file = true;
};

class ExperimentFlags {
 public:
  // Registers the flags on `sub`; each value is checked while parsing
  // against its setting's declared type and range. The help shows each
  // flag's default: its setting's default note, or its value in `defaults`
  // (the verb's own defaults, as it passes them to Build).
  void Add(CLI::App* sub, FlagGroups groups = {},
           const ExperimentConfig& defaults = ExperimentConfig{});
  // Replaces the default the help shows for `flag` ("--steps").
  void ShowDefault(const std::string& flag, const std::string& text);

  // `defaults`, then the --config file, then every flag that was given;
  // resolved (vocabulary and, unless given, arch and warm-up from the data
  // and run length) and validated (errors name the flag or field).
  ExperimentConfig Build(const ExperimentConfig& defaults) const;

  // True if any model/optimiser flag or --config was given (for --resume,
  // which takes its configuration from the checkpoint).
  bool AnyGiven() const;
  // Names of the given flags, in registration order (for messages).
  std::vector<std::string> GivenNames() const;
  // The value given for `flag` ("--steps"), or "" if it was not given.
  std::string GivenText(const std::string& flag) const;

  const std::string& progress() const { return progress_; }

 private:
  // One flag bound to one setting: CLI11 stores the text, Build applies it.
  struct Bound {
    const SettingInfo* setting = nullptr;
    std::string key;  // what ExperimentConfig::Set takes
    std::string flag;
    CLI::Option* option = nullptr;
    std::string text;
    bool on = false;  // boolean switches
  };
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
std::string PositionLabel(const ExperimentConfig& config);

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_

// Model and training flags shared by `relpos train`, `relpos sweep` and
// `relpos demo`, and how they combine with `--config FILE.json`:
// built-in defaults < the config file < flags given on the command line.
// The flags are the settings' own (relpos::ExperimentConfig::Settings()):
// a setting declared in the library is a flag here without more code.
#ifndef RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_
#define RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_

#include <CLI/CLI.hpp>
#include <deque>
#include <memory>
#include <string>
#include <vector>

#include "relpos/lab/config.h"
#include "relpos/lab/files.h"

namespace relpos::cli {

// "--progress auto|bar|lines|none", the one spelling every verb shares.
CLI::Option* AddProgressFlag(CLI::App* sub, std::string* storage);

// The one seed parser of every verb: a decimal integer in [0, 2^64 - 1],
// read by the same rule as the train.seed setting (digits only: no sign,
// spaces or exponent); anything else, 2^64 included, is InvalidArgument
// "<flag> must be a non-negative integer (got '-1')", never clamped.
uint64_t ParseSeed(const std::string& text, const std::string& flag);
// A --seed option read by ParseSeed into *seed (a usage error while parsing
// for a bad value).
CLI::Option* AddSeedOption(CLI::App* sub, const std::string& flag,
                           uint64_t* seed, const std::string& help);

// The --compute-type option of the decoding verbs (generate, translate,
// eval): a name of ComputeTypeNames(), float32, int8 or int8_a8
// (relpos/lab/model.h, DecodeOptions::compute_type).
CLI::Option* AddComputeTypeOption(CLI::App* sub, std::string* compute_type);

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

// A path for a message: 'runs/a', or PathText's quoted form ("t\xff") when
// the bytes are not printable UTF-8 (relpos/lab/files.h).
std::string Quoted(const std::string& path);

// An output folder a verb writes, from start to end: checked (CheckOutDir),
// created if missing, locked (one writer per folder: a second relpos
// process is refused with "... is in use by another relpos process"), and
// checked again under the lock (another run may have committed a checkpoint
// meanwhile). A folder this verb created is removed again when the object
// goes unless a checkpoint was written into it or Keep() was called, so a
// failed command leaves nothing behind.
class OutputFolder {
 public:
  OutputFolder(const std::string& out, bool refuse_checkpoint);
  ~OutputFolder();
  OutputFolder(const OutputFolder&) = delete;
  OutputFolder& operator=(const OutputFolder&) = delete;
  void Keep() { keep_ = true; }

 private:
  std::string dir_;
  bool created_ = false, keep_ = false;
  std::unique_ptr<FolderLock> lock_;
};

// Short description: "relative (k=16)", "learned", ...
std::string PositionLabel(const ExperimentConfig& config);

}  // namespace relpos::cli

#endif  // RELPOS_SRC_CLI_EXPERIMENT_FLAGS_H_

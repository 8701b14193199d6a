#include "cli/experiment_flags.h"

#include <unistd.h>

#include <filesystem>
#include <system_error>

#include "cli/cli_common.h"
#include "relpos/error.h"
#include "relpos/lab/files.h"
#include "relpos/lab/model.h"
#include "relpos/schemes.h"

namespace relpos::cli {
namespace {

}  // namespace

std::string Quoted(const std::string& path) {
  const std::string text = PathText(path);
  return text != path ? text : "'" + text + "'";
}

namespace {

// "--max-distance,-k" -> "--max-distance".
std::string LongName(const std::string& flag) {
  return flag.substr(0, flag.find(','));
}

}  // namespace

CLI::Option* AddProgressFlag(CLI::App* sub, std::string* storage) {
  return sub
      ->add_option("--progress", *storage,
                   "Progress display: auto (bar on a terminal, log lines "
                   "otherwise), bar, lines or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
}

std::string PositionLabel(const ExperimentConfig& c) {
  const Scheme& scheme = FindScheme(c.Get("model", "position"));
  std::string s = scheme.name;
  // The reach of the scheme's table (its label, e.g. "k={max_distance}",
  // with each {key} replaced by the setting's value) and, for Shaw's
  // tables, the terms in use.
  std::string reach = scheme.label;
  for (size_t open = reach.find('{'); open != std::string::npos;
       open = reach.find('{', open)) {
    const size_t close = reach.find('}', open);
    const std::string value =
        c.Get("model", reach.substr(open + 1, close - open - 1));
    reach.replace(open, close - open + 1, value);
    open += value.size();
  }
  if (!reach.empty()) {
    s += " (" + reach;
    const std::string terms = c.Get("model", "--terms");
    if (scheme.Reads(SchemeSetting::kKeyTerm) && terms != "both") {
      s += ", " + terms + " term";
      if (terms == "neither") s += "s";
    }
    s += ")";
  }
  return s;
}

uint64_t ParseSeed(const std::string& text, const std::string& flag) {
  ExperimentConfig scratch;
  scratch.Set("train", "seed", text, flag);
  return std::stoull(scratch.Get("train", "seed"));
}

CLI::Option* AddComputeTypeOption(CLI::App* sub, std::string* compute_type) {
  return sub
      ->add_option("--compute-type", *compute_type,
                   "float32; int8: the linear layers with int8 "
                   "weights per output channel and 16-bit activations; "
                   "int8_a8: 8-bit activations, faster, less accurate "
                   "(docs/generate.md, \"Quantized inference\")")
      ->check(CLI::IsMember(ComputeTypeNames()))
      ->capture_default_str();
}

CLI::Option* AddSeedOption(CLI::App* sub, const std::string& flag,
                           uint64_t* seed, const std::string& help) {
  CLI::Option* option = sub->add_option_function<std::string>(
      flag, [seed, flag](const std::string& text) {
        *seed = ParseSeed(text, flag);
      },
      help);
  option->type_name("UINT");
  // The start value, shown as the default (add_option_function captures
  // none).
  option->default_str(std::to_string(*seed));
  option->check(CLI::Validator(
      [flag](std::string& text) -> std::string {
        try {
          ParseSeed(text, flag);
        } catch (const Error& e) {
          // CLI11 puts the flag in front already.
          std::string message = MessageBody(e);
          if (message.rfind(flag + " ", 0) == 0) {
            message.erase(0, flag.size() + 1);
          }
          return message;
        }
        return "";
      },
      "[0, 2^64 - 1]"));
  return option;
}

void ExperimentFlags::Add(CLI::App* sub, FlagGroups groups,
                          const ExperimentConfig& defaults) {
  static const char* kTypeNames[] = {"INT", "UINT", "FLOAT", "TEXT"};
  // Train settings first: --task and --train-lengths lead the help.
  for (const char* section : {"train", "model"}) {
    for (const SettingInfo& s : ExperimentConfig::Settings()) {
      if (s.section != section || s.flag.empty()) continue;
      if (s.group == "position" && !groups.position) continue;
      Bound& b = bound_.emplace_back();
      b.setting = &s;
      b.flag = LongName(s.flag);
      b.key = s.key.empty() ? b.flag : s.key;
      if (s.is_switch) {
        b.option = sub->add_flag(s.flag, b.on, s.help);
        continue;
      }
      const char* type = s.type == "integer"        ? kTypeNames[0]
                         : s.type == "integer >= 0" ? kTypeNames[1]
                         : s.type == "number"       ? kTypeNames[2]
                                                    : kTypeNames[3];
      b.option = sub->add_option(s.flag, b.text, s.help)
                     ->type_name(type)
                     ->default_str(s.default_note.empty()
                                       ? defaults.Get(s.section, b.key)
                                       : s.default_note);
      // Checked while parsing, on a scratch config, so a bad value is a
      // usage error naming the flag before anything runs.
      const Bound* bound = &b;
      b.option->check(CLI::Validator(
          [bound](std::string& text) -> std::string {
            try {
              ExperimentConfig scratch;
              scratch.Set(bound->setting->section, bound->key, text,
                          bound->flag);
            } catch (const Error& e) {
              // CLI11 puts the flag in front already.
              std::string message = MessageBody(e);
              if (message.rfind(bound->flag + " ", 0) == 0) {
                message.erase(0, bound->flag.size() + 1);
              }
              return message;
            }
            return "";
          },
          s.valid));
    }
  }
  if (groups.config_file) {
    config_option_ = sub->add_option(
        "--config", config_file_,
        "JSON file {\"model\": {...}, \"train\": {...}} (a checkpoint's "
        "config.json works); flags given on the command line win");
  }
  AddProgressFlag(sub, &progress_);
}

void ExperimentFlags::ShowDefault(const std::string& flag,
                                  const std::string& text) {
  const Bound* b = Find(flag);
  RELPOS_CLI_CHECK(b != nullptr, "no flag " << flag);
  b->option->default_str(text);
}

const ExperimentFlags::Bound* ExperimentFlags::Find(
    const std::string& flag) const {
  for (const Bound& b : bound_) {
    if (b.flag == flag) return &b;
  }
  return nullptr;
}

std::string ExperimentFlags::GivenText(const std::string& flag) const {
  const Bound* b = Find(flag);
  return b && b->option->count() > 0 ? b->text : "";
}

bool ExperimentFlags::AnyGiven() const { return !GivenNames().empty(); }

std::vector<std::string> ExperimentFlags::GivenNames() const {
  std::vector<std::string> names;
  if (config_option_ && config_option_->count() > 0) {
    names.push_back(config_option_->get_name());
  }
  for (const Bound& b : bound_) {
    if (b.option->count() > 0) names.push_back(b.option->get_name());
  }
  return names;
}

ExperimentConfig ExperimentFlags::Build(
    const ExperimentConfig& defaults) const {
  ExperimentConfig c = defaults;
  if (config_option_ && config_option_->count() > 0) {
    try {
      c.MergeJsonFile(config_file_);
    } catch (const FormatError& e) {
      throw FormatError("--config " + MessageBody(e));
    }
  }
  for (const Bound& b : bound_) {
    if (b.option->count() == 0) continue;
    c.Set(b.setting->section, b.key,
          b.setting->is_switch ? (b.on ? "true" : "false") : b.text, b.flag);
  }
  c.Resolve();
  return c;
}

void CheckOutDir(const std::string& out, bool refuse_checkpoint) {
  namespace fs = std::filesystem;
  RELPOS_CLI_CHECK(!out.empty(), "--out must not be empty");
  std::error_code ec;
  const fs::path p(out);
  if (fs::exists(p, ec)) {
    RELPOS_CLI_CHECK(fs::is_directory(p, ec),
                     "--out " << Quoted(out) << " exists and is not a folder");
    RELPOS_CLI_CHECK(!refuse_checkpoint || !HasCheckpoint(out),
                     "--out "
                         << Quoted(out)
                         << " already holds a checkpoint (continue it with "
                            "--resume, or choose another folder)");
    RELPOS_CLI_CHECK(access(out.c_str(), W_OK | X_OK) == 0,
                     "--out " << Quoted(out) << " is not writable");
    return;
  }
  fs::path parent = p.parent_path();
  if (parent.empty()) parent = ".";
  RELPOS_CLI_CHECK(fs::is_directory(parent, ec),
                   "--out " << Quoted(out) << ": parent folder "
                            << Quoted(parent.string()) << " does not exist");
  RELPOS_CLI_CHECK(access(parent.c_str(), W_OK | X_OK) == 0,
                   "--out " << Quoted(out) << ": parent folder "
                            << Quoted(parent.string()) << " is not writable");
}

OutputFolder::OutputFolder(const std::string& out, bool refuse_checkpoint)
    : dir_(out) {
  namespace fs = std::filesystem;
  CheckOutDir(out, refuse_checkpoint);
  std::error_code ec;
  if (!fs::exists(out, ec)) {
    created_ = fs::create_directory(out, ec);
    if (ec) {
      throw IoError("--out " + Quoted(out) + ": cannot create the folder (" +
                    ec.message() + ")");
    }
  }
  try {
    lock_ = std::make_unique<FolderLock>(out);
  } catch (const Error&) {
    created_ = false;  // the other process's now: never removed by us
    throw;
  }
  // Under the lock: another run may have committed a checkpoint between
  // the first check and the lock.
  RELPOS_CLI_CHECK(!refuse_checkpoint || !HasCheckpoint(out),
                   "--out " << Quoted(out)
                            << " already holds a checkpoint (continue it "
                               "with --resume, or choose another folder)");
}

OutputFolder::~OutputFolder() {
  if (!created_ || keep_ || HasCheckpoint(dir_)) return;
  std::error_code ec;
  std::filesystem::remove_all(dir_, ec);  // still under the lock
}

}  // namespace relpos::cli

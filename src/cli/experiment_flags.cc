#include "cli/experiment_flags.h"

#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <system_error>
#include <nlohmann/json.hpp>
#include <set>

#include "core/check.h"
#include "io/file_io.h"
#include "train/checkpoint.h"

namespace relpos::cli {

using model::ModelConfig;
using train::TrainConfig;

CLI::Option* AddProgressFlag(CLI::App* sub, std::string* storage) {
  return sub
      ->add_option("--progress", *storage,
                   "Progress display: auto (bar on a terminal, log lines "
                   "otherwise), bar, lines or none")
      ->check(CLI::IsMember({"auto", "bar", "lines", "none"}));
}

train::ProgressMode ParseProgressMode(const std::string& name) {
  if (name == "bar") return train::ProgressMode::kTerminal;
  if (name == "lines") return train::ProgressMode::kLines;
  if (name == "none") return train::ProgressMode::kQuiet;
  return train::ProgressMode::kAuto;
}

std::string PositionLabel(const ModelConfig& c) {
  std::string s = model::ToString(c.position);
  if (c.position == model::PositionScheme::kRelative) {
    const std::string terms = model::TermsName(c);
    s += " (k=" + std::to_string(c.max_distance);
    if (terms != "both") s += ", " + terms + " term";
    if (terms == "neither") s += "s";
    s += ")";
  }
  return s;
}

namespace {

// Applies `text` given for `s` on the command line to `c`: parsed as the
// setting's type, checked against its declared range or choices, stored.
// InvalidArgument naming the flag.
template <typename C>
void ApplyText(const io::Setting<C>& s, const std::string& flag,
               const std::string& text, C& c) {
  const io::SettingValue v = io::ParseSettingText(s.type, text, flag);
  io::CheckSetting(s, v, flag);
  s.set(c, v, flag);
}

// The first name of a CLI11 spelling: "--max-distance,-k" -> "--max-distance".
std::string LongName(const std::string& flag) {
  return flag.substr(0, flag.find(','));
}

}  // namespace

template <typename C>
void ExperimentFlags::Bind(CLI::App* sub, const io::Setting<C>& s,
                           const FlagGroups& groups) {
  if (s.flag.empty()) return;
  if (s.group == model::kPositionGroup && !groups.position) return;
  Bound& b = bound_.emplace_back();
  const std::string flag = LongName(s.flag);
  const io::Setting<C>* setting = &s;  // the tables are static
  if (s.type == io::SettingType::kBool) {
    b.option = sub->add_flag(s.flag, b.on, s.help);
    b.apply = [setting, &b](ModelConfig& m, TrainConfig& t) {
      if constexpr (std::is_same_v<C, ModelConfig>) {
        setting->set(m, b.on, "");
      } else {
        setting->set(t, b.on, "");
      }
    };
    return;
  }
  static const char* kTypeNames[] = {"INT", "UINT", "FLOAT", "BOOL", "TEXT"};
  b.option = sub->add_option(s.flag, b.text, s.help)
                 ->type_name(kTypeNames[static_cast<int>(s.type)]);
  // Checked while parsing, on a scratch config, so a bad value is a usage
  // error naming the flag before anything runs.
  b.option->check(CLI::Validator(
      [setting, flag](std::string& text) -> std::string {
        try {
          C scratch;
          ApplyText(*setting, flag, text, scratch);
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
      io::DescribeValid(s.type, s.range, s.choices)));
  b.apply = [setting, flag, &b](ModelConfig& m, TrainConfig& t) {
    if constexpr (std::is_same_v<C, ModelConfig>) {
      ApplyText(*setting, flag, b.text, m);
    } else {
      ApplyText(*setting, flag, b.text, t);
    }
  };
}

void ExperimentFlags::Add(CLI::App* sub, FlagGroups groups) {
  // Train settings first: --task and --train-lengths lead the help.
  for (const auto& s : train::TrainSettings()) Bind(sub, s, groups);
  for (const auto& s : model::ModelSettings()) Bind(sub, s, groups);
  if (groups.config_file) {
    config_option_ = sub->add_option(
        "--config", config_file_,
        "JSON file {\"model\": {...}, \"train\": {...}} (a checkpoint's "
        "config.json works); flags given on the command line win");
  }
  AddProgressFlag(sub, &progress_);
}

const ExperimentFlags::Bound* ExperimentFlags::Find(
    const std::string& flag) const {
  for (const Bound& b : bound_) {
    if (b.option->check_name(flag)) return &b;
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

void ExperimentFlags::Build(const ModelConfig& model_defaults,
                            const TrainConfig& train_defaults,
                            ModelConfig* model, TrainConfig* train) const {
  ModelConfig m = model_defaults;
  TrainConfig t = train_defaults;
  bool arch_set = !GivenText("--arch").empty();
  bool config_warmup_set = false;
  const int64_t default_warmup = t.warmup_steps;
  if (config_option_ && config_option_->count() > 0) {
    // Untrusted file: size-capped read, strict parse; unknown sections and
    // fields are errors (a typo must not be silently ignored).
    const std::string text =
        io::ReadFileBounded(config_file_, int64_t{1} << 20);
    nlohmann::json j;
    try {
      j = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
      RELPOS_THROW(FormatError, "--config " << config_file_
                                            << ": not valid JSON (" << e.what()
                                            << ")");
    }
    if (!j.is_object()) {
      RELPOS_THROW(FormatError,
                   "--config " << config_file_ << ": must hold a JSON object");
    }
    static const std::set<std::string> known = {"model",   "train", "format",
                                                "version", "state", "files"};
    for (const auto& [key, value] : j.items()) {
      if (!known.count(key)) {
        RELPOS_THROW(FormatError, "--config " << config_file_
                                              << ": unknown section '" << key
                                              << "' (expected model, train)");
      }
    }
    try {
      if (j.contains("model")) {
        if (!j["model"].is_object()) {
          RELPOS_THROW(FormatError, "section 'model' must be an object");
        }
        nlohmann::json merged = model::ToJson(m);
        merged["vocab_size"] = 1;  // placeholder: the task decides it below
        merged.update(j["model"]);
        arch_set = arch_set || j["model"].contains("arch");
        m = model::ModelConfigFromJson(merged);
      }
      if (j.contains("train")) {
        if (!j["train"].is_object()) {
          RELPOS_THROW(FormatError, "section 'train' must be an object");
        }
        nlohmann::json merged = train::ToJson(t);
        merged.update(j["train"]);
        config_warmup_set = j["train"].contains("warmup_steps");
        // An unset warm-up is resolved below (after the flags), so the
        // default must not fail validation against a short `steps` here.
        if (!config_warmup_set) merged["warmup_steps"] = 0;
        t = train::TrainConfigFromJson(merged);
      }
    } catch (const FormatError& e) {
      RELPOS_THROW(FormatError,
                   "--config " << config_file_ << ": " << MessageBody(e));
    }
  }
  for (const Bound& b : bound_) {
    if (b.option->count() > 0) b.apply(m, t);
  }
  const bool warmup_set =
      config_warmup_set || !GivenText("--warmup-steps").empty();
  // Unless set, the warm-up is the default's (100 updates) but at most a
  // tenth of the run, so that `--steps 50` works without more flags.
  if (!warmup_set) t.warmup_steps = std::min(default_warmup, t.steps / 10);
  train::Validate(t);
  // The data decides the vocabulary and, unless set, the architecture.
  const std::unique_ptr<train::DataSource> data = train::MakeDataSource(t.data);
  m.vocab_size = data->vocab_size();
  if (!arch_set) m.arch = data->default_arch();
  model::Validate(m);
  train::CheckModelAndData(m, t, *data);
  *model = m;
  *train = t;
}

void CheckOutDir(const std::string& out, bool refuse_checkpoint) {
  namespace fs = std::filesystem;
  RELPOS_CHECK_ARG(!out.empty(), "--out must not be empty");
  std::error_code ec;
  const fs::path p(out);
  if (fs::exists(p, ec)) {
    RELPOS_CHECK_ARG(fs::is_directory(p, ec),
                     "--out '" << out << "' exists and is not a folder");
    RELPOS_CHECK_ARG(!refuse_checkpoint || !train::HasCheckpoint(out),
                     "--out '"
                         << out
                         << "' already holds a checkpoint (continue it with "
                            "--resume, or choose another folder)");
    RELPOS_CHECK_ARG(access(out.c_str(), W_OK | X_OK) == 0,
                     "--out '" << out << "' is not writable");
    return;
  }
  fs::path parent = p.parent_path();
  if (parent.empty()) parent = ".";
  RELPOS_CHECK_ARG(fs::is_directory(parent, ec),
                   "--out '" << out << "': parent folder '" << parent.string()
                             << "' does not exist");
  RELPOS_CHECK_ARG(access(parent.c_str(), W_OK | X_OK) == 0,
                   "--out '" << out << "': parent folder '" << parent.string()
                             << "' is not writable");
}

}  // namespace relpos::cli

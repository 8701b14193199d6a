// ExperimentConfig: the public face of the settings tables
// (model/model_config.h, train/train_config.h).
#include <algorithm>
#include <nlohmann/json.hpp>

#include "lab/api/internal.h"
#include "base/check.h"
#include "base/io/file_io.h"
#include "base/io/settings.h"
#include "model/arch.h"
#include "model/model_config.h"
#include "train/data_source.h"

namespace relpos {
namespace {

constexpr const char* kModel = "model";
constexpr const char* kTrain = "train";

std::string LongFlag(const std::string& flag) {
  return flag.substr(0, flag.find(','));
}

// The name a setting is found by: its key, or for a shorthand its flag.
template <typename C>
std::string LookupName(const io::Setting<C>& s) {
  return s.key.empty() ? LongFlag(s.flag) : s.key;
}

template <typename C>
const io::Setting<C>* FindSetting(const std::vector<io::Setting<C>>& table,
                                  const std::string& key) {
  for (const io::Setting<C>& s : table) {
    if (LookupName(s) == key) return &s;
  }
  return nullptr;
}

template <typename C>
void AddInfos(const char* section, const std::vector<io::Setting<C>>& table,
              std::vector<SettingInfo>* out) {
  for (const io::SettingRow& r : io::SettingRows(table, C{})) {
    out->push_back({.section = section,
                    .key = r.key,
                    .flag = r.flag,
                    .help = r.help,
                    .type = r.type,
                    .valid = r.valid == "any" ? "" : r.valid});
  }
  for (size_t i = 0; i < table.size(); ++i) {
    SettingInfo& info = (*out)[out->size() - table.size() + i];
    info.group = table[i].group;
    info.is_switch = table[i].type == io::SettingType::kBool;
    info.default_note = table[i].default_note;
  }
}

template <typename C>
void SetText(const std::vector<io::Setting<C>>& table, const char* section,
             const std::string& key, const std::string& text,
             const std::string& name, C* c) {
  const io::Setting<C>* s = FindSetting(table, key);
  RELPOS_CHECK_ARG(s, "unknown " << section << " setting '" << key << "'");
  const io::SettingValue v = io::ParseSettingText(s->type, text, name);
  io::CheckSetting(*s, v, name);
  s->set(*c, v, name);
}

template <typename C>
std::string GetText(const std::vector<io::Setting<C>>& table,
                    const char* section, const std::string& key, const C& c) {
  const io::Setting<C>* s = FindSetting(table, key);
  RELPOS_CHECK_ARG(s, "unknown " << section << " setting '" << key << "'");
  return io::FormatSettingValue(s->get(c));
}

}  // namespace

ExperimentConfig MakeConfig(const model::ModelConfig& model,
                            const train::TrainConfig& train) {
  ExperimentConfig c;
  Internals(c).model = model;
  Internals(c).train = train;
  for (const SettingInfo& s : ExperimentConfig::Settings()) {
    Internals(c).given.insert(s.section + "." +
                          (s.key.empty() ? LongFlag(s.flag) : s.key));
  }
  return c;
}

ExperimentConfig::ExperimentConfig() : impl_(std::make_unique<Impl>()) {}
ExperimentConfig::~ExperimentConfig() = default;
ExperimentConfig::ExperimentConfig(const ExperimentConfig& other)
    : impl_(std::make_unique<Impl>(*other.impl_)) {}
ExperimentConfig& ExperimentConfig::operator=(const ExperimentConfig& other) {
  *impl_ = *other.impl_;
  return *this;
}
ExperimentConfig::ExperimentConfig(ExperimentConfig&&) noexcept = default;
ExperimentConfig& ExperimentConfig::operator=(ExperimentConfig&&) noexcept =
    default;

const std::vector<SettingInfo>& ExperimentConfig::Settings() {
  static const std::vector<SettingInfo> infos = [] {
    std::vector<SettingInfo> v;
    AddInfos(kModel, model::ModelSettings(), &v);
    AddInfos(kTrain, train::TrainSettings(), &v);
    return v;
  }();
  return infos;
}

void ExperimentConfig::Set(const std::string& section, const std::string& key,
                           const std::string& value, const std::string& name) {
  const std::string shown = name.empty() ? key : name;
  if (section == kModel) {
    SetText(model::ModelSettings(), kModel, key, value, shown, &impl_->model);
  } else if (section == kTrain) {
    SetText(train::TrainSettings(), kTrain, key, value, shown, &impl_->train);
  } else {
    RELPOS_THROW(InvalidArgument, "unknown settings section '"
                                      << section << "' (expected model or "
                                      << "train)");
  }
  impl_->given.insert(section + "." + key);
}

void ExperimentConfig::SetDefault(const std::string& section,
                                  const std::string& key,
                                  const std::string& value) {
  const bool was_given = Given(section, key);
  Set(section, key, value);
  if (!was_given) impl_->given.erase(section + "." + key);
}

std::string ExperimentConfig::Get(const std::string& section,
                                  const std::string& key) const {
  if (section == kModel) {
    return GetText(model::ModelSettings(), kModel, key, impl_->model);
  }
  RELPOS_CHECK_ARG(section == kTrain, "unknown settings section '"
                                          << section
                                          << "' (expected model or train)");
  return GetText(train::TrainSettings(), kTrain, key, impl_->train);
}

bool ExperimentConfig::Given(const std::string& section,
                             const std::string& key) const {
  return impl_->given.count(section + "." + key) > 0;
}

void ExperimentConfig::MergeJson(const std::string& text,
                                 const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    RELPOS_THROW(FormatError,
                 source << ": not valid JSON (" << e.what() << ")");
  }
  if (!j.is_object()) {
    RELPOS_THROW(FormatError, source << ": must hold a JSON object");
  }
  // A checkpoint's config.json has these too; anything else is a typo that
  // must not be silently ignored.
  for (const auto& item : j.items()) {
    const std::string& key = item.key();
    if (key != kModel && key != kTrain && key != "format" &&
        key != "version" && key != "state" && key != "files" &&
        key != "validation") {
      RELPOS_THROW(FormatError, source << ": unknown section '" << key
                                       << "' (expected model, train)");
    }
  }
  Impl next = *impl_;
  try {
    if (j.contains(kModel)) {
      io::SettingsFromJson(model::ModelSettings(), j[kModel], "model config",
                           &next.model);
      for (const auto& item : j[kModel].items()) {
        next.given.insert(std::string(kModel) + "." + item.key());
      }
    }
    if (j.contains(kTrain)) {
      io::SettingsFromJson(train::TrainSettings(), j[kTrain], "train config",
                           &next.train);
      for (const auto& item : j[kTrain].items()) {
        next.given.insert(std::string(kTrain) + "." + item.key());
      }
    }
  } catch (const Error& e) {
    // Type errors are FormatError, values out of range InvalidArgument; both
    // are a bad file here.
    RELPOS_THROW(FormatError, source << ": " << MessageBody(e));
  }
  *impl_ = std::move(next);
}

void ExperimentConfig::MergeJsonFile(const std::string& path) {
  MergeJson(io::ReadFileBounded(path, int64_t{1} << 20), path);
}

std::string ExperimentConfig::SettingsMarkdown() {
  return "# Settings\n\n"
         "<!-- Generated by `relpos settings > docs/settings.md` from the "
         "declarations in\n"
         "src/model/model_config.cc and src/train/train_config.cc; "
         "settings_doc_test fails\n"
         "when this file and the declarations differ. -->\n\n"
         "Every setting of a model and of a training run, as the `model` and "
         "`train`\n"
         "sections of a `--config` file (and of a checkpoint's config.json) "
         "spell it and\n"
         "as `relpos train`, `relpos sweep` take it on the command line. "
         "Precedence:\n"
         "built-in defaults < the `--config` file < flags. A row without a "
         "JSON key is a\n"
         "command-line shorthand for the fields it names; a row without a "
         "flag is set\n"
         "in JSON only (or, like `vocab_size`, by the data). In C++, "
         "`relpos::ExperimentConfig`\n"
         "(include/relpos/lab/config.h) sets them by the same keys.\n\n"
         "## Model (`\"model\"`)\n\n" +
         io::MarkdownTable(
             io::SettingRows(model::ModelSettings(), model::ModelConfig{})) +
         "\n## Training (`\"train\"`)\n\n" +
         io::MarkdownTable(
             io::SettingRows(train::TrainSettings(), train::TrainConfig{}));
}

std::string ExperimentConfig::ToJson() const {
  return nlohmann::json{{kModel, model::ToJson(impl_->model)},
                        {kTrain, train::ToJson(impl_->train)}}
      .dump();
}

void ExperimentConfig::Resolve() {
  model::ModelConfig& m = impl_->model;
  train::TrainConfig& t = impl_->train;
  // Unless given, the warm-up is the default's but at most a tenth of the
  // run, so that a short run needs no more settings.
  if (!Given(kTrain, "warmup_steps")) {
    t.warmup_steps = std::min(t.warmup_steps, t.steps / 10);
  }
  train::Validate(t);
  const std::unique_ptr<train::DataSource> data = train::MakeDataSource(t.data);
  m.vocab_size = data->vocab_size();
  if (!Given(kModel, "arch")) m.arch = data->default_arch();
  if (!Given(kTrain, "label_smoothing") && model::Describe(m.arch).source) {
    t.label_smoothing = train::kSeq2seqLabelSmoothing;
  }
  model::Validate(m);
  train::CheckModelAndData(m, t, *data);
}

}  // namespace relpos

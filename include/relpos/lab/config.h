// The configuration of a model and its training run: every setting of
// docs/settings.md, by section ("model", "train") and JSON key, with the
// defaults, types and ranges declared once in the library. Values are set
// and read as text ("64", "shaw", "8-16", "true"), parsed and checked
// against their declaration; JSON files use the same keys.
//
//   relpos::ExperimentConfig c;            // built-in defaults
//   c.Set("train", "task", "reverse");
//   c.Set("model", "d_model", "32");
//   c.Resolve();                           // vocab, arch from the data; checks
#ifndef RELPOS_LAB_CONFIG_H_
#define RELPOS_LAB_CONFIG_H_

#include <memory>
#include <string>
#include <vector>

namespace relpos {

// One setting, as docs/settings.md lists it.
struct SettingInfo {
  std::string section;  // "model" or "train"
  std::string key;      // JSON key in the section; empty: a shorthand flag
  std::string flag;     // command-line spelling, "--max-distance,-k"; or ""
  std::string help;
  std::string type;     // "integer", "integer >= 0", "number", "boolean",
                        // "string"
  std::string valid;    // "[1, 65536]", "none, sinusoidal, ...", "" = any
  std::string group;    // "position" for the position settings, else ""
  // The default in words where it is not a fixed value ("from the data",
  // "min(100, steps/10)"); empty: the default is the built-in value.
  std::string default_note;
  bool is_switch = false;  // boolean: a flag without a value
};

class ExperimentConfig {
 public:
  ExperimentConfig();  // the built-in defaults
  ~ExperimentConfig();
  ExperimentConfig(const ExperimentConfig& other);
  ExperimentConfig& operator=(const ExperimentConfig& other);
  ExperimentConfig(ExperimentConfig&&) noexcept;
  ExperimentConfig& operator=(ExperimentConfig&&) noexcept;

  // Every setting, model first, in the order of docs/settings.md.
  static const std::vector<SettingInfo>& Settings();
  // The text of docs/settings.md.
  static std::string SettingsMarkdown();

  // Sets the setting `key` (a JSON key, or a shorthand's flag such as
  // "--terms") of `section` from text. InvalidArgument naming `name` (default:
  // the key) for an unknown setting or a value of the wrong type or out of
  // range. The setting then counts as given (see Resolve).
  void Set(const std::string& section, const std::string& key,
           const std::string& value, const std::string& name = "");
  // The same, as a default: it does not count as given.
  void SetDefault(const std::string& section, const std::string& key,
                  const std::string& value);
  // The current value as text, e.g. Get("model", "position") == "shaw".
  std::string Get(const std::string& section, const std::string& key) const;
  bool Given(const std::string& section, const std::string& key) const;

  // Merges {"model": {...}, "train": {...}} over the current values (a
  // checkpoint's config.json works: its other sections are ignored); every
  // key read counts as given. FormatError naming `source` for malformed
  // JSON, unknown sections or fields, wrong types.
  void MergeJson(const std::string& json_text, const std::string& source);
  // Reads the file (at most 1 MiB) and merges it; IoError if unreadable.
  void MergeJsonFile(const std::string& path);
  // {"model": {...}, "train": {...}}, every keyed setting.
  std::string ToJson() const;

  // Completes and checks the configuration: vocab_size comes from the data,
  // the architecture too unless given (encoder for the formal tasks, decoder
  // for lm, seq2seq for the source-target tasks), the label smoothing unless
  // given is 0.1 for seq2seq models, the warm-up unless given is min(its
  // default, steps / 10); then
  // every setting, the pair and the pair against the data are validated
  // (InvalidArgument naming the setting).
  void Resolve();

 private:
  struct Impl;  // the lab's internal configs (src/lab/api/internal.h)
  friend struct ApiAccess;
  std::unique_ptr<Impl> impl_;
};

}  // namespace relpos

#endif  // RELPOS_LAB_CONFIG_H_

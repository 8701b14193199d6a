// Settings declared once. Each field of a config struct (model::ModelConfig,
// train::TrainConfig) is described by one Setting: its JSON key, its
// command-line flag, its help text and its valid values. JSON reading and
// writing, validation, the command-line flags (src/cli/experiment_flags.cc)
// and the table of docs/settings.md are all derived from that one list, so
// adding a setting is one declaration plus its use.
//
// A setting with an empty key is a command-line shorthand over other fields
// (`--terms key` sets key_term and value_term; `--train-lengths 8-16` sets
// train_min_length and train_max_length): it is a flag, not a JSON field.
#ifndef RELPOS_SRC_BASE_IO_SETTINGS_H_
#define RELPOS_SRC_BASE_IO_SETTINGS_H_

#include <cstdint>
#include <functional>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "base/io/path_text.h"

namespace relpos::io {

enum class SettingType { kInt, kUnsigned, kDouble, kBool, kString };

using SettingValue = std::variant<int64_t, uint64_t, double, bool, std::string>;

// Valid values of a numeric setting: [lo, hi], either end possibly open.
// Doubles must also be finite.
struct Range {
  double lo = -std::numeric_limits<double>::infinity();
  double hi = std::numeric_limits<double>::infinity();
  bool lo_open = false, hi_open = false;
};

template <typename C>
struct Setting {
  std::string key;   // JSON key; empty: a command-line shorthand
  std::string flag;  // CLI11 name(s), e.g. "--max-distance,-k"; empty: none
  std::string help;
  SettingType type = SettingType::kInt;
  Range range;                       // numeric types only
  std::vector<std::string> choices;  // kString: the accepted values (if any)
  std::string group;                 // flag group a verb may leave out
  std::string default_note;          // docs: replaces the printed default
  // Written to JSON only when its value differs from a default-constructed
  // C's: a setting added after checkpoints existed then leaves their
  // config.json byte for byte as it was wherever it keeps its default (and
  // readers that refuse keys they do not know keep reading them). Reading
  // is unchanged: a missing key keeps the default.
  bool omit_default = false;
  std::function<SettingValue(const C&)> get;
  // Stores a value that passed CheckSetting; `name` (the key or the flag) is
  // for the errors of shorthands that parse their value further.
  std::function<void(C&, const SettingValue&, const std::string& name)> set;
};

// ------------------------------------------------------------ value checks

// "" if `value` is valid for a setting of `type` with `range` and `choices`,
// else what is wrong, e.g. "must be in [1, 2^24] (got 0)".
std::string CheckValue(SettingType type, const Range& range,
                       const std::vector<std::string>& choices,
                       const SettingValue& value);
// "[1, 2^24]", "(0, 10]", ">= 0", "none|learned", "any", for messages and docs.
std::string DescribeValid(SettingType type, const Range& range,
                          const std::vector<std::string>& choices);
// The value as text ("64", "0.001", "true", "relative").
std::string FormatSettingValue(const SettingValue& value);
// Reads a JSON value as `type`, strictly: integers must be integers (no
// 3.0, no "3"), unsigned ones non-negative, and so on; strings are read
// back from io::PathText (io/path_text.h). FormatError
// "<what> '<key>' must be an integer (got 64.5)".
SettingValue ReadJsonSetting(SettingType type, const nlohmann::json& v,
                             const std::string& what, const std::string& key);
// Parses command-line text as `type` ("12", "1e-3", "true"); InvalidArgument
// "<name> must be an integer (got 'x')".
SettingValue ParseSettingText(SettingType type, const std::string& text,
                              const std::string& name);
// Throws InvalidArgument "<what> '<name>' <problem>" if CheckValue fails.
void CheckOrThrow(SettingType type, const Range& range,
                  const std::vector<std::string>& choices,
                  const SettingValue& value, const std::string& what);

template <typename C>
void CheckSetting(const Setting<C>& s, const SettingValue& value,
                  const std::string& what) {
  CheckOrThrow(s.type, s.range, s.choices, value, what);
}

// ------------------------------------------------------------ declarations

namespace settings_detail {

template <typename T>
constexpr SettingType TypeOf() {
  if constexpr (std::is_same_v<T, bool>) {
    return SettingType::kBool;
  } else if constexpr (std::is_same_v<T, std::string>) {
    return SettingType::kString;
  } else if constexpr (std::is_floating_point_v<T>) {
    return SettingType::kDouble;
  } else if constexpr (std::is_unsigned_v<T>) {
    return SettingType::kUnsigned;
  } else {
    static_assert(std::is_integral_v<T>, "unsupported setting type");
    return SettingType::kInt;
  }
}

// The SettingValue alternative that holds a T.
template <typename T>
using Stored = std::conditional_t<
    std::is_same_v<T, bool> || std::is_same_v<T, std::string>, T,
    std::conditional_t<std::is_floating_point_v<T>, double,
                       std::conditional_t<std::is_unsigned_v<T>, uint64_t,
                                          int64_t>>>;

}  // namespace settings_detail

// A plain field reached through `ref`: a member pointer (&C::d_model) or a
// callable returning a reference ([](C& c) -> auto& { return c.a.b; }).
// A narrower integer field (int) gets its type's limits within `range`.
template <typename C, typename Ref>
Setting<C> Field(std::string key, std::string flag, std::string help, Ref ref,
                 Range range = {}) {
  using T = std::remove_cvref_t<std::invoke_result_t<Ref, C&>>;
  using S = settings_detail::Stored<T>;
  Setting<C> s;
  s.key = std::move(key);
  s.flag = std::move(flag);
  s.help = std::move(help);
  s.type = settings_detail::TypeOf<T>();
  if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>) {
    range.lo = std::max(range.lo,
                        static_cast<double>(std::numeric_limits<T>::min()));
    if constexpr (sizeof(T) < sizeof(int64_t)) {
      range.hi = std::min(range.hi,
                          static_cast<double>(std::numeric_limits<T>::max()));
    }
  }
  s.range = range;
  // `ref` takes a C& (a lambda reaching a nested field cannot be written
  // for both constnesses); get only reads through it.
  s.get = [ref](const C& c) -> SettingValue {
    return static_cast<S>(std::invoke(ref, const_cast<C&>(c)));
  };
  s.set = [ref](C& c, const SettingValue& v, const std::string&) {
    std::invoke(ref, c) = static_cast<T>(std::get<S>(v));
  };
  return s;
}

// A setting shown and given as a word: an enum (`choices` lists the names)
// or a shorthand over several fields (key empty, `choices` may be empty and
// `set` parse the text itself).
template <typename C>
Setting<C> Words(std::string key, std::string flag, std::string help,
                 std::vector<std::string> choices,
                 std::function<std::string(const C&)> get,
                 std::function<void(C&, const std::string& text,
                                    const std::string& name)>
                     set) {
  Setting<C> s;
  s.key = std::move(key);
  s.flag = std::move(flag);
  s.help = std::move(help);
  s.type = SettingType::kString;
  s.choices = std::move(choices);
  s.get = [get](const C& c) -> SettingValue { return get(c); };
  s.set = [set](C& c, const SettingValue& v, const std::string& name) {
    set(c, std::get<std::string>(v), name);
  };
  return s;
}

// Declaration helpers for the tables: flag group and documented default.
template <typename C>
Setting<C> InGroup(Setting<C> s, std::string group) {
  s.group = std::move(group);
  return s;
}
template <typename C>
Setting<C> WithDefaultNote(Setting<C> s, std::string note) {
  s.default_note = std::move(note);
  return s;
}
template <typename C>
Setting<C> OmitAtDefault(Setting<C> s) {
  s.omit_default = true;
  return s;
}

// -------------------------------------------------------- derived behaviour

// Every keyed setting of `c` as one JSON object (an OmitAtDefault setting
// only when it differs from C{}'s value). String values are bytes (a corpus
// path need not be UTF-8): they are stored as io::PathText, which is valid
// UTF-8 and reads back exactly (ReadJsonSetting).
template <typename C>
nlohmann::json SettingsToJson(const std::vector<Setting<C>>& settings,
                              const C& c) {
  nlohmann::json j = nlohmann::json::object();
  const C defaults{};
  for (const Setting<C>& s : settings) {
    if (s.key.empty()) continue;
    if (s.omit_default && s.get(c) == s.get(defaults)) continue;
    std::visit(
        [&](const auto& x) {
          if constexpr (std::is_same_v<std::decay_t<decltype(x)>,
                                       std::string>) {
            j[s.key] = PathText(x);
          } else {
            j[s.key] = x;
          }
        },
        s.get(c));
  }
  return j;
}

// Fills `c` from the JSON object `j`: missing keys keep c's values. A non-
// object, an unknown key or a wrong JSON type is FormatError; a value out of
// range is InvalidArgument. `what` names the config ("model config").
void ThrowNotObject(const std::string& what, const nlohmann::json& j);
void ThrowUnknownKey(const std::string& what, const std::string& key);
template <typename C>
void SettingsFromJson(const std::vector<Setting<C>>& settings,
                      const nlohmann::json& j, const std::string& what, C* c) {
  if (!j.is_object()) ThrowNotObject(what, j);
  for (const auto& item : j.items()) {
    const Setting<C>* found = nullptr;
    for (const Setting<C>& s : settings) {
      if (!s.key.empty() && s.key == item.key()) found = &s;
    }
    if (!found) ThrowUnknownKey(what, item.key());
    const SettingValue v =
        ReadJsonSetting(found->type, item.value(), what, found->key);
    CheckSetting(*found, v, what + " field '" + found->key + "'");
    found->set(*c, v, found->key);
  }
}

// InvalidArgument "<what> field '<key>' must be ..." for the first keyed
// setting whose value in `c` is out of range.
template <typename C>
void ValidateSettings(const std::vector<Setting<C>>& settings, const C& c,
                      const std::string& what) {
  for (const Setting<C>& s : settings) {
    if (!s.key.empty()) {
      CheckSetting(s, s.get(c), what + " field '" + s.key + "'");
    }
  }
}

// One row of the docs table.
struct SettingRow {
  std::string key, flag, type;
  std::string default_value;  // Markdown: `64`, or a note in words
  std::string valid, help;
};
// A Markdown table of `rows` (docs/settings.md).
std::string MarkdownTable(const std::vector<SettingRow>& rows);

template <typename C>
std::vector<SettingRow> SettingRows(const std::vector<Setting<C>>& settings,
                                    const C& defaults) {
  static const char* kTypeNames[] = {"integer", "integer >= 0", "number",
                                     "boolean", "string"};
  std::vector<SettingRow> rows;
  for (const Setting<C>& s : settings) {
    SettingRow r;
    r.key = s.key;
    r.flag = s.flag;
    r.type = kTypeNames[static_cast<int>(s.type)];
    if (s.default_note.empty()) {
      // Appended piecewise: GCC 12 warns (-Wrestrict) on "`" + string.
      r.default_value.append("`")
          .append(FormatSettingValue(s.get(defaults)))
          .append("`");
    } else {
      r.default_value = s.default_note;
    }
    r.valid = DescribeValid(s.type, s.range, s.choices);
    r.help = s.help;
    rows.push_back(std::move(r));
  }
  return rows;
}

}  // namespace relpos::io

#endif  // RELPOS_SRC_BASE_IO_SETTINGS_H_

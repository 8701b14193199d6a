#include "base/io/json_reader.h"

#include <algorithm>
#include <set>
#include <vector>

#include "base/check.h"
#include "base/io/file_io.h"
#include "base/io/path_text.h"

namespace relpos::io {
namespace {

using json = nlohmann::json;

// The deepest nesting of arrays and objects in `text` (strings skipped),
// stopping once it exceeds `limit`: linear, and allocates nothing.
int NestingDepth(std::string_view text, int limit) {
  int depth = 0, deepest = 0;
  bool in_string = false, escaped = false;
  for (const char c : text) {
    if (in_string) {
      if (escaped) {
        escaped = false;
      } else if (c == '\\') {
        escaped = true;
      } else if (c == '"') {
        in_string = false;
      }
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > deepest) deepest = depth;
      if (deepest > limit) return deepest;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return deepest;
}

}  // namespace

void ThrowBadDocument(const std::string& source, const std::string& problem) {
  RELPOS_THROW(FormatError, PathText(source) << ": " << problem);
}

json ParseJson(std::string_view text, const std::string& source,
               const JsonLimits& limits) {
  RELPOS_CHECK_ARG(
      limits.max_bytes > 0,
      "ParseJson: max_bytes must be > 0 (got " << limits.max_bytes << ")");
  if (static_cast<int64_t>(text.size()) > limits.max_bytes) {
    ThrowBadDocument(
        source, limits.what + " is too large: " + std::to_string(text.size()) +
                    " bytes (limit " + std::to_string(limits.max_bytes) + ")");
  }
  if (NestingDepth(text, limits.max_depth) > limits.max_depth) {
    ThrowBadDocument(source, limits.what +
                                 " nests arrays and objects deeper "
                                 "than " +
                                 std::to_string(limits.max_depth) +
                                 " levels (not a document relpos reads)");
  }
  // Duplicate keys in any object, found while parsing.
  std::vector<std::set<std::string>> keys;
  bool duplicate_found = false;
  std::string duplicate;
  const json::parser_callback_t callback = [&](int, json::parse_event_t event,
                                               json& parsed) {
    if (event == json::parse_event_t::object_start) {
      keys.emplace_back();
    } else if (event == json::parse_event_t::object_end) {
      if (!keys.empty()) keys.pop_back();
    } else if (event == json::parse_event_t::key && !keys.empty() &&
               !duplicate_found &&
               !keys.back().insert(parsed.get<std::string>()).second) {
      duplicate_found = true;
      duplicate = parsed.get<std::string>();
    }
    return true;
  };
  json j;
  try {
    j = json::parse(text.begin(), text.end(), callback,
                    /*allow_exceptions=*/true, /*ignore_comments=*/false);
  } catch (const json::exception& e) {
    ThrowBadDocument(source, limits.what + " is not valid JSON: " + e.what());
  }
  if (duplicate_found) {
    ThrowBadDocument(source, "duplicate key " + QuotedPath(duplicate) + " in " +
                                 limits.what);
  }
  return j;
}

json ReadJsonFile(const std::string& path, int64_t max_bytes) {
  return ParseJson(ReadFileBounded(path, max_bytes), path,
                   {.max_bytes = std::max<int64_t>(max_bytes, 1)});
}

void CheckFormatAndVersion(const json& j, const std::string& source,
                           const std::string& format, int version,
                           const std::string& what) {
  if (!j.is_object()) ThrowBadDocument(source, "must hold a JSON object");
  if (!j.contains("format") || j["format"] != format) {
    ThrowBadDocument(source, "field 'format' must be \"" + format + "\"");
  }
  if (!j.contains("version") || j["version"] != version) {
    ThrowBadDocument(source, "unsupported " + what +
                                 " version (this relpos reads version " +
                                 std::to_string(version) + ")");
  }
}

}  // namespace relpos::io

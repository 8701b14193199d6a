// The one reader of JSON documents relpos did not necessarily write itself
// (a checkpoint's config.json, --config files, signal files, compare.json,
// safetensors headers). Every document is bounded before it is parsed:
//   - in size: the caller passes the largest document it can be (a file is
//     refused before it is read: ReadJsonFile);
//   - in nesting (kMaxJsonDepth), checked by a scan of the text before
//     nlohmann::json builds anything, so "[[[[..." costs no memory;
//   - strictly: one value and nothing after it, no comments, valid UTF-8,
//     and no object with a duplicate key (nlohmann would keep the last one
//     silently, letting a second "format" or tensor name win).
// Errors are FormatError "<source>: <what> is not valid JSON (...)", the
// source shown as io::PathText.
//
//   const nlohmann::json j = io::ReadJsonFile(path, int64_t{1} << 20);
//   io::CheckFormatAndVersion(j, path, "relpos-signal", 1, "signal file");
#ifndef RELPOS_SRC_BASE_IO_JSON_READER_H_
#define RELPOS_SRC_BASE_IO_JSON_READER_H_

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

namespace relpos::io {

// Deeper nesting than any document relpos writes (checkpoints nest 3 deep).
inline constexpr int kMaxJsonDepth = 64;

struct JsonLimits {
  int64_t max_bytes = 0;  // the text's size limit (required)
  int max_depth = kMaxJsonDepth;
  std::string what = "the file";  // the document, in messages ("header")
};

// Throws FormatError "<PathText(source)>: <problem>": the one way a reader
// reports a bad document.
[[noreturn]] void ThrowBadDocument(const std::string& source,
                                   const std::string& problem);

// Parses `text` within `limits`.
nlohmann::json ParseJson(std::string_view text, const std::string& source,
                         const JsonLimits& limits);

// ReadFileBounded(path, max_bytes) (IoError) + ParseJson (FormatError).
nlohmann::json ReadJsonFile(const std::string& path, int64_t max_bytes);

// The preamble of relpos's own formats: `j` must be an object whose
// "format" is `format` and whose "version" is `version`; FormatError
// "<source>: must hold a JSON object", "field 'format' must be
// \"<format>\"", "unsupported <what> version (this relpos reads version
// <version>)".
void CheckFormatAndVersion(const nlohmann::json& j, const std::string& source,
                           const std::string& format, int version,
                           const std::string& what);

}  // namespace relpos::io

#endif  // RELPOS_SRC_BASE_IO_JSON_READER_H_

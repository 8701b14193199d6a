// What the .mo and .po readers share: the header, the conversion to UTF-8,
// and ReadCatalog (relpos/data/parallel_text.h).
#include "data/translate/catalog.h"

#include <iconv.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "base/check.h"
#include "base/io/file_io.h"
#include "base/io/path_text.h"
#include "data/translate/utf8.h"

namespace relpos::translate {
namespace {

std::string_view Trim(std::string_view s) {
  const auto space = [](char c) {
    return c == ' ' || c == '\t' || c == '\r' || c == '\n';
  };
  while (!s.empty() && space(s.front())) s.remove_prefix(1);
  while (!s.empty() && space(s.back())) s.remove_suffix(1);
  return s;
}

std::string Upper(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  return out;
}

// "text/plain; charset=ISO-8859-1" -> "ISO-8859-1".
std::string CharsetOf(std::string_view header) {
  const std::string content_type = HeaderField(header, "Content-Type");
  const std::string upper = Upper(content_type);
  const size_t at = upper.find("CHARSET=");
  if (at == std::string::npos) return "";
  std::string_view rest = std::string_view(content_type).substr(at + 8);
  rest = rest.substr(0, rest.find_first_of("; \t"));
  return std::string(rest);
}

// Converts strings from a catalog's charset to UTF-8 (or only checks them,
// for UTF-8).
class ToUtf8 {
 public:
  ToUtf8(const std::string& charset, const std::string& source) {
    const std::string name = Upper(charset);
    // No charset, msgfmt's template placeholder, or UTF-8 itself: checked,
    // not converted.
    if (name.empty() || name == "CHARSET" || name == "UTF-8" || name == "UTF8")
      return;
    cd_ = ::iconv_open("UTF-8", charset.c_str());
    if (cd_ == reinterpret_cast<iconv_t>(-1)) {
      RELPOS_THROW(FormatError, "gettext catalog "
                                    << io::QuotedPath(source)
                                    << ": unknown charset '"
                                    << charset
                                    << "' (iconv cannot convert it to UTF-8)");
    }
  }
  ~ToUtf8() {
    if (cd_ != reinterpret_cast<iconv_t>(-1)) ::iconv_close(cd_);
  }
  ToUtf8(const ToUtf8&) = delete;
  ToUtf8& operator=(const ToUtf8&) = delete;

  // UTF-8 of `text` in *out; false if it is not valid in the charset.
  bool Convert(std::string& text) const {
    if (cd_ == reinterpret_cast<iconv_t>(-1)) return IsValidUtf8(text);
    ::iconv(cd_, nullptr, nullptr, nullptr, nullptr);  // initial state
    std::string in = text;  // iconv takes char**, not const char**
    // A character of any charset becomes at most 4 bytes of UTF-8 and takes
    // at least one byte; the flush of a stateful charset writes nothing.
    std::string out(in.size() * 4 + 4, '\0');
    char* in_ptr = in.data();
    size_t in_left = in.size();
    char* out_ptr = out.data();
    size_t out_left = out.size();
    if (::iconv(cd_, &in_ptr, &in_left, &out_ptr, &out_left) ==
            static_cast<size_t>(-1) ||
        ::iconv(cd_, nullptr, nullptr, &out_ptr, &out_left) ==
            static_cast<size_t>(-1)) {
      return false;
    }
    out.resize(out.size() - out_left);
    if (!IsValidUtf8(out)) return false;
    text = std::move(out);
    return true;
  }

 private:
  iconv_t cd_ = reinterpret_cast<iconv_t>(-1);
};

bool EndsWith(std::string_view s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.substr(s.size() - suffix.size()) == suffix;
}

}  // namespace

std::string HeaderField(std::string_view header, std::string_view field) {
  while (!header.empty()) {
    const size_t end = header.find('\n');
    const std::string_view line = header.substr(0, end);
    header.remove_prefix(end == std::string_view::npos ? header.size()
                                                       : end + 1);
    if (line.size() > field.size() && line.substr(0, field.size()) == field &&
        line[field.size()] == ':') {
      return std::string(Trim(line.substr(field.size() + 1)));
    }
  }
  return "";
}

Catalog FinishCatalog(std::vector<RawEntry> entries, const std::string& source) {
  Catalog catalog;
  catalog.source = source;
  // The header: the first entry with an empty msgid and no context.
  const auto header = std::find_if(entries.begin(), entries.end(),
                                   [](const RawEntry& e) {
                                     return !e.has_context && e.msgid.empty();
                                   });
  std::string header_text;
  if (header != entries.end()) {
    catalog.has_header = true;
    header_text = header->msgstr;
    catalog.language = HeaderField(header_text, "Language");
    catalog.charset = CharsetOf(header_text);
  }
  const ToUtf8 convert(catalog.charset, source);
  // The header's own fields are ASCII in practice; a language code that is
  // not valid UTF-8 is useless, so it is dropped rather than kept garbled.
  if (!IsValidUtf8(catalog.language)) catalog.language.clear();
  catalog.messages.reserve(entries.size());
  for (RawEntry& e : entries) {
    if (!e.has_context && e.msgid.empty()) continue;  // header (or a copy)
    if (!convert.Convert(e.context) || !convert.Convert(e.msgid) ||
        !convert.Convert(e.msgstr)) {
      ++catalog.bad_encoding;
      continue;
    }
    catalog.messages.push_back({.context = std::move(e.context),
                                .msgid = std::move(e.msgid),
                                .msgstr = std::move(e.msgstr),
                                .has_context = e.has_context,
                                .plural = e.plural,
                                .fuzzy = e.fuzzy});
  }
  return catalog;
}

}  // namespace relpos::translate

namespace relpos {

Catalog ReadCatalog(const std::string& path) {
  const std::string bytes = io::ReadFileBounded(path, kMaxCatalogBytes);
  if (translate::EndsWith(path, ".mo") || translate::EndsWith(path, ".gmo")) {
    return translate::ParseMo(bytes, path);
  }
  return translate::ParsePo(bytes, path);
}

}  // namespace relpos

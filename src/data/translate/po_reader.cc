// The .po reader (catalog.h): a line-by-line parser of GNU gettext's text
// format, strict about what it does not understand (every error names the
// file and line).
//
//   # translator comment          #, fuzzy, c-format      (flags)
//   msgctxt "context"
//   msgid "one file"
//   msgid_plural "%d files"
//   msgstr[0] "eine Datei"
//   msgstr[1] "%d Dateien"
//   "a continuation line appends to the keyword before it"
#include <string>
#include <string_view>
#include <vector>

#include "base/check.h"
#include "base/io/path_text.h"
#include "data/translate/catalog.h"

namespace relpos::translate {
namespace {

enum class Field { kNone, kContext, kId, kPlural, kStr, kOtherForm };

class PoParser {
 public:
  PoParser(std::string_view text, const std::string& source)
      : text_(text), source_(source) {}

  std::vector<RawEntry> Parse() {
    while (NextLine()) {
      const std::string_view line = Trim(line_);
      if (line.empty()) {
        Flush();
      } else if (line[0] == '#') {
        Comment(line);
      } else if (line[0] == '"') {
        Continuation(line);
      } else {
        Keyword(line);
      }
    }
    Flush();
    return std::move(entries_);
  }

 private:
  bool NextLine() {
    if (pos_ >= text_.size()) return false;
    const size_t end = text_.find('\n', pos_);
    const size_t stop = end == std::string_view::npos ? text_.size() : end;
    line_ = text_.substr(pos_, stop - pos_);
    pos_ = stop + 1;
    ++line_number_;
    return true;
  }

  static std::string_view Trim(std::string_view s) {
    while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
    while (!s.empty() && (s.back() == ' ' || s.back() == '\t' || s.back() == '\r'))
      s.remove_suffix(1);
    return s;
  }

  [[noreturn]] void Fail(const std::string& what) const {
    RELPOS_THROW(FormatError, "gettext catalog " << io::QuotedPath(source_)
                                                 << " line " << line_number_
                                                 << ": " << what);
  }

  // A comment ends an entry that is complete; "#," lines carry flags for the
  // next entry. Obsolete entries ("#~ msgid ...") are comments too.
  void Comment(std::string_view line) {
    if (has_str_) Flush();
    if (line.size() >= 2 && line[1] == ',') {
      std::string_view flags = line.substr(2);
      while (!flags.empty()) {
        const size_t comma = flags.find(',');
        if (Trim(flags.substr(0, comma)) == "fuzzy") entry_.fuzzy = true;
        flags.remove_prefix(comma == std::string_view::npos ? flags.size()
                                                            : comma + 1);
      }
    }
  }

  void Keyword(std::string_view line) {
    const size_t space = line.find_first_of(" \t");
    if (space == std::string_view::npos) Fail("expected a keyword and a string");
    const std::string_view keyword = line.substr(0, space);
    const std::string value = QuotedString(Trim(line.substr(space)));
    if (keyword == "msgctxt") {
      if (has_str_) Flush();
      if (field_ != Field::kNone || entry_.has_context) {
        Fail("msgctxt must begin an entry");
      }
      entry_.has_context = true;
      entry_.context = value;
      field_ = Field::kContext;
    } else if (keyword == "msgid") {
      if (has_str_) Flush();
      if (has_id_) Fail("msgid without msgstr before it");
      has_id_ = true;
      entry_.msgid = value;
      field_ = Field::kId;
    } else if (keyword == "msgid_plural") {
      if (!has_id_ || has_str_ || entry_.plural) {
        Fail("msgid_plural must follow msgid");
      }
      entry_.plural = true;
      field_ = Field::kPlural;
    } else if (keyword == "msgstr") {
      if (!has_id_ || has_str_) Fail("msgstr must follow msgid");
      if (entry_.plural) Fail("an entry with msgid_plural needs msgstr[N]");
      has_str_ = true;
      entry_.msgstr = value;
      field_ = Field::kStr;
    } else if (keyword.substr(0, 7) == "msgstr[") {
      PluralForm(keyword, value);
    } else {
      Fail("unknown keyword '" + std::string(keyword.substr(0, 40)) + "'");
    }
  }

  void PluralForm(std::string_view keyword, const std::string& value) {
    if (!has_id_ || !entry_.plural) Fail("msgstr[N] needs msgid_plural");
    const std::string_view index = keyword.substr(7);
    if (index.size() < 2 || index.size() > 4 || index.back() != ']' ||
        index.find_first_not_of("0123456789") != index.size() - 1) {
      Fail("bad plural index in '" + std::string(keyword) + "'");
    }
    const int form = std::stoi(std::string(index.substr(0, index.size() - 1)));
    if (form != next_form_) Fail("plural forms out of order");
    ++next_form_;
    if (form == 0) {
      has_str_ = true;
      entry_.msgstr = value;
      field_ = Field::kStr;
    } else {
      field_ = Field::kOtherForm;  // only the singular form is kept
    }
  }

  void Continuation(std::string_view line) {
    const std::string value = QuotedString(line);
    switch (field_) {
      case Field::kNone:
        Fail("a string continues no keyword");
      case Field::kContext:
        entry_.context += value;
        break;
      case Field::kId:
        entry_.msgid += value;
        break;
      case Field::kStr:
        entry_.msgstr += value;
        break;
      case Field::kPlural:
      case Field::kOtherForm:
        break;
    }
  }

  // An entry ends at a blank line, a comment after its msgstr, a new
  // msgctxt / msgid, or the end of the file.
  void Flush() {
    if (has_id_ && !has_str_) Fail("msgid without msgstr");
    if (!has_id_ && field_ == Field::kContext) Fail("msgctxt without msgid");
    if (has_str_) entries_.push_back(std::move(entry_));
    entry_ = RawEntry();
    has_id_ = has_str_ = false;
    field_ = Field::kNone;
    next_form_ = 0;
  }

  // "..." with C escapes -> its bytes. Nothing but spaces may follow it.
  std::string QuotedString(std::string_view s) {
    if (s.size() < 2 || s.front() != '"') Fail("expected a quoted string");
    std::string out;
    size_t i = 1;
    for (; i < s.size() && s[i] != '"'; ++i) {
      if (s[i] != '\\') {
        out.push_back(s[i]);
        continue;
      }
      if (++i == s.size()) break;
      i = Escape(s, i, out);
    }
    if (i >= s.size()) Fail("unterminated string");
    if (!Trim(s.substr(i + 1)).empty()) Fail("text after the closing quote");
    if (out.find('\0') != std::string::npos) Fail("NUL byte in a string");
    return out;
  }

  // The escape whose letter is s[i]; returns the index of its last byte.
  size_t Escape(std::string_view s, size_t i, std::string& out) {
    const auto octal = [](char c) { return c >= '0' && c <= '7'; };
    const auto hex_value = [](char c) {
      if (c >= '0' && c <= '9') return c - '0';
      if (c >= 'a' && c <= 'f') return c - 'a' + 10;
      if (c >= 'A' && c <= 'F') return c - 'A' + 10;
      return -1;
    };
    switch (s[i]) {
      case 'n': out.push_back('\n'); return i;
      case 't': out.push_back('\t'); return i;
      case 'r': out.push_back('\r'); return i;
      case 'a': out.push_back('\a'); return i;
      case 'b': out.push_back('\b'); return i;
      case 'f': out.push_back('\f'); return i;
      case 'v': out.push_back('\v'); return i;
      case '\\': case '"': case '\'': case '?': out.push_back(s[i]); return i;
      case 'x': {
        int value = 0, digits = 0;
        while (digits < 2 && i + 1 < s.size() && hex_value(s[i + 1]) >= 0) {
          value = value * 16 + hex_value(s[++i]);
          ++digits;
        }
        if (digits == 0) Fail("\\x without hex digits");
        out.push_back(static_cast<char>(value));
        return i;
      }
      default:
        if (!octal(s[i])) {
          Fail(std::string("unknown escape \\") + s[i]);
        }
        int value = s[i] - '0';
        for (int k = 1; k < 3 && i + 1 < s.size() && octal(s[i + 1]); ++k) {
          value = value * 8 + (s[++i] - '0');
        }
        if (value > 0xFF) Fail("octal escape above \\377");
        out.push_back(static_cast<char>(value));
        return i;
    }
  }

  std::string_view text_;
  const std::string& source_;
  size_t pos_ = 0;
  int64_t line_number_ = 0;
  std::string_view line_;
  std::vector<RawEntry> entries_;
  RawEntry entry_;
  bool has_id_ = false, has_str_ = false;
  Field field_ = Field::kNone;
  int next_form_ = 0;
};

}  // namespace

Catalog ParsePo(std::string_view text, const std::string& source) {
  return FinishCatalog(PoParser(text, source).Parse(), source);
}

}  // namespace relpos::translate

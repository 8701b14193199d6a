#include "base/io/path_text.h"

#include <cstdint>

#include "base/check.h"

namespace relpos::io {
namespace {

// Length of the well-formed, printable UTF-8 sequence at s[i], or 0 if the
// byte there starts none (Unicode table 3-7; C0, DEL and C1 controls count
// as not printable).
size_t PrintableSequence(std::string_view s, size_t i) {
  const auto at = [&](size_t k) -> unsigned {
    return i + k < s.size() ? static_cast<unsigned char>(s[i + k]) : 0x100;
  };
  const auto in = [](unsigned b, unsigned lo, unsigned hi) {
    return b >= lo && b <= hi;
  };
  const unsigned b0 = at(0);
  if (b0 < 0x80) return b0 >= 0x20 && b0 != 0x7f ? 1 : 0;
  if (in(b0, 0xc2, 0xdf)) {
    if (!in(at(1), 0x80, 0xbf)) return 0;
    return b0 == 0xc2 && at(1) < 0xa0 ? 0 : 2;  // C1 controls U+0080..9F
  }
  unsigned lo = 0x80, hi = 0xbf;  // the second byte's range
  size_t n = 0;
  if (b0 == 0xe0) {
    lo = 0xa0, n = 3;
  } else if (in(b0, 0xe1, 0xec) || in(b0, 0xee, 0xef)) {
    n = 3;
  } else if (b0 == 0xed) {
    hi = 0x9f, n = 3;  // no surrogates
  } else if (b0 == 0xf0) {
    lo = 0x90, n = 4;
  } else if (in(b0, 0xf1, 0xf3)) {
    n = 4;
  } else if (b0 == 0xf4) {
    hi = 0x8f, n = 4;  // nothing above U+10FFFF
  } else {
    return 0;
  }
  if (!in(at(1), lo, hi)) return 0;
  for (size_t k = 2; k < n; ++k) {
    if (!in(at(k), 0x80, 0xbf)) return 0;
  }
  return n;
}

int HexValue(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

bool IsQuotedForm(std::string_view text) {
  return text.size() >= 2 && text.front() == '"' && text.back() == '"';
}

}  // namespace

bool IsPrintableUtf8(std::string_view bytes) {
  for (size_t i = 0; i < bytes.size();) {
    const size_t n = PrintableSequence(bytes, i);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::string PathText(std::string_view path) {
  if (IsPrintableUtf8(path) && (path.empty() || path.front() != '"')) {
    return std::string(path);
  }
  static const char kHex[] = "0123456789abcdef";
  std::string out = "\"";
  for (size_t i = 0; i < path.size();) {
    const char c = path[i];
    if (c == '\\' || c == '"') {
      out += '\\';
      out += c;
      ++i;
      continue;
    }
    if (const size_t n = PrintableSequence(path, i); n > 0) {
      out.append(path.substr(i, n));
      i += n;
      continue;
    }
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\r') {
      out += "\\r";
    } else {
      const unsigned char b = static_cast<unsigned char>(c);
      out += "\\x";
      out += kHex[b >> 4];
      out += kHex[b & 15];
    }
    ++i;
  }
  return out + "\"";
}

std::string PathFromText(std::string_view text, std::string_view what) {
  if (!IsQuotedForm(text)) return std::string(text);
  const std::string_view body = text.substr(1, text.size() - 2);
  auto bad = [&](const char* problem) {
    RELPOS_THROW(FormatError, what << " " << std::string(text) << ": "
                                   << problem
                                   << " (a path in double quotes uses the "
                                      "escapes \\\\ \\\" \\n \\t \\r \\xHH)");
  };
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c == '"') bad("holds an unescaped double quote");
    if (c != '\\') {
      out += c;
      continue;
    }
    if (++i == body.size()) bad("ends in a lone backslash");
    switch (body[i]) {
      case '\\':
      case '"':
        out += body[i];
        break;
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case 'x': {
        const int hi = i + 1 < body.size() ? HexValue(body[i + 1]) : -1;
        const int lo = i + 2 < body.size() ? HexValue(body[i + 2]) : -1;
        if (hi < 0 || lo < 0) bad("has \\x without two hex digits");
        out += static_cast<char>(hi * 16 + lo);
        i += 2;
        break;
      }
      default:
        bad("has an unknown escape");
    }
  }
  return out;
}

std::string QuotedPath(std::string_view path) {
  std::string text = PathText(path);
  return IsQuotedForm(text) ? text : "'" + text + "'";
}

}  // namespace relpos::io

#include "data/translate/utf8.h"

#include <cstdint>

#include "base/check.h"

namespace relpos::translate {
namespace {

// Decodes the sequence starting at text[i]: returns its length (1..4) and
// sets *c, or returns 0 if the bytes there are not well-formed UTF-8.
size_t DecodeOne(std::string_view text, size_t i, char32_t* c) {
  const auto byte = [&](size_t k) {
    return static_cast<uint8_t>(text[i + k]);
  };
  const uint8_t b0 = byte(0);
  if (b0 < 0x80) {
    *c = b0;
    return 1;
  }
  size_t n = 0;
  char32_t value = 0, min = 0;
  if ((b0 & 0xE0) == 0xC0) {
    n = 2, value = b0 & 0x1F, min = 0x80;
  } else if ((b0 & 0xF0) == 0xE0) {
    n = 3, value = b0 & 0x0F, min = 0x800;
  } else if ((b0 & 0xF8) == 0xF0) {
    n = 4, value = b0 & 0x07, min = 0x10000;
  } else {
    return 0;  // a continuation byte or 0xF8..0xFF where a lead byte belongs
  }
  if (text.size() - i < n) return 0;  // truncated
  for (size_t k = 1; k < n; ++k) {
    if ((byte(k) & 0xC0) != 0x80) return 0;
    value = (value << 6) | (byte(k) & 0x3F);
  }
  // Overlong forms, surrogates and values past U+10FFFF are not UTF-8.
  if (value < min || value > 0x10FFFF || (value >= 0xD800 && value <= 0xDFFF))
    return 0;
  *c = value;
  return n;
}

}  // namespace

bool IsValidUtf8(std::string_view text) {
  char32_t c = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = DecodeOne(text, i, &c);
    if (n == 0) return false;
    i += n;
  }
  return true;
}

std::u32string DecodeUtf8(std::string_view text, std::string_view what) {
  std::u32string out;
  out.reserve(text.size());
  char32_t c = 0;
  for (size_t i = 0; i < text.size();) {
    const size_t n = DecodeOne(text, i, &c);
    RELPOS_CHECK_ARG(n != 0, what << " is not valid UTF-8 (bad byte 0x"
                                  << std::hex
                                  << static_cast<int>(
                                         static_cast<uint8_t>(text[i]))
                                  << std::dec << " at byte " << i << ")");
    out.push_back(c);
    i += n;
  }
  return out;
}

void AppendUtf8(char32_t c, std::string& out) {
  if (c < 0x80) {
    out.push_back(static_cast<char>(c));
  } else if (c < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (c >> 6)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else if (c < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (c >> 12)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (c >> 18)));
    out.push_back(static_cast<char>(0x80 | ((c >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((c >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (c & 0x3F)));
  }
}

std::string EncodeUtf8(std::u32string_view text) {
  std::string out;
  out.reserve(text.size());
  for (const char32_t c : text) AppendUtf8(c, out);
  return out;
}

bool IsPythonSpace(char32_t c) {
  if (c <= 0x20) return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C);
  if (c < 0x85) return false;
  return c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
         c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

}  // namespace relpos::translate

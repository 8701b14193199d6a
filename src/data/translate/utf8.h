// UTF-8 helpers for the translation data and metrics: validation, decoding
// to code points and back, and the whitespace classes the metrics and the
// corpus use.
#ifndef RELPOS_SRC_DATA_TRANSLATE_UTF8_H_
#define RELPOS_SRC_DATA_TRANSLATE_UTF8_H_

#include <string>
#include <string_view>

namespace relpos::translate {

// Whether `text` is well-formed UTF-8 (RFC 3629): no overlong forms, no
// surrogates (U+D800..U+DFFF), nothing above U+10FFFF, no truncated sequence.
bool IsValidUtf8(std::string_view text);

// The code points of well-formed UTF-8. InvalidArgument naming `what` (for
// example "hypothesis 12") if `text` is not well-formed.
std::u32string DecodeUtf8(std::string_view text, std::string_view what);

// Appends the UTF-8 encoding of the code point `c` (c <= U+10FFFF, not a
// surrogate) to `out`.
void AppendUtf8(char32_t c, std::string& out);
std::string EncodeUtf8(std::u32string_view text);

// Python's str.isspace() for one code point (what str.split() and
// str.rstrip() without arguments split and strip on, and so what sacrebleu's
// tokenisers use): the ASCII whitespace \t \n \v \f \r and space, the
// separators U+001C..U+001F, U+0085, U+00A0, U+1680, U+2000..U+200A, U+2028,
// U+2029, U+202F, U+205F and U+3000 (Unicode bidirectional class WS, B or S,
// or category Zs). U+200B (zero width space) is not whitespace.
bool IsPythonSpace(char32_t c);

}  // namespace relpos::translate

#endif  // RELPOS_SRC_DATA_TRANSLATE_UTF8_H_

#include "base/io/path_text.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <string>

#include "relpos/error.h"

namespace relpos::io {
namespace {

using ::testing::HasSubstr;

TEST(PathText, PrintableUtf8StaysAsIs) {
  for (const char* p : {"runs/a.txt", "", "données/ñ.txt", "日本/語", "a'b c",
                        "emoji \xf0\x9f\x98\x80", "ends with \""}) {
    EXPECT_EQ(PathText(p), p);
    EXPECT_EQ(PathFromText(PathText(p)), p);
    // Built piecewise: GCC 12 warns (-Wrestrict) on "'" + string.
    std::string quoted = "'";
    quoted.append(p).append("'");
    EXPECT_EQ(QuotedPath(p), quoted);
  }
}

TEST(PathText, OtherBytesAreQuotedAndEscaped) {
  EXPECT_EQ(PathText("t\xff.txt"), "\"t\\xff.txt\"");
  EXPECT_EQ(PathText("a\nb\tc\rd"), "\"a\\nb\\tc\\rd\"");
  EXPECT_EQ(PathText("\"q\" \\ \xff"), "\"\\\"q\\\" \\\\ \\xff\"");
  EXPECT_EQ(PathText("\x01\x7f"), "\"\\x01\\x7f\"");
  // C1 control U+0085, an overlong '/', a surrogate, above U+10FFFF, a cut
  // sequence: each byte escaped.
  EXPECT_EQ(PathText("\xc2\x85"), "\"\\xc2\\x85\"");
  EXPECT_EQ(PathText("\xc0\xaf"), "\"\\xc0\\xaf\"");
  EXPECT_EQ(PathText("\xed\xa0\x80"), "\"\\xed\\xa0\\x80\"");
  EXPECT_EQ(PathText("\xf4\x90\x80\x80"), "\"\\xf4\\x90\\x80\\x80\"");
  EXPECT_EQ(PathText("ab\xe2\x82"), "\"ab\\xe2\\x82\"");
  // Valid characters inside a quoted form stay as they are.
  EXPECT_EQ(PathText("ñ\xff"), "\"ñ\\xff\"");
  EXPECT_EQ(QuotedPath("t\xff"), "\"t\\xff\"");
}

// Every byte string survives the round trip, and its text is valid UTF-8
// that nlohmann::json dumps without throwing (its type_error.316 on invalid
// UTF-8 was the root of "internal error" for such paths).
TEST(PathText, RoundTripsEveryByteAndDumpsAsJson) {
  std::string all;
  for (int b = 0; b < 256; ++b) all += static_cast<char>(b);
  for (const std::string& p :
       {all, std::string("\"\""), std::string("\"x"), std::string("x\"")}) {
    const std::string text = PathText(p);
    EXPECT_TRUE(IsPrintableUtf8(text)) << text;
    EXPECT_EQ(PathFromText(text), p);
    EXPECT_NO_THROW((void)nlohmann::json(text).dump());
  }
}

TEST(PathText, MalformedQuotedFormsAreFormatErrors) {
  for (const char* text : {"\"a\\\"", "\"\\q\"", "\"\\x4\"", "\"a\"b\""}) {
    try {
      PathFromText(text, "corpus_path");
      FAIL() << text;
    } catch (const FormatError& e) {
      EXPECT_THAT(e.what(), HasSubstr("corpus_path"));
    }
  }
  // Not a quoted form (one quote): taken as it is.
  EXPECT_EQ(PathFromText("\"abc"), "\"abc");
}

}  // namespace
}  // namespace relpos::io

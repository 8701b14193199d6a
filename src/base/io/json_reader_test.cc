#include "base/io/json_reader.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <sys/resource.h>

#include <string>

#include "relpos/error.h"
#include "support/subprocess.h"

namespace relpos::io {
namespace {

using ::testing::HasSubstr;

std::string ErrorOf(const std::string& text, const JsonLimits& limits) {
  try {
    ParseJson(text, "doc.json", limits);
  } catch (const FormatError& e) {
    return e.what();
  }
  return "accepted";
}

TEST(JsonReader, NestingIsBoundedBeforeParsing) {
  const std::string deep64 = std::string(64, '[') + std::string(64, ']');
  EXPECT_NO_THROW(ParseJson(deep64, "d", {.max_bytes = 1000}));
  const std::string deep65 = "[" + deep64 + "]";
  EXPECT_THAT(ErrorOf(deep65, {.max_bytes = 1000}),
              HasSubstr("deeper than 64 levels"));
  // Brackets inside strings (escaped quotes too) are text, not nesting.
  const std::string text = "{\"a\": \"" + std::string(100, '[') + "\\\"[\"}";
  EXPECT_EQ(ParseJson(text, "s", {.max_bytes = 1000})["a"].get<std::string>(),
            std::string(100, '[') + "\"[");
  EXPECT_THAT(ErrorOf("[[[[", {.max_bytes = 10, .max_depth = 3}),
              HasSubstr("deeper than 3"));
}

TEST(JsonReader, SizeStrictnessAndDuplicateKeys) {
  EXPECT_THAT(ErrorOf("[1, 2, 3]", {.max_bytes = 8}),
              HasSubstr("too large: 9 bytes (limit 8)"));
  EXPECT_THAT(ErrorOf("{} x", {.max_bytes = 100}),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf("{} // c", {.max_bytes = 100}),
              HasSubstr("not valid JSON"));
  EXPECT_THAT(ErrorOf("{\"a\": {\"b\": 1, \"b\": 2}}", {.max_bytes = 100}),
              HasSubstr("duplicate key 'b'"));
  EXPECT_THAT(ErrorOf("[\"\xff\"]", {.max_bytes = 100}),
              HasSubstr("not valid JSON"));
  // The source is shown as PathText: one line of valid UTF-8.
  try {
    ParseJson("[", "dir\xff/doc.json", {.max_bytes = 10});
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_THAT(e.what(), HasSubstr("\"dir\\xff/doc.json\": "));
  }
  EXPECT_THROW(ParseJson("{}", "x", {.max_bytes = 0}), InvalidArgument);
}

TEST(JsonReader, FormatAndVersionPreamble) {
  const nlohmann::json ok = {{"format", "relpos-x"}, {"version", 1}};
  EXPECT_NO_THROW(CheckFormatAndVersion(ok, "f", "relpos-x", 1, "x file"));
  auto error = [](const nlohmann::json& j) {
    try {
      CheckFormatAndVersion(j, "f", "relpos-x", 1, "x file");
    } catch (const FormatError& e) {
      return std::string(e.what());
    }
    return std::string("accepted");
  };
  EXPECT_THAT(error(nlohmann::json::array()), HasSubstr("a JSON object"));
  EXPECT_THAT(error({{"format", "y"}, {"version", 1}}),
              HasSubstr("field 'format' must be \"relpos-x\""));
  EXPECT_THAT(error({{"format", "relpos-x"}, {"version", 2}}),
              HasSubstr("unsupported x file version (this relpos reads "
                        "version 1)"));
}

// 20 MB of '[' is what made nlohmann::json build 1.5 GB: refused in a child
// whose address space is limited to 256 MiB above what it uses.
TEST(JsonReader, HostileNestingCostsNoMemory) {
  const std::string brackets(20 << 20, '[');
  const relpos::testing::ChildResult r = relpos::testing::RunInChild([&] {
    const rlimit lim{uint64_t{768} << 20, uint64_t{768} << 20};
    ::setrlimit(RLIMIT_AS, &lim);
    try {
      ParseJson(brackets, "x", {.max_bytes = int64_t{64} << 20});
    } catch (const FormatError&) {
      return 0;
    }
    return 1;
  });
  EXPECT_FALSE(r.timed_out);
  EXPECT_EQ(r.exit_code, 0);
}

}  // namespace
}  // namespace relpos::io

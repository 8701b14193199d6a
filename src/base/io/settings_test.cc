// The declared-once settings: JSON round trip, strict types, ranges, and the
// docs table, on a small struct of every kind of field.
#include "base/io/settings.h"

#include <gtest/gtest.h>

#include <string>

#include "relpos/error.h"

namespace relpos::io {
namespace {

struct Inner {
  double rate = 0.5;
};

struct Toy {
  int64_t size = 4;
  uint64_t seed = 7;
  int threads = 1;
  bool flag = false;
  std::string name = "a";
  Inner inner;
};

const std::vector<Setting<Toy>>& ToySettings() {
  static const std::vector<Setting<Toy>> s = {
      Field<Toy>("size", "--size", "Size", &Toy::size, Range{1, 1 << 20}),
      Field<Toy>("seed", "--seed", "Seed", &Toy::seed),
      Field<Toy>("threads", "--threads", "Threads", &Toy::threads,
                 Range{.lo = 1}),
      Field<Toy>("flag", "--flag", "A switch", &Toy::flag),
      Words<Toy>(
          "name", "--name", "Name", {"a", "b"},
          [](const Toy& t) { return t.name; },
          [](Toy& t, const std::string& v, const std::string&) { t.name = v; }),
      Field<Toy>("rate", "--rate", "Rate | ratio",
                 [](Toy& t) -> auto& { return t.inner.rate; },
                 Range{.lo = 0, .hi = 1, .hi_open = true}),
  };
  return s;
}

template <typename E>
std::string Rejected(const nlohmann::json& j) {
  try {
    Toy t;
    SettingsFromJson(ToySettings(), j, "toy config", &t);
  } catch (const E& e) {
    return e.what();
  }
  ADD_FAILURE() << "accepted " << j.dump();
  return "";
}

TEST(Settings, JsonRoundTrip) {
  Toy t;
  t.size = 9;
  t.seed = 18446744073709551615ULL;
  t.threads = 3;
  t.flag = true;
  t.name = "b";
  t.inner.rate = 0.1 + 0.2;
  const nlohmann::json j = SettingsToJson(ToySettings(), t);
  EXPECT_EQ(j["rate"], 0.1 + 0.2);
  Toy back;
  SettingsFromJson(ToySettings(), nlohmann::json::parse(j.dump()), "toy",
                   &back);
  EXPECT_EQ(SettingsToJson(ToySettings(), back), j);
  EXPECT_EQ(back.seed, t.seed);
  EXPECT_EQ(back.threads, 3);
}

// An OmitAtDefault setting is written only when it is not the default, and
// a JSON object without it reads back to the default.
TEST(Settings, OmitAtDefaultWritesOnlyChangedValues) {
  std::vector<Setting<Toy>> settings = ToySettings();
  settings[0] = OmitAtDefault(settings[0]);  // "size"
  Toy t;
  nlohmann::json j = SettingsToJson(settings, t);
  EXPECT_FALSE(j.contains("size"));
  EXPECT_TRUE(j.contains("seed"));
  Toy back;
  back.size = 99;
  SettingsFromJson(settings, j, "toy", &back);
  EXPECT_EQ(back.size, 99);  // missing: left as it was
  t.size = 5;
  j = SettingsToJson(settings, t);
  EXPECT_EQ(j["size"], 5);
}

TEST(Settings, StrictTypesAndRanges) {
  EXPECT_NE(Rejected<FormatError>({{"size", 2.5}}).find("'size'"),
            std::string::npos);
  EXPECT_NE(Rejected<FormatError>({{"size", "2"}}).find("an integer"),
            std::string::npos);
  EXPECT_NE(Rejected<FormatError>({{"seed", -1}}).find("non-negative"),
            std::string::npos);
  EXPECT_NE(Rejected<FormatError>({{"flag", 1}}).find("true or false"),
            std::string::npos);
  EXPECT_NE(Rejected<FormatError>({{"nosuch", 1}}).find("'nosuch'"),
            std::string::npos);
  EXPECT_NE(Rejected<FormatError>(nlohmann::json::array()).find("object"),
            std::string::npos);
  const std::string range = Rejected<InvalidArgument>({{"size", 2097152}});
  EXPECT_NE(range.find("toy config field 'size' must be in [1, 2^20] (got "
                       "2097152)"),
            std::string::npos)
      << range;
  // An int field gets int's limits on top of its declared range.
  EXPECT_NE(Rejected<InvalidArgument>({{"threads", int64_t{1} << 40}})
                .find("threads"),
            std::string::npos);
  EXPECT_NE(Rejected<InvalidArgument>({{"rate", 1.0}}).find("[0, 1)"),
            std::string::npos);
  EXPECT_NE(Rejected<InvalidArgument>({{"name", "c"}}).find("one of a, b"),
            std::string::npos);
}

TEST(Settings, TextParsing) {
  EXPECT_EQ(std::get<int64_t>(ParseSettingText(SettingType::kInt, "-3", "n")),
            -3);
  EXPECT_EQ(std::get<double>(ParseSettingText(SettingType::kDouble, "1e-3",
                                              "n")),
            1e-3);
  for (const char* bad : {"", "3x", "1.5", "99999999999999999999"}) {
    EXPECT_THROW(ParseSettingText(SettingType::kInt, bad, "--n"),
                 InvalidArgument)
        << bad;
  }
  EXPECT_THROW(ParseSettingText(SettingType::kUnsigned, "-1", "--n"),
               InvalidArgument);
  // Out-of-range or oddly written integers are refused, never clamped or
  // wrapped (strtoull alone reads " -1" as 2^64 - 1).
  for (const char* bad : {" -1", "-0", "+5", " 5", "5 ", "1e23", "0x10",
                          "18446744073709551616", "-"}) {
    EXPECT_THROW(ParseSettingText(SettingType::kUnsigned, bad, "--seed"),
                 InvalidArgument)
        << bad;
  }
  for (const char* bad : {" 5", "+5", "--5", "9223372036854775808"}) {
    EXPECT_THROW(ParseSettingText(SettingType::kInt, bad, "--n"),
                 InvalidArgument)
        << bad;
  }
  EXPECT_EQ(std::get<uint64_t>(ParseSettingText(
                SettingType::kUnsigned, "18446744073709551615", "--seed")),
            UINT64_MAX);
}

TEST(Settings, DocsTable) {
  const std::string table = MarkdownTable(SettingRows(ToySettings(), Toy{}));
  EXPECT_NE(table.find("| `size` | `--size` | integer | `4` | [1, 2^20] | "
                       "Size |"),
            std::string::npos)
      << table;
  EXPECT_NE(table.find("Rate \\| ratio"), std::string::npos) << table;
  EXPECT_NE(table.find("| `threads` | `--threads` | integer | `1` | "
                       "[1, 2147483647] |"),
            std::string::npos)
      << table;
}

}  // namespace
}  // namespace relpos::io

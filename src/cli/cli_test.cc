#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"

namespace relpos::cli {
namespace {

TEST(ParamsVerb, PrintsShawNumbers) {
  CliResult r = RunRelpos({"params", "--d-model", "768", "--heads", "12",
                  "--max-distance", "64", "--per-head"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("16,512"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("198,144"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1,769,472"), std::string::npos) << r.out;
}

TEST(ParamsVerb, Json) {
  CliResult r = RunRelpos({"params", "--d-model", "768", "--heads", "12",
                  "--max-distance", "64", "--per-head", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["relative_params_per_head"], 16512);
  EXPECT_EQ(j["relative_params"], 198144);
  EXPECT_EQ(j["qkv_params"], 1769472);
  EXPECT_EQ(j["ak_shape"], nlohmann::json({12, 129, 64}));
}

// Every bad invocation: exit code 2, exactly one line on stderr, nothing on
// stdout.
TEST(ParamsVerb, BadUsage) {
  const std::vector<std::vector<std::string>> cases = {
      {"params"},
      {"params", "--d-model", "768", "--heads", "0", "--max-distance", "4"},
      {"params", "--d-model", "768", "--heads", "12", "--max-distance", "-1"},
      {"params", "--d-model", "100", "--heads", "8", "--max-distance", "4"},
      {"params", "--d-model", "x", "--heads", "8", "--max-distance", "4"},
      {"params", "--d-model", "64", "--heads", "8", "--max-distance", "4",
       "--bogus"},
      {"nosuchverb"},
      {},
  };
  for (const auto& args : cases) {
    CliResult r = RunRelpos(args);
    std::string joined;
    for (const auto& a : args) joined += a + " ";
    EXPECT_EQ(r.code, 2) << joined;
    EXPECT_TRUE(r.out.empty()) << joined << r.out;
    ASSERT_FALSE(r.err.empty()) << joined;
    EXPECT_EQ(r.err.find('\n'), r.err.size() - 1) << joined << r.err;
  }
}

TEST(Cli, HelpOnEveryVerbExitsZero) {
  for (const std::string verb : {"params"}) {
    CliResult r = RunRelpos({verb, "--help"});
    EXPECT_EQ(r.code, 0) << verb;
    EXPECT_NE(r.out.find("--help"), std::string::npos) << verb << r.out;
  }
  EXPECT_EQ(RunRelpos({"--help"}).code, 0);
}

}  // namespace
}  // namespace relpos::cli

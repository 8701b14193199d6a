#include <cstdlib>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include "cli/cli_test_util.h"
#include "relpos/cpu.h"
#include "relpos/error.h"

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
  for (const std::string verb :
       {"params", "bench", "train", "eval", "demo", "sweep", "compare",
        "settings", "generate", "inspect"}) {
    CliResult r = RunRelpos({verb, "--help"});
    EXPECT_EQ(r.code, 0) << verb;
    EXPECT_NE(r.out.find("--help"), std::string::npos) << verb << r.out;
    // CLI11's own "=VALUE" default spelling is replaced by "(default: ...)".
    EXPECT_EQ(r.out.find("(default: )"), std::string::npos) << verb << r.out;
  }
  EXPECT_EQ(RunRelpos({"--help"}).code, 0);
}

// The line of `relpos VERB --help` that documents `flag`.
std::string HelpLine(const std::string& verb, const std::string& flag) {
  const CliResult r = RunRelpos({verb, "--help"});
  const size_t at = r.out.find("  " + flag + " ");
  if (at == std::string::npos) return "";
  // A long flag's description may start on the next line.
  size_t end = r.out.find('\n', at);
  if (r.out.compare(end + 1, 4, "    ") == 0) end = r.out.find('\n', end + 1);
  return r.out.substr(at, end - at);
}

TEST(Cli, HelpShowsEachVerbsDefaults) {
  const std::vector<std::tuple<std::string, std::string, std::string>> cases =
      {{"train", "--steps", "(default: 1000)"},
       {"train", "--task", "(default: local_difference)"},
       {"train", "--lr", "(default: 0.001)"},
       {"train", "--warmup-steps", "(default: min(100, steps/10))"},
       {"train", "--position", "(default: shaw)"},
       {"sweep", "--steps", "(default: 400)"},
       {"sweep", "--lr", "(default: 0.002)"},
       {"compare", "--steps", "(default: 1000; --quick: 300)"},
       {"demo", "--steps", "(default: 1500)"},
       {"demo", "--threads", "(default: 1)"},
       {"generate", "--max-new", "(default: 256)"},
       {"generate", "--temperature", "(default: 1)"},
       {"eval", "--sequences", "(default: 128)"},
       {"eval", "--threads", "(default: the checkpoint's)"},
       {"generate", "--threads", "(default: the checkpoint's, 1 unless"},
       {"generate", "--seed", "(default: 0)"},
       {"bench", "--n", "(default: 256,512,1024,2048,4096,8192)"},
       {"inspect", "--share", "(default: 0.99)"},
       {"params", "--dk", "(default: d_model/heads)"}};
  for (const auto& [verb, flag, expected] : cases) {
    EXPECT_NE(HelpLine(verb, flag).find(expected), std::string::npos)
        << verb << " " << flag << ": " << HelpLine(verb, flag);
  }
  // Required options and switches show no default.
  EXPECT_EQ(HelpLine("params", "--d-model").find("default"), std::string::npos);
  EXPECT_EQ(HelpLine("generate", "--json").find("default"), std::string::npos);
}

// An unknown verb names the verbs there are, also when --help follows it
// (CLI11 alone says "A subcommand is required", or prints the top-level
// help and exits 0).
TEST(Cli, UnknownVerbListsTheVerbs) {
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"transmogrify"},
        std::vector<std::string>{"transmogrify", "--help"},
        std::vector<std::string>{"transmogrify", "--src", "x"}}) {
    const CliResult r = RunRelpos(args);
    EXPECT_EQ(r.code, 2) << Joined(args);
    EXPECT_TRUE(r.out.empty()) << r.out;
    EXPECT_EQ(r.err,
              "relpos: error: unknown verb 'transmogrify' (verbs: bench, "
              "compare, demo, eval, generate, inspect, params, settings, "
              "sweep, train, translate; see 'relpos --help')\n");
  }
}

// A bad --share is reported under --share (it was once wrapped in
// --untrained-fraction's name by the nested flag translation).
// RELPOS_CPU_ISA (relpos/cpu.h): a bad value is one usage error before any
// verb runs; avx2 caps the kernels (the int8 products' target says so).
TEST(Cli, CpuIsaFromTheEnvironment) {
  ::setenv("RELPOS_CPU_ISA", "avx9000", 1);
  CliResult bad = RunRelpos({"params", "--d-model", "64", "--heads", "8",
                             "--max-distance", "4"});
  EXPECT_EQ(bad.code, 2);
  EXPECT_TRUE(bad.out.empty()) << bad.out;
  EXPECT_EQ(bad.err,
            "relpos: error: RELPOS_CPU_ISA: the instruction set cap must be "
            "native, avx512 or avx2 (got \"avx9000\")\n");
  ::setenv("RELPOS_CPU_ISA", "native", 1);
  EXPECT_EQ(RunRelpos({"params", "--d-model", "64", "--heads", "8",
                       "--max-distance", "4"})
                .code,
            0);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    ::setenv("RELPOS_CPU_ISA", "avx2", 1);
    CliResult r = RunRelpos({"params", "--d-model", "64", "--heads", "8",
                             "--max-distance", "4"});
    EXPECT_EQ(r.code, 0) << r.err;
    EXPECT_EQ(CpuIsa(), "AVX2");
  }
  ::unsetenv("RELPOS_CPU_ISA");
}

TEST(Cli, InspectNamesTheFlagThatIsWrong) {
  for (const std::string bad : {"0", "1.5", "-1", "x"}) {
    const CliResult r = RunRelpos({"inspect", "nodir", "--share", bad});
    EXPECT_EQ(r.code, 2) << bad;
    EXPECT_NE(r.err.find("--share"), std::string::npos) << r.err;
    EXPECT_EQ(r.err.find("untrained"), std::string::npos) << r.err;
  }
}

TEST(AsFlag, KeepsAMessageThatAlreadyNamesAFlag) {
  auto nested = [] {
    return AsFlag("--outer", "outer", [] {
      return AsFlag("--inner", "inner", []() -> int {
        throw InvalidArgument("inner must be positive (got 0)");
      });
    });
  };
  try {
    nested();
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(MessageBody(e), "--inner must be positive (got 0)");
  }
  try {
    AsFlag("--steps", "steps", []() -> int {
      throw InvalidArgument("something else");
    });
    FAIL() << "no throw";
  } catch (const InvalidArgument& e) {
    EXPECT_EQ(MessageBody(e), "--steps: something else");
  }
}

}  // namespace
}  // namespace relpos::cli

// `relpos compare` end to end on a tiny grid: the table, compare.json,
// compare.svg with one panel per task, the flags it refuses, the lm corpus.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <tuple>
#include <vector>

#include "cli/cli_test_util.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("relpos_compare_cli_test_" + std::to_string(::getpid())) /
                     name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p.string();
}

std::string Slurp(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::string> TinyArgs(const std::string& out) {
  return {"compare", "--out", out, "--steps", "4", "--batch-size", "4",
          "--d-model", "16", "--heads", "2", "--layers", "1", "--d-ff", "32",
          "--train-lengths", "2-4", "--sequences", "4", "--progress", "none"};
}

size_t Count(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos;
       at = text.find(what, at + 1)) {
    ++n;
  }
  return n;
}

TEST(CompareVerb, PrintsTheTableAndWritesJsonAndAPanelPerTask) {
  const std::string out = TempDir("grid");
  std::vector<std::string> args = TinyArgs(out);
  for (const char* a : {"--tasks", "reverse,local_difference", "--positions",
                        "none,relative", "--seeds", "2"}) {
    args.push_back(a);
  }
  const CliResult r = RunRelpos(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("task reverse"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("task local_difference"), std::string::npos);
  EXPECT_NE(r.out.find("at 8 (2x)"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("8 of 8 cells"), std::string::npos) << r.out;
  const auto j = nlohmann::json::parse(Slurp(out + "/compare.json"));
  EXPECT_EQ(j["cells"].size(), 8u);
  EXPECT_EQ(j["rows"].size(), 4u);
  const std::string svg = Slurp(out + "/compare.svg");
  EXPECT_EQ(Count(svg, "<svg"), 3u);  // the page and one panel per task
  EXPECT_NE(svg.find("reverse: per-token accuracy"), std::string::npos);
  EXPECT_NE(svg.find("local_difference: per-token accuracy"),
            std::string::npos);
  // A rerun reuses every cell.
  const CliResult again = RunRelpos(args);
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_NE(again.out.find("8 of 8 cells (8 reused from compare.json)"),
            std::string::npos)
      << again.out;
  fs::remove_all(out);
}

TEST(CompareVerb, RefusesPerCellFlagsAndBadLists) {
  const std::string out = TempDir("bad");
  for (const auto& [flag, value, expect] :
       std::vector<std::tuple<std::string, std::string, std::string>>{
           {"--position", "none", "compare takes --positions LIST"},
           {"--seed", "3", "compare takes --seeds LIST"},
           {"--positions", "none,bogus", "--positions"},
           {"--seeds", "x", "--seeds must be N"},
           {"--tasks", "reverse,reverse", "--tasks names reverse twice"}}) {
    std::vector<std::string> args = TinyArgs(out);
    args.push_back(flag);
    args.push_back(value);
    const CliResult r = RunRelpos(args);
    EXPECT_EQ(r.code, kExitUsage) << flag;
    EXPECT_NE(r.err.find(expect), std::string::npos) << flag << ": " << r.err;
  }
  fs::remove_all(out);
}

TEST(CompareVerb, LmOnADirectoryCorpusReportsBitsPerByte) {
  const std::string out = TempDir("lm");
  const std::string corpus = TempDir("corpus");
  fs::create_directories(corpus + "/pkg");
  for (int i = 0; i < 20; ++i) {
    std::ofstream(corpus + "/pkg/m" + std::to_string(i) + ".py")
        << "def f" << i << "(x):\n    return x + " << i << "\n\n";
    std::ofstream(corpus + "/skip" + std::to_string(i) + ".txt") << "no";
  }
  std::vector<std::string> args = TinyArgs(out);
  for (const char* a : {"--tasks", "lm", "--positions", "sinusoidal",
                        "--seeds", "1", "--corpus", corpus.c_str(),
                        "--corpus-pattern", "*.py", "--eval-lengths", "5"}) {
    args.push_back(a);
  }
  const CliResult r = RunRelpos(args);
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("bits per byte"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("20 of 20 matching files"), std::string::npos)
      << r.out;
  const auto j = nlohmann::json::parse(Slurp(out + "/compare.json"));
  EXPECT_EQ(j["tasks"][0]["eval_lengths"],
            nlohmann::json::parse("[2, 3, 4, 5, 8, 16]"));
  EXPECT_TRUE(j["tasks"][0]["lower_is_better"].get<bool>());
  fs::remove_all(out);
  fs::remove_all(corpus);
}

}  // namespace
}  // namespace relpos::cli

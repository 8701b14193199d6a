// `relpos inspect`: the table, the verdict, --json, --svg, and the messages
// for checkpoints without statistics and for bad input.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "cli/cli_test_util.h"

namespace relpos::cli {
namespace {

namespace fs = std::filesystem;

class VerbInspectTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = fs::temp_directory_path() /
            ("relpos_verb_inspect_test_" + std::to_string(::getpid()) + "_" +
             ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(root_);
    fs::create_directories(root_);
  }
  void TearDown() override { fs::remove_all(root_); }
  std::string P(const std::string& name) const {
    return (root_ / name).string();
  }
  // A decoder trained on sequences of at most 8 tokens with k = 10.
  std::string Train() const {
    const std::string dir = P("run");
    const CliResult r = RunRelpos(
        {"train", "--out", dir, "--steps", "8", "--task", "reverse",
         "--train-lengths", "1-4", "--arch", "decoder", "--d-model", "16",
         "--heads", "2", "--layers", "2", "--d-ff", "32", "--batch-size", "4",
         "--max-distance", "10", "--progress", "none"});
    EXPECT_EQ(r.code, 0) << r.err;
    return dir;
  }
  fs::path root_;
};

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

TEST_F(VerbInspectTest, TableVerdictJsonAndSvg) {
  const std::string dir = Train();
  CliResult r = RunRelpos({"inspect", dir});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("distances |r| <= 7"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("blocks.1.attn.rel_v (AV, 21 rows x 8"),
            std::string::npos)
      << r.out;
  // Rows r > 0 (the future, masked) and r < -7 (longer than any sequence).
  EXPECT_NE(r.out.find("blocks.0.attn.rel_k: 13 of 21 rows untrained (r <= "
                       "-8, r >= 1); 99% of the signal within |r| <= "),
            std::string::npos)
      << r.out;

  r = RunRelpos({"inspect", dir, "--json", "--share", "0.5", "--svg",
                 P("rows.svg")});
  ASSERT_EQ(r.code, 0) << r.err;
  const nlohmann::json j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j["step"], 8);
  EXPECT_TRUE(j["has_signal"]);
  ASSERT_EQ(j["tables"].size(), 4u);
  const nlohmann::json& t = j["tables"][0];
  EXPECT_EQ(t["parameter"], "blocks.0.attn.rel_k");
  EXPECT_EQ(t["pair_count"].size(), 21u);
  EXPECT_EQ(t["pair_count"][11], 0);  // r = 1
  EXPECT_GT(t["pair_count"][10], 0);  // r = 0
  EXPECT_EQ(t["distance_label"][0], "<= -10");
  EXPECT_EQ(t["share"], 0.5);
  EXPECT_EQ(t["untrained_rows"], 13);
  const std::string svg = ReadAll(P("rows.svg"));
  EXPECT_EQ(svg.rfind("<?xml", 0), 0u);
  EXPECT_NE(svg.find("Training signal of AK rows"), std::string::npos);
  EXPECT_NE(svg.find("Movement of AV rows"), std::string::npos);
  EXPECT_NE(svg.find("layer 1"), std::string::npos);
  EXPECT_EQ(svg.find("<?xml", 1), std::string::npos);  // one document
}

TEST_F(VerbInspectTest, OldCheckpointsAndBadInput) {
  const std::string dir = Train();
  // As written before the statistics existed.
  const std::string cfg = dir + "/config.json";
  nlohmann::json j = nlohmann::json::parse(ReadAll(cfg));
  j["files"].erase("signal");
  std::ofstream(cfg) << j.dump();
  CliResult r = RunRelpos({"inspect", dir});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("this checkpoint has no signal statistics (written "
                       "before relpos recorded them"),
            std::string::npos)
      << r.out;
  EXPECT_NE(r.out.find("norm     moved"), std::string::npos) << r.out;
  r = RunRelpos({"inspect", dir, "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(nlohmann::json::parse(r.out)["has_signal"]);

  r = RunRelpos({"inspect", P("nothing")});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("does not exist"), std::string::npos) << r.err;
  r = RunRelpos({"inspect", dir, "--share", "0"});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find("--share: must be a number in (0, 1] (got 0)"),
            std::string::npos)
      << r.err;
  EXPECT_EQ(r.err.find("untrained"), std::string::npos) << r.err;
  r = RunRelpos({"inspect", dir, "--untrained-fraction", "3"});
  EXPECT_EQ(r.code, kExitUsage);
  std::ofstream(dir + "/" + j["files"]["model"].get<std::string>()) << "x";
  r = RunRelpos({"inspect", dir});
  EXPECT_EQ(r.code, kExitUsage);
  EXPECT_NE(r.err.find(j["files"]["model"].get<std::string>()),
            std::string::npos)
      << r.err;
}

// The sweep's column: a k beyond every training distance leaves its far
// rows untrained; a run without tables has no share.
TEST_F(VerbInspectTest, SweepReportsTheUntrainedShare) {
  const CliResult r = RunRelpos(
      {"sweep", "--task", "reverse", "--train-lengths", "1-3", "--d-model",
       "16", "--heads", "2", "--layers", "1", "--d-ff", "16", "--steps", "3",
       "--batch-size", "4", "--ks", "1,12", "--terms-list", "both,neither",
       "--terms-k", "1", "--sequences", "4", "--progress", "none", "--json"});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  ASSERT_EQ(j["runs"].size(), 3u);
  // k = 1: every row within reach of 6-token sequences.
  EXPECT_EQ(j["runs"][0]["untrained_row_share"], 0.0);
  // k = 12, 25 rows per table: at least the 14 of |r| > 5 (and the
  // verdict may add rows that got almost nothing).
  const double share = j["runs"][1]["untrained_row_share"];
  EXPECT_GE(share, 14.0 / 25.0);
  EXPECT_LT(share, 1.0);
  EXPECT_TRUE(j["runs"][2]["untrained_row_share"].is_null());  // neither
}

}  // namespace
}  // namespace relpos::cli

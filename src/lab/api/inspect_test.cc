// relpos::Inspect (include/relpos/lab/inspect.h): far rows of a table whose k
// exceeds every training distance get no pairs, no signal, do not move, and
// are exactly the rows the verdict flags; old and damaged checkpoints.
#include "relpos/lab/inspect.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "relpos/lab/config.h"
#include "relpos/error.h"
#include "relpos/lab/training.h"

namespace relpos {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("relpos_inspect_test_" + std::to_string(::getpid())) /
                     name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p.string();
}

// reverse on sizes 1-4: sequences of at most 8 tokens, so distances
// |r| <= 7; k = 12 > 7.
ExperimentConfig Tiny(const std::string& arch) {
  ExperimentConfig c;
  for (const auto& [key, value] :
       std::vector<std::pair<std::string, std::string>>{
           {"task", "reverse"}, {"--train-lengths", "1-4"}, {"steps", "12"},
           {"batch_size", "8"}, {"checkpoint_every", "0"}}) {
    c.Set("train", key, value);
  }
  c.Set("model", "arch", arch);
  c.Set("model", "d_model", "16");
  c.Set("model", "heads", "2");
  c.Set("model", "layers", "2");
  c.Set("model", "d_ff", "32");
  c.Set("model", "max_distance", "12");
  return c;
}

TEST(Inspect, FarRowsAreExactlyTheUntrainedOnes) {
  // The causal decoder: keys at or before the query, so the rows of r > 0
  // and of r < -7 see no pair.
  const std::string dir = TempDir("decoder");
  Training training(Tiny("decoder"));
  training.Run({.checkpoint_dir = dir});
  const Inspection in = Inspect(dir);
  ASSERT_TRUE(in.has_signal) << in.no_signal;
  EXPECT_EQ(in.step, 12);
  EXPECT_EQ(in.first_step, 0);
  EXPECT_EQ(in.steps, 12);
  EXPECT_EQ(in.train_max_tokens, 8);
  ASSERT_EQ(in.tables.size(), 4u);  // rel_k, rel_v of 2 layers
  for (const TableInspection& t : in.tables) {
    ASSERT_EQ(t.rows, 25);
    int64_t untrained = 0;
    for (int64_t b = 0; b < t.rows; ++b) {
      const int64_t r = t.distance[b];
      EXPECT_EQ(r, b - 12);
      const bool far = r > 0 || r < -7;
      EXPECT_EQ(t.pair_count[b] == 0, far) << t.parameter << " r=" << r;
      EXPECT_EQ(t.signal[b] == 0.0, far) << t.parameter << " r=" << r;
      EXPECT_EQ(t.untrained[b] != 0, far) << t.parameter << " r=" << r;
      // AdamW moves a row only with gradient (no decay on position tables).
      EXPECT_EQ(t.movement[b] == 0.0, far) << t.parameter << " r=" << r;
      EXPECT_GT(t.row_norm[b], 0.0);
      untrained += far;
    }
    EXPECT_EQ(t.untrained_rows, untrained);
    EXPECT_GE(t.share_k, 0);
    EXPECT_LE(t.share_k, 7);
    EXPECT_EQ(DistanceLabel(t, 0), "<= -12");
    EXPECT_EQ(DistanceLabel(t, 24), ">= 12");
    EXPECT_EQ(DistanceLabel(t, 12), "0");
  }
  EXPECT_EQ(Verdict(in.tables[0]).substr(0, 62),
            "blocks.0.attn.rel_k: 17 of 25 rows untrained (r <= -8, r >= 1)");

  // The model in memory gives the same numbers.
  const Inspection mem = Inspect(training.model());
  ASSERT_TRUE(mem.has_signal);
  for (size_t i = 0; i < in.tables.size(); ++i) {
    EXPECT_EQ(mem.tables[i].pair_count, in.tables[i].pair_count);
    EXPECT_EQ(mem.tables[i].signal, in.tables[i].signal);
    EXPECT_EQ(mem.tables[i].movement, in.tables[i].movement);
  }
}

TEST(Inspect, EncoderFarRowsGetNothing) {
  const std::string dir = TempDir("encoder");
  Training training(Tiny("encoder"));
  training.Run({.checkpoint_dir = dir});
  const Inspection in = Inspect(dir);
  ASSERT_TRUE(in.has_signal);
  for (const TableInspection& t : in.tables) {
    for (int64_t b = 0; b < t.rows; ++b) {
      const int64_t r = t.distance[b];
      const bool far = r > 7 || r < -7;
      EXPECT_EQ(t.pair_count[b] == 0, far) << t.parameter << " r=" << r;
      if (far) {
        EXPECT_EQ(t.signal[b], 0.0);
        EXPECT_TRUE(t.untrained[b]);
      }
    }
    // Every row of layer 0 within reach is used and learns.
    if (t.layer == 0) {
      for (int64_t b = 0; b < t.rows; ++b) {
        EXPECT_EQ(t.untrained[b] != 0, std::abs(t.distance[b]) > 7)
            << t.parameter << " r=" << t.distance[b];
      }
    }
  }
}

TEST(Inspect, OldCheckpointsAndBadInput) {
  const std::string dir = TempDir("old");
  Training training(Tiny("decoder"));
  training.Run({.checkpoint_dir = dir});
  // As written before the statistics: no files.signal.
  const fs::path cfg = fs::path(dir) / "config.json";
  std::ifstream in(cfg);
  std::stringstream ss;
  ss << in.rdbuf();
  nlohmann::json j = nlohmann::json::parse(ss.str());
  j["files"].erase("signal");
  std::ofstream(cfg) << j.dump();
  const Inspection old = Inspect(dir);
  EXPECT_FALSE(old.has_signal);
  EXPECT_NE(old.no_signal.find("no signal statistics"), std::string::npos);
  ASSERT_EQ(old.tables.size(), 4u);
  EXPECT_TRUE(old.tables[0].signal.empty());
  EXPECT_EQ(old.tables[0].movement.size(), 25u);  // still there
  EXPECT_EQ(Verdict(old.tables[0]),
            "blocks.0.attn.rel_k: no signal statistics");

  EXPECT_THROW(Inspect(TempDir("missing")), IoError);
  EXPECT_THROW(Inspect(dir, {.untrained_fraction = 2}), InvalidArgument);
  EXPECT_THROW(Inspect(dir, {.share = 0}), InvalidArgument);
  std::ofstream(cfg) << "{";
  EXPECT_THROW(Inspect(dir), FormatError);
}

TEST(Inspect, NoTablesForAbsolutePositions) {
  ExperimentConfig c = Tiny("encoder");
  c.Set("model", "position", "sinusoidal");
  Training training(c);
  training.Run();
  const Inspection in = Inspect(training.model());
  EXPECT_TRUE(in.has_signal);
  EXPECT_TRUE(in.tables.empty());
}

}  // namespace
}  // namespace relpos

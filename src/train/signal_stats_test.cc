#include "train/signal_stats.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "base/rng.h"
#include "base/io/file_io.h"
#include "model/transformer.h"
#include "relpos/error.h"
#include "train/batching.h"
#include "train/checkpoint.h"
#include "train/trainer.h"

namespace relpos::train {
namespace {

namespace fs = std::filesystem;

// Every scheme's tables are parameters of its model, with heads x rows x
// width elements, and rows = the bucket map's rows; the schemes with nothing
// distance-indexed to learn have none.
TEST(RelativeTables, MatchTheModelsParametersForEveryScheme) {
  using model::PositionScheme;
  for (const PositionScheme s :
       {PositionScheme::kNone, PositionScheme::kSinusoidal,
        PositionScheme::kLearned, PositionScheme::kShaw,
        PositionScheme::kShawAsym, PositionScheme::kShawLog,
        PositionScheme::kT5, PositionScheme::kAlibi, PositionScheme::kRope,
        PositionScheme::kXl}) {
    for (const model::Arch arch : {model::Arch::kEncoder, model::Arch::kDecoder}) {
      model::ModelConfig c;
      c.arch = arch;
      c.vocab_size = 7;
      c.d_model = 16;
      c.heads = 2;
      c.layers = 2;
      c.d_ff = 8;
      c.position = s;
      c.scheme.max_distance = 3;
      c.scheme.k_left = 5;
      c.scheme.k_right = 2;
      c.scheme.num_buckets = 10;
      c.scheme.bucket_max_distance = 40;
      const model::BasicTransformer<double> m(c);
      const std::vector<RelativeTable> tables = RelativeTables(c);
      const bool learned_rows = s == PositionScheme::kShaw ||
                                s == PositionScheme::kShawAsym ||
                                s == PositionScheme::kShawLog ||
                                s == PositionScheme::kT5;
      EXPECT_EQ(tables.empty(), !learned_rows) << model::ToString(s);
      for (const RelativeTable& t : tables) {
        const int64_t i = m.FindParameter(t.parameter);
        ASSERT_GE(i, 0) << t.parameter;
        EXPECT_EQ(m.parameters()[i].numel(), t.heads * t.map.rows * t.width)
            << model::ToString(s) << " " << t.parameter;
        const int64_t rows = s == PositionScheme::kShaw      ? 7
                             : s == PositionScheme::kShawAsym ? 8
                                                              : 10;
        EXPECT_EQ(t.map.rows, rows) << model::ToString(s);
      }
    }
  }
}

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("relpos_signal_test_" + std::to_string(::getpid())) /
                     name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

std::string ReadAll(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The definition, pair by pair: O(n^2) per sequence.
std::vector<int64_t> DirectCounts(const std::vector<int64_t>& lengths,
                                  bool causal, const BucketMap& map) {
  std::vector<int64_t> counts(map.rows, 0);
  for (int64_t n : lengths) {
    for (int64_t i = 0; i < n; ++i) {
      for (int64_t j = 0; j < (causal ? i + 1 : n); ++j) {
        ++counts[map.bucket(j - i)];
      }
    }
  }
  return counts;
}

TEST(SignalStats, PairCountsEqualTheDirectCount) {
  Rng rng(11);
  std::vector<BucketMap> maps = {
      ClipBucketMap(0, 0),  ClipBucketMap(1, 1),   ClipBucketMap(3, 3),
      ClipBucketMap(5, 2),  ClipBucketMap(40, 40),
      T5BucketMap({.num_buckets = 8, .max_distance = 12}),
      T5BucketMap({.num_buckets = 6, .max_distance = 9,
                   .bidirectional = false}),
  };
  for (const BucketMap& map : maps) {
    for (bool causal : {false, true}) {
      for (int trial = 0; trial < 5; ++trial) {
        std::vector<int64_t> lengths;
        const int64_t batch = 1 + static_cast<int64_t>(rng.NextU64() % 6);
        for (int64_t b = 0; b < batch; ++b) {
          lengths.push_back(static_cast<int64_t>(rng.NextU64() % 23));
        }
        std::vector<int64_t> counts;
        AddPairCounts(lengths, causal, map, &counts);
        EXPECT_EQ(counts, DirectCounts(lengths, causal, map))
            << map.description << (causal ? " causal" : "");
        // Accumulates.
        AddPairCounts(lengths, causal, map, &counts);
        std::vector<int64_t> twice = DirectCounts(lengths, causal, map);
        for (int64_t& c : twice) c *= 2;
        EXPECT_EQ(counts, twice);
      }
    }
  }
}

TEST(SignalStats, BucketMapsReachAndRows) {
  const BucketMap clip = ClipBucketMap(4, 4);
  EXPECT_EQ(clip.rows, 9);
  EXPECT_EQ(clip.reach, 4);
  EXPECT_EQ(clip.bucket(-100), 0);
  EXPECT_EQ(clip.bucket(0), 4);
  EXPECT_EQ(clip.bucket(100), 8);
  const BucketMap t5 = T5BucketMap({.num_buckets = 32, .max_distance = 128});
  EXPECT_EQ(t5.rows, 32);
  for (int64_t r : {t5.reach, t5.reach + 1, t5.reach + 1000}) {
    EXPECT_EQ(t5.bucket(r), t5.bucket(t5.reach));
    EXPECT_EQ(t5.bucket(-r), t5.bucket(-t5.reach));
  }
  EXPECT_THROW(ClipBucketMap(-1, 2), InvalidArgument);
}

TEST(SignalStats, RowDistances) {
  RowDistances d = DescribeRows(ClipBucketMap(2, 3));
  EXPECT_EQ(d.distance, (std::vector<int64_t>{-2, -1, 0, 1, 2, 3}));
  EXPECT_EQ(d.min, (std::vector<int64_t>{-3, -1, 0, 1, 2, 3}));
  EXPECT_EQ(d.max, (std::vector<int64_t>{-2, -1, 0, 1, 2, 3}));
  EXPECT_EQ(d.open_below, (std::vector<uint8_t>{1, 0, 0, 0, 0, 0}));
  EXPECT_EQ(d.open_above, (std::vector<uint8_t>{0, 0, 0, 0, 0, 1}));
  d = DescribeRows(ClipBucketMap(0, 0));  // one row for everything
  EXPECT_EQ(d.distance, (std::vector<int64_t>{0}));
  EXPECT_TRUE(d.open_below[0] && d.open_above[0]);

  // T5, bidirectional, 7 buckets: half = 3, exact = 1; rows 0-2 for r <= 0,
  // 4-5 for r > 0 (row 3 = half would be r > 0 with |r| < exact: none, as
  // in T5 itself), row 6 unused (odd count). Every row's range holds the r
  // that T5Bucket sends there.
  const T5Buckets t5{.num_buckets = 7, .max_distance = 10};
  const BucketMap map = T5BucketMap(t5);
  d = DescribeRows(map);
  for (int64_t r = -3 * map.reach; r <= 3 * map.reach; ++r) {
    const int64_t b = T5Bucket(r, t5);
    const bool in = (r >= d.min[b] || d.open_below[b]) &&
                    (r <= d.max[b] || d.open_above[b]);
    EXPECT_TRUE(in) << "r=" << r << " row " << b;
  }
  EXPECT_EQ(d.distance[0], 0);
  EXPECT_EQ(d.distance[4], 1);
  EXPECT_GT(d.min[3], d.max[3]);  // unused
  EXPECT_TRUE(d.open_below[2]);
  EXPECT_TRUE(d.open_above[5]);
  EXPECT_GT(d.min[6], d.max[6]);  // unused
  // Causal T5: bucket 0 is every r >= 0.
  d = DescribeRows(T5BucketMap({.num_buckets = 4, .max_distance = 8,
                                .bidirectional = false}));
  EXPECT_EQ(d.distance[0], 0);
  EXPECT_EQ(d.min[0], 0);
  EXPECT_TRUE(d.open_above[0]);
  EXPECT_TRUE(d.open_below[3]);
}

TEST(SignalStats, TablesOfAConfig) {
  model::ModelConfig c;
  c.layers = 2;
  c.heads = 4;
  c.d_model = 32;
  c.scheme.max_distance = 5;
  std::vector<RelativeTable> t = RelativeTables(c);
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].parameter, "blocks.0.attn.rel_k");
  EXPECT_EQ(t[1].parameter, "blocks.0.attn.rel_v");
  EXPECT_EQ(t[3].parameter, "blocks.1.attn.rel_v");
  EXPECT_EQ(t[3].layer, 1);
  EXPECT_EQ(t[0].heads, 1);
  EXPECT_EQ(t[0].width, 8);
  EXPECT_EQ(t[0].map.rows, 11);
  c.scheme.value_term = false;
  c.scheme.per_head_tables = true;
  t = RelativeTables(c);
  ASSERT_EQ(t.size(), 2u);
  EXPECT_EQ(t[1].parameter, "blocks.1.attn.rel_k");
  EXPECT_EQ(t[1].heads, 4);
  c.position = model::PositionScheme::kSinusoidal;
  EXPECT_TRUE(RelativeTables(c).empty());
}

model::ModelConfig TinyModel(model::Arch arch, bool per_head) {
  model::ModelConfig m;
  m.arch = arch;
  m.d_model = 16;
  m.heads = 2;
  m.layers = 2;
  m.d_ff = 32;
  m.scheme.max_distance = 16;  // > every distance of 8-token sequences
  m.scheme.per_head_tables = per_head;
  return m;
}

TrainConfig TinyTrain() {
  TrainConfig t;
  t.data.task = "reverse";  // 2n tokens: at most 8
  t.train_min_length = 1;
  t.train_max_length = 4;
  t.steps = 6;
  t.batch_size = 5;
  t.warmup_steps = 2;
  t.checkpoint_every = 0;
  t.seed = 3;
  return t;
}

// The training batches of a run, drawn again from its data stream.
std::vector<model::Batch> ReplayBatches(const Trainer& trainer,
                                        uint64_t data_rng, int64_t steps) {
  Rng rng(data_rng);
  std::vector<model::Batch> batches;
  const TrainConfig& c = trainer.config();
  for (int64_t s = 0; s < steps; ++s) {
    batches.push_back(MakeTrainBatch(trainer.data(), c.batch_size,
                                     c.train_min_length, c.train_max_length,
                                     rng));
  }
  return batches;
}

// On a tiny run: the counts are those of the training batches, pair by
// pair; rows of distances the batches never contain get exactly zero count
// and zero signal; the others get both.
TEST(SignalStats, TinyRunCountsAndFarRows) {
  for (model::Arch arch : {model::Arch::kEncoder, model::Arch::kDecoder}) {
    for (bool per_head : {false, true}) {
      Trainer t(TinyModel(arch, per_head), TinyTrain());
      const uint64_t data_rng = t.state().data_rng;
      t.Run({});
      const SignalStats& s = t.signal();
      EXPECT_EQ(s.first_step, 0);
      EXPECT_EQ(s.steps, 6);
      const std::vector<model::Batch> batches = ReplayBatches(t, data_rng, 6);
      std::vector<int64_t> lengths;
      int64_t longest = 0;
      for (const model::Batch& b : batches) {
        lengths.insert(lengths.end(), b.lengths.begin(), b.lengths.end());
        longest = std::max(longest, b.length);
      }
      ASSERT_LE(longest, 8);
      const std::vector<RelativeTable> tables = RelativeTables(t.model_config());
      ASSERT_EQ(s.tables.size(), 4u);
      const bool causal = arch == model::Arch::kDecoder;
      for (size_t i = 0; i < tables.size(); ++i) {
        const TableSignal& ts = s.tables[i];
        EXPECT_EQ(ts.parameter, tables[i].parameter);
        EXPECT_EQ(ts.pair_count, DirectCounts(lengths, causal, tables[i].map));
        for (int64_t b = 0; b < ts.rows; ++b) {
          const int64_t r = b - 16;
          const bool seen = -r < longest && (causal ? r <= 0 : r < longest);
          EXPECT_EQ(ts.pair_count[b] > 0, seen) << ts.parameter << " r=" << r;
          // A pair sends gradient only if the loss depends on its query's
          // output: in the last layer, queries without a target send none
          // (row r = 7 of an encoder's last layer has only the pair (0, 7),
          // an input position), so positivity is checked in layer 0.
          if (seen && tables[i].layer == 0) {
            EXPECT_GT(ts.signal[b], 0.0) << ts.parameter << " r=" << r;
          } else if (!seen) {
            EXPECT_EQ(ts.signal[b], 0.0) << ts.parameter << " r=" << r;
          }
          if (per_head) {
            double sum = 0;
            for (int64_t h = 0; h < ts.heads; ++h)
              sum += ts.signal_per_head[h * ts.rows + b];
            EXPECT_NEAR(sum, ts.signal[b], 1e-12 * ts.signal[b]);
          }
        }
      }
    }
  }
}

// The statistics go into every checkpoint and come back bit for bit; a run
// stopped and resumed ends with exactly the statistics of one that was not.
TEST(SignalStats, SurviveSaveAndResumeBitForBit) {
  const std::string full = TempDir("full"), part = TempDir("part");
  Trainer a(TinyModel(model::Arch::kDecoder, true), TinyTrain());
  a.Run({.checkpoint_dir = full});
  const Checkpoint ck = ReadCheckpoint(full, false, /*with_signal=*/true);
  ASSERT_TRUE(ck.signal.has_value());
  EXPECT_EQ(*ck.signal, a.signal());  // == compares doubles exactly

  Trainer b(TinyModel(model::Arch::kDecoder, true), TinyTrain());
  RunOptions stop;
  stop.checkpoint_dir = part;
  stop.stop_at_step = 3;
  b.Run(stop);
  Trainer resumed = Trainer::Resume(part);
  EXPECT_EQ(resumed.signal(), b.signal());
  EXPECT_EQ(resumed.signal().steps, 3);
  resumed.Run({.checkpoint_dir = part});
  EXPECT_EQ(resumed.signal(), a.signal());
  EXPECT_EQ(ReadAll(fs::path(full) / "signal-00000006.json"),
            ReadAll(fs::path(part) / "signal-00000006.json"));
  // Without with_signal nothing is read.
  EXPECT_FALSE(ReadCheckpoint(full, false).signal.has_value());
}

TEST(SignalStats, EncodeDecodeRoundTripsExactly) {
  const model::ModelConfig c = TinyModel(model::Arch::kEncoder, true);
  SignalStats s = MakeSignalStats(c, 2);
  s.steps = 5;
  Rng rng(5);
  for (TableSignal& t : s.tables) {
    for (int64_t& n : t.pair_count) n = static_cast<int64_t>(rng.NextU64() >> 2);
    for (double& x : t.signal) x = rng.Uniform() * 1e-7;
    for (double& x : t.signal_per_head) x = rng.Uniform() / 3;
  }
  const std::string text = EncodeSignalStats(s, 7);
  EXPECT_EQ(DecodeSignalStats(text, "x", c, 7), s);
}

// The reader's size bound comes from the layout: the largest file the
// writer can produce fits (every number at its longest), and anything far
// larger (1 GB of spaces took 3 GB and 14 s to parse) is refused before
// parsing.
TEST(SignalStats, TheFileIsBoundedByTheLayout) {
  const model::ModelConfig c = TinyModel(model::Arch::kEncoder, true);
  SignalStats s = MakeSignalStats(c, 0);
  s.steps = 9;
  for (TableSignal& t : s.tables) {
    for (int64_t& n : t.pair_count) n = INT64_MAX;
    for (double& x : t.signal) x = 1.2345678901234567e-300;
    for (double& x : t.signal_per_head) x = 1.2345678901234567e-300;
  }
  const std::string text = EncodeSignalStats(s, 9);
  const int64_t bound = MaxSignalFileBytes(MakeSignalStats(c, 0));
  EXPECT_LT(static_cast<int64_t>(text.size()), bound / 2);
  EXPECT_EQ(DecodeSignalStats(text, "x", c, 9), s);
  const std::string padded = text + std::string(bound, ' ');
  try {
    DecodeSignalStats(padded, "signal.json", c, 9);
    FAIL();
  } catch (const FormatError& e) {
    EXPECT_NE(std::string(e.what()).find("is too large"), std::string::npos)
        << e.what();
  }
}

// A checkpoint from before the statistics (no files.signal) loads and
// resumes, counting from its step on; a damaged signal file is a
// FormatError naming the file, not a crash.
TEST(SignalStats, OldAndDamagedCheckpoints) {
  const std::string good = TempDir("good");
  TrainConfig tc = TinyTrain();
  Trainer t(TinyModel(model::Arch::kEncoder, false), tc);
  RunOptions o;
  o.checkpoint_dir = good;
  o.stop_at_step = 4;
  t.Run(o);
  const fs::path cfg = fs::path(good) / "config.json";
  const std::string cfg_text = ReadAll(cfg);
  const fs::path sig = fs::path(good) / "signal-00000004.json";
  const std::string sig_text = ReadAll(sig);

  auto copy = [&](const std::string& name) {
    const std::string dir = TempDir(name);
    for (const auto& e : fs::directory_iterator(good)) {
      fs::copy_file(e.path(), fs::path(dir) / e.path().filename());
    }
    return dir;
  };

  {  // Old: no entry, no file.
    const std::string dir = copy("old");
    nlohmann::json j = nlohmann::json::parse(cfg_text);
    j["files"].erase("signal");
    io::AtomicWriteFile((fs::path(dir) / "config.json").string(), j.dump());
    fs::remove(fs::path(dir) / sig.filename());
    EXPECT_FALSE(ReadCheckpoint(dir, true, true).signal.has_value());
    Trainer r = Trainer::Resume(dir);
    EXPECT_EQ(r.signal().first_step, 4);
    EXPECT_EQ(r.signal().steps, 0);
    r.Run({.checkpoint_dir = dir});
    const Checkpoint after = ReadCheckpoint(dir, false, true);
    ASSERT_TRUE(after.signal.has_value());
    EXPECT_EQ(after.signal->first_step, 4);
    EXPECT_EQ(after.signal->steps, 2);
  }

  using Edit = std::function<void(nlohmann::json&)>;
  const std::vector<std::pair<std::string, Edit>> edits = {
      {"wrong format", [](nlohmann::json& j) { j["format"] = "x"; }},
      {"wrong version", [](nlohmann::json& j) { j["version"] = 2; }},
      {"wrong step", [](nlohmann::json& j) { j["step"] = 3; }},
      {"steps inconsistent", [](nlohmann::json& j) { j["steps"] = 9; }},
      {"table missing", [](nlohmann::json& j) { j["tables"].erase(0); }},
      {"table renamed",
       [](nlohmann::json& j) { j["tables"][0]["parameter"] = "x"; }},
      {"rows changed", [](nlohmann::json& j) { j["tables"][0]["rows"] = 3; }},
      {"negative count",
       [](nlohmann::json& j) { j["tables"][0]["pair_count"][0] = -1; }},
      {"count beyond int64",
       [](nlohmann::json& j) {
         j["tables"][0]["pair_count"][0] = uint64_t{1} << 63;
       }},
      {"fractional count",
       [](nlohmann::json& j) { j["tables"][0]["pair_count"][0] = 0.5; }},
      {"short signal",
       [](nlohmann::json& j) { j["tables"][1]["signal"].erase(0); }},
      {"string signal",
       [](nlohmann::json& j) { j["tables"][1]["signal"][2] = "big"; }},
      {"per-head rows on a shared table",
       [](nlohmann::json& j) {
         j["tables"][1]["signal_per_head"] = {j["tables"][1]["signal"]};
       }},
  };
  for (const auto& [name, edit] : edits) {
    const std::string dir = copy("edit");
    nlohmann::json j = nlohmann::json::parse(sig_text);
    edit(j);
    io::AtomicWriteFile((fs::path(dir) / sig.filename()).string(), j.dump());
    try {
      ReadCheckpoint(dir, false, true);
      ADD_FAILURE() << name << ": accepted";
    } catch (const FormatError& e) {
      EXPECT_NE(std::string(e.what()).find("signal-00000004.json"),
                std::string::npos)
          << name << ": " << e.what();
    }
    EXPECT_NO_THROW(ReadCheckpoint(dir, false)) << name;  // eval ignores it
    EXPECT_THROW(Trainer::Resume(dir), FormatError) << name;
  }
  {
    const std::string dir = copy("notjson");
    io::AtomicWriteFile((fs::path(dir) / sig.filename()).string(), "{[");
    EXPECT_THROW(ReadCheckpoint(dir, false, true), FormatError);
  }
  {
    const std::string dir = copy("missing");
    fs::remove(fs::path(dir) / sig.filename());
    EXPECT_THROW(ReadCheckpoint(dir, false, true), IoError);
  }
  {
    const std::string dir = copy("traversal");
    nlohmann::json j = nlohmann::json::parse(cfg_text);
    j["files"]["signal"] = "../signal-00000004.json";
    io::AtomicWriteFile((fs::path(dir) / "config.json").string(), j.dump());
    EXPECT_THROW(ReadCheckpoint(dir, false, true), FormatError);
  }
}

}  // namespace
}  // namespace relpos::train

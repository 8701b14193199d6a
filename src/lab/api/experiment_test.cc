// The experiment runner (relpos/lab/experiment.h) on tiny runs: it trains
// and evaluates each run exactly as Training and Evaluate do by hand,
// checks every run before the first, writes its JSON and checkpoints, stops
// on the flag; and the demo's and the sweep's runs.
#include "relpos/lab/experiment.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <vector>

#include "relpos/error.h"
#include "relpos/lab/model.h"

namespace relpos {
namespace {

namespace fs = std::filesystem;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("relpos_experiment_test_" + std::to_string(::getpid())) /
                     name;
  fs::remove_all(p);
  fs::create_directories(p.parent_path());
  return p.string();
}

// Two clipping distances of a tiny model, a few steps each.
ExperimentSpec TinySpec() {
  ExperimentSpec spec;
  ExperimentConfig& c = spec.base;
  c.Set("train", "task", "reverse");
  c.Set("train", "--train-lengths", "2-4");
  c.Set("train", "steps", "4");
  c.Set("train", "batch_size", "4");
  c.Set("train", "checkpoint_every", "0");
  c.Set("model", "d_model", "16");
  c.Set("model", "heads", "2");
  c.Set("model", "layers", "1");
  c.Set("model", "d_ff", "32");
  c.Set("model", "position", "shaw");
  spec.runs = {{.name = "k=1", .settings = {{"model", "max_distance", "1"}}},
               {.name = "k=3",
                .settings = {{"model", "max_distance", "3"}},
                .checkpoint = "k3"}};
  spec.lengths = {2, 4, 6};
  spec.sequences_per_length = 8;
  return spec;
}

TEST(ExperimentTest, EachRunIsTrainingThenEvaluate) {
  const ExperimentSpec spec = TinySpec();
  const std::string out = TempDir("by_hand");
  ExperimentOptions options{.out_dir = out, .json_file = "results.json"};
  int64_t calls = 0;
  options.on_run = [&](const ExperimentRunResult&, int64_t done,
                       int64_t total) {
    EXPECT_EQ(done, ++calls);
    EXPECT_EQ(total, 2);
  };
  const ExperimentResult r = RunExperiment(spec, options);
  ASSERT_EQ(r.runs.size(), 2u);
  EXPECT_EQ(calls, 2);
  EXPECT_FALSE(r.interrupted);
  EXPECT_EQ(r.task, "reverse");
  EXPECT_EQ(r.train_min_length, 2);
  EXPECT_EQ(r.train_max_length, 4);
  for (size_t i = 0; i < spec.runs.size(); ++i) {
    ExperimentConfig c = spec.base;
    c.Set("model", "max_distance", spec.runs[i].settings[0].value);
    Training t(c);
    const TrainSummary s = t.Run();
    const std::vector<LengthMetrics> m = Evaluate(
        t.model(), {.lengths = spec.lengths, .sequences_per_length = 8});
    const ExperimentRunResult& got = r.runs[i];
    EXPECT_EQ(got.name, spec.runs[i].name);
    EXPECT_EQ(got.train.final_loss, s.final_loss);
    EXPECT_EQ(got.parameters, t.model().NumParameters());
    ASSERT_EQ(got.by_length.size(), m.size());
    for (size_t k = 0; k < m.size(); ++k) {
      EXPECT_EQ(got.by_length[k].token_accuracy, m[k].token_accuracy);
      EXPECT_EQ(got.by_length[k].loss, m[k].loss);
    }
    // Lengths 2 and 4 are inside the training range, 6 beyond it.
    EXPECT_DOUBLE_EQ(got.accuracy_train_lengths,
                     (m[0].token_accuracy + m[1].token_accuracy) / 2);
    EXPECT_EQ(got.accuracy_longer_lengths, m[2].token_accuracy);
    EXPECT_EQ(got.sequence_accuracy_longer_lengths, m[2].sequence_accuracy);
    EXPECT_GE(got.untrained_row_share, 0.0);
    EXPECT_LE(got.untrained_row_share, 1.0);
  }
  // The checkpoint of the run that names one, and the JSON.
  EXPECT_TRUE(HasCheckpoint(out + "/k3"));
  EXPECT_FALSE(fs::exists(out + "/k=1"));
  std::ifstream in(out + "/results.json");
  std::stringstream text;
  text << in.rdbuf();
  // The file is the result, written after the last run (the wall time is
  // taken again at the end).
  auto j = nlohmann::json::parse(text.str());
  auto want = nlohmann::json::parse(r.ToJson());
  j.erase("wall_seconds");
  want.erase("wall_seconds");
  EXPECT_EQ(j, want);
  ASSERT_EQ(j["runs"].size(), 2u);
  EXPECT_EQ(j["runs"][1]["checkpoint"], "k3");
  EXPECT_TRUE(j["runs"][0]["checkpoint"].is_null());
  EXPECT_EQ(j["runs"][1]["settings"]["max_distance"], "3");
  EXPECT_EQ(j["runs"][1]["max_distance"], 3);
  EXPECT_EQ(j["eval_lengths"], nlohmann::json({2, 4, 6}));
  EXPECT_EQ(j["train_config"]["task"], "reverse");
}

// Nothing is trained, and the output folder is not made, unless every run
// is valid.
TEST(ExperimentTest, ChecksEveryRunFirst) {
  const std::string out = TempDir("refused");
  auto refused = [&](ExperimentSpec spec, const std::string& want,
                     ExperimentOptions options) {
    if (options.out_dir.empty()) options.out_dir = out;
    try {
      RunExperiment(spec, options);
      ADD_FAILURE() << "accepted; wanted " << want;
    } catch (const InvalidArgument& e) {
      EXPECT_THAT(e.what(), HasSubstr(want));
    }
    EXPECT_FALSE(fs::exists(out)) << want;
  };
  ExperimentSpec s = TinySpec();
  s.runs.clear();
  refused(s, "at least one run", {});
  s = TinySpec();
  s.runs[1].name = "k=1";
  refused(s, "names 'k=1' twice", {});
  s = TinySpec();
  s.runs[1].settings[0].value = "-2";  // the second run's k
  refused(s, "max_distance", {});
  s = TinySpec();
  s.runs[1].checkpoint = "../k3";
  refused(s, "must name one file or folder", {});
  s = TinySpec();
  refused(s, "the result file", {.out_dir = out, .json_file = "a/b"});
  s = TinySpec();
  s.runs[0].checkpoint = "k3";
  refused(s, "twice", {});
  s = TinySpec();
  s.lengths = {2, 0};
  refused(s, "length", {});
  s = TinySpec();
  s.sequences_per_length = 0;
  refused(s, ">= 1", {});
  s = TinySpec();
  refused(s, "result file", {.out_dir = out, .json_file = "k3"});
  s = TinySpec();
  s.runs[0].name.clear();
  refused(s, "needs a name", {});
  s = TinySpec();
  s.runs.resize(kMaxExperimentRuns + 1);
  refused(s, "at most", {});
  // An output folder that is a file is refused before any training.
  {
    std::ofstream(out + ".file") << "x";
    ExperimentSpec one = TinySpec();
    one.runs.resize(1);
    EXPECT_THROW(RunExperiment(one, {.out_dir = out + ".file"}), IoError);
    fs::remove(out + ".file");
  }
  // A checkpoint folder needs somewhere to go.
  try {
    RunExperiment(TinySpec(), {});
    ADD_FAILURE() << "a checkpoint without out_dir was accepted";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("output folder"));
  }
}

TEST(ExperimentTest, StopsOnTheFlag) {
  volatile std::sig_atomic_t stop = 1;
  ExperimentSpec spec = TinySpec();
  spec.runs[1].checkpoint.clear();
  const ExperimentResult r = RunExperiment(spec, {.stop_flag = &stop});
  EXPECT_TRUE(r.interrupted);
  EXPECT_TRUE(r.runs.empty());
  // Stopped after the first run: it is kept, the second never starts.
  stop = 0;
  ExperimentOptions options;
  options.stop_flag = &stop;
  options.on_run = [&](const ExperimentRunResult&, int64_t, int64_t) {
    stop = 1;
  };
  const ExperimentResult one = RunExperiment(spec, options);
  EXPECT_TRUE(one.interrupted);
  ASSERT_EQ(one.runs.size(), 1u);
  EXPECT_EQ(one.runs[0].name, "k=1");
  const auto j = nlohmann::json::parse(one.ToJson());
  EXPECT_EQ(j["interrupted"], true);
  EXPECT_EQ(j["runs"].size(), 1u);
}

TEST(ExperimentTest, SweepRunsAndLengths) {
  ExperimentConfig base = SweepDefaults();
  base.Set("train", "task", "local_difference");
  const ExperimentSpec spec = SweepExperiment(
      base, {.ks = {0, 2}, .terms = {"both", "key"}, .terms_k = 2});
  std::vector<std::string> names;
  for (const ExperimentRun& r : spec.runs) names.push_back(r.name);
  // k = 2 with both terms is listed once.
  EXPECT_THAT(names, ElementsAre("k=0 both", "k=2 both", "k=2 key"));
  // Train lengths 8-16: 8-16:2 inside, 17-48:8 beyond (48 included).
  EXPECT_THAT(spec.lengths,
              ElementsAre(8, 10, 12, 14, 16, 17, 25, 33, 41, 48));
  EXPECT_EQ(base.Get("train", "steps"), "400");
  const ExperimentSpec longer =
      SweepExperiment(base, {.ks = {4}, .longer_lengths = {20, 30}});
  EXPECT_THAT(longer.lengths, ElementsAre(8, 10, 12, 14, 16, 20, 30));
}

TEST(ExperimentTest, DemoRuns) {
  const ExperimentSpec spec = DemoExperiment({});
  ASSERT_EQ(spec.runs.size(), 2u);
  EXPECT_EQ(spec.runs[0].name, "absolute (sinusoidal)");
  EXPECT_EQ(spec.runs[1].name, "relative (k=16)");
  EXPECT_EQ(spec.runs[1].checkpoint, "relative");
  EXPECT_EQ(spec.lengths.size(), 16u);
  EXPECT_EQ(spec.lengths.back(), 64);
  EXPECT_EQ(spec.sequences_per_length, 256);
  EXPECT_EQ(spec.base.Get("train", "steps"), "1500");
  EXPECT_EQ(spec.base.Get("train", "warmup_steps"), "80");
  EXPECT_EQ(DemoRunName("none"), "no positions");
  EXPECT_EQ(DemoRunName("t5"), "relative (t5)");
  EXPECT_EQ(DemoRunName("learned"), "absolute (learned)");
}

}  // namespace
}  // namespace relpos

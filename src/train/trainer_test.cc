#include "train/trainer.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <nlohmann/json.hpp>
#include <string>

#include "relpos/error.h"
#include "train/batching.h"
#include "train/checkpoint.h"
#include "train/evaluation.h"
#include "train/lengths.h"
#include "train/train_test_util.h"

namespace relpos::train {
namespace {

namespace fs = std::filesystem;

std::string TempDir(const std::string& name) {
  const fs::path p = fs::temp_directory_path() /
                     ("relpos_trainer_test_" + std::to_string(::getpid())) /
                     name;
  fs::remove_all(p);
  fs::create_directories(p);
  return p.string();
}

TEST(Lengths, ParseAcceptsListsRangesAndSteps) {
  EXPECT_EQ(ParseLengths("3", "--l"), (std::vector<int64_t>{3}));
  EXPECT_EQ(ParseLengths("2-5", "--l"), (std::vector<int64_t>{2, 3, 4, 5}));
  // The end of a strided range is always included.
  EXPECT_EQ(ParseLengths("8-30:8", "--l"),
            (std::vector<int64_t>{8, 16, 24, 30}));
  EXPECT_EQ(ParseLengths("9,1-2,9", "--l"), (std::vector<int64_t>{1, 2, 9}));
  EXPECT_EQ(ParseLengthRange("8-16", "--t"),
            (std::pair<int64_t, int64_t>{8, 16}));
  EXPECT_EQ(ParseLengthRange("5", "--t"), (std::pair<int64_t, int64_t>{5, 5}));
}

TEST(Lengths, ParseRejectsWithTheFlagName) {
  for (const char* bad :
       {"", "16-8", "0-4", "-3", "a-b", "4-", "1-2-3", "1-9:0", "1-9:x",
        "1-9:2:3", "1,,2", "99999999999999999999", "1-2000000"}) {
    try {
      ParseLengths(bad, "--lengths");
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const InvalidArgument& e) {
      EXPECT_NE(std::string(e.what()).find("--lengths"), std::string::npos)
          << e.what();
    }
  }
  EXPECT_THROW(ParseLengths("1-100000", "--l"),
               InvalidArgument);  // > 4096 lengths
  EXPECT_THROW(ParseLengthRange("16-8", "--train-lengths"), InvalidArgument);
}

TEST(TrainConfigJson, RoundTripAndStrictness) {
  TrainConfig c;
  c.data.task = "reverse";
  c.seed = 0xFFFFFFFFFFFFFFFFULL;  // survives JSON exactly
  c.lr = 0.1 + 0.2;                // and so do doubles
  const TrainConfig back = TrainConfigFromJson(ToJson(c));
  EXPECT_EQ(ToJson(back), ToJson(c));
  EXPECT_EQ(back.seed, c.seed);
  EXPECT_EQ(back.lr, c.lr);

  nlohmann::json j = ToJson(c);
  j["bogus"] = 1;
  EXPECT_THROW(TrainConfigFromJson(j), FormatError);
  j = ToJson(c);
  j["steps"] = "ten";
  EXPECT_THROW(TrainConfigFromJson(j), FormatError);
  j = ToJson(c);
  j["steps"] = 0;
  EXPECT_THROW(TrainConfigFromJson(j), InvalidArgument);
  j = ToJson(c);
  j["train_min_length"] = 9;
  j["train_max_length"] = 3;
  EXPECT_THROW(TrainConfigFromJson(j), InvalidArgument);
  EXPECT_THROW(TrainConfigFromJson(nlohmann::json::array()), FormatError);
}

TEST(Data, UnknownTaskListsTheKnownOnes) {
  try {
    MakeDataSource(DataConfig{.task = "nosuch"});
    FAIL();
  } catch (const InvalidArgument& e) {
    EXPECT_NE(std::string(e.what()).find("reverse"), std::string::npos);
    EXPECT_NE(std::string(e.what()).find("lm"), std::string::npos);
  }
}

TEST(Batches, PaddedToTheLongestWithMaskedTargets) {
  auto data = MakeDataSource(DataConfig{.task = "reverse"});
  Rng rng(3), rng2(3);
  const model::Batch b = MakeTrainBatch(*data, 16, 2, 6, rng);
  EXPECT_EQ(b.batch, 16);
  int64_t longest = 0;
  for (int64_t i = 0; i < b.batch; ++i) {
    const int64_t n = b.lengths[i];
    EXPECT_EQ(n % 2, 0);  // reverse: 2 tokens per input symbol
    EXPECT_GE(n, 4);
    EXPECT_LE(n, 12);
    longest = std::max(longest, n);
    for (int64_t p = n; p < b.length; ++p)
      EXPECT_EQ(b.targets[i * b.length + p], -1);
  }
  EXPECT_EQ(b.length, longest);
  // Same Rng state, same batch.
  const model::Batch b2 = MakeTrainBatch(*data, 16, 2, 6, rng2);
  EXPECT_EQ(b.tokens, b2.tokens);
  EXPECT_EQ(b.targets, b2.targets);
  EXPECT_EQ(rng.state(), rng2.state());
}

model::ModelConfig SmallModel(model::PositionScheme pos) {
  model::ModelConfig m;
  m.d_model = 32;
  m.heads = 4;
  m.layers = 2;
  m.d_ff = 64;
  m.scheme.max_len = 256;
  m.position = pos;
  m.scheme.max_distance = 4;
  return m;
}

TrainConfig SmallTrain(int64_t steps) {
  TrainConfig t;
  t.data.task = "local_difference";
  t.train_min_length = 2;
  t.train_max_length = 8;
  t.steps = steps;
  t.batch_size = 16;
  t.lr = 3e-3;
  t.warmup_steps = steps / 10;
  t.checkpoint_every = 0;
  t.seed = 11;
  return t;
}

// The end-to-end check: a small relative-position model learns the local
// task (chance is 25%) within a few seconds, and keeps its accuracy on
// lengths 4x the longest it trained on.
TEST(Trainer, TinyRunLearnsLocalDifference) {
  Trainer t(SmallModel(model::PositionScheme::kRelative), SmallTrain(300));
  const RunResult r = t.Run(RunOptions{});
  EXPECT_TRUE(r.completed);
  EXPECT_EQ(r.steps.size(), 300u);
  EXPECT_LT(r.final_loss, r.steps.front().loss);
  EvalConfig ec{
      .lengths = {8, 32}, .sequences_per_length = 64, .batch_size = 64};
  const auto res = EvaluateByLength(t.model(), t.data(), ec);
  EXPECT_GE(res[0].token_accuracy, 0.95) << "loss " << r.final_loss;
  EXPECT_GE(res[1].token_accuracy, 0.95);
}

TEST(Trainer, SameSeedSameLossesBitwise) {
  Trainer a(SmallModel(model::PositionScheme::kLearned), SmallTrain(8));
  Trainer b(SmallModel(model::PositionScheme::kLearned), SmallTrain(8));
  const RunResult ra = a.Run(RunOptions{}), rb = b.Run(RunOptions{});
  ASSERT_EQ(ra.steps.size(), rb.steps.size());
  for (size_t i = 0; i < ra.steps.size(); ++i) {
    EXPECT_EQ(ra.steps[i].loss, rb.steps[i].loss) << i;
    EXPECT_EQ(ra.steps[i].grad_norm, rb.steps[i].grad_norm) << i;
  }
  for (size_t i = 0; i < a.model().parameters().size(); ++i) {
    EXPECT_EQ(a.model().parameters()[i].value, b.model().parameters()[i].value);
  }
  // A different seed gives a different run.
  TrainConfig other = SmallTrain(8);
  other.seed = 12;
  Trainer c(SmallModel(model::PositionScheme::kLearned), other);
  EXPECT_NE(c.Run(RunOptions{}).steps[0].loss, ra.steps[0].loss);
}

// Thread counts (hardening issue, "1 thread versus 2"): at 2 threads two runs
// are bitwise identical; 1 thread versus 2 agree within a tolerance. The
// thread count changes the order of float sums (oneDNN's GEMM blocking, the
// fused kernel's per-thread dAK/dAV partials), so the runs differ by rounding
// (relative 1e-7 per step), which training can amplify; over 20 steps of this
// small model the loss stays within 1e-5 relative (measured: about 1e-7),
// the bound documented in docs/training.md.
TEST(Trainer, ThreadCountsAgreeWithinTolerance) {
  auto run = [](int threads) {
    TrainConfig tc = SmallTrain(20);
    tc.threads = threads;
    Trainer t(SmallModel(model::PositionScheme::kRelative), tc);
    return t.Run(RunOptions{});
  };
  const RunResult one = run(1), two = run(2), two_again = run(2);
  ASSERT_EQ(one.steps.size(), 20u);
  ASSERT_EQ(two.steps.size(), 20u);
  double worst = 0;
  for (size_t i = 0; i < one.steps.size(); ++i) {
    EXPECT_EQ(two.steps[i].loss, two_again.steps[i].loss) << i;
    const double rel = std::abs(double(one.steps[i].loss) - two.steps[i].loss) /
                       std::abs(double(one.steps[i].loss));
    worst = std::max(worst, rel);
    EXPECT_LE(rel, 1e-5) << "step " << i << ": " << one.steps[i].loss
                         << " vs " << two.steps[i].loss;
  }
  std::printf("worst relative loss difference, 1 vs 2 threads: %.3g\n", worst);
}

// Stop after 5 updates (with a checkpoint), resume from the folder, finish:
// the later losses equal the uninterrupted run's bit for bit, and so do the
// final checkpoints.
TEST(Trainer, ResumeContinuesBitwise) {
  model::ModelConfig m = SmallModel(model::PositionScheme::kRelative);
  m.dropout = 0.1;  // exercises the dropout stream's state too
  TrainConfig tc = SmallTrain(12);
  tc.checkpoint_every = 4;
  const std::string full = TempDir("full"), part = TempDir("part");

  Trainer a(m, tc);
  RunOptions oa;
  oa.checkpoint_dir = full;
  const RunResult ra = a.Run(oa);

  Trainer b(m, tc);
  RunOptions ob;
  ob.checkpoint_dir = part;
  ob.stop_at_step = 5;
  const RunResult rb = b.Run(ob);
  EXPECT_TRUE(rb.interrupted);
  EXPECT_EQ(rb.final_step, 5);
  EXPECT_EQ(ReadCheckpoint(part, false).state.step, 5);

  Trainer c = Trainer::Resume(part);
  EXPECT_EQ(c.state().step, 5);
  RunOptions oc;
  oc.checkpoint_dir = part;
  const RunResult rc = c.Run(oc);
  ASSERT_EQ(rc.steps.size(), 7u);
  for (size_t i = 0; i < rc.steps.size(); ++i) {
    EXPECT_EQ(rc.steps[i].step, ra.steps[5 + i].step);
    EXPECT_EQ(rc.steps[i].loss, ra.steps[5 + i].loss) << "step " << 5 + i;
    EXPECT_EQ(rc.steps[i].lr, ra.steps[5 + i].lr);
  }
  const Checkpoint x = ReadCheckpoint(full, true),
                   y = ReadCheckpoint(part, true);
  EXPECT_EQ(x.state.step, 12);
  EXPECT_EQ(x.state.data_rng, y.state.data_rng);
  EXPECT_EQ(x.state.dropout_rng, y.state.dropout_rng);
  testing::ExpectSameTensors(x, y);
}

TEST(Trainer, StopFlagSavesAndReturns) {
  const std::string dir = TempDir("stop");
  Trainer t(SmallModel(model::PositionScheme::kRelative), SmallTrain(50));
  volatile std::sig_atomic_t flag = 0;
  RunOptions o;
  o.checkpoint_dir = dir;
  o.stop_flag = &flag;
  o.on_step = [&](const StepRecord& r) {
    if (r.step == 2) flag = SIGINT;
  };
  const RunResult r = t.Run(o);
  EXPECT_TRUE(r.interrupted);
  EXPECT_FALSE(r.completed);
  EXPECT_EQ(r.final_step, 3);
  EXPECT_EQ(ReadCheckpoint(dir, true).state.step, 3);
}

// A non-finite value stops training with a message naming the step and the
// culprit; the last good checkpoint stays as it was.
TEST(Trainer, NonFiniteStopsAndKeepsTheLastCheckpoint) {
  const std::string dir = TempDir("nan");
  TrainConfig tc = SmallTrain(10);
  tc.checkpoint_every = 2;
  Trainer t(SmallModel(model::PositionScheme::kRelative), tc);
  RunOptions o;
  o.checkpoint_dir = dir;
  o.stop_at_step = 4;
  t.Run(o);
  ASSERT_EQ(ReadCheckpoint(dir, true).state.step, 4);

  // NaN in a parameter: refused before any compute.
  const int64_t idx = t.model().FindParameter("head.bias");
  ASSERT_GE(idx, 0);
  t.model().parameters()[idx].value[0] =
      std::numeric_limits<float>::quiet_NaN();
  o.stop_at_step = -1;
  try {
    t.Run(o);
    FAIL() << "no error";
  } catch (const NumericalError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("step 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("head.bias"), std::string::npos) << msg;
  }
  // Finite but huge parameters: the residual stream overflows (3e38 + 1e38
  // exceeds FLT_MAX), so the forward pass goes non-finite.
  t.model().parameters()[idx].value[0] = 0.0f;
  for (float& x : t.model().parameters()[0].value) x = 3e38f;
  const int64_t bias = t.model().FindParameter("blocks.0.attn.out.bias");
  ASSERT_GE(bias, 0);
  for (float& x : t.model().parameters()[bias].value) x = 1e38f;
  try {
    t.Run(o);
    FAIL() << "no error";
  } catch (const NumericalError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("step 4"), std::string::npos) << msg;
    EXPECT_NE(msg.find("checkpoint (step 4) is kept"), std::string::npos)
        << msg;
  }
  const Checkpoint ck = ReadCheckpoint(dir, true);
  EXPECT_EQ(ck.state.step, 4);
  for (float x : ck.parameters[0].data) ASSERT_TRUE(std::isfinite(x));
}

TEST(Eval, SameExamplesForEveryModelAndIndependentOfOtherLengths) {
  Trainer a(SmallModel(model::PositionScheme::kRelative), SmallTrain(1));
  EvalConfig both{
      .lengths = {3, 5}, .sequences_per_length = 10, .batch_size = 4};
  EvalConfig one{.lengths = {5}, .sequences_per_length = 10, .batch_size = 4};
  const auto r2 = EvaluateByLength(a.model(), a.data(), both);
  const auto r1 = EvaluateByLength(a.model(), a.data(), one);
  ASSERT_EQ(r2.size(), 2u);
  EXPECT_EQ(r2[1].loss, r1[0].loss);
  EXPECT_EQ(r2[1].tokens, 50);  // 10 sequences x 5 outputs
  EXPECT_EQ(r2[1].sequences, 10);
  EXPECT_EQ(r2[1].sequence_length, 10);
  // Beyond the learned table: refused up front, naming --lengths.
  Trainer l(SmallModel(model::PositionScheme::kLearned), SmallTrain(1));
  EvalConfig far{.lengths = {200}};
  EXPECT_THROW(EvaluateByLength(l.model(), l.data(), far), InvalidArgument);
}

}  // namespace
}  // namespace relpos::train

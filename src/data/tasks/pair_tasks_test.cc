// The synthetic pair tasks: a hand-checked pair each, teacher forcing's
// layout, lengths and alphabet over many samples, determinism, the
// default training sampler, and bad input.
#include "data/tasks/pair_tasks.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "relpos/error.h"

namespace relpos::tasks {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

TEST(PairTasksTest, HandCheckedPairs) {
  struct Hand {
    std::string task;
    std::vector<int32_t> source, target;
  };
  // From the definitions in docs/tasks.md, worked out by hand.
  const std::vector<Hand> hands = {
      {"s2s_copy", {3, 0, 7}, {3, 0, 7}},
      {"s2s_reverse", {3, 0, 7, 1}, {1, 7, 0, 3}},
      {"s2s_duplicate", {5, 2}, {5, 2, 5, 2}},
      // (0-3) mod 8 = 5, (7-0) = 7, (1-7) mod 8 = 2.
      {"s2s_difference", {3, 0, 7, 1}, {5, 7, 2}},
      {"s2s_difference", {4, 4}, {0}},
  };
  for (const Hand& h : hands) {
    const auto task = MakePairTask(h.task);
    const SequencePair p = task->FromSource(h.source);
    EXPECT_EQ(p.source, h.source) << h.task;
    EXPECT_EQ(p.target, h.target) << h.task;
    EXPECT_EQ(task->TargetLength(static_cast<int64_t>(h.source.size())),
              static_cast<int64_t>(h.target.size()))
        << h.task;
  }
}

TEST(PairTasksTest, TeacherForcingLayout) {
  const auto task = MakePairTask("s2s_reverse");
  const PairTokens t = task->tokens();
  EXPECT_EQ(t.bos, kPairSymbols);
  EXPECT_EQ(t.eos, kPairSymbols + 1);
  EXPECT_EQ(task->vocab_size(), kPairSymbols + 2);
  const Example e = TeacherForced(task->FromSource({{1, 2, 6}}), t);
  EXPECT_THAT(e.source, ElementsAre(1, 2, 6));
  EXPECT_THAT(e.tokens, ElementsAre(t.bos, 6, 2, 1));
  EXPECT_THAT(e.targets, ElementsAre(6, 2, 1, t.eos));
}

TEST(PairTasksTest, SamplesHaveTheirLengthsAndAlphabet) {
  for (const std::string& name : PairTaskNames()) {
    const auto task = MakePairTask(name);
    Rng rng(4);
    for (int64_t n = task->min_length(); n <= 12; ++n) {
      const SequencePair p = task->Sample(n, false, rng);
      ASSERT_EQ(static_cast<int64_t>(p.source.size()), n) << name;
      EXPECT_EQ(static_cast<int64_t>(p.target.size()),
                task->MaxTargetTokens(n))
          << name;
      EXPECT_EQ(task->MaxSourceTokens(n), n);
      for (int32_t s : p.source) ASSERT_TRUE(s >= 0 && s < kPairSymbols);
      for (int32_t s : p.target) ASSERT_TRUE(s >= 0 && s < kPairSymbols);
      EXPECT_EQ(p.target, task->FromSource(p.source).target) << name;
    }
  }
}

// An example is a pure function of the Rng state; SampleTrain draws the
// length uniformly in the range, then Sample (so every length appears).
TEST(PairTasksTest, DeterministicAndTrainLengthsCoverTheRange) {
  const auto task = MakePairTask("s2s_copy");
  Rng a(9), b(9);
  EXPECT_EQ(task->Sample(7, false, a).source, task->Sample(7, false, b).source);
  Rng r(1);
  std::vector<int> seen(6, 0);
  for (int i = 0; i < 300; ++i) {
    const SequencePair p = task->SampleTrain(2, 5, r);
    const size_t n = p.source.size();
    ASSERT_TRUE(n >= 2 && n <= 5) << n;
    ++seen[n];
  }
  for (size_t n = 2; n <= 5; ++n) EXPECT_GT(seen[n], 40) << n;
}

TEST(PairTasksTest, NamesAndBadInput) {
  EXPECT_THAT(PairTaskNames(),
              ElementsAreArray({"s2s_copy", "s2s_difference", "s2s_duplicate",
                                "s2s_reverse"}));
  try {
    MakePairTask("s2s_sort");
    ADD_FAILURE() << "accepted an unknown task";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("s2s_copy"));
  }
  const auto diff = MakePairTask("s2s_difference");
  Rng rng(1);
  EXPECT_THROW(diff->Sample(1, false, rng), InvalidArgument);  // needs 2
  EXPECT_THROW(diff->FromSource({{1, 8}}), InvalidArgument);   // symbol 8
  EXPECT_THROW(diff->FromSource({{1, -1}}), InvalidArgument);
}

}  // namespace
}  // namespace relpos::tasks

// Tests for the synthetic tasks: a hand-checked example per task (via
// FromInput), then invariants over many generated examples of every task.
#include "data/tasks/task.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "relpos/error.h"

namespace relpos::tasks {
namespace {

using ::testing::ElementsAre;
using ::testing::ElementsAreArray;
using ::testing::HasSubstr;

constexpr int32_t kIgnore = -1;

struct HandCase {
  std::string task;
  std::vector<int32_t> input;
  std::vector<int32_t> tokens;   // expected
  std::vector<int32_t> targets;  // expected
};

// Every expectation below was worked out by hand from the definitions in
// docs/tasks.md (B = the task's blank id).
std::vector<HandCase> HandCases() {
  const int32_t x = kIgnore;
  return {
      // reverse, B = 2: 0 1 1 -> 1 1 0.
      {"reverse", {0, 1, 1}, {0, 1, 1, 2, 2, 2}, {x, x, x, 1, 1, 0}},
      // duplicate, B = 2: 1 0 -> 1 0 1 0.
      {"duplicate", {1, 0}, {1, 0, 2, 2, 2, 2}, {x, x, 1, 0, 1, 0}},
      // bucket_sort, B = 5: 3 0 4 0 2 -> 0 0 2 3 4.
      {"bucket_sort",
       {3, 0, 4, 0, 2},
       {3, 0, 4, 0, 2, 5, 5, 5, 5, 5},
       {x, x, x, x, x, 0, 0, 2, 3, 4}},
      // odds_first, B = 2: positions 1,3,5 hold 1,1,0; positions 2,4 hold 0,0.
      {"odds_first",
       {1, 0, 1, 0, 0},
       {1, 0, 1, 0, 0, 2, 2, 2, 2, 2},
       {x, x, x, x, x, 1, 1, 0, 0, 0}},
      // even_pairs, B = 2: 0 1 1 0 has pairs 01, 10 -> 2 unequal -> even -> 0.
      {"even_pairs", {0, 1, 1, 0}, {0, 1, 1, 0, 2}, {x, x, x, x, 0}},
      // 0 0 1 has one unequal pair (01) -> odd -> 1.
      {"even_pairs", {0, 0, 1}, {0, 0, 1, 2}, {x, x, x, 1}},
      // A single symbol has no pairs: 0 is even -> 0.
      {"even_pairs", {1}, {1, 2}, {x, 0}},
      // Deletang et al.'s docstring example: 0101001 has 2 '10' and 3 '01'
      // -> 5 -> class 1.
      {"even_pairs",
       {0, 1, 0, 1, 0, 0, 1},
       {0, 1, 0, 1, 0, 0, 1, 2},
       {x, x, x, x, x, x, x, 1}},
      // Their parity example: 1010100 has three 1s -> class 1.
      {"parity",
       {1, 0, 1, 0, 1, 0, 0},
       {1, 0, 1, 0, 1, 0, 0, 2},
       {x, x, x, x, x, x, x, 1}},
      // parity, B = 2: three 1s -> 1.
      {"parity", {1, 0, 1, 1}, {1, 0, 1, 1, 2}, {x, x, x, x, 1}},
      {"parity", {1, 1, 0}, {1, 1, 0, 2}, {x, x, x, 0}},
      // cycle_navigation, B = 5: moves -1 +1 +1 +1 0 from state 0 -> 2.
      {"cycle_navigation",
       {0, 2, 2, 2, 1},
       {0, 2, 2, 2, 1, 5},
       {x, x, x, x, x, 2}},
      // Two steps back from 0 wraps to 3.
      {"cycle_navigation", {0, 0}, {0, 0, 5}, {x, x, 3}},
      // Their example "1 -1 0 -1 -1 -> class 3" in symbols (movement + 1).
      {"cycle_navigation",
       {2, 0, 1, 0, 0},
       {2, 0, 1, 0, 0, 5},
       {x, x, x, x, x, 3}},
      // missing_duplicate, marker 2, pad 3, B = 4: w = 0 1 1, the marker hides
      // position 5 (second copy's middle), whose twin (position 2) holds 1.
      {"missing_duplicate",
       {0, 1, 1, 0, 2, 1},
       {0, 1, 1, 0, 2, 1, 4},
       {x, x, x, x, x, x, 1}},
      // Odd length 5: w = 1 0, marker in the first copy (twin = 1 0 's 0),
      // then the pad.
      {"missing_duplicate",
       {1, 2, 1, 0, 3},
       {1, 2, 1, 0, 3, 4},
       {x, x, x, x, x, 0}},
      // The reference generator's docstring examples (same marker 2 and pad
      // 3): 01100210 -> 1 and 1011213 -> 0.
      {"missing_duplicate",
       {0, 1, 1, 0, 0, 2, 1, 0},
       {0, 1, 1, 0, 0, 2, 1, 0, 4},
       {x, x, x, x, x, x, x, x, 1}},
      {"missing_duplicate",
       {1, 0, 1, 1, 2, 1, 3},
       {1, 0, 1, 1, 2, 1, 3, 4},
       {x, x, x, x, x, x, x, 0}},
      // local_difference, B = 4: x = 2 3 1 1 -> y = 2, 1, (1-3)mod4 = 2, 0.
      {"local_difference",
       {2, 3, 1, 1},
       {2, 4, 3, 4, 1, 4, 1, 4},
       {x, 2, x, 1, x, 2, x, 0}},
  };
}

TEST(TasksTest, HandCheckedExamples) {
  std::set<std::string> covered;
  for (const HandCase& c : HandCases()) {
    SCOPED_TRACE(c.task);
    const auto task = MakeTask(c.task);
    const Example e = task->FromInput(c.input);
    EXPECT_THAT(e.tokens, ElementsAreArray(c.tokens));
    EXPECT_THAT(e.targets, ElementsAreArray(c.targets));
    covered.insert(c.task);
  }
  // Every registered task has at least one hand-checked example.
  for (const std::string& name : TaskNames()) {
    EXPECT_TRUE(covered.count(name)) << "no hand-checked example for " << name;
  }
}

TEST(TasksTest, NamesAreSortedAndIncludeTheIssueTasks) {
  const std::vector<std::string> names = TaskNames();
  EXPECT_TRUE(std::is_sorted(names.begin(), names.end()));
  for (const char* required :
       {"reverse", "duplicate", "bucket_sort", "even_pairs", "parity",
        "cycle_navigation", "missing_duplicate", "odds_first"}) {
    EXPECT_NE(std::find(names.begin(), names.end(), required), names.end())
        << required;
  }
  for (const std::string& name : names) EXPECT_EQ(MakeTask(name)->info().name, name);
}

TEST(TasksTest, UnknownTaskListsKnownNames) {
  try {
    MakeTask("sort_of_reverse");
    FAIL() << "expected InvalidArgument";
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("unknown task 'sort_of_reverse'"));
    for (const std::string& name : TaskNames()) {
      EXPECT_THAT(e.what(), HasSubstr(name));
    }
  }
}

// Generated examples of every task and many lengths satisfy the layout
// contract, and the targets agree with FromInput on the generated input.
TEST(TasksTest, GeneratedExamplesSatisfyInvariants) {
  for (const std::string& name : TaskNames()) {
    SCOPED_TRACE(name);
    const auto task = MakeTask(name);
    const TaskInfo& info = task->info();
    ASSERT_GT(info.vocab_size, 0);
    ASSERT_GE(info.blank_token, 0);
    ASSERT_LT(info.blank_token, info.vocab_size);
    ASSERT_LE(info.input_symbols, info.blank_token);
    ASSERT_LE(info.output_symbols, info.blank_token);
    EXPECT_FALSE(info.description.empty());
    Rng rng(7);
    for (int64_t length = info.min_length; length <= 41; ++length) {
      for (int rep = 0; rep < 5; ++rep) {
        const Example e = task->Generate(length, rng);
        ASSERT_EQ(static_cast<int64_t>(e.tokens.size()),
                  task->SequenceLength(length));
        ASSERT_EQ(e.targets.size(), e.tokens.size());
        int64_t scored = 0;
        for (size_t i = 0; i < e.tokens.size(); ++i) {
          ASSERT_GE(e.tokens[i], 0);
          ASSERT_LT(e.tokens[i], info.vocab_size);
          if (e.targets[i] == kIgnore) {
            // Blanks are exactly the scored positions.
            ASSERT_NE(e.tokens[i], info.blank_token) << "position " << i;
          } else {
            ASSERT_GE(e.targets[i], 0);
            ASSERT_LT(e.targets[i], info.output_symbols);
            ASSERT_EQ(e.tokens[i], info.blank_token) << "position " << i;
            ++scored;
          }
        }
        ASSERT_EQ(scored, task->OutputLength(length));
        // Rebuilding from the input (the non-blank tokens) gives the same
        // example: Generate = sample input + FromInput.
        std::vector<int32_t> input;
        for (const int32_t t : e.tokens) {
          if (t != info.blank_token) input.push_back(t);
        }
        const Example again = task->FromInput(input);
        ASSERT_EQ(again.tokens, e.tokens);
        ASSERT_EQ(again.targets, e.targets);
      }
    }
  }
}

TEST(TasksTest, DeterministicPerSeedAndSeedsDiffer) {
  for (const std::string& name : TaskNames()) {
    SCOPED_TRACE(name);
    const auto task = MakeTask(name);
    Rng a(123), b(123), c(124);
    std::vector<Example> from_a, from_b, from_c;
    for (int i = 0; i < 20; ++i) {
      from_a.push_back(task->Generate(30, a));
      from_b.push_back(task->Generate(30, b));
      from_c.push_back(task->Generate(30, c));
    }
    bool differ = false;
    for (int i = 0; i < 20; ++i) {
      EXPECT_EQ(from_a[i].tokens, from_b[i].tokens);
      EXPECT_EQ(from_a[i].targets, from_b[i].targets);
      differ |= from_a[i].tokens != from_c[i].tokens;
    }
    // 20 examples of 30 random symbols: equal by chance with probability
    // below 2^-600.
    EXPECT_TRUE(differ);
  }
}

// The single-output tasks must not be solvable by a constant answer: both
// classes (all classes for cycle_navigation) occur with reasonable frequency.
TEST(TasksTest, OutputClassesAreBalanced) {
  for (const char* name :
       {"even_pairs", "parity", "cycle_navigation", "missing_duplicate"}) {
    SCOPED_TRACE(name);
    const auto task = MakeTask(name);
    const int32_t classes = task->info().output_symbols;
    std::vector<int> counts(classes, 0);
    Rng rng(5);
    const int n = 2000;
    for (int i = 0; i < n; ++i) {
      const Example e = task->Generate(2 + i % 30, rng);
      ++counts[e.targets.back()];
    }
    // Each class expects n / classes; 6 standard deviations below that
    // (sd <= sqrt(n/4) ~ 22) would essentially never happen by chance.
    for (int k = 0; k < classes; ++k) {
      EXPECT_GT(counts[k], n / classes - 6 * 23) << "class " << k;
    }
  }
}

TEST(TasksTest, RejectsBadLengthsAndInputs) {
  Rng rng(1);
  EXPECT_THROW(MakeTask("reverse")->Generate(0, rng), InvalidArgument);
  EXPECT_THROW(MakeTask("reverse")->Generate(-3, rng), InvalidArgument);
  EXPECT_THROW(MakeTask("reverse")->Generate(int64_t{1} << 40, rng),
               InvalidArgument);
  EXPECT_THROW(MakeTask("missing_duplicate")->Generate(1, rng), InvalidArgument);
  EXPECT_THROW(MakeTask("parity")->FromInput(std::vector<int32_t>{}),
               InvalidArgument);
  // Symbols outside the input alphabet (the blank included).
  EXPECT_THROW(MakeTask("reverse")->FromInput(std::vector<int32_t>{0, 2}),
               InvalidArgument);
  EXPECT_THROW(MakeTask("bucket_sort")->FromInput(std::vector<int32_t>{5}),
               InvalidArgument);
  EXPECT_THROW(MakeTask("cycle_navigation")->FromInput(std::vector<int32_t>{3}),
               InvalidArgument);
  EXPECT_THROW(MakeTask("local_difference")->FromInput(std::vector<int32_t>{-1}),
               InvalidArgument);
  const auto missing = MakeTask("missing_duplicate");
  // No marker; two markers; halves disagree; odd length without the pad.
  EXPECT_THROW(missing->FromInput(std::vector<int32_t>{0, 1, 0, 1}),
               InvalidArgument);
  EXPECT_THROW(missing->FromInput(std::vector<int32_t>{2, 1, 2, 1}),
               InvalidArgument);
  EXPECT_THROW(missing->FromInput(std::vector<int32_t>{0, 2, 1, 1}),
               InvalidArgument);
  EXPECT_THROW(missing->FromInput(std::vector<int32_t>{0, 2, 0, 1, 0}),
               InvalidArgument);
  try {
    MakeTask("reverse")->Generate(0, rng);
  } catch (const InvalidArgument& e) {
    EXPECT_THAT(e.what(), HasSubstr("task 'reverse': length"));
    EXPECT_THAT(e.what(), HasSubstr("(got 0)"));
  }
}

TEST(TasksTest, MissingDuplicateHidesEitherCopy) {
  // The marker is drawn over all 2|w| positions, so both copies get hidden.
  const auto task = MakeTask("missing_duplicate");
  Rng rng(11);
  int first_half = 0, second_half = 0;
  for (int i = 0; i < 200; ++i) {
    const Example e = task->Generate(10, rng);
    const auto marker =
        std::find(e.tokens.begin(), e.tokens.end(), 2) - e.tokens.begin();
    (marker < 5 ? first_half : second_half)++;
  }
  EXPECT_GT(first_half, 50);
  EXPECT_GT(second_half, 50);
}

}  // namespace
}  // namespace relpos::tasks

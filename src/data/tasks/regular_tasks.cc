// Regular-language tasks with a single output symbol (Deletang et al. 2023,
// appendix A: "even pairs", "parity check", "cycle navigation"). Each input is
// followed by one blank, where the answer is read.
#include <memory>
#include <span>
#include <vector>

#include "data/tasks/task_families.h"

namespace relpos::tasks {
namespace {

// even_pairs: binary string -> (number of adjacent unequal pairs "01" or
// "10") mod 2, i.e. class 0 when the count is even, as in Deletang et al.'s
// generator. (The count is even iff x_1 == x_n, which is why the language is
// regular; the task checks whether the model finds that.)
class EvenPairsTask : public UniformInputTask {
 public:
  EvenPairsTask()
      : UniformInputTask(
            {.name = "even_pairs",
             .vocab_size = 3,
             .blank_token = 2,
             .description = "binary string -> number of adjacent pairs "
                            "01 and 10, modulo 2 (0 = even)",
             .min_length = 1,
             .input_symbols = 2,
             .output_symbols = 2}) {}
  int64_t OutputLength(int64_t /*length*/) const override { return 1; }

 protected:
  std::vector<int32_t> Outputs(std::span<const int32_t> input) const override {
    int64_t unequal = 0;
    for (size_t i = 1; i < input.size(); ++i) unequal += input[i] != input[i - 1];
    return {static_cast<int32_t>(unequal % 2)};
  }
};

// parity: binary string -> (number of 1s) mod 2.
class ParityTask : public UniformInputTask {
 public:
  ParityTask()
      : UniformInputTask({.name = "parity",
                          .vocab_size = 3,
                          .blank_token = 2,
                          .description =
                              "binary string -> number of 1s modulo 2",
                          .min_length = 1,
                          .input_symbols = 2,
                          .output_symbols = 2}) {}
  int64_t OutputLength(int64_t /*length*/) const override { return 1; }

 protected:
  std::vector<int32_t> Outputs(std::span<const int32_t> input) const override {
    int64_t ones = 0;
    for (const int32_t s : input) ones += s;
    return {static_cast<int32_t>(ones % 2)};
  }
};

// cycle_navigation: an agent starts at state 0 of a cycle of 5 states; symbol
// 0 moves it one step back, 1 keeps it in place, 2 moves it one step forward
// (movement = symbol - 1, as in Deletang et al.). Output: the final state.
class CycleNavigationTask : public UniformInputTask {
 public:
  static constexpr int32_t kCycle = 5;
  CycleNavigationTask()
      : UniformInputTask(
            {.name = "cycle_navigation",
             .vocab_size = kCycle + 1,
             .blank_token = kCycle,
             .description = "moves on a 5-cycle (0 = back, 1 = stay, "
                            "2 = forward) from state 0 -> the final state",
             .min_length = 1,
             .input_symbols = 3,
             .output_symbols = kCycle}) {}
  int64_t OutputLength(int64_t /*length*/) const override { return 1; }

 protected:
  std::vector<int32_t> Outputs(std::span<const int32_t> input) const override {
    int32_t state = 0;
    // Adding kCycle - 1 instead of subtracting 1 keeps the state non-negative.
    for (const int32_t s : input) state = (state + s + kCycle - 1) % kCycle;
    return {state};
  }
};

}  // namespace

std::unique_ptr<Task> MakeEvenPairsTask() {
  return std::make_unique<EvenPairsTask>();
}
std::unique_ptr<Task> MakeParityTask() { return std::make_unique<ParityTask>(); }
std::unique_ptr<Task> MakeCycleNavigationTask() {
  return std::make_unique<CycleNavigationTask>();
}

}  // namespace relpos::tasks

// A task whose every answer depends only on tokens at a FIXED relative offset
// from where it is read, whatever the sequence length. Relative position
// representations with max_distance >= 3 can express the rule identically at
// every length, while absolute embeddings see positions at test time they
// never saw in training; it is relpos's demonstration task for length
// generalisation (docs/tasks.md).
//
// local_difference: symbols over {0..3}; the blanks are interleaved with the
// input instead of following it:
//
//   tokens  = x_1  B   x_2  B   ...  x_n  B
//   targets = -1  y_1  -1  y_2  ...  -1  y_n
//   y_i = (x_i - x_{i-1}) mod 4,  with x_0 = 0 (so y_1 = x_1)
//
// The answer at position 2i (1-based) needs the tokens at relative offsets -1
// and -3, and the order matters (difference, not sum), so a model without
// positions cannot solve it.
#include <memory>
#include <span>
#include <vector>

#include "data/tasks/task_families.h"

namespace relpos::tasks {
namespace {

class LocalDifferenceTask : public Task {
 public:
  static constexpr int32_t kSymbols = 4;
  LocalDifferenceTask()
      : info_({.name = "local_difference",
               .vocab_size = kSymbols + 1,
               .blank_token = kSymbols,
               .description =
                   "x_1 B x_2 B ... over {0..3} -> at the blank after x_i: "
                   "(x_i - x_{i-1}) mod 4, x_0 = 0",
               .min_length = 1,
               .input_symbols = kSymbols,
               .output_symbols = kSymbols}) {}

  const TaskInfo& info() const override { return info_; }
  int64_t OutputLength(int64_t length) const override { return length; }
  int64_t SequenceLength(int64_t length) const override { return 2 * length; }

  Example Generate(int64_t length, Rng& rng) const override {
    CheckLength(info_, length);
    return FromInput(UniformSymbols(length, kSymbols, rng));
  }

  // `input` = the n input symbols x_1..x_n (without the interleaved blanks).
  Example FromInput(std::span<const int32_t> input) const override {
    CheckSymbols(info_, input);
    Example example;
    example.tokens.reserve(2 * input.size());
    example.targets.reserve(2 * input.size());
    int32_t previous = 0;
    for (const int32_t x : input) {
      example.tokens.push_back(x);
      example.targets.push_back(-1);
      example.tokens.push_back(info_.blank_token);
      example.targets.push_back((x - previous + kSymbols) % kSymbols);
      previous = x;
    }
    return example;
  }

 private:
  TaskInfo info_;
};

}  // namespace

std::unique_ptr<Task> MakeLocalDifferenceTask() {
  return std::make_unique<LocalDifferenceTask>();
}

}  // namespace relpos::tasks

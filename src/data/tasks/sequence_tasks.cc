// Sequence-to-sequence tasks: the output is a rearrangement of the input.
// Definitions follow Deletang et al. (2023), section 4 / appendix A
// ("reverse string", "duplicate string", "bucket sort", "missing duplicate")
// and Ruoss et al. (2023) ("odds first"); docs/tasks.md has an example each.
#include <algorithm>
#include <memory>
#include <span>
#include <vector>

#include "base/check.h"
#include "data/tasks/task_families.h"

namespace relpos::tasks {
namespace {

// reverse: x_1 ... x_n  ->  x_n ... x_1, binary alphabet.
class ReverseTask : public UniformInputTask {
 public:
  ReverseTask()
      : UniformInputTask({.name = "reverse",
                          .vocab_size = 3,
                          .blank_token = 2,
                          .description = "binary string -> the string reversed",
                          .min_length = 1,
                          .input_symbols = 2,
                          .output_symbols = 2}) {}
  int64_t OutputLength(int64_t length) const override { return length; }

 protected:
  std::vector<int32_t> Outputs(std::span<const int32_t> input) const override {
    return std::vector<int32_t>(input.rbegin(), input.rend());
  }
};

// duplicate: w  ->  w w, binary alphabet.
class DuplicateTask : public UniformInputTask {
 public:
  DuplicateTask()
      : UniformInputTask({.name = "duplicate",
                          .vocab_size = 3,
                          .blank_token = 2,
                          .description = "binary string w -> w w",
                          .min_length = 1,
                          .input_symbols = 2,
                          .output_symbols = 2}) {}
  int64_t OutputLength(int64_t length) const override { return 2 * length; }

 protected:
  std::vector<int32_t> Outputs(std::span<const int32_t> input) const override {
    std::vector<int32_t> out(input.begin(), input.end());
    out.insert(out.end(), input.begin(), input.end());
    return out;
  }
};

// bucket_sort: a string over {0..4} -> the same symbols in ascending order.
class BucketSortTask : public UniformInputTask {
 public:
  BucketSortTask()
      : UniformInputTask({.name = "bucket_sort",
                          .vocab_size = 6,
                          .blank_token = 5,
                          .description =
                              "string over {0..4} -> its symbols sorted",
                          .min_length = 1,
                          .input_symbols = 5,
                          .output_symbols = 5}) {}
  int64_t OutputLength(int64_t length) const override { return length; }

 protected:
  std::vector<int32_t> Outputs(std::span<const int32_t> input) const override {
    std::vector<int32_t> out(input.begin(), input.end());
    std::sort(out.begin(), out.end());
    return out;
  }
};

// odds_first: x_1 x_2 ... x_n -> x_1 x_3 x_5 ... x_2 x_4 ... (1-based: the
// symbols at odd positions, then those at even positions), binary alphabet.
class OddsFirstTask : public UniformInputTask {
 public:
  OddsFirstTask()
      : UniformInputTask(
            {.name = "odds_first",
             .vocab_size = 3,
             .blank_token = 2,
             .description = "binary string -> symbols at odd positions, "
                            "then those at even positions (1-based)",
             .min_length = 1,
             .input_symbols = 2,
             .output_symbols = 2}) {}
  int64_t OutputLength(int64_t length) const override { return length; }

 protected:
  std::vector<int32_t> Outputs(std::span<const int32_t> input) const override {
    std::vector<int32_t> out;
    out.reserve(input.size());
    // 0-based even indices are the 1-based odd positions.
    for (size_t i = 0; i < input.size(); i += 2) out.push_back(input[i]);
    for (size_t i = 1; i < input.size(); i += 2) out.push_back(input[i]);
    return out;
  }
};

// missing_duplicate (Ruoss et al. 2023; DeepMind's reference generator):
// w is a binary string of floor(n/2) symbols; the input is w w with exactly
// one symbol replaced by the marker, plus one pad token when n is odd (so the
// input is exactly n tokens). The output is the hidden symbol, which equals
// the symbol at the same place in the other copy of w.
constexpr int32_t kMissingMarker = 2;
constexpr int32_t kMissingPad = 3;

class MissingDuplicateTask : public Task {
 public:
  MissingDuplicateTask()
      : info_({.name = "missing_duplicate",
               .vocab_size = 5,
               .blank_token = 4,
               .description =
                   "w w (binary w, |w| = floor(n/2)) with one symbol replaced "
                   "by the marker 2 (plus pad 3 when n is odd) -> the hidden "
                   "symbol",
               .min_length = 2,
               .input_symbols = 2,
               .output_symbols = 2}) {}

  const TaskInfo& info() const override { return info_; }
  int64_t OutputLength(int64_t /*length*/) const override { return 1; }
  int64_t SequenceLength(int64_t length) const override { return length + 1; }

  Example Generate(int64_t length, Rng& rng) const override {
    CheckLength(info_, length);
    const int64_t half = length / 2;
    std::vector<int32_t> input = UniformSymbols(half, 2, rng);
    input.insert(input.end(), input.begin(), input.end());
    const uint64_t hidden = rng.Below(static_cast<uint64_t>(2 * half));
    input[hidden] = kMissingMarker;
    if (length % 2 == 1) input.push_back(kMissingPad);
    return FromInput(input);
  }

  Example FromInput(std::span<const int32_t> input) const override {
    const int64_t n = static_cast<int64_t>(input.size());
    CheckLength(info_, n);
    const int64_t half = n / 2;
    if (n % 2 == 1) {
      RELPOS_CHECK_ARG(input[n - 1] == kMissingPad,
                       "task 'missing_duplicate': an odd-length input must end "
                       "with the pad token "
                           << kMissingPad << " (got " << input[n - 1] << ")");
    }
    int64_t marker = -1;
    for (int64_t i = 0; i < 2 * half; ++i) {
      const int32_t t = input[i];
      if (t == kMissingMarker) {
        RELPOS_CHECK_ARG(marker < 0,
                         "task 'missing_duplicate': the input must hold exactly "
                         "one marker (found at "
                             << marker << " and " << i << ")");
        marker = i;
      } else {
        RELPOS_CHECK_ARG(t == 0 || t == 1,
                         "task 'missing_duplicate': input["
                             << i << "] must be 0, 1 or the marker "
                             << kMissingMarker << " (got " << t << ")");
      }
    }
    RELPOS_CHECK_ARG(marker >= 0,
                     "task 'missing_duplicate': the input holds no marker "
                         << kMissingMarker);
    // Both halves must agree wherever neither holds the marker.
    for (int64_t i = 0; i < half; ++i) {
      if (i == marker || i + half == marker) continue;
      RELPOS_CHECK_ARG(input[i] == input[i + half],
                       "task 'missing_duplicate': the input is not w w: input["
                           << i << "] = " << input[i] << " but input["
                           << i + half << "] = " << input[i + half]);
    }
    const int64_t twin = marker < half ? marker + half : marker - half;
    return InputThenBlanks(info_, input, {input[twin]});
  }

 private:
  TaskInfo info_;
};

}  // namespace

std::unique_ptr<Task> MakeReverseTask() {
  return std::make_unique<ReverseTask>();
}
std::unique_ptr<Task> MakeDuplicateTask() {
  return std::make_unique<DuplicateTask>();
}
std::unique_ptr<Task> MakeBucketSortTask() {
  return std::make_unique<BucketSortTask>();
}
std::unique_ptr<Task> MakeOddsFirstTask() {
  return std::make_unique<OddsFirstTask>();
}
std::unique_ptr<Task> MakeMissingDuplicateTask() {
  return std::make_unique<MissingDuplicateTask>();
}

}  // namespace relpos::tasks

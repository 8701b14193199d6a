// Internal to src/data/tasks: the building block shared by the task families and
// the factory functions MakeTask() dispatches to. Not part of the interface
// the trainer uses (that is task.h).
#ifndef RELPOS_SRC_DATA_TASKS_TASK_FAMILIES_H_
#define RELPOS_SRC_DATA_TASKS_TASK_FAMILIES_H_

#include <cstdint>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include "data/tasks/task.h"

namespace relpos::tasks {

// Largest `length` any task accepts: bounds memory for a mistyped flag.
inline constexpr int64_t kMaxTaskLength = int64_t{1} << 22;

// Throws InvalidArgument unless min_length <= length <= kMaxTaskLength.
void CheckLength(const TaskInfo& info, int64_t length);

// Throws InvalidArgument unless every element of `input` lies in
// [0, info.input_symbols) and input.size() >= info.min_length.
void CheckSymbols(const TaskInfo& info, std::span<const int32_t> input);

// The standard layout: the input, then one blank per output symbol.
//   tokens  = input  ++ [blank] * |outputs|
//   targets = [-1] * |input| ++ outputs
Example InputThenBlanks(const TaskInfo& info, std::span<const int32_t> input,
                        const std::vector<int32_t>& outputs);

// `length` symbols drawn uniformly from [0, symbols), in order.
std::vector<int32_t> UniformSymbols(int64_t length, int32_t symbols, Rng& rng);

// A task with the standard layout whose input is `length` uniform symbols
// from [0, info.input_symbols) and whose output is a function of the input
// (Outputs), `output_length(n)` symbols long.
class UniformInputTask : public Task {
 public:
  const TaskInfo& info() const override { return info_; }
  Example Generate(int64_t length, Rng& rng) const override;
  int64_t SequenceLength(int64_t length) const override {
    return length + OutputLength(length);
  }
  Example FromInput(std::span<const int32_t> input) const override;

 protected:
  explicit UniformInputTask(TaskInfo info) : info_(std::move(info)) {}
  // The wanted outputs for a valid input (already checked by FromInput).
  virtual std::vector<int32_t> Outputs(std::span<const int32_t> input) const = 0;

 private:
  TaskInfo info_;
};

// Context-sensitive / sequence-to-sequence tasks (sequence_tasks.cc).
std::unique_ptr<Task> MakeReverseTask();
std::unique_ptr<Task> MakeDuplicateTask();
std::unique_ptr<Task> MakeBucketSortTask();
std::unique_ptr<Task> MakeOddsFirstTask();
std::unique_ptr<Task> MakeMissingDuplicateTask();
// Regular tasks with a single output symbol (regular_tasks.cc).
std::unique_ptr<Task> MakeEvenPairsTask();
std::unique_ptr<Task> MakeParityTask();
std::unique_ptr<Task> MakeCycleNavigationTask();
// The local task (local_tasks.cc).
std::unique_ptr<Task> MakeLocalDifferenceTask();

}  // namespace relpos::tasks

#endif  // RELPOS_SRC_DATA_TASKS_TASK_FAMILIES_H_

// Synthetic sequence tasks for length-generalisation experiments.
//
// The tasks follow the formal-language benchmarks of Deletang et al. (2023,
// "Neural Networks and the Chomsky Hierarchy") and Ruoss et al. (2023,
// "Randomized Positional Encodings Boost Length Generalization of
// Transformers"); docs/tasks.md defines each one with a small example.
//
// Layout (the issue: "Input tokens are followed by one blank token per output
// position; predictions are read at those positions"):
//
//   tokens  = x_1 ... x_n  BLANK ... BLANK      (one BLANK per output symbol)
//   targets = -1  ...  -1  y_1   ...  y_m       (-1: no loss, not scored)
//
// The one exception is the local task "local_difference", whose blanks are
// interleaved with the input (x_1 BLANK x_2 BLANK ...) so that every output
// depends only on tokens at a fixed relative offset (see docs/tasks.md).
//
// Everything is generated on the fly from a relpos::Rng, so an example is a
// pure function of (task, length, rng state).
#ifndef RELPOS_SRC_DATA_TASKS_TASK_H_
#define RELPOS_SRC_DATA_TASKS_TASK_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "base/rng.h"

namespace relpos::tasks {

// One training/evaluation example. tokens.size() == targets.size(); targets
// holds the wanted token id at output positions and -1 everywhere else. A
// sequence-to-sequence example (tasks/pair_source.h) also has a source,
// which the model's encoder reads; tokens and targets are then the
// decoder's.
struct Example {
  std::vector<int32_t> tokens;
  std::vector<int32_t> targets;
  std::vector<int32_t> source;  // empty but for pair data
};

struct TaskInfo {
  std::string name;        // "reverse", ...
  int32_t vocab_size = 0;  // every token and target id is in [0, vocab_size)
  int32_t blank_token = 0; // id of the blank (output placeholder) token
  std::string description;
  // Smallest accepted `length` (1 for most tasks; missing_duplicate needs 2).
  int64_t min_length = 1;
  // Input symbols are drawn from [0, input_symbols); targets lie in
  // [0, output_symbols). Special tokens (blank, marker, pad) come after both.
  int32_t input_symbols = 0;
  int32_t output_symbols = 0;
};

class Task {
 public:
  virtual ~Task() = default;
  virtual const TaskInfo& info() const = 0;

  // `length` = the task's size parameter: the number of input symbols
  // (length >= info().min_length, else InvalidArgument). The example has
  // SequenceLength(length) tokens (input + blanks). Deterministic given the
  // Rng state; advances `rng`.
  virtual Example Generate(int64_t length, Rng& rng) const = 0;

  // Total sequence length of an example of size `length` (input + blanks).
  virtual int64_t SequenceLength(int64_t length) const = 0;

  // Number of scored (output) positions in an example of size `length`.
  virtual int64_t OutputLength(int64_t length) const = 0;

  // Builds the example for a given input: the non-blank tokens of
  // Example::tokens in order (special tokens such as missing_duplicate's
  // marker and pad included; for local_difference, whose blanks are
  // interleaved, the n input symbols). InvalidArgument when `input` is not a
  // valid input of this task. Generate() = sample an input, then FromInput().
  // Exposed so tests can check hand-computed examples.
  virtual Example FromInput(std::span<const int32_t> input) const = 0;
};

// Names of all tasks, sorted.
std::vector<std::string> TaskNames();

// The task called `name`; InvalidArgument listing the known names otherwise.
std::unique_ptr<Task> MakeTask(const std::string& name);

}  // namespace relpos::tasks

#endif  // RELPOS_SRC_DATA_TASKS_TASK_H_

// Task registry and the shared building blocks of task_families.h.
#include "data/tasks/task.h"

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <utility>

#include "base/check.h"
#include "data/tasks/task_families.h"

namespace relpos::tasks {
namespace {

using Factory = std::function<std::unique_ptr<Task>()>;

// std::map keeps the names sorted, which TaskNames() promises.
const std::map<std::string, Factory>& Registry() {
  static const std::map<std::string, Factory> registry = {
      {"bucket_sort", MakeBucketSortTask},
      {"cycle_navigation", MakeCycleNavigationTask},
      {"duplicate", MakeDuplicateTask},
      {"even_pairs", MakeEvenPairsTask},
      {"local_difference", MakeLocalDifferenceTask},
      {"missing_duplicate", MakeMissingDuplicateTask},
      {"odds_first", MakeOddsFirstTask},
      {"parity", MakeParityTask},
      {"reverse", MakeReverseTask},
  };
  return registry;
}

}  // namespace

std::vector<std::string> TaskNames() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : Registry()) names.push_back(name);
  return names;
}

std::unique_ptr<Task> MakeTask(const std::string& name) {
  const auto& registry = Registry();
  const auto it = registry.find(name);
  if (it == registry.end()) {
    std::ostringstream known;
    for (const auto& [known_name, factory] : registry) {
      if (known.tellp() > 0) known << ", ";
      known << known_name;
    }
    RELPOS_THROW(InvalidArgument, "unknown task '" << name
                                                   << "' (known tasks: "
                                                   << known.str() << ")");
  }
  return it->second();
}

void CheckLength(const TaskInfo& info, int64_t length) {
  RELPOS_CHECK_ARG(length >= info.min_length && length <= kMaxTaskLength,
                   "task '" << info.name << "': length must be in ["
                            << info.min_length << ", " << kMaxTaskLength
                            << "] (got " << length << ")");
}

void CheckSymbols(const TaskInfo& info, std::span<const int32_t> input) {
  CheckLength(info, static_cast<int64_t>(input.size()));
  for (size_t i = 0; i < input.size(); ++i) {
    RELPOS_CHECK_ARG(input[i] >= 0 && input[i] < info.input_symbols,
                     "task '" << info.name << "': input[" << i << "] must be in [0, "
                              << info.input_symbols << ") (got " << input[i]
                              << ")");
  }
}

Example InputThenBlanks(const TaskInfo& info, std::span<const int32_t> input,
                        const std::vector<int32_t>& outputs) {
  Example example;
  example.tokens.assign(input.begin(), input.end());
  example.tokens.insert(example.tokens.end(), outputs.size(), info.blank_token);
  example.targets.assign(input.size(), -1);
  example.targets.insert(example.targets.end(), outputs.begin(), outputs.end());
  return example;
}

std::vector<int32_t> UniformSymbols(int64_t length, int32_t symbols, Rng& rng) {
  std::vector<int32_t> out(static_cast<size_t>(length));
  for (auto& s : out) {
    s = static_cast<int32_t>(rng.Below(static_cast<uint64_t>(symbols)));
  }
  return out;
}

Example UniformInputTask::Generate(int64_t length, Rng& rng) const {
  CheckLength(info_, length);
  const std::vector<int32_t> input =
      UniformSymbols(length, info_.input_symbols, rng);
  return InputThenBlanks(info_, input, Outputs(input));
}

Example UniformInputTask::FromInput(std::span<const int32_t> input) const {
  CheckSymbols(info_, input);
  return InputThenBlanks(info_, input, Outputs(input));
}

}  // namespace relpos::tasks

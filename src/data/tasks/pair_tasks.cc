// The synthetic pair tasks of pair_tasks.h and the shared parts of
// pair_source.h.
#include "data/tasks/pair_tasks.h"

#include <map>
#include <memory>
#include <sstream>

#include "base/check.h"
#include "data/tasks/task_families.h"

namespace relpos::tasks {

SequencePair PairSource::SampleTrain(int64_t min_length, int64_t max_length,
                                     Rng& rng) const {
  const uint64_t span = static_cast<uint64_t>(max_length - min_length + 1);
  const int64_t length = min_length + static_cast<int64_t>(rng.Below(span));
  return Sample(length, /*held_out=*/false, rng);
}

Example TeacherForced(const SequencePair& pair, const PairTokens& tokens) {
  Example e;
  e.source = pair.source;
  e.tokens.push_back(tokens.bos);
  e.tokens.insert(e.tokens.end(), pair.target.begin(), pair.target.end());
  e.targets = pair.target;
  e.targets.push_back(tokens.eos);
  return e;
}

int64_t PairTask::max_length() const { return kMaxTaskLength; }

std::string PairTask::metric_description() const {
  return "per-token accuracy of the target (and its EOS) under teacher "
         "forcing";
}

SequencePair PairTask::FromSource(std::span<const int32_t> source) const {
  const int64_t n = static_cast<int64_t>(source.size());
  RELPOS_CHECK_ARG(n >= min_length_ && n <= kMaxTaskLength,
                   "task '" << name_ << "': length must be in [" << min_length_
                            << ", " << kMaxTaskLength << "] (got " << n
                            << ")");
  for (int64_t i = 0; i < n; ++i) {
    RELPOS_CHECK_ARG(source[i] >= 0 && source[i] < kPairSymbols,
                     "task '" << name_ << "': source[" << i
                              << "] must be in [0, " << kPairSymbols
                              << ") (got " << source[i] << ")");
  }
  SequencePair p;
  p.source.assign(source.begin(), source.end());
  p.target = Target(source);
  return p;
}

SequencePair PairTask::Sample(int64_t length, bool /*held_out*/,
                              Rng& rng) const {
  RELPOS_CHECK_ARG(length >= min_length_ && length <= kMaxTaskLength,
                   "task '" << name_ << "': length must be in [" << min_length_
                            << ", " << kMaxTaskLength << "] (got " << length
                            << ")");
  return FromSource(UniformSymbols(length, kPairSymbols, rng));
}

namespace {

class CopyTask final : public PairTask {
 public:
  CopyTask() : PairTask("s2s_copy", "x -> x", 1) {}
  int64_t TargetLength(int64_t n) const override { return n; }

 protected:
  std::vector<int32_t> Target(std::span<const int32_t> x) const override {
    return {x.begin(), x.end()};
  }
};

class ReverseTask final : public PairTask {
 public:
  ReverseTask() : PairTask("s2s_reverse", "x -> x reversed", 1) {}
  int64_t TargetLength(int64_t n) const override { return n; }

 protected:
  std::vector<int32_t> Target(std::span<const int32_t> x) const override {
    return {x.rbegin(), x.rend()};
  }
};

class DuplicateTask final : public PairTask {
 public:
  DuplicateTask() : PairTask("s2s_duplicate", "x -> x x", 1) {}
  int64_t TargetLength(int64_t n) const override { return 2 * n; }

 protected:
  std::vector<int32_t> Target(std::span<const int32_t> x) const override {
    std::vector<int32_t> y(x.begin(), x.end());
    y.insert(y.end(), x.begin(), x.end());
    return y;
  }
};

class DifferenceTask final : public PairTask {
 public:
  DifferenceTask()
      : PairTask("s2s_difference",
                 "x -> (x_{i+1} - x_i) mod 8, one symbol shorter", 2) {}
  int64_t TargetLength(int64_t n) const override { return n - 1; }

 protected:
  std::vector<int32_t> Target(std::span<const int32_t> x) const override {
    std::vector<int32_t> y;
    for (size_t i = 0; i + 1 < x.size(); ++i) {
      y.push_back((x[i + 1] - x[i] + kPairSymbols) % kPairSymbols);
    }
    return y;
  }
};

using Factory = std::unique_ptr<PairTask> (*)();

template <typename Task>
std::unique_ptr<PairTask> Make() {
  return std::make_unique<Task>();
}

// std::map keeps the names sorted, which PairTaskNames() promises.
const std::map<std::string, Factory>& Registry() {
  static const std::map<std::string, Factory> registry = {
      {"s2s_copy", Make<CopyTask>},
      {"s2s_difference", Make<DifferenceTask>},
      {"s2s_duplicate", Make<DuplicateTask>},
      {"s2s_reverse", Make<ReverseTask>},
  };
  return registry;
}

}  // namespace

std::vector<std::string> PairTaskNames() {
  std::vector<std::string> names;
  for (const auto& [name, factory] : Registry()) names.push_back(name);
  return names;
}

std::unique_ptr<PairTask> MakePairTask(const std::string& name) {
  const auto it = Registry().find(name);
  if (it == Registry().end()) {
    std::ostringstream known;
    for (const std::string& n : PairTaskNames()) {
      if (known.tellp() > 0) known << ", ";
      known << n;
    }
    RELPOS_THROW(InvalidArgument, "unknown pair task '"
                                      << name << "' (known: " << known.str()
                                      << ")");
  }
  return it->second();
}

}  // namespace relpos::tasks

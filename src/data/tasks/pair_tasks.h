// Synthetic sequence-to-sequence tasks for the seq2seq model (docs/tasks.md,
// "Sequence-to-sequence tasks"): a source of n uniform symbols over an
// alphabet of kPairSymbols and a target that is a function of it, of the
// same or another length. Their vocabulary is the symbols, then BOS and EOS.
//
//   s2s_copy        x_1 .. x_n  ->  x_1 .. x_n
//   s2s_reverse     x_1 .. x_n  ->  x_n .. x_1
//   s2s_duplicate   x_1 .. x_n  ->  x_1 .. x_n x_1 .. x_n       (2n)
//   s2s_difference  x_1 .. x_n  ->  d_1 .. d_{n-1},  d_i = x_{i+1} - x_i
//                                   mod kPairSymbols           (n - 1)
//
// copy aligns target position i with source position i (a fixed relative
// offset), reverse with n + 1 - i (no fixed offset), duplicate with i mod n,
// and difference needs two neighbouring source symbols per target symbol.
#ifndef RELPOS_SRC_DATA_TASKS_PAIR_TASKS_H_
#define RELPOS_SRC_DATA_TASKS_PAIR_TASKS_H_

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "data/tasks/pair_source.h"

namespace relpos::tasks {

inline constexpr int32_t kPairSymbols = 8;

// A synthetic pair task: uniform source symbols, the target computed from
// them.
class PairTask : public PairSource {
 public:
  std::string name() const override { return name_; }
  int32_t vocab_size() const override { return kPairSymbols + 2; }
  PairTokens tokens() const override {
    return {.bos = kPairSymbols, .eos = kPairSymbols + 1};
  }
  int64_t min_length() const override { return min_length_; }
  int64_t max_length() const override;
  int64_t MaxSourceTokens(int64_t length) const override { return length; }
  int64_t MaxTargetTokens(int64_t length) const override {
    return TargetLength(length);
  }
  SequencePair Sample(int64_t length, bool held_out, Rng& rng) const override;
  std::string metric_description() const override;
  const std::string& description() const { return description_; }

  // The pair for a given source (symbols in [0, kPairSymbols), at least
  // min_length of them); InvalidArgument otherwise. Sample = uniform source,
  // then FromSource.
  SequencePair FromSource(std::span<const int32_t> source) const;
  virtual int64_t TargetLength(int64_t length) const = 0;

 protected:
  PairTask(std::string name, std::string description, int64_t min_length)
      : name_(std::move(name)),
        description_(std::move(description)),
        min_length_(min_length) {}
  // The target of a valid source.
  virtual std::vector<int32_t> Target(std::span<const int32_t> source) const = 0;

 private:
  std::string name_, description_;
  int64_t min_length_;
};

// The pair task names, sorted; the task called `name` (InvalidArgument
// listing them otherwise).
std::vector<std::string> PairTaskNames();
std::unique_ptr<PairTask> MakePairTask(const std::string& name);

}  // namespace relpos::tasks

#endif  // RELPOS_SRC_DATA_TASKS_PAIR_TASKS_H_

// Source-target pairs of token ids: what a seq2seq model (model::Arch::
// kSeq2seq) trains and is evaluated on. The synthetic pair tasks
// (tasks/pair_tasks.h) implement PairSource; so does a tokenised parallel
// corpus (a translation task: pairs of SentencePiece ids of one shared
// vocabulary). train::MakePairDataSource turns any PairSource into the
// trainer's DataSource under teacher forcing (TeacherForced below).
//
// The `length` of a pair is the source's size as the task counts it (the
// synthetic tasks: its tokens; a corpus may count words, so that
// --train-lengths and evaluation buckets speak of sentence lengths); the
// target's length is whatever the pair has.
#ifndef RELPOS_SRC_DATA_TASKS_PAIR_SOURCE_H_
#define RELPOS_SRC_DATA_TASKS_PAIR_SOURCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "base/rng.h"
#include "data/tasks/task.h"

namespace relpos::tasks {

// One pair; the target without BOS or EOS.
struct SequencePair {
  std::vector<int32_t> source, target;
};

// The special ids of a pair source's vocabulary: BOS starts every decoder
// input, EOS ends every target.
struct PairTokens {
  int32_t bos = -1, eos = -1;
};

class PairSource {
 public:
  virtual ~PairSource() = default;
  virtual std::string name() const = 0;
  // One vocabulary for sources and targets (the model ties its embedding).
  virtual int32_t vocab_size() const = 0;
  virtual PairTokens tokens() const = 0;
  // The accepted sizes: min_length <= length <= max_length.
  virtual int64_t min_length() const = 0;
  virtual int64_t max_length() const = 0;
  // The most source tokens and target tokens (without BOS / EOS) a pair of
  // size `length` has: what a learned position table must cover, and the
  // decoding length a pair may need.
  virtual int64_t MaxSourceTokens(int64_t length) const = 0;
  virtual int64_t MaxTargetTokens(int64_t length) const = 0;
  // One pair of size `length` (held_out: the evaluation split where the
  // data has one; the synthetic tasks draw from one distribution and keep
  // evaluation apart by its seed). Deterministic given the Rng state.
  virtual SequencePair Sample(int64_t length, bool held_out,
                              Rng& rng) const = 0;
  // One training pair of a size in [min_length, max_length]. The default
  // draws the size uniformly, then Sample; a corpus overrides it to follow
  // its own distribution of lengths.
  virtual SequencePair SampleTrain(int64_t min_length, int64_t max_length,
                                   Rng& rng) const;
  // What the evaluation's accuracy counts; where the pairs come from.
  virtual std::string metric_description() const = 0;
  virtual std::string source_description() const { return name(); }
  // A corpus's serialised subword vocabulary (a checkpoint stores it);
  // empty for the synthetic tasks.
  virtual std::string vocabulary() const { return {}; }
};

// Teacher forcing (docs/training.md): the decoder reads BOS y_1 .. y_m and
// predicts y_1 .. y_m EOS, every position scored:
//   source  = x_1 .. x_n
//   tokens  = BOS y_1 .. y_m
//   targets = y_1 .. y_m EOS
Example TeacherForced(const SequencePair& pair, const PairTokens& tokens);

}  // namespace relpos::tasks

#endif  // RELPOS_SRC_DATA_TASKS_PAIR_SOURCE_H_

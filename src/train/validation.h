// The held-out loss of a translation run's validation curve
// (TrainConfig::eval_every; docs/training.md, "Validation curve and early
// stopping"): the teacher-forced held-out split of the corpus, the one
// relpos eval translates, scored by plain cross-entropy.
//
// It draws no random numbers and changes no training state: the model runs
// in inference mode (no dropout, no gradients), so a run with the curve
// trains the same weights, bit for bit, as one without it.
#ifndef RELPOS_SRC_TRAIN_VALIDATION_H_
#define RELPOS_SRC_TRAIN_VALIDATION_H_

#include <cstdint>
#include <vector>

#include "model/transformer.h"
#include "train/data_source.h"

namespace relpos::train {

// The held-out pairs as padded batches, built once per run.
class HeldOutSet {
 public:
  // The held-out split of `data` (a translation corpus: InvalidArgument for
  // other data), every pair the model takes (learned positions: source and
  // BOS + target within max_len; the others are counted in skipped()),
  // sorted by length (stable) and packed into batches of at most
  // `batch_size` pairs and about as many tokens as a batch of `batch_size`
  // pairs of `tokens_per_pair` (a longer pair gets a batch of its own).
  HeldOutSet(const DataSource& data, const model::ModelConfig& model,
             int64_t batch_size, int64_t tokens_per_pair);

  int64_t pairs() const { return pairs_; }
  int64_t skipped() const { return skipped_; }

  // Mean cross-entropy (nats, no label smoothing) per target token, EOS
  // included, over every pair; the sums run in a fixed order.
  double Loss(model::Transformer& model) const;

 private:
  std::vector<model::Batch> batches_;
  int64_t pairs_ = 0, skipped_ = 0;
};

}  // namespace relpos::train

#endif  // RELPOS_SRC_TRAIN_VALIDATION_H_

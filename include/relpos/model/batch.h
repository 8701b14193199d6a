// A batch of token sequences and what a forward pass counts over it: the
// types the public Model (model.h) takes and returns, and the ones the
// transformer inside it (src/model/) works on.
#ifndef RELPOS_MODEL_BATCH_H_
#define RELPOS_MODEL_BATCH_H_

#include <cstdint>
#include <vector>

namespace relpos {

// Token sequences, padded to `length`.
struct TokenBatch {
  int64_t batch = 0, length = 0;
  std::vector<int32_t> tokens;   // [batch, length], ids < vocab_size
  // [batch, length], -1 = no loss there; empty (public API only): no
  // targets anywhere.
  std::vector<int32_t> targets;
  // Valid length of each sequence, in [0, length]. Positions >= lengths[b]
  // are padding: invisible as keys, their tokens are ignored (any value),
  // and their targets must be -1. Empty (public API only): every sequence
  // is `length` long.
  std::vector<int64_t> lengths;
  // Seq2seq models only (empty for the others): each sequence's source
  // sentence, padded to source_length >= 1, and their valid lengths in
  // [0, source_length] (empty, public API only: every source is
  // source_length long). The sequences above are then the decoder's: BOS
  // y_1 .. y_m, targets y_1 .. y_m EOS. Source and target lengths differ
  // freely per sequence.
  int64_t source_length = 0;
  std::vector<int32_t> source_tokens;   // [batch, source_length]
  std::vector<int64_t> source_lengths;  // [batch]
};

// Sums over a batch's scored tokens (targets != -1).
struct BatchCounts {
  double loss_sum = 0;  // cross-entropy (nats), summed
  int64_t tokens = 0, correct_tokens = 0;
  // A sequence with at least one target counts; it is correct when every
  // target position is predicted right (argmax, ties to the lowest id).
  int64_t sequences = 0, correct_sequences = 0;
};

}  // namespace relpos

#endif  // RELPOS_MODEL_BATCH_H_

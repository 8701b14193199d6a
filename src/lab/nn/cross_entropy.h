// Softmax cross-entropy over the vocabulary with ignored positions
// (target -1), as torch.nn.functional.cross_entropy(ignore_index=-1).
#ifndef RELPOS_SRC_LAB_NN_CROSS_ENTROPY_H_
#define RELPOS_SRC_LAB_NN_CROSS_ENTROPY_H_

#include <cstdint>

namespace relpos::nn {

struct CrossEntropyShape {
  int64_t rows = 0;
  int64_t vocab = 0;
};

struct CrossEntropyResult {
  double loss_sum = 0.0;  // sum over counted rows of -log softmax[target]
  int64_t count = 0;      // rows with target != -1
  int64_t correct = 0;    // counted rows whose argmax equals the target
};

// logits [rows, vocab], targets [rows] in [-1, vocab) (validated by the
// caller). predictions [rows] (optional): argmax of each row, ties to the
// lowest id; rows with target -1 get one too.
template <typename T>
CrossEntropyResult CrossEntropyForward(const T* logits, const int32_t* targets,
                                       int32_t* predictions,
                                       const CrossEntropyShape& shape);

// Differentiates `loss = scale * sum_r -log softmax(logits[r])[targets[r]]`:
//   dlogits[r] = scale * (softmax(logits[r]) - onehot(targets[r]))
// and 0 for rows with target -1. dlogits [rows, vocab] is overwritten.
template <typename T>
void CrossEntropyBackward(const T* logits, const int32_t* targets, T scale,
                          T* dlogits, const CrossEntropyShape& shape);

}  // namespace relpos::nn

#endif  // RELPOS_SRC_LAB_NN_CROSS_ENTROPY_H_

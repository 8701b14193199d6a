// Softmax cross-entropy over the vocabulary with ignored positions
// (target -1), as torch.nn.functional.cross_entropy(ignore_index=-1), with
// optional label smoothing as torch.nn.CrossEntropyLoss(label_smoothing=eps)
// defines it (and OpenNMT-py 3 and eole, which call it): the target
// distribution of a row with target y is
//   q_c = (1 - eps) [c == y] + eps / V          (every c of the vocabulary)
// so its loss is  -sum_c q_c log p_c
//   = (1 - eps) (lse - z_y) + (eps / V) sum_c (lse - z_c).
// (fairseq's label_smoothed_nll_loss spreads eps / (V - 1) over the other
// classes instead.) Rows with target -1 (padding) take no part.
#ifndef RELPOS_SRC_MODEL_NN_CROSS_ENTROPY_H_
#define RELPOS_SRC_MODEL_NN_CROSS_ENTROPY_H_

#include <cstdint>

namespace relpos::nn {

struct CrossEntropyShape {
  int64_t rows = 0;
  int64_t vocab = 0;
};

struct CrossEntropyOptions {
  double label_smoothing = 0.0;  // eps in [0, 1); 0: plain cross-entropy
};

struct CrossEntropyResult {
  double loss_sum = 0.0;  // sum over counted rows of -log softmax[target]
  // The same sum with label smoothing: what the backward pass
  // differentiates (equal to loss_sum when eps = 0).
  double smoothed_sum = 0.0;
  int64_t count = 0;      // rows with target != -1
  int64_t correct = 0;    // counted rows whose argmax equals the target
};

// logits [rows, vocab], targets [rows] in [-1, vocab) (validated by the
// caller). predictions [rows] (optional): argmax of each row, ties to the
// lowest id; rows with target -1 get one too.
template <typename T>
CrossEntropyResult CrossEntropyForward(const T* logits, const int32_t* targets,
                                       int32_t* predictions,
                                       const CrossEntropyShape& shape,
                                       const CrossEntropyOptions& options = {});

// lse[r] = log sum_v exp(logits[r, v]) for each row of logits [rows, vocab]
// (vocab >= 1), computed as CrossEntropyForward computes it (float: SIMD
// exponentials of z - max, summed in double in a fixed order; double:
// libm's exp): beam search's log-probabilities are z - lse.
template <typename T>
void LogSumExpRows(const T* logits, int64_t rows, int64_t vocab, double* lse);

// Differentiates `loss = scale * sum_r -sum_c q[r, c] log softmax(logits[r])_c`
// (q as above):
//   dlogits[r] = scale * (softmax(logits[r]) - q[r])
// and 0 for rows with target -1. dlogits [rows, vocab] is overwritten.
template <typename T>
void CrossEntropyBackward(const T* logits, const int32_t* targets, T scale,
                          T* dlogits, const CrossEntropyShape& shape,
                          const CrossEntropyOptions& options = {});

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_CROSS_ENTROPY_H_

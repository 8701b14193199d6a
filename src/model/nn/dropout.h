// Inverted dropout (Srivastava et al., 2014): keep each element with
// probability 1 - p and scale kept ones by 1 / (1 - p), so evaluation needs
// no rescaling.
//
// The mask is a pure function of (seed, element index): element i is dropped
// iff Uniform(Hash(seed, i)) < p. The backward pass regenerates it instead of
// storing it, and the result does not depend on the thread count or on how
// the loop is split.
#ifndef RELPOS_SRC_MODEL_NN_DROPOUT_H_
#define RELPOS_SRC_MODEL_NN_DROPOUT_H_

#include <cstdint>

namespace relpos::nn {

struct DropoutOptions {
  double p = 0.0;     // drop probability, in [0, 1)
  uint64_t seed = 0;  // one fresh value per dropout site and step
  // Element i of the call uses the mask of index index_offset + i, so a
  // buffer can be processed in pieces (e.g. the valid rows of each sequence
  // of a packed batch) with the masks of the whole.
  int64_t index_offset = 0;
};

// True when element `index` survives.
bool DropoutKeep(uint64_t seed, int64_t index, double p);

// x [n] -> y [n] (y may alias x). p = 0 copies.
template <typename T>
void DropoutForward(const T* x, T* y, int64_t n, const DropoutOptions& options);

// Differentiates `y[i] = keep(i) ? x[i] * scale : 0`:
//   dx[i] = keep(i) ? dy[i] * scale : 0   (dx may alias dy).
template <typename T>
void DropoutBackward(const T* dy, T* dx, int64_t n,
                     const DropoutOptions& options);

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_DROPOUT_H_

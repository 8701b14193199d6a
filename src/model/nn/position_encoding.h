// Absolute position encodings added to the token embeddings at the input
// (Vaswani et al., 2017, section 3.5): a fixed sinusoidal table (its values:
// relpos::SinusoidalTable, relpos/position_schemes.h) or a learned one.
// Relative position representations live inside attention instead
// (relpos::AttentionForward; tables initialised by relpos::InitRelativeTable).
#ifndef RELPOS_SRC_MODEL_NN_POSITION_ENCODING_H_
#define RELPOS_SRC_MODEL_NN_POSITION_ENCODING_H_

#include <cstdint>

namespace relpos::nn {

struct PositionShape {
  int64_t batch = 0, length = 0, dim = 0;
};

// x [batch, length, dim] += table[:length] (table [>= length, dim]).
template <typename T>
void AddPositionForward(const T* table, T* x, const PositionShape& shape);

// Differentiates `x[b, p] += table[p]`:
//   dtable[p] = sum_b dx[b, p]  for p < length (rows beyond are untouched;
//   the caller zeroes them). Sums over b in order: deterministic.
template <typename T>
void AddPositionBackward(const T* dx, T* dtable, const PositionShape& shape);

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_POSITION_ENCODING_H_

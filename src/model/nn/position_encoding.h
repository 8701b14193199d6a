// Absolute position encodings added to the token embeddings at the input
// (Vaswani et al., 2017, section 3.5): a fixed sinusoidal table or a learned
// one. Relative position representations live inside attention instead
// (relpos::AttentionForward; tables initialised by relpos::InitRelativeTable).
#ifndef RELPOS_SRC_MODEL_NN_POSITION_ENCODING_H_
#define RELPOS_SRC_MODEL_NN_POSITION_ENCODING_H_

#include <cstdint>

namespace relpos::nn {

// table [length, dim]:
//   table[p, 2i]   = sin(p / 10000^(2i / dim))
//   table[p, 2i+1] = cos(p / 10000^(2i / dim))
// computed in double, so every length sees the same values for its prefix.
template <typename T>
void SinusoidalTable(int64_t length, int64_t dim, T* table);

// Transformer-XL's fixed relative encodings (Dai et al. 2019, section 3.3;
// docs/math.md section 8), for the distances r = -k .. k of relpos
// (key minus query; XL's distance is x = -r), table [2k+1, dim], dim even:
//   table[r + k, t]         = sin(x f_t)
//   table[r + k, dim/2 + t] = cos(x f_t),   f_t = 10000^(-2t / dim),
// the sines first, then the cosines (XL's layout), computed in double.
template <typename T>
void XlSinusoidTable(int64_t k, int64_t dim, T* table);

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

// SIMD bodies of the fast RoPE (src/op/kernels/rope.h), compiled once per
// Highway target through rope.cc's foreach_target recipe
// (hwy/examples/skeleton.cc).
//
// Tables. For each position the driver stores the float cosines and sines of
// the pair angles, with the sign of the rotation folded into the sines:
//   split halves:  [c_0 .. c_{h-1}, s_0 .. s_{h-1}]           (d floats)
//   interleaved:   C = [c_0, c_0, c_1, c_1, ...],
//                  S = [-s_0, s_0, -s_1, s_1, ...]           (2d floats)
// so the split layout rotates two contiguous halves with whole vectors, and
// the interleaved one is y = x * C + swap_pairs(x) * S with one lane swap
// (Reverse2) per vector: no gathers in either.
//
// Per-target toggle guard: this file is included once per target.
#if defined(RELPOS_SRC_KERNELS_ROPE_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RELPOS_SRC_KERNELS_ROPE_INL_H_
#undef RELPOS_SRC_KERNELS_ROPE_INL_H_
#else
#define RELPOS_SRC_KERNELS_ROPE_INL_H_
#endif

#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace relpos {
namespace HWY_NAMESPACE {
namespace rope_simd {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;

// One row, split halves: pair t is (t, t + h), h = d / 2; cs = [c, s].
//   y_t     = x_t c_t - x_{t+h} s_t
//   y_{t+h} = x_{t+h} c_t + x_t s_t
// Loads both halves before storing, so y == x is safe.
HWY_INLINE void RotateSplitRow(const float* x, float* y, const float* cs,
                               int64_t h) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const float* c = cs;
  const float* s = cs + h;
  int64_t t = 0;
  for (; t + lanes <= h; t += lanes) {
    const auto x1 = hn::LoadU(df, x + t);
    const auto x2 = hn::LoadU(df, x + h + t);
    const auto vc = hn::LoadU(df, c + t);
    const auto vs = hn::LoadU(df, s + t);
    hn::StoreU(hn::NegMulAdd(x2, vs, hn::Mul(x1, vc)), df, y + t);
    hn::StoreU(hn::MulAdd(x1, vs, hn::Mul(x2, vc)), df, y + h + t);
  }
  for (; t < h; ++t) {  // h not a multiple of the vector length
    const float x1 = x[t], x2 = x[h + t];
    y[t] = x1 * c[t] - x2 * s[t];
    y[h + t] = x2 * c[t] + x1 * s[t];
  }
}

// One row, interleaved pairs (2t, 2t + 1): y = x * C + swap_pairs(x) * S,
//   y_{2t}   = x_{2t} c_t - x_{2t+1} s_t
//   y_{2t+1} = x_{2t+1} c_t + x_{2t} s_t
// Vectors start at even offsets and hold an even number of lanes, so a pair
// never straddles two vectors. Each vector is loaded before it is stored.
HWY_INLINE void RotateInterleavedRow(const float* x, float* y, const float* cs,
                                     int64_t d) {
  const DF df;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const float* c = cs;
  const float* s = cs + d;
  int64_t u = 0;
  if (lanes >= 2) {
    for (; u + lanes <= d; u += lanes) {
      const auto v = hn::LoadU(df, x + u);
      const auto swapped = hn::Reverse2(df, v);
      hn::StoreU(hn::MulAdd(swapped, hn::LoadU(df, s + u),
                            hn::Mul(v, hn::LoadU(df, c + u))),
                 df, y + u);
    }
  }
  for (; u < d; u += 2) {  // the tail: whole pairs, since d and u are even
    const float x1 = x[u], x2 = x[u + 1];
    y[u] = x1 * c[u] + x2 * s[u];
    y[u + 1] = x2 * c[u + 1] + x1 * s[u + 1];
  }
}

// The rows at positions [pos_begin, pos_end) (indices along N) of the
// slices [outer_begin, outer_end) of an [outer, n, d] tensor. Table row
// i - pos_begin holds position i's cosines and sines, `stride` floats
// (d split, 2d interleaved).
HWY_INLINE void RotateBlock(const float* x, float* y, const float* table,
                            int64_t outer_begin, int64_t outer_end,
                            int64_t pos_begin, int64_t pos_end, int64_t n,
                            int64_t d, bool interleaved) {
  const int64_t stride = interleaved ? 2 * d : d;
  for (int64_t o = outer_begin; o < outer_end; ++o) {
    for (int64_t i = pos_begin; i < pos_end; ++i) {
      const int64_t r = o * n + i;
      const float* cs = table + (i - pos_begin) * stride;
      if (interleaved) {
        RotateInterleavedRow(x + r * d, y + r * d, cs, d);
      } else {
        RotateSplitRow(x + r * d, y + r * d, cs, d / 2);
      }
    }
  }
}

}  // namespace rope_simd
}  // namespace HWY_NAMESPACE
}  // namespace relpos
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard

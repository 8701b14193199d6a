// Dot products of a few rows with many rows, vectorised along the shared
// dimension, compiled once per Highway target by the file that includes it
// (fused_attention.cc, for the few-query attention path):
//
//   s[r * lds + j] = sum_c x[r * ldx + c] * y[j * ldy + c],   r < m <= 4, j < n
//
// Each y row is loaded once for all m x rows; per inner step the registers
// hold m x KB accumulators (KB = 4 y rows for m <= 2, 2 for m = 3, 4), and
// each group of four accumulators is reduced to four sums at once (two
// rounds of interleaves within 128-bit blocks, then the blocks added),
// which costs about three instructions per dot product instead of a full
// horizontal sum each. A width that is no multiple of the vector length
// ends with one masked vector (never reading past a row).
//
// Only HWY_INLINE functions here, so several translation units may include
// this header (per-target toggle guard below).
#if defined(RELPOS_SRC_KERNELS_DOT_ROWS_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RELPOS_SRC_KERNELS_DOT_ROWS_INL_H_
#undef RELPOS_SRC_KERNELS_DOT_ROWS_INL_H_
#else
#define RELPOS_SRC_KERNELS_DOT_ROWS_INL_H_
#endif

#include <cstddef>
#include <cstdint>

#include "hwy/highway.h"

HWY_BEFORE_NAMESPACE();
namespace relpos {
namespace HWY_NAMESPACE {
namespace dot_rows {

namespace hn = hwy::HWY_NAMESPACE;
#if HWY_TARGET == HWY_SCALAR

// One-lane target: plain loops (the blocked form below needs 4 lanes).
HWY_INLINE void DotRows(int64_t m, const float* x, int64_t ldx, const float* y,
                        int64_t ldy, int64_t k, int64_t n, float alpha,
                        bool accumulate, float* s, int64_t lds) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t j = 0; j < n; ++j) {
      float sum = 0.0f;
      for (int64_t c = 0; c < k; ++c) sum += x[r * ldx + c] * y[j * ldy + c];
      float* out = s + r * lds + j;
      *out = accumulate ? *out + alpha * sum : alpha * sum;
    }
  }
}

#else  // vector targets

using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;
using D4 = hn::Full128<float>;
using V4 = hn::Vec<D4>;

// The first n lanes of p, zeros in the others, never touching memory past
// p[n - 1] (on targets older than AVX2 Highway's MaskedLoad may read a whole
// aligned vector, so copy through a buffer there).
HWY_INLINE VF LoadFirst(DF d, const float* HWY_RESTRICT p, size_t n) {
#if HWY_TARGET <= HWY_AVX2
  return hn::MaskedLoad(hn::FirstN(d, n), d, p);
#else
  HWY_ALIGN float buf[hn::MaxLanes(DF())] = {};
  for (size_t i = 0; i < n; ++i) buf[i] = p[i];
  return hn::Load(d, buf);
#endif
}

// The sum of the 128-bit blocks of v (lanes i, i + 4, i + 8, ... into lane
// i of the result).
HWY_INLINE V4 SumBlocks(VF v) {
#if HWY_TARGET <= HWY_AVX3
  const hn::Half<DF> dh;
  const auto h = hn::Add(hn::LowerHalf(dh, v), hn::UpperHalf(dh, v));
  return hn::Add(hn::LowerHalf(D4(), h), hn::UpperHalf(D4(), h));
#elif HWY_TARGET == HWY_AVX2
  return hn::Add(hn::LowerHalf(D4(), v), hn::UpperHalf(D4(), v));
#else
  return v;  // 128-bit vectors: one block
#endif
}

// Lane t of the result is the sum of all lanes of a_t (t = 0..3).
HWY_INLINE V4 Sum4(VF a0, VF a1, VF a2, VF a3) {
  const DF d;
  // Within each 128-bit block: [a0_0 + a0_2, a1_0 + a1_2, a0_1 + a0_3,
  // a1_1 + a1_3], likewise for a2 / a3.
  const VF s01 = hn::Add(hn::InterleaveLower(d, a0, a1),
                         hn::InterleaveUpper(d, a0, a1));
  const VF s23 = hn::Add(hn::InterleaveLower(d, a2, a3),
                         hn::InterleaveUpper(d, a2, a3));
  // 64-bit interleaves: [s01_0 + s01_2, s01_1 + s01_3, s23_0 + s23_2,
  // s23_1 + s23_3] = the block's partial sums of a0 .. a3.
  const hn::Repartition<uint64_t, DF> du;
  const auto u01 = hn::BitCast(du, s01);
  const auto u23 = hn::BitCast(du, s23);
  const VF lo = hn::BitCast(d, hn::InterleaveLower(du, u01, u23));
  const VF hi = hn::BitCast(d, hn::InterleaveUpper(du, u01, u23));
  return SumBlocks(hn::Add(lo, hi));
}

// One block of m x KB dot products: rows x_0 .. x_{m-1} with y_0 ..
// y_{KB-1}, width k (full vectors, then `tail` lanes). acc[r][u] ends as
// x_r . y_u (not yet reduced).
template <int M, int KB>
HWY_INLINE void DotBlock(const float* HWY_RESTRICT x, int64_t ldx,
                         const float* HWY_RESTRICT y, int64_t ldy, int64_t full,
                         size_t tail, VF (&acc)[M][KB]) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int r = 0; r < M; ++r) {
    for (int u = 0; u < KB; ++u) acc[r][u] = hn::Zero(d);
  }
  int64_t c = 0;
  for (int64_t v = 0; v < full; ++v, c += lanes) {
    VF yv[KB];
    for (int u = 0; u < KB; ++u) yv[u] = hn::LoadU(d, y + u * ldy + c);
    for (int r = 0; r < M; ++r) {
      const VF xv = hn::LoadU(d, x + r * ldx + c);
      for (int u = 0; u < KB; ++u) acc[r][u] = hn::MulAdd(xv, yv[u], acc[r][u]);
    }
  }
  if (tail > 0) {
    VF yv[KB];
    for (int u = 0; u < KB; ++u) yv[u] = LoadFirst(d, y + u * ldy + c, tail);
    for (int r = 0; r < M; ++r) {
      const VF xv = LoadFirst(d, x + r * ldx + c, tail);
      for (int u = 0; u < KB; ++u) acc[r][u] = hn::MulAdd(xv, yv[u], acc[r][u]);
    }
  }
}

// s[r * lds + j] (+)= alpha * x_r . y_j for M rows of x and n rows of y.
template <int M>
HWY_INLINE void DotRowsM(const float* HWY_RESTRICT x, int64_t ldx,
                         const float* HWY_RESTRICT y, int64_t ldy, int64_t k,
                         int64_t n, float alpha, bool accumulate,
                         float* HWY_RESTRICT s, int64_t lds) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = k / lanes;
  const size_t tail = static_cast<size_t>(k - full * lanes);
  constexpr int KB = M <= 2 ? 4 : 2;
  const V4 va = hn::Set(D4(), alpha);
  int64_t j = 0;
  for (; j + KB <= n; j += KB) {
    VF acc[M][KB];
    DotBlock<M, KB>(x, ldx, y + j * ldy, ldy, full, tail, acc);
    if constexpr (KB == 4) {
      for (int r = 0; r < M; ++r) {
        float* out = s + r * lds + j;
        V4 sum = hn::Mul(Sum4(acc[r][0], acc[r][1], acc[r][2], acc[r][3]), va);
        if (accumulate) sum = hn::Add(sum, hn::LoadU(D4(), out));
        hn::StoreU(sum, D4(), out);
      }
    } else {
      // Rows in pairs: [x_r y_j, x_r y_j+1, x_r+1 y_j, x_r+1 y_j+1].
      for (int r = 0; r < M; r += 2) {
        const VF z = hn::Zero(d);
        const bool pair = r + 1 < M;
        const int r1 = pair ? r + 1 : r;  // (never read when !pair)
        HWY_ALIGN float sum[4];
        hn::Store(hn::Mul(Sum4(acc[r][0], acc[r][1], pair ? acc[r1][0] : z,
                               pair ? acc[r1][1] : z),
                          va),
                  D4(), sum);
        for (int t = 0; t < (pair ? 4 : 2); ++t) {
          float* out = s + (r + t / 2) * lds + j + t % 2;
          *out = accumulate ? *out + sum[t] : sum[t];
        }
      }
    }
  }
  for (; j < n; ++j) {  // the last n % KB rows of y, one at a time
    VF acc[M][1];
    DotBlock<M, 1>(x, ldx, y + j * ldy, ldy, full, tail, acc);
    for (int r = 0; r < M; ++r) {
      float* out = s + r * lds + j;
      const float v = alpha * hn::GetLane(hn::SumOfLanes(d, acc[r][0]));
      *out = accumulate ? *out + v : v;
    }
  }
}

// s[r * lds + j] (+)= alpha * x_r . y_j, r < m (any m >= 0, in groups of at
// most four rows), j < n.
HWY_INLINE void DotRows(int64_t m, const float* x, int64_t ldx, const float* y,
                        int64_t ldy, int64_t k, int64_t n, float alpha,
                        bool accumulate, float* s, int64_t lds) {
  for (int64_t r = 0; r < m; r += 4) {
    const float* xr = x + r * ldx;
    float* sr = s + r * lds;
    switch (m - r) {
      case 1:
        DotRowsM<1>(xr, ldx, y, ldy, k, n, alpha, accumulate, sr, lds);
        break;
      case 2:
        DotRowsM<2>(xr, ldx, y, ldy, k, n, alpha, accumulate, sr, lds);
        break;
      case 3:
        DotRowsM<3>(xr, ldx, y, ldy, k, n, alpha, accumulate, sr, lds);
        break;
      default:
        DotRowsM<4>(xr, ldx, y, ldy, k, n, alpha, accumulate, sr, lds);
        break;
    }
  }
}

#endif  // HWY_TARGET == HWY_SCALAR

}  // namespace dot_rows
}  // namespace HWY_NAMESPACE
}  // namespace relpos
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard

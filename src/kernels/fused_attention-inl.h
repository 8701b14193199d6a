// SIMD bodies of the fused relative-attention kernel (SPEC.md section 4),
// compiled once per Highway target through fused_attention.cc's
// foreach_target recipe (hwy/examples/skeleton.cc).
//
// Layout. Every score-shaped tile is stored TRANSPOSED: S^T[j][i] with one
// row per key j of the key tile and one column per query row i of the query
// tile (leading dimension kQueryTile). Then
//   - S^T = K_J (Q_I / sqrt(dk))^T needs Q_I^T, packed once per query tile
//     and reused by every key tile (K and V are read in place);
//   - the online-softmax statistics (running max m_i, sum l_i) are per
//     column, so the softmax is plain vertical vector arithmetic;
//   - G = Q AK^T and W (SPEC section 2) are stored as G^T / W^T
//     (bucket x query row): a far tile adds ONE row of G^T to every key row
//     (the scalar G[i, 0] or G[i, 2k] of each query column) and adds its
//     column sums to one row of W^T; for a band tile and a fixed key j the
//     query columns split into three contiguous runs: d = j - i - off >= k
//     (bucket 2k), |d| < k (bucket d + k, at most 2k - 1 columns) and
//     d <= -k (bucket 0). The two clamped runs are contiguous vector adds;
//     only the (< 2k)-wide diagonal strip is element-wise.
// All tile products go through one register-blocked micro-kernel
// (MatMul below) with arbitrary row / inner strides for A, so P V, dS K and
// W AV read the transposed tiles directly, without transposing them.
//
// Per-target toggle guard: this file is included once per target.
#if defined(RELPOS_SRC_KERNELS_FUSED_ATTENTION_INL_H_) == \
    defined(HWY_TARGET_TOGGLE)
#ifdef RELPOS_SRC_KERNELS_FUSED_ATTENTION_INL_H_
#undef RELPOS_SRC_KERNELS_FUSED_ATTENTION_INL_H_
#else
#define RELPOS_SRC_KERNELS_FUSED_ATTENTION_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/fused_tiles.h"

HWY_BEFORE_NAMESPACE();
namespace relpos {
namespace HWY_NAMESPACE {
namespace fused_simd {

namespace hn = hwy::HWY_NAMESPACE;
using DF = hn::ScalableTag<float>;
using VF = hn::Vec<DF>;

using fused::kKeyTile;
using fused::kQueryTile;
constexpr int64_t kLd = kQueryTile;  // leading dimension of transposed tiles

// Lazy running-max threshold (natural-log units). The running max m_i used as
// the exponent's reference is only raised when a tile's column max exceeds it
// by more than this, so W and the output accumulator are rescaled rarely.
// Unnormalised probabilities are then at most e^8 ~ 2981; their sum over any
// Nk allowed fits float easily, and softmax is invariant to the reference.
constexpr float kMaxSlack = 8.0f;

// ---------------------------------------------------------------------------
// Partial vectors: the first n < Lanes lanes of p. On AVX2 and AVX-512
// Highway's MaskedLoad / BlendedStore are hardware masked accesses that never
// touch the other lanes' memory; on SSE4 and older targets Highway 1.0.3
// implements MaskedLoad as a full ALIGNED load, which may fault, so go
// through a small aligned buffer there.
HWY_INLINE VF LoadN(DF d, const float* HWY_RESTRICT p, size_t n) {
#if HWY_TARGET <= HWY_AVX2
  return hn::MaskedLoad(hn::FirstN(d, n), d, p);
#else
  HWY_ALIGN float buf[64] = {};
  for (size_t i = 0; i < n; ++i) buf[i] = p[i];
  return hn::Load(d, buf);
#endif
}

HWY_INLINE void StoreN(VF v, DF d, float* HWY_RESTRICT p, size_t n) {
#if HWY_TARGET <= HWY_AVX2
  hn::BlendedStore(v, hn::FirstN(d, n), d, p);
#else
  HWY_ALIGN float buf[64];
  hn::Store(v, d, buf);
  for (size_t i = 0; i < n; ++i) p[i] = buf[i];
#endif
}

// ---------------------------------------------------------------------------
// Micro-kernel: C[MR, NV vectors] (+)= alpha * A[MR, kin] B[kin, NV vectors].
// A(r, p) = a[r * a_row + p * a_inner]; B and C row-major (ldb, ldc).
// Per inner step: NV vector loads of B, MR broadcasts of A, MR*NV FMAs; the
// accumulators (6 x 2 = 12 vectors on AVX2) stay in registers. kTail: the
// last vector holds only `tail` valid lanes (masked load / blended store,
// which never touch memory outside the valid lanes).
template <int MR, int NV, bool kTail>
HWY_INLINE void MicroTile(DF d, size_t tail, int64_t kin,
                          const float* HWY_RESTRICT a, int64_t a_row,
                          int64_t a_inner, const float* HWY_RESTRICT b,
                          int64_t ldb, float* HWY_RESTRICT c, int64_t ldc,
                          float alpha, bool accumulate) {
  const size_t n = hn::Lanes(d);
  VF acc[MR][NV];
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) acc[r][v] = hn::Zero(d);
  }
  for (int64_t p = 0; p < kin; ++p) {
    const float* HWY_RESTRICT brow = b + p * ldb;
    VF bv[NV];
    for (int v = 0; v < NV; ++v) {
      bv[v] = (kTail && v == NV - 1) ? LoadN(d, brow + v * n, tail)
                                     : hn::LoadU(d, brow + v * n);
    }
    const float* HWY_RESTRICT ap = a + p * a_inner;
    for (int r = 0; r < MR; ++r) {
      const VF ar = hn::Set(d, ap[r * a_row]);
      for (int v = 0; v < NV; ++v) acc[r][v] = hn::MulAdd(ar, bv[v], acc[r][v]);
    }
  }
  const VF va = hn::Set(d, alpha);
  for (int r = 0; r < MR; ++r) {
    for (int v = 0; v < NV; ++v) {
      float* HWY_RESTRICT cp = c + r * ldc + v * n;
      VF x = hn::Mul(acc[r][v], va);
      if (kTail && v == NV - 1) {
        if (accumulate) x = hn::Add(x, LoadN(d, cp, tail));
        StoreN(x, d, cp, tail);
      } else {
        if (accumulate) x = hn::Add(x, hn::LoadU(d, cp));
        hn::StoreU(x, d, cp);
      }
    }
  }
}

constexpr int kMaxRows = 6;

template <int NV, bool kTail>
HWY_INLINE void RowBlocks(DF d, size_t tail, int64_t m, int64_t kin,
                          const float* a, int64_t a_row, int64_t a_inner,
                          const float* b, int64_t ldb, float* c, int64_t ldc,
                          float alpha, bool accumulate) {
  int64_t r0 = 0;
  for (; r0 + kMaxRows <= m; r0 += kMaxRows) {
    MicroTile<kMaxRows, NV, kTail>(d, tail, kin, a + r0 * a_row, a_row, a_inner,
                                   b, ldb, c + r0 * ldc, ldc, alpha,
                                   accumulate);
  }
  const float* ar = a + r0 * a_row;
  float* cr = c + r0 * ldc;
  switch (m - r0) {
    case 5:
      MicroTile<5, NV, kTail>(d, tail, kin, ar, a_row, a_inner, b, ldb, cr, ldc,
                              alpha, accumulate);
      break;
    case 4:
      MicroTile<4, NV, kTail>(d, tail, kin, ar, a_row, a_inner, b, ldb, cr, ldc,
                              alpha, accumulate);
      break;
    case 3:
      MicroTile<3, NV, kTail>(d, tail, kin, ar, a_row, a_inner, b, ldb, cr, ldc,
                              alpha, accumulate);
      break;
    case 2:
      MicroTile<2, NV, kTail>(d, tail, kin, ar, a_row, a_inner, b, ldb, cr, ldc,
                              alpha, accumulate);
      break;
    case 1:
      MicroTile<1, NV, kTail>(d, tail, kin, ar, a_row, a_inner, b, ldb, cr, ldc,
                              alpha, accumulate);
      break;
    default:
      break;
  }
}

// C[m, n] = alpha * A B (+ C if accumulate). A(r, p) = a[r*a_row + p*a_inner]
// (so a transposed operand is read in place), B[kin, n] and C row-major.
// kin = 0 gives C = 0 (or C unchanged when accumulating).
HWY_NOINLINE void MatMul(int64_t m, int64_t n, int64_t kin, const float* a,
                         int64_t a_row, int64_t a_inner, const float* b,
                         int64_t ldb, float* c, int64_t ldc, float alpha,
                         bool accumulate) {
  if (m <= 0 || n <= 0) return;
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t full = n / lanes;  // whole vectors per row of C
  int64_t vec = 0;
  for (; vec + 2 <= full; vec += 2) {
    const int64_t c0 = vec * lanes;
    RowBlocks<2, false>(d, 0, m, kin, a, a_row, a_inner, b + c0, ldb, c + c0,
                        ldc, alpha, accumulate);
  }
  if (vec < full) {
    const int64_t c0 = vec * lanes;
    RowBlocks<1, false>(d, 0, m, kin, a, a_row, a_inner, b + c0, ldb, c + c0,
                        ldc, alpha, accumulate);
  }
  const int64_t c0 = full * lanes;
  if (c0 < n) {
    RowBlocks<1, true>(d, static_cast<size_t>(n - c0), m, kin, a, a_row,
                       a_inner, b + c0, ldb, c + c0, ldc, alpha, accumulate);
  }
}

// ---------------------------------------------------------------------------
// Row helpers.

// dst[0, n) += src[0, n)
HWY_INLINE void AddRange(float* HWY_RESTRICT dst, const float* HWY_RESTRICT src,
                         int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    hn::StoreU(hn::Add(hn::LoadU(d, dst + i), hn::LoadU(d, src + i)), d,
               dst + i);
  }
  if (i < n) {  // partial vector: never touches memory past dst[n - 1]
    const size_t rest = static_cast<size_t>(n - i);
    StoreN(hn::Add(LoadN(d, dst + i, rest), LoadN(d, src + i, rest)), d,
           dst + i, rest);
  }
}

// dst[0, kLd) = a[0, kLd) - b[0, kLd)
HWY_INLINE void SubRow(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                       float* HWY_RESTRICT dst) {
  const DF d;
  for (int64_t i = 0; i < kLd; i += static_cast<int64_t>(hn::Lanes(d))) {
    hn::StoreU(hn::Sub(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, dst + i);
  }
}

HWY_INLINE void FillRange(float* dst, float value, int64_t n) {
  std::fill(dst, dst + n, value);
}

// ---------------------------------------------------------------------------
// Far / band classification of a (query tile, key tile) pair (SPEC 4).

enum class TileKind { kFarLeft, kFarRight, kBand };

HWY_INLINE TileKind Classify(const AttentionProblem& p,
                             const fused::QueryTile& t, int64_t j0,
                             int64_t kn) {
  const int64_t kk = p.max_distance;
  // Largest and smallest distance j - (i + off) over the tile pair.
  const int64_t d_max = (j0 + kn - 1) - t.i0 - p.query_offset;
  const int64_t d_min = j0 - (t.i0 + t.rows - 1) - p.query_offset;
  if (d_max <= -kk) return TileKind::kFarLeft;  // all in bucket 0
  if (d_min >= kk) return TileKind::kFarRight;  // all in bucket 2k
  return TileKind::kBand;
}

// Runs of query columns for key j inside a band tile: [0, right_end) are in
// bucket 2k (d >= k), [left_begin, rows) in bucket 0 (d <= -k), and column i
// in between uses bucket rel - i + k where rel = j - i0 - off is the distance
// at column 0.
struct BandRuns {
  int64_t right_end, left_begin, rel;
};

HWY_INLINE BandRuns MakeBandRuns(const AttentionProblem& p,
                                 const fused::QueryTile& t, int64_t j) {
  const int64_t kk = p.max_distance;
  BandRuns r;
  r.rel = j - t.i0 - p.query_offset;
  r.right_end = std::clamp<int64_t>(r.rel - kk + 1, 0, t.rows);
  // max(): with k = 0 both clamped runs would claim the column d = 0 (it is
  // bucket 0 = bucket 2k either way).
  r.left_begin =
      std::max(std::clamp<int64_t>(r.rel + kk, 0, t.rows), r.right_end);
  return r;
}

// The base bucket of a tile pair: the bucket whose table row (G[i, base],
// U[i, base]) is folded into per-column constants of the exponent, and into
// which the column sums of P / dS go, minus whatever lands elsewhere. A far
// tile is entirely in its base bucket, so it costs exactly a vanilla tile; a
// band tile only touches, pair by pair, the pairs outside its base: the
// diagonal strip |d| < k and the clamped run at the other end. The base is
// the end bucket on the tile's side of the diagonal (for causal attention
// always bucket 0: pairs in bucket 2k are masked), when reachable.
struct TileBase {
  int64_t bucket = 0;     // base bucket, in [bucket_lo, bucket_lo + buckets)
  bool band = false;      // some pair lies outside the base bucket
  bool do_left = false;   // bucket-0 run is not the base: handle pair-wise
  bool do_right = false;  // bucket-2k run is not the base (and not masked)
};

HWY_INLINE TileBase ChooseBase(const AttentionProblem& p,
                               const fused::QueryTile& t, int64_t j0,
                               int64_t kn) {
  const int64_t kk = p.max_distance;
  TileBase b;
  const TileKind kind = Classify(p, t, j0, kn);
  if (kind == TileKind::kFarLeft) {
    b.bucket = 0;
    return b;
  }
  if (kind == TileKind::kFarRight) {
    b.bucket = 2 * kk;
    return b;
  }
  b.band = true;
  const bool left_ok = t.bucket_lo == 0;
  const bool right_ok = t.bucket_lo + t.buckets - 1 == 2 * kk;
  // Sign of the tile's mean distance (times 2, to stay in integers).
  const int64_t center2 =
      (2 * j0 + kn - 1) - (2 * t.i0 + t.rows - 1) - 2 * p.query_offset;
  const bool prefer_left = p.causal || center2 <= 0;
  if (left_ok && (prefer_left || !right_ok)) {
    b.bucket = 0;
  } else if (right_ok) {
    b.bucket = 2 * kk;
  } else {
    b.bucket = t.bucket_lo;  // no clamped run at all: only the diagonal
  }
  b.do_left = left_ok && b.bucket != 0;
  // Causal: every pair with d >= k >= 1 is masked, so the bucket-2k run
  // needs nothing. (k = 0: buckets 0 and 2k coincide with the base.)
  b.do_right = right_ok && b.bucket != 2 * kk && !(p.causal && kk > 0);
  return b;
}

// Columns of the diagonal strip that matter for key j: [right_end,
// left_begin), and for causal attention only the visible ones (d <= 0, i.e.
// i >= rel): masked pairs have p = 0 and need no bias.
HWY_INLINE int64_t DiagBegin(const AttentionProblem& p, const BandRuns& r) {
  return p.causal ? std::max(r.right_end, std::min(r.rel, r.left_begin))
                  : r.right_end;
}

// Band tile: xt[jj][i] += T[bucket(j, i)][i] - T[base][i] for every pair
// outside the base bucket (T = G^T: the key-side score term; T = U^T: the
// value-side dP term, SPEC sections 2-3). `delta` is scratch for two rows.
HWY_INLINE void AddBandDelta(const AttentionProblem& p,
                             const fused::QueryTile& t, int64_t j0, int64_t kn,
                             const TileBase& base, const float* table,
                             float* delta, float* xt) {
  const int64_t kk = p.max_distance;
  const float* base_row = table + (base.bucket - t.bucket_lo) * kLd;
  float* d_right = delta;
  float* d_left = delta + kLd;
  if (base.do_right)
    SubRow(table + (2 * kk - t.bucket_lo) * kLd, base_row, d_right);
  if (base.do_left) SubRow(table + (0 - t.bucket_lo) * kLd, base_row, d_left);
  for (int64_t jj = 0; jj < kn; ++jj) {
    float* x = xt + jj * kLd;
    const BandRuns r = MakeBandRuns(p, t, j0 + jj);
    if (base.do_right) AddRange(x, d_right, r.right_end);
    // Diagonal strip: the bucket index falls by one per column.
    const float* diag = table + (r.rel + kk - t.bucket_lo) * kLd;
    for (int64_t i = DiagBegin(p, r); i < r.left_begin; ++i) {
      x[i] += diag[i - i * kLd] - base_row[i];
    }
    if (base.do_left) {
      AddRange(x + r.left_begin, d_left + r.left_begin, t.rows - r.left_begin);
    }
  }
}

// Bucketed sums of one query tile: W[i, r+k] = sum_{j: r(i,j) = r} p_ij
// (SPEC section 2) or E (the same over dS, section 3). Pairs of the
// diagonal strip go to a SKEWED array, skew[(b - lo + i) * kLd + i] for
// bucket b and query column i: for a fixed key j every column's bucket
// differs, but b - lo + i = j - i0 - off + k - lo does not, so each key row
// adds into one contiguous run of `skew` (a vector add instead of a strided
// scatter). The products with AV / AK / Q read the skewed array in place
// (MatMul's A strides). Clamped runs and base-bucket sums go to three plain
// rows `ends` (bucket 0, bucket 2k, bucket lo), folded into `skew` once per
// query tile by FoldEnds.
struct BucketAcc {
  float* skew;  // (buckets + kLd - 1) x kLd
  float* ends;  // 3 x kLd
};

HWY_INLINE BucketAcc CarveBucketAcc(float* buf, int64_t buckets) {
  return {buf, buf + (buckets + kLd - 1) * kLd};
}

HWY_INLINE void ZeroBucketAcc(const BucketAcc& acc, int64_t buckets) {
  std::fill(acc.skew, acc.ends + 3 * kLd, 0.0f);
  (void)buckets;
}

// The plain row collecting bucket `bucket` (0, 2k, or bucket_lo).
HWY_INLINE float* EndRow(const AttentionProblem& p, const BucketAcc& acc,
                         int64_t bucket) {
  if (bucket == 0) return acc.ends;
  if (bucket == 2 * p.max_distance) return acc.ends + kLd;
  return acc.ends + 2 * kLd;
}

// skew[bucket] += ends[...] for the three plain rows (unused ones are zero).
HWY_INLINE void FoldEnds(const AttentionProblem& p, const fused::QueryTile& t,
                         const BucketAcc& acc) {
  const int64_t kk = p.max_distance;
  auto fold = [&](int64_t bucket, const float* row) {
    float* col0 = acc.skew + (bucket - t.bucket_lo) * kLd;
    for (int64_t i = 0; i < kLd; ++i) col0[i * (kLd + 1)] += row[i];
  };
  const bool left_ok = t.bucket_lo == 0;
  const bool right_ok = t.bucket_lo + t.buckets - 1 == 2 * kk;
  if (left_ok) fold(0, acc.ends);
  if (right_ok && kk > 0) fold(2 * kk, acc.ends + kLd);
  if (t.bucket_lo != 0 && t.bucket_lo != 2 * kk)
    fold(t.bucket_lo, acc.ends + 2 * kLd);
}

// Adds one tile pair's bucketed sums: pairs outside the base bucket pair by
// pair (vector runs), and the base bucket the column sum minus them.
// `moved` is scratch for one row.
HWY_INLINE void AccumulateTile(const AttentionProblem& p,
                               const fused::QueryTile& t, int64_t j0,
                               int64_t kn, const TileBase& base,
                               const float* xt, const float* colsum,
                               float* moved, const BucketAcc& acc) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  float* base_row = EndRow(p, acc, base.bucket);
  if (!base.band) {
    AddRange(base_row, colsum, kLd);
    return;
  }
  const int64_t kk = p.max_distance;
  float* right = EndRow(p, acc, 2 * kk);
  float* left = EndRow(p, acc, 0);
  std::fill(moved, moved + kLd, 0.0f);
  for (int64_t jj = 0; jj < kn; ++jj) {
    const float* x = xt + jj * kLd;
    const BandRuns r = MakeBandRuns(p, t, j0 + jj);
    if (base.do_right) {
      AddRange(right, x, r.right_end);
      AddRange(moved, x, r.right_end);
    }
    const int64_t begin = DiagBegin(p, r);
    if (begin < r.left_begin) {
      float* row = acc.skew + (r.rel + kk - t.bucket_lo) * kLd;
      AddRange(row + begin, x + begin, r.left_begin - begin);
      AddRange(moved + begin, x + begin, r.left_begin - begin);
    }
    if (base.do_left) {
      const int64_t n = t.rows - r.left_begin;
      AddRange(left + r.left_begin, x + r.left_begin, n);
      AddRange(moved + r.left_begin, x + r.left_begin, n);
    }
  }
  for (int64_t i = 0; i < kLd; i += lanes) {
    hn::StoreU(
        hn::Add(hn::LoadU(d, base_row + i),
                hn::Sub(hn::LoadU(d, colsum + i), hn::LoadU(d, moved + i))),
        d, base_row + i);
  }
}

// Multiplies every row of the accumulator by the per-column alpha.
HWY_INLINE void ScaleBucketAcc(const BucketAcc& acc, int64_t buckets,
                               const float* alpha) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t nrows = buckets + kLd - 1 + 3;  // skew rows, then ends
  for (int64_t r = 0; r < nrows; ++r) {
    float* w = acc.skew + r * kLd;
    for (int64_t c0 = 0; c0 < kLd; c0 += lanes) {
      hn::StoreU(hn::Mul(hn::LoadU(d, w + c0), hn::LoadU(d, alpha + c0)), d,
                 w + c0);
    }
  }
}

// Causal mask (SPEC section 1): key j is visible to row i iff j <= i + off,
// i.e. to the columns i >= j - off - i0. Sets the hidden prefix to -inf.
// Padding needs no mask here: key tiles stop at the tile's key_end.
HWY_INLINE void ApplyCausalMask(const AttentionProblem& p,
                                const fused::QueryTile& t, int64_t j0,
                                int64_t kn, float* xt) {
  if (!p.causal) return;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t jj = 0; jj < kn; ++jj) {
    const int64_t first = (j0 + jj) - p.query_offset - t.i0;
    if (first > 0) FillRange(xt + jj * kLd, neg_inf, std::min(first, kLd));
  }
}

// qt[c][i] = scale * x[i][c] for the tile's rows; zero columns past them
// (so every product over the padded tile width stays finite).
HWY_INLINE void PackTransposed(const float* x, int64_t rows, int64_t dim,
                               float scale, float* qt) {
  for (int64_t c = 0; c < dim; ++c) {
    float* dst = qt + c * kLd;
    for (int64_t i = 0; i < rows; ++i) dst[i] = x[i * dim + c] * scale;
    for (int64_t i = rows; i < kLd; ++i) dst[i] = 0.0f;
  }
}

// ---------------------------------------------------------------------------
// Forward: one query tile of one (batch, head). SPEC section 2 and 4.
//   S^T = K_J Q_I^T / sqrt(dk) + G-gather   (masked -> -inf)
//   online softmax per column; O += P V_J; W += bucketed P
//   finally O += W AV, O /= l, lse = m + log l.
// `scratch` holds fused::ForwardScratch(p).Floats() floats.
HWY_NOINLINE void ForwardQueryTile(const AttentionProblem& p,
                                   const fused::QueryTile& t,
                                   const fused::HeadData& hd, float* scratch) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t dk = p.dk, dv = p.dv, rows = t.rows;
  float* out = hd.out + t.i0 * dv;
  float* lse = hd.lse ? hd.lse + t.i0 : nullptr;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (t.key_end == 0) {  // no row of the tile sees a key
    std::fill(out, out + rows * dv, 0.0f);
    if (lse) std::fill(lse, lse + rows, neg_inf);
    return;
  }
  const fused::ForwardScratch sz(p);
  float* qt = scratch;
  float* st = qt + sz.qt;
  float* gt = st + sz.st;
  float* wt = gt + sz.gt;
  float* oacc = wt + sz.wt;
  float* m = oacc + sz.oacc;
  float* l = m + kLd;
  float* alpha = l + kLd;
  float* m_use = alpha + kLd;
  float* colsum = m_use + kLd;
  float* delta = colsum + kLd;  // two rows
  float* moved = delta + 2 * kLd;

  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  PackTransposed(hd.q + t.i0 * dk, rows, dk, scale, qt);
  if (p.key_term) {
    // G^T slice = AK[lo : lo+nb] (Q_I / sqrt(dk))^T   (SPEC 2: G = Q AK^T /
    // sqrt(dk))
    MatMul(t.buckets, kLd, dk, hd.ak + t.bucket_lo * dk, dk, 1, qt, kLd, gt,
           kLd, 1.0f, false);
  }
  const BucketAcc w_acc = CarveBucketAcc(wt, t.buckets);
  if (p.value_term) ZeroBucketAcc(w_acc, t.buckets);
  std::fill(oacc, oacc + rows * dv, 0.0f);
  std::fill(m, m + kLd, neg_inf);
  std::fill(l, l + kLd, 0.0f);

  const VF v_neg_inf = hn::Set(d, neg_inf);
  const VF v_slack = hn::Set(d, kMaxSlack);
  for (int64_t j0 = 0; j0 < t.key_end; j0 += kKeyTile) {
    const int64_t kn = std::min(kKeyTile, t.key_end - j0);
    const TileBase base = ChooseBase(p, t, j0, kn);
    MatMul(kn, kLd, dk, hd.k + j0 * dk, dk, 1, qt, kLd, st, kLd, 1.0f, false);
    // Key-side term s_ij = S_ij + G[i, r(i,j)+k]: the base bucket's
    // G[i, base] is one scalar per column, folded into the column's max and
    // exponent below; a band tile adds G[i, r+k] - G[i, base] pair by pair
    // for the pairs outside the base.
    const float* g_base = nullptr;
    if (p.key_term) {
      g_base = gt + (base.bucket - t.bucket_lo) * kLd;
      if (base.band) AddBandDelta(p, t, j0, kn, base, gt, delta, st);
    }
    ApplyCausalMask(p, t, j0, kn, st);

    // Online softmax, one vector of query columns at a time.
    bool rescale = false;
    for (int64_t c0 = 0; c0 < kLd; c0 += lanes) {
      const VF g = g_base ? hn::LoadU(d, g_base + c0) : hn::Zero(d);
      VF tile_max = v_neg_inf;
      for (int64_t jj = 0; jj < kn; ++jj) {
        tile_max = hn::Max(tile_max, hn::LoadU(d, st + jj * kLd + c0));
      }
      tile_max = hn::Add(tile_max, g);  // -inf stays -inf
      const VF m_old = hn::LoadU(d, m + c0);
      // Raise the reference only when the tile exceeds it by > kMaxSlack.
      const VF m_new = hn::IfThenElse(hn::Gt(tile_max, hn::Add(m_old, v_slack)),
                                      tile_max, m_old);
      // A column that has seen only masked keys keeps m = -inf; use 0 as its
      // reference so exp(-inf - 0) = 0 instead of NaN.
      const VF ref =
          hn::IfThenElse(hn::Eq(m_new, v_neg_inf), hn::Zero(d), m_new);
      const VF a = hwy::HWY_NAMESPACE::Exp(d, hn::Sub(m_old, ref));
      // p = exp(S + g - ref) = exp(S - (ref - g)).
      const VF shift = hn::Sub(ref, g);
      VF sum = hn::Zero(d);
      for (int64_t jj = 0; jj < kn; ++jj) {
        float* s = st + jj * kLd + c0;
        const VF e =
            hwy::HWY_NAMESPACE::Exp(d, hn::Sub(hn::LoadU(d, s), shift));
        hn::StoreU(e, d, s);
        sum = hn::Add(sum, e);
      }
      hn::StoreU(m_new, d, m + c0);
      hn::StoreU(hn::MulAdd(hn::LoadU(d, l + c0), a, sum), d, l + c0);
      hn::StoreU(a, d, alpha + c0);
      hn::StoreU(sum, d, colsum + c0);
      if (!hn::AllTrue(d, hn::Eq(a, hn::Set(d, 1.0f)))) rescale = true;
    }
    // The accumulators are still zero on the first key tile: nothing to scale.
    if (rescale && j0 > 0) {
      // W and the output accumulator share the reference m (SPEC 4).
      for (int64_t i = 0; i < rows; ++i) {
        const float a = alpha[i];
        if (a == 1.0f) continue;
        float* o = oacc + i * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] *= a;
      }
      if (p.value_term) ScaleBucketAcc(w_acc, t.buckets, alpha);
    }
    // O_I += P V_J: A(i, jj) = P^T[jj][i].
    MatMul(rows, dv, kn, st, 1, kLd, hd.v + j0 * dv, dv, oacc, dv, 1.0f, true);
    if (p.value_term) {
      AccumulateTile(p, t, j0, kn, base, st, colsum, moved, w_acc);
    }
  }
  if (p.value_term) {
    // O_I += W AV[lo : lo+nb]: A(i, b) = skew[(b + i) * kLd + i].
    FoldEnds(p, t, w_acc);
    MatMul(rows, dv, t.buckets, w_acc.skew, kLd + 1, kLd,
           hd.av + t.bucket_lo * dv, dv, oacc, dv, 1.0f, true);
  }
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + i * dv;
    const float* acc = oacc + i * dv;
    if (l[i] > 0.0f) {
      const float inv = 1.0f / l[i];
      for (int64_t c = 0; c < dv; ++c) o[c] = acc[c] * inv;
      if (lse) lse[i] = m[i] + std::log(l[i]);
    } else {  // the row sees no key: zeros, lse = -inf (SPEC 1)
      std::fill(o, o + dv, 0.0f);
      if (lse) lse[i] = neg_inf;
    }
  }
}

// ---------------------------------------------------------------------------
// Backward: one query tile of one (batch, head), SPEC section 3, recomputing
// P from the saved lse. Accumulates into hd.dk / hd.dv (rows of this head or
// a chunk-private copy) and hd.dak / hd.dav (per-thread, rows from
// hd.bucket_base); writes the tile's rows of hd.dq.
//   P^T  = exp(S^T - lse)                       (S^T as in the forward)
//   dP^T = V_J dO_I^T + U-gather                (U = dO AV^T)
//   dS^T = P^T * (dP^T - D),  D_i = dO_i . o_i
//   dV_J += P^T dO_I;  dK_J += dS^T Q_I / sqrt(dk);  dQ_I += dS K_J
//   W += bucketed P, E += bucketed dS; at the end
//   dQ_I += E AK, dQ_I /= sqrt(dk);  dAK += E^T Q_I / sqrt(dk);  dAV += W^T
//   dO_I
//
// Only key tiles first, first + step, ... are visited (step > 1 splits one
// (batch, head) over threads by key tiles; dQ_I, dAK and dAV are linear in
// the visited pairs, so each split writes a partial dQ_I that the driver
// sums).
HWY_NOINLINE void BackwardQueryTile(const AttentionProblem& p,
                                    const fused::QueryTile& t,
                                    const fused::HeadData& hd, float* scratch,
                                    int64_t key_tile_first,
                                    int64_t key_tile_step) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t dk = p.dk, dv = p.dv, rows = t.rows;
  if (t.key_end == 0) {  // no row sees a key: zero gradient
    if (hd.dq) std::fill(hd.dq + t.i0 * dk, hd.dq + (t.i0 + rows) * dk, 0.0f);
    return;
  }
  const fused::BackwardScratch sz(p);
  float* qt = scratch;
  float* dot = qt + sz.qt;
  float* st = dot + sz.dot;
  float* dpt = st + sz.st;
  float* gt = dpt + sz.dpt;
  float* ut = gt + sz.gt;
  float* et = ut + sz.ut;
  float* wt = et + sz.et;
  float* dqacc = wt + sz.wt;
  float* drow = dqacc + sz.dqacc;
  float* lse_row = drow + kLd;
  float* p_colsum = lse_row + kLd;
  float* ds_colsum = p_colsum + kLd;
  float* delta = ds_colsum + kLd;  // two rows
  float* moved = delta + 2 * kLd;

  const float scale = 1.0f / std::sqrt(static_cast<float>(dk));
  const float* q = hd.q + t.i0 * dk;
  const float* dout = hd.dout + t.i0 * dv;
  PackTransposed(q, rows, dk, scale, qt);
  PackTransposed(dout, rows, dv, 1.0f, dot);
  for (int64_t i = 0; i < kLd; ++i) {
    if (i < rows) {
      // D_i = dO_i . o_i (o_i includes the AV term), SPEC 3.
      const float* o = hd.o + (t.i0 + i) * dv;
      const float* g = dout + i * dv;
      float s = 0.0f;
      for (int64_t c = 0; c < dv; ++c) s += g[c] * o[c];
      drow[i] = s;
      // A row that sees no key has lse = -inf; all its scores are masked to
      // -inf, and exp(-inf - 0) = 0 keeps its P (and gradient) at zero.
      const float lv = hd.lse_in[t.i0 + i];
      lse_row[i] = std::isfinite(lv) ? lv : 0.0f;
    } else {
      drow[i] = 0.0f;
      lse_row[i] = 0.0f;
    }
  }
  const bool want_w = p.value_term && hd.dav != nullptr;
  if (p.key_term) {
    MatMul(t.buckets, kLd, dk, hd.ak + t.bucket_lo * dk, dk, 1, qt, kLd, gt,
           kLd, 1.0f, false);
  }
  const BucketAcc e_acc = CarveBucketAcc(et, t.buckets);
  const BucketAcc w_acc = CarveBucketAcc(wt, t.buckets);
  if (p.key_term) ZeroBucketAcc(e_acc, t.buckets);
  if (p.value_term) {
    // U^T slice = AV[lo : lo+nb] dO_I^T.
    MatMul(t.buckets, kLd, dv, hd.av + t.bucket_lo * dv, dv, 1, dot, kLd, ut,
           kLd, 1.0f, false);
  }
  if (want_w) ZeroBucketAcc(w_acc, t.buckets);
  if (hd.dq) std::fill(dqacc, dqacc + rows * dk, 0.0f);

  for (int64_t j0 = key_tile_first * kKeyTile; j0 < t.key_end;
       j0 += key_tile_step * kKeyTile) {
    const int64_t kn = std::min(kKeyTile, t.key_end - j0);
    const TileBase base = ChooseBase(p, t, j0, kn);
    MatMul(kn, kLd, dk, hd.k + j0 * dk, dk, 1, qt, kLd, st, kLd, 1.0f, false);
    MatMul(kn, kLd, dv, hd.v + j0 * dv, dv, 1, dot, kLd, dpt, kLd, 1.0f, false);
    // As in the forward, the base bucket is folded into per-column constants:
    // p = exp(S + g - lse) = exp(S - (lse - g)) and
    // dS = p (dP + u - D) = p (dP - (D - u)) with g = G[i, base], u = U[i,
    // base]; band tiles add the differences for pairs outside the base.
    const float* g_base = nullptr;
    const float* u_base = nullptr;
    if (p.key_term) {
      g_base = gt + (base.bucket - t.bucket_lo) * kLd;
      if (base.band) AddBandDelta(p, t, j0, kn, base, gt, delta, st);
    }
    if (p.value_term) {
      u_base = ut + (base.bucket - t.bucket_lo) * kLd;
      if (base.band) AddBandDelta(p, t, j0, kn, base, ut, delta, dpt);
    }
    ApplyCausalMask(p, t, j0, kn, st);
    for (int64_t c0 = 0; c0 < kLd; c0 += lanes) {
      const VF g = g_base ? hn::LoadU(d, g_base + c0) : hn::Zero(d);
      const VF u = u_base ? hn::LoadU(d, u_base + c0) : hn::Zero(d);
      const VF shift = hn::Sub(hn::LoadU(d, lse_row + c0), g);
      const VF d_shift = hn::Sub(hn::LoadU(d, drow + c0), u);
      VF p_sum = hn::Zero(d), ds_sum = hn::Zero(d);
      for (int64_t jj = 0; jj < kn; ++jj) {
        float* s = st + jj * kLd + c0;
        float* gp = dpt + jj * kLd + c0;
        const VF pr =
            hwy::HWY_NAMESPACE::Exp(d, hn::Sub(hn::LoadU(d, s), shift));
        hn::StoreU(pr, d, s);
        const VF ds = hn::Mul(pr, hn::Sub(hn::LoadU(d, gp), d_shift));
        hn::StoreU(ds, d, gp);
        p_sum = hn::Add(p_sum, pr);
        ds_sum = hn::Add(ds_sum, ds);
      }
      hn::StoreU(p_sum, d, p_colsum + c0);
      hn::StoreU(ds_sum, d, ds_colsum + c0);
    }
    if (want_w) AccumulateTile(p, t, j0, kn, base, st, p_colsum, moved, w_acc);
    if (p.key_term) {
      AccumulateTile(p, t, j0, kn, base, dpt, ds_colsum, moved, e_acc);
    }
    if (hd.dv) {
      MatMul(kn, dv, rows, st, kLd, 1, dout, dv, hd.dv + j0 * dv, dv, 1.0f,
             true);
    }
    if (hd.dk) {
      MatMul(kn, dk, rows, dpt, kLd, 1, q, dk, hd.dk + j0 * dk, dk, scale,
             true);
    }
    if (hd.dq) {
      MatMul(rows, dk, kn, dpt, 1, kLd, hd.k + j0 * dk, dk, dqacc, dk, 1.0f,
             true);
    }
  }
  // Skewed accumulators: E(i, b) = skew[(b + i) * kLd + i], so E is read
  // with A strides (kLd + 1, kLd) and E^T with (kLd, kLd + 1).
  if (p.key_term) {
    FoldEnds(p, t, e_acc);
    if (hd.dq) {
      MatMul(rows, dk, t.buckets, e_acc.skew, kLd + 1, kLd,
             hd.ak + t.bucket_lo * dk, dk, dqacc, dk, 1.0f, true);
    }
    if (hd.dak) {
      MatMul(t.buckets, dk, rows, e_acc.skew, kLd, kLd + 1, q, dk,
             hd.dak + (t.bucket_lo - hd.bucket_base) * dk, dk, scale, true);
    }
  }
  if (want_w) {
    FoldEnds(p, t, w_acc);
    MatMul(t.buckets, dv, rows, w_acc.skew, kLd, kLd + 1, dout, dv,
           hd.dav + (t.bucket_lo - hd.bucket_base) * dv, dv, 1.0f, true);
  }
  if (hd.dq) {
    float* dq = hd.dq + t.i0 * dk;
    for (int64_t e = 0; e < rows * dk; ++e) dq[e] = dqacc[e] * scale;
  }
}

}  // namespace fused_simd
}  // namespace HWY_NAMESPACE
}  // namespace relpos
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard

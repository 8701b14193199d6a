// SIMD bodies of the fused relative-attention kernel (docs/math.md section 4),
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
//   - G = Q AK^T and W (docs/math.md section 2) are stored as G^T / W^T
//     (bucket x query row): a far tile adds ONE row of G^T to every key row
//     (the scalar G[i, 0] or G[i, 2k] of each query column) and adds its
//     column sums to one row of W^T; for a band tile and a fixed key j the
//     query columns split into three contiguous runs: d = j - i - off >= k
//     (bucket 2k), |d| < k (bucket d + k, at most 2k - 1 columns) and
//     d <= -k (bucket 0). The two clamped runs are contiguous vector adds,
//     and so is the diagonal strip: it reads a skewed copy of G^T / U^T
//     (SkewTable) in which the bucket that falls by one per column is one
//     row.
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
#include <type_traits>

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

// Query columns of a tile that are computed: its rows rounded up to whole
// vectors (at most kLd). A short tile (n < 64, or the last tile of a
// sequence) does not pay for the padding columns in S^T, dP^T, G^T, U^T,
// the softmax or the bucket sums; columns >= Cols(t) of every score-shaped
// tile are never written or read.
HWY_INLINE int64_t Cols(const fused::QueryTile& t) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(DF()));
  return std::min(kLd, (t.rows + lanes - 1) / lanes * lanes);
}

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

// dst[0, n) += a[0, n) - b[0, n)
HWY_INLINE void AddDiffRange(float* HWY_RESTRICT dst,
                             const float* HWY_RESTRICT a,
                             const float* HWY_RESTRICT b, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const VF diff = hn::Sub(hn::LoadU(d, a + i), hn::LoadU(d, b + i));
    hn::StoreU(hn::Add(hn::LoadU(d, dst + i), diff), d, dst + i);
  }
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i);
    const VF diff = hn::Sub(LoadN(d, a + i, rest), LoadN(d, b + i, rest));
    StoreN(hn::Add(LoadN(d, dst + i, rest), diff), d, dst + i, rest);
  }
}

// dst[0, cols) = a[0, cols) - b[0, cols), cols a multiple of the lanes
HWY_INLINE void SubRow(const float* HWY_RESTRICT a, const float* HWY_RESTRICT b,
                       int64_t cols, float* HWY_RESTRICT dst) {
  const DF d;
  for (int64_t i = 0; i < cols; i += static_cast<int64_t>(hn::Lanes(d))) {
    hn::StoreU(hn::Sub(hn::LoadU(d, a + i), hn::LoadU(d, b + i)), d, dst + i);
  }
}

// dst[0, n) = value, with vector stores (never a libc memset call: the fills
// here are short and many).
HWY_INLINE void FillRange(float* HWY_RESTRICT dst, float value, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF v = hn::Set(d, value);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) hn::StoreU(v, d, dst + i);
  if (i < n) StoreN(v, d, dst + i, static_cast<size_t>(n - i));
}

// Skewed copy of a bucket-major table slice (G^T or U^T, `buckets` rows of
// kLd query columns): sk[(r + i) * kLd + i] = table[r * kLd + i]. Row c of
// `sk` holds, in column i, bucket c - i: exactly the values a band tile's key
// row with c = rel + k - bucket_lo needs along its diagonal strip (the bucket
// falls by one per column), so that strip becomes one contiguous vector run
// instead of a gather with stride 1 - kLd. Entries with c - i outside
// [0, buckets) are never read. One pass per query tile; every band tile of
// the query tile reads it.
template <int64_t kCols>
HWY_INLINE void SkewRows(const float* HWY_RESTRICT table, int64_t buckets,
                         int64_t cols, float* HWY_RESTRICT sk) {
  const int64_t n = kCols > 0 ? kCols : cols;  // a constant: fully unrolled
  for (int64_t r = 0; r < buckets; ++r) {
    const float* HWY_RESTRICT src = table + r * kLd;
    float* HWY_RESTRICT dst = sk + r * kLd;
    for (int64_t i = 0; i < n; ++i) dst[i * (kLd + 1)] = src[i];
  }
}

HWY_INLINE void SkewTable(const float* HWY_RESTRICT table, int64_t buckets,
                          int64_t cols, float* HWY_RESTRICT sk) {
  if (cols == kLd) {
    SkewRows<kLd>(table, buckets, cols, sk);
  } else {
    SkewRows<0>(table, buckets, cols, sk);
  }
}

// ---------------------------------------------------------------------------
// Far / band classification of a (query tile, key tile) pair (docs/math.md section 4).

enum class TileKind { kFarLeft, kFarRight, kBand };

HWY_INLINE TileKind Classify(const AttentionProblem& p,
                             const fused::QueryTile& t, int64_t j0,
                             int64_t kn) {
  const fused::ClipReach cr = fused::Reach(p);
  // Largest and smallest distance j - (i + off) over the tile pair.
  const int64_t d_max = (j0 + kn - 1) - t.i0 - t.off;
  const int64_t d_min = j0 - (t.i0 + t.rows - 1) - t.off;
  if (d_max <= -cr.left) return TileKind::kFarLeft;  // all in bucket 0
  if (d_min >= cr.right) return TileKind::kFarRight;  // all in the top one
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
  const fused::ClipReach cr = fused::Reach(p);
  BandRuns r;
  r.rel = j - t.i0 - t.off;
  r.right_end = std::clamp<int64_t>(r.rel - cr.right + 1, 0, t.rows);
  // max(): with k = 0 both clamped runs would claim the column d = 0 (it is
  // bucket 0 = bucket 2k either way).
  r.left_begin =
      std::max(std::clamp<int64_t>(r.rel + cr.left, 0, t.rows), r.right_end);
  return r;
}

// sum over x in [a, a + n) of clamp(x, 0, hi), in O(1); n >= 0, hi >= 0.
HWY_INLINE int64_t SumClamped(int64_t a, int64_t n, int64_t hi) {
  const int64_t last = a + n - 1;
  int64_t sum = 0;
  const int64_t mid_lo = std::max<int64_t>(a, 0);
  const int64_t mid_hi = std::min(last, hi);
  if (mid_lo <= mid_hi) sum += (mid_lo + mid_hi) * (mid_hi - mid_lo + 1) / 2;
  const int64_t top_lo = std::max(a, hi + 1);
  if (top_lo <= last) sum += hi * (last - top_lo + 1);
  return sum;
}

// How a tile pair handles the relative terms. Far tiles and most band tiles
// are FOLDED: a base bucket's table row (G[i, base], U[i, base]) is folded
// into per-column constants of the exponent, and the column sums of P / dS go
// to the base bucket, minus whatever lands elsewhere. A far tile is entirely
// in its base bucket, so it costs exactly a vanilla tile; a folded band tile
// touches, pair by pair, only the pairs outside its base: the diagonal strip
// |d| < k and the clamped run at the other end. The base is the end bucket
// on the tile's side of the diagonal (for causal attention always bucket 0:
// pairs in bucket 2k are masked), when reachable. A band tile whose pairs lie
// mostly outside any one end bucket (the tile on the diagonal, or every band
// tile when 2k approaches the tile size) is DIRECT instead: nothing is
// folded, and every visible pair adds its own table entry and goes to its
// own bucket, each key row as at most three contiguous runs. Folding costs
// about 3.25 vector passes per non-base pair (the difference to the base in
// the scores, then both the bucket and the `moved` sum), direct 2 per pair,
// so direct wins once more than ~60% of the pairs are outside the base.
struct TileBase {
  int64_t bucket = 0;     // folded: base bucket, in [lo, lo + buckets)
  bool band = false;      // some pair lies outside one end bucket
  bool folded = true;     // false: direct band tile (no base bucket)
  bool do_left = false;   // bucket-0 run is not the base: handle pair-wise
  bool do_right = false;  // bucket-2k run is not the base (and not masked)
  // Key rows [row_begin, row_end) of the tile have pair-wise work (folded
  // tiles beside the diagonal: only the rows that reach the strip).
  int64_t row_begin = 0, row_end = 0;
};

HWY_INLINE TileBase ChooseBase(const AttentionProblem& p,
                               const fused::QueryTile& t, int64_t j0,
                               int64_t kn) {
  const fused::ClipReach cr = fused::Reach(p);
  const int64_t top = cr.top();
  TileBase b;
  const TileKind kind = Classify(p, t, j0, kn);
  if (kind == TileKind::kFarLeft) {
    b.bucket = 0;
    return b;
  }
  if (kind == TileKind::kFarRight) {
    b.bucket = top;
    return b;
  }
  b.band = true;
  const bool left_ok = t.bucket_lo == 0;
  const bool right_ok = t.bucket_lo + t.buckets - 1 == top;
  // Causal: every pair with d >= k >= 1 is masked, so the bucket-2k run
  // needs nothing. (k = 0: buckets 0 and 2k coincide.)
  const bool right_visible = right_ok && !(p.causal && cr.right > 0);
  // Sign of the tile's mean distance (times 2, to stay in integers).
  const int64_t center2 =
      (2 * j0 + kn - 1) - (2 * t.i0 + t.rows - 1) - 2 * t.off;
  const bool prefer_left = p.causal || center2 <= 0;
  if (left_ok && (prefer_left || !right_ok)) {
    b.bucket = 0;
  } else if (right_ok) {
    b.bucket = top;
  } else {
    b.bucket = t.bucket_lo;  // no clamped run at all: only the diagonal
  }
  // Pair counts of the three runs over the tile's key rows (MakeBandRuns:
  // right_end = clamp(rel - k + 1), left_begin = clamp(rel + k), or
  // right_end for k = 0).
  const int64_t rel0 = j0 - t.i0 - t.off;
  const int64_t pairs = kn * t.rows;
  const int64_t right = SumClamped(rel0 - cr.right + 1, kn, t.rows);
  const int64_t left =
      top > 0 ? pairs - SumClamped(rel0 + cr.left, kn, t.rows) : pairs - right;
  const int64_t diag = pairs - right - left;
  const bool right_work = right_visible && right > 0;
  const bool left_work = left_ok && left > 0;
  if (top > 0) {
    const int64_t visible = diag + left + (right_visible ? right : 0);
    int64_t outside = diag;
    if (b.bucket != 0) outside += left;
    if (b.bucket != top && right_visible) outside += right;
    if (13 * outside > 8 * visible) b.folded = false;
  }
  b.do_left = left_work && (!b.folded || b.bucket != 0);
  b.do_right = right_work && (!b.folded || b.bucket != top);
  // Key rows with pair-wise work: the union of the rows where an active run
  // is non-empty (right: rel - k + 1 > 0; strip: rel - k + 1 < rows and
  // rel + k > 0; left: rel + k < rows). The intervals overlap, so their
  // union is one interval.
  int64_t first = kn, last = 0;
  if (top > 0) {
    first = std::min(first, 1 - cr.left - rel0);
    last = std::max(last, t.rows + cr.right - 1 - rel0);
  }
  if (b.do_right) {
    first = std::min(first, cr.right - rel0);
    last = kn;
  }
  if (b.do_left) {
    first = 0;
    last = std::max(last, t.rows - cr.left - rel0);
  }
  b.row_begin = std::clamp<int64_t>(first, 0, kn);
  b.row_end = std::clamp<int64_t>(last, b.row_begin, kn);
  return b;
}

// Columns of the diagonal strip that matter for key j: [right_end,
// left_begin), and for causal attention only the visible ones (d <= 0, i.e.
// i >= rel): masked pairs have p = 0 and need no bias.
HWY_INLINE int64_t DiagBegin(const AttentionProblem& p, const BandRuns& r) {
  return p.causal ? std::max(r.right_end, std::min(r.rel, r.left_begin))
                  : r.right_end;
}

// One relative term of a band tile: the table slice T (G^T for the key-side
// score term, U^T for the value-side dP term, docs/math.md sections 2-3),
// its skewed copy (SkewTable) and the score-shaped tile it is added to.
struct BandTerm {
  const float* table;
  const float* skew;
  float* xt;
};

// Band tile, for each of the `count` terms (the backward does G and U in
// one pass over the key rows): folded, xt[jj][i] += T[bucket(j, i)][i] -
// T[base][i] for every pair outside the base bucket; direct, xt[jj][i] +=
// T[bucket(j, i)][i] for every visible pair. Per key row everything is a
// contiguous vector run: the clamped runs add a table row (folded: its
// difference to the base row, precomputed), the diagonal strip reads the
// skewed copy. `delta` is scratch for 2 * count rows.
HWY_INLINE void AddBandDelta(const AttentionProblem& p,
                             const fused::QueryTile& t, int64_t j0,
                             const TileBase& base, const BandTerm* terms,
                             int count, float* delta) {
  const fused::ClipReach cr = fused::Reach(p);
  const float* base_row[2] = {nullptr, nullptr};
  const float* right_src[2] = {nullptr, nullptr};
  const float* left_src[2] = {nullptr, nullptr};
  for (int e = 0; e < count; ++e) {
    const float* table = terms[e].table;
    const float* right_row = table + (cr.top() - t.bucket_lo) * kLd;
    const float* left_row = table + (0 - t.bucket_lo) * kLd;
    if (!base.folded) {
      right_src[e] = right_row;
      left_src[e] = left_row;
      continue;
    }
    base_row[e] = table + (base.bucket - t.bucket_lo) * kLd;
    right_src[e] = delta + 2 * e * kLd;
    left_src[e] = delta + (2 * e + 1) * kLd;
    if (base.do_right) {
      SubRow(right_row, base_row[e], Cols(t), delta + 2 * e * kLd);
    }
    if (base.do_left) {
      SubRow(left_row, base_row[e], Cols(t), delta + (2 * e + 1) * kLd);
    }
  }
  for (int64_t jj = base.row_begin; jj < base.row_end; ++jj) {
    const BandRuns r = MakeBandRuns(p, t, j0 + jj);
    const int64_t begin = DiagBegin(p, r);
    const int64_t left_n = t.rows - r.left_begin;
    for (int e = 0; e < count; ++e) {
      float* x = terms[e].xt + jj * kLd;
      if (base.do_right) AddRange(x, right_src[e], r.right_end);
      if (begin < r.left_begin) {
        // Skewed row rel + left - lo holds bucket rel - i + left in column i.
        const float* diag =
            terms[e].skew + (r.rel + cr.left - t.bucket_lo) * kLd;
        if (base.folded) {
          AddDiffRange(x + begin, diag + begin, base_row[e] + begin,
                       r.left_begin - begin);
        } else {
          AddRange(x + begin, diag + begin, r.left_begin - begin);
        }
      }
      if (base.do_left) {
        AddRange(x + r.left_begin, left_src[e] + r.left_begin, left_n);
      }
    }
  }
}

// Bucketed sums of one query tile: W[i, r+k] = sum_{j: r(i,j) = r} p_ij
// (docs/math.md section 2) or E (the same over dS, section 3). Pairs of the
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

// Whole rows of full vectors: cheaper than zeroing only the parallelogram
// (0 <= c - i < buckets in skewed row c) that the readers use.
HWY_INLINE void ZeroBucketAcc(const BucketAcc& acc, int64_t buckets) {
  FillRange(acc.skew, 0.0f, (buckets + kLd - 1 + 3) * kLd);
}

// The plain row collecting bucket `bucket` (0, 2k, or bucket_lo).
HWY_INLINE float* EndRow(const AttentionProblem& p, const BucketAcc& acc,
                         int64_t bucket) {
  if (bucket == 0) return acc.ends;
  if (bucket == fused::Reach(p).top()) return acc.ends + kLd;
  return acc.ends + 2 * kLd;
}

// skew[bucket] += ends[...] for the three plain rows (unused ones are zero).
HWY_INLINE void FoldEnds(const AttentionProblem& p, const fused::QueryTile& t,
                         const BucketAcc& acc) {
  const int64_t top = fused::Reach(p).top();
  auto fold = [&](int64_t bucket, const float* row) {
    float* col0 = acc.skew + (bucket - t.bucket_lo) * kLd;
    for (int64_t i = 0; i < t.rows; ++i) col0[i * (kLd + 1)] += row[i];
  };
  const bool left_ok = t.bucket_lo == 0;
  const bool right_ok = t.bucket_lo + t.buckets - 1 == top;
  if (left_ok) fold(0, acc.ends);
  if (right_ok && top > 0) fold(top, acc.ends + kLd);
  if (t.bucket_lo != 0 && t.bucket_lo != top)
    fold(t.bucket_lo, acc.ends + 2 * kLd);
}

// One bucketed sum to accumulate from a tile pair: the score-shaped tile
// (P^T or dS^T), its column sums, a scratch row and the accumulator.
struct AccTerm {
  const float* xt;
  const float* colsum;
  float* moved;
  const BucketAcc* acc;
};

// Adds one tile pair's bucketed sums for each of the `count` terms (the
// backward does W and E in one pass). Folded: pairs outside the base bucket
// pair by pair (vector runs), and the base bucket the column sum minus them.
// Direct: every run to its own bucket.
HWY_INLINE void AccumulateTile(const AttentionProblem& p,
                               const fused::QueryTile& t, int64_t j0,
                               const TileBase& base, const AccTerm* terms,
                               int count) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t cols = Cols(t);
  if (!base.band) {
    for (int e = 0; e < count; ++e) {
      AddRange(EndRow(p, *terms[e].acc, base.bucket), terms[e].colsum, cols);
    }
    return;
  }
  const fused::ClipReach cr = fused::Reach(p);
  const bool folded = base.folded;
  if (folded) {
    for (int e = 0; e < count; ++e) FillRange(terms[e].moved, 0.0f, cols);
  }
  for (int64_t jj = base.row_begin; jj < base.row_end; ++jj) {
    const BandRuns r = MakeBandRuns(p, t, j0 + jj);
    const int64_t begin = DiagBegin(p, r);
    const int64_t left_n = t.rows - r.left_begin;
    for (int e = 0; e < count; ++e) {
      const float* x = terms[e].xt + jj * kLd;
      const BucketAcc& acc = *terms[e].acc;
      float* moved = terms[e].moved;
      if (base.do_right) {
        AddRange(EndRow(p, acc, cr.top()), x, r.right_end);
        if (folded) AddRange(moved, x, r.right_end);
      }
      if (begin < r.left_begin) {
        float* row = acc.skew + (r.rel + cr.left - t.bucket_lo) * kLd;
        AddRange(row + begin, x + begin, r.left_begin - begin);
        if (folded) AddRange(moved + begin, x + begin, r.left_begin - begin);
      }
      if (base.do_left) {
        AddRange(EndRow(p, acc, 0) + r.left_begin, x + r.left_begin, left_n);
        if (folded) AddRange(moved + r.left_begin, x + r.left_begin, left_n);
      }
    }
  }
  if (!folded) return;
  for (int e = 0; e < count; ++e) {
    float* base_row = EndRow(p, *terms[e].acc, base.bucket);
    const float* colsum = terms[e].colsum;
    const float* moved = terms[e].moved;
    for (int64_t i = 0; i < cols; i += lanes) {
      hn::StoreU(
          hn::Add(hn::LoadU(d, base_row + i),
                  hn::Sub(hn::LoadU(d, colsum + i), hn::LoadU(d, moved + i))),
          d, base_row + i);
    }
  }
}

// Multiplies every row of the accumulator by the per-column alpha (the first
// `cols` columns, the ones in use).
HWY_INLINE void ScaleBucketAcc(const BucketAcc& acc, int64_t buckets,
                               int64_t cols, const float* alpha) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t nrows = buckets + kLd - 1 + 3;  // skew rows, then ends
  for (int64_t r = 0; r < nrows; ++r) {
    float* w = acc.skew + r * kLd;
    for (int64_t c0 = 0; c0 < cols; c0 += lanes) {
      hn::StoreU(hn::Mul(hn::LoadU(d, w + c0), hn::LoadU(d, alpha + c0)), d,
                 w + c0);
    }
  }
}

// Causal mask (docs/math.md section 1): key j is visible to row i iff j <= i + off,
// i.e. to the columns i >= j - off - i0. Sets the hidden prefix to -inf.
// Padding needs no mask here: key tiles start at the tile's key_begin
// and stop at its key_end.
HWY_INLINE void ApplyCausalMask(const AttentionProblem& p,
                                const fused::QueryTile& t, int64_t j0,
                                int64_t kn, float* xt) {
  if (!p.causal) return;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  for (int64_t jj = 0; jj < kn; ++jj) {
    const int64_t first = (j0 + jj) - t.off - t.i0;
    if (first > 0) FillRange(xt + jj * kLd, neg_inf, std::min(first, Cols(t)));
  }
}

// ALiBi's score term (docs/math.md section 8): xt[jj][i] -= m |r| with
// r = j0 + jj - (i0 + i + off). It has no table and no reach, so every tile
// pair pays it. The distance is formed in float, exact while |r| < 2^24.
// A tile pair whose distances all are (AlibiInLoop) adds the term inside
// the softmax loop that reads S anyway (AlibiCursor: per vector of query
// columns one add, one absolute value and one fused multiply-add, and no
// pass of its own over S^T); this function is the separate pass for the
// rest: rows further out (offsets beyond 2^24) take a scalar loop that
// rounds |r| to float as the reference does.
// Only the tile's first `cols` query columns (Cols(t)) are computed.
HWY_INLINE bool AlibiInLoop(const fused::QueryTile& t, int64_t j0,
                            int64_t kn) {
  constexpr int64_t kExact = (int64_t{1} << 24) - kLd;
  const int64_t rel0 = j0 - t.i0 - t.off;
  return rel0 > -kExact && rel0 + kn - 1 < kExact;
}

// The distances r = rel0 + jj - (c0 + lane) of one vector of query columns,
// walked down the key rows jj = 0, 1, ... of an AlibiInLoop tile pair: Apply
// returns x - m |r| and steps to the next key row. Exact integers in float,
// so the result is bit for bit AddAlibi's.
// `step` > 1 walks every step-th row (several cursors side by side, so that
// no row waits on the previous row's add).
struct AlibiCursor {
  VF r, m, step;
  AlibiCursor(DF d, int64_t rel0, int64_t c0, float slope, float row_step = 1)
      : r(hn::Sub(hn::Set(d, static_cast<float>(rel0)),
                  hn::Iota(d, static_cast<float>(c0)))),
        m(hn::Set(d, slope)),
        step(hn::Set(d, row_step)) {}
  HWY_INLINE VF Apply(VF x) {
    const VF y = hn::NegMulAdd(m, hn::Abs(r), x);
    r = hn::Add(r, step);
    return y;
  }
};

HWY_INLINE void AddAlibi(const fused::QueryTile& t, int64_t j0, int64_t kn,
                         int64_t cols, float slope, float* xt) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF vm = hn::Set(d, slope);
  constexpr int64_t kExact = (int64_t{1} << 24) - kLd;
  const int64_t rel0 = j0 - t.i0 - t.off;
  for (int64_t jj = 0; jj < kn; ++jj) {
    const int64_t rel = rel0 + jj;
    float* HWY_RESTRICT x = xt + jj * kLd;
    if (rel > -kExact && rel < kExact) {
      const VF vrel = hn::Set(d, static_cast<float>(rel));
      for (int64_t c0 = 0; c0 < cols; c0 += lanes) {
        const VF r = hn::Abs(hn::Sub(vrel, hn::Iota(d, static_cast<float>(c0))));
        hn::StoreU(hn::NegMulAdd(vm, r, hn::LoadU(d, x + c0)), d, x + c0);
      }
    } else {
      for (int64_t i = 0; i < cols; ++i) {
        const int64_t r = rel - i;
        x[i] -= slope * static_cast<float>(r < 0 ? -r : r);
      }
    }
  }
}

// Scalar score table (T5's bias[h, b], docs/math.md section 8) on one tile
// pair. Its buckets are constant beyond the reach, so a FAR tile pair (every
// distance clamps to the same end of hd's distance window) adds one
// constant to all its scores: the caller folds it into the per-column
// shift of the softmax, as it folds G's base bucket, so it costs nothing per
// pair. A BAND tile pair fills row[e] = bias[b(r_first - e)] for
// e in [0, kn - 1 + kLd), r_first = rel0 + kn - 1: key row jj, query column
// i has distance rel0 + jj - i = r_first - (kn - 1 - jj + i), so the key row
// adds the contiguous run row[kn - 1 - jj ...] (one vector add per vector).
struct ScalarTile {
  bool band = false;
  float constant = 0.0f;  // far: the tile's bias
  int64_t bucket = 0;     // far: its bucket
  int64_t r_first = 0;    // band: distance of row[0]
};

HWY_INLINE int64_t DistanceIndex(const fused::HeadData& hd, int64_t r) {
  return std::clamp(r, hd.r_lo, hd.r_hi) - hd.r_lo;
}

HWY_INLINE ScalarTile ScalarBandBias(const fused::QueryTile& t, int64_t j0,
                                     int64_t kn, const fused::HeadData& hd,
                                     float* HWY_RESTRICT row) {
  ScalarTile s;
  const int64_t rel0 = j0 - t.i0 - t.off;
  s.r_first = rel0 + kn - 1;  // the largest distance of the tile pair
  const int64_t first = DistanceIndex(hd, s.r_first);
  if (first == DistanceIndex(hd, rel0 - (t.rows - 1))) {
    s.bucket = hd.dist_bucket[first];
    s.constant = hd.bias[s.bucket];
    return s;
  }
  s.band = true;
  for (int64_t e = 0; e < kn - 1 + kLd; ++e)
    row[e] = hd.bias[hd.dist_bucket[DistanceIndex(hd, s.r_first - e)]];
  return s;
}

// xt[jj][i] += row[kn - 1 - jj + i] (band tile pair, see ScalarBandBias),
// for the computed columns i < cols.
HWY_INLINE void AddScalarBand(int64_t kn, int64_t cols, const float* row,
                              float* xt) {
  for (int64_t jj = 0; jj < kn; ++jj)
    AddRange(xt + jj * kLd, row + (kn - 1 - jj), cols);
}

// dbias[b] += sum of dS over the tile pair's pairs in bucket b. Far: the
// whole tile (its column sums). Band: first per distance (acc[e] sums the
// run each key row added from row[e], a contiguous vector add per key row),
// then each distance to its bucket, in a fixed order (deterministic).
// Masked pairs and the padding columns in [rows, cols) have dS = 0; columns
// from cols on are not computed and are not read.
HWY_INLINE void AccumulateScalarBias(const fused::HeadData& hd,
                                     const ScalarTile& s, int64_t kn,
                                     int64_t cols, const float* dst,
                                     const float* ds_colsum,
                                     float* HWY_RESTRICT acc) {
  if (!hd.dbias) return;
  if (!s.band) {
    float sum = 0.0f;
    for (int64_t i = 0; i < cols; ++i) sum += ds_colsum[i];
    hd.dbias[s.bucket] += sum;
    return;
  }
  const int64_t n = kn - 1 + kLd;
  FillRange(acc, 0.0f, n);
  for (int64_t jj = 0; jj < kn; ++jj)
    AddRange(acc + (kn - 1 - jj), dst + jj * kLd, cols);
  for (int64_t e = 0; e < n; ++e)
    hd.dbias[hd.dist_bucket[DistanceIndex(hd, s.r_first - e)]] += acc[e];
}

// Transformer-XL's position query bias (docs/math.md section 8): the
// position term uses q_i + pb, G = (Q + pb) AK^T / sqrt(dk). Its pb part
// AK[b] . pb / sqrt(dk) is one number per bucket, the same for every query
// row: added to row b of the G^T slice of table rows [lo, lo + count)
// (count x dk multiply-adds per query tile, nothing per pair).
HWY_INLINE void AddPositionBias(const AttentionProblem& p, int64_t lo,
                                int64_t count, const fused::HeadData& hd,
                                float scale, float* gt) {
  const DF d;
  for (int64_t b = 0; b < count; ++b) {
    const float* ak = hd.ak + (lo + b) * p.dk;
    float c = 0.0f;
    for (int64_t e = 0; e < p.dk; ++e) c += ak[e] * hd.pb[e];
    const VF vc = hn::Set(d, c * scale);
    float* row = gt + b * kLd;
    for (int64_t i = 0; i < kLd; i += static_cast<int64_t>(hn::Lanes(d)))
      hn::StoreU(hn::Add(hn::LoadU(d, row + i), vc), d, row + i);
  }
}

// The pb parts of the backward: with e_b = sum_i E[i, b] over the table
// rows [lo, lo + count), E(i, b) = e[b * b_stride + i * i_stride] (the
// skewed accumulator after FoldEnds, or a compact slice), dAK[b] += e_b pb
// / sqrt(dk) (the rest, E^T Q / sqrt(dk), is the caller's product) and dpb
// += sum_b e_b AK[b] / sqrt(dk), buckets in order.
HWY_INLINE void PositionBiasGrads(const AttentionProblem& p, int64_t lo,
                                  int64_t count, int64_t rows,
                                  const fused::HeadData& hd, float scale,
                                  const float* e, int64_t b_stride,
                                  int64_t i_stride) {
  for (int64_t b = 0; b < count; ++b) {
    float e_b = 0.0f;
    for (int64_t i = 0; i < rows; ++i) e_b += e[b * b_stride + i * i_stride];
    e_b *= scale;
    const float* ak = hd.ak + (lo + b) * p.dk;
    if (hd.dak) {
      float* dak = hd.dak + (lo + b - hd.bucket_base) * p.dk;
      for (int64_t e = 0; e < p.dk; ++e) dak[e] += e_b * hd.pb[e];
    }
    if (hd.dpb) {
      for (int64_t e = 0; e < p.dk; ++e) hd.dpb[e] += e_b * ak[e];
    }
  }
}

// ---------------------------------------------------------------------------
// Distance rows: Shaw's vector / value tables under T5 buckets (shaw-log,
// docs/kernel.md). The tile's kernel rows [bucket_lo, bucket_lo + buckets)
// are distances r = row - R (fused::Reach), so far tiles, band tiles and
// the skewed strips work exactly as for the clip. Only the products with
// the tables differ: they run on the compact slice of table rows (buckets)
// [lo, lo + count) those distances reach, at most nb rows (32 for T5's
// usual setting) instead of up to 2R + 1. G^T and U^T are computed on the
// slice and copied out to distance rows (one row copy each); the
// distance-row accumulators W and E are summed into bucket rows before
// their products. Both passes are O(buckets x kLd) per query tile.
struct CompactSlice {
  int64_t lo = 0, count = 0;
};

// Table row (bucket) of kernel row `row`.
HWY_INLINE int64_t RowBucket(const AttentionProblem& p,
                             const fused::HeadData& hd, int64_t row) {
  return hd.dist_bucket[DistanceIndex(hd, row - p.t5_reach)];
}

HWY_INLINE CompactSlice MakeCompactSlice(const AttentionProblem& p,
                                         const fused::QueryTile& t,
                                         const fused::HeadData& hd) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1;
  for (int64_t x = 0; x < t.buckets; ++x) {
    const int64_t b = RowBucket(p, hd, t.bucket_lo + x);
    lo = std::min(lo, b);
    hi = std::max(hi, b);
  }
  if (hi < 0) return {};
  return {lo, hi - lo + 1};
}

// table[x][0, cols) = compact[bucket of row bucket_lo + x - lo][0, cols).
HWY_INLINE void ExpandRows(const AttentionProblem& p,
                           const fused::QueryTile& t,
                           const fused::HeadData& hd, const CompactSlice& s,
                           const float* HWY_RESTRICT compact, int64_t cols,
                           float* HWY_RESTRICT table) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  for (int64_t x = 0; x < t.buckets; ++x) {
    const float* src =
        compact + (RowBucket(p, hd, t.bucket_lo + x) - s.lo) * kLd;
    float* dst = table + x * kLd;
    for (int64_t c0 = 0; c0 < cols; c0 += lanes)
      hn::StoreU(hn::LoadU(d, src + c0), d, dst + c0);
  }
}

// The G^T slice of one query tile: AK[lo : lo + nb] (Q_I / sqrt(dk))^T
// (docs/math.md section 2: G = Q AK^T / sqrt(dk); qt holds the scaled
// Q_I^T), plus the position query bias. Distance rows (`slice` not null):
// computed on the compact slice in `gc`, then copied out to `gt`.
HWY_INLINE void KeyScoreSlice(const AttentionProblem& p,
                              const fused::QueryTile& t,
                              const fused::HeadData& hd,
                              const CompactSlice* slice, const float* qt,
                              float scale, float* gc, float* gt) {
  const int64_t cols = Cols(t), dk = p.dk;
  const int64_t lo = slice ? slice->lo : t.bucket_lo;
  const int64_t count = slice ? slice->count : t.buckets;
  float* g = slice ? gc : gt;
  MatMul(count, cols, dk, hd.ak + lo * dk, dk, 1, qt, kLd, g, kLd, 1.0f,
         false);
  if (p.position_query_bias) AddPositionBias(p, lo, count, hd, scale, g);
  if (slice) ExpandRows(p, t, hd, *slice, gc, cols, gt);
}

// compact[b - lo][i] = sum of A(i, x) over the distance rows x of bucket
// b, for the tile's rows i, with A(i, x) = skew[(x + i) * kLd + i] a
// skewed accumulator (FoldEnds done). Rows in order: deterministic.
HWY_INLINE void CompactAcc(const AttentionProblem& p,
                           const fused::QueryTile& t,
                           const fused::HeadData& hd, const CompactSlice& s,
                           const float* HWY_RESTRICT skew,
                           float* HWY_RESTRICT compact) {
  FillRange(compact, 0.0f, s.count * kLd);
  for (int64_t x = 0; x < t.buckets; ++x) {
    float* dst = compact + (RowBucket(p, hd, t.bucket_lo + x) - s.lo) * kLd;
    const float* src = skew + x * kLd;
    for (int64_t i = 0; i < t.rows; ++i) dst[i] += src[i * (kLd + 1)];
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
// Forward: one query tile of one (batch, head). docs/math.md sections 2 and 4.
//   S^T = K_J Q_I^T / sqrt(dk) + G-gather   (masked -> -inf)
//   online softmax per column; O += P V_J; W += bucketed P
//   finally O += W AV, O /= l, lse = m + log l.
// `scratch` holds fused::ForwardScratch(p).Floats() floats.
// One function of about 150 lines, deliberately: it is the kernel's inner
// loop, and every step below reads and writes the same per-thread scratch in
// the order of the equations above. The steps that stand alone (MatMul,
// AddBandDelta, AccumulateTile, AddAlibi, the scalar-table helpers) are
// already functions of their own; cutting the rest would only pass the
// scratch pointers through more calls.
HWY_NOINLINE void ForwardQueryTile(const AttentionProblem& p,
                                   const fused::QueryTile& t,
                                   const fused::HeadData& hd, float* scratch) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t dk = p.dk, dv = p.dv, rows = t.rows;
  float* out = hd.out + t.i0 * dv;
  float* lse = hd.lse ? hd.lse + t.i0 : nullptr;
  const float neg_inf = -std::numeric_limits<float>::infinity();
  if (t.key_end == t.key_begin) {  // no row of the tile sees a key
    std::fill(out, out + rows * dv, 0.0f);
    if (lse) std::fill(lse, lse + rows, neg_inf);
    return;
  }
  const int64_t cols = Cols(t);
  const fused::ForwardScratch sz(p);
  float* qt = scratch;
  float* st = qt + sz.qt;
  float* gt = st + sz.st;
  float* gsk = gt + sz.gt;
  float* wt = gsk + sz.gsk;
  float* oacc = wt + sz.wt;
  float* m = oacc + sz.oacc;
  float* l = m + kLd;
  float* alpha = l + kLd;
  float* m_use = alpha + kLd;
  float* colsum = m_use + kLd;
  float* delta = colsum + kLd;  // two rows
  float* moved = delta + 2 * kLd;
  float* gc = m + sz.stats;  // distance rows: compact G^T and W
  float* wc = gc + sz.gc;
  float* sbias = scratch + (sz.Floats() - sz.sb);  // ScalarBandBias row

  const float scale = p.ScoreScale<float>();
  PackTransposed(hd.q + t.i0 * dk, rows, dk, scale, qt);
  const bool dist_rows = fused::DistanceRows(p);
  const CompactSlice slice =
      dist_rows ? MakeCompactSlice(p, t, hd) : CompactSlice{};
  if (p.VectorScore())
    KeyScoreSlice(p, t, hd, dist_rows ? &slice : nullptr, qt, scale, gc, gt);
  const BucketAcc w_acc = CarveBucketAcc(wt, t.buckets);
  if (p.value_term) ZeroBucketAcc(w_acc, t.buckets);
  FillRange(oacc, 0.0f, rows * dv);
  FillRange(m, neg_inf, kLd);
  FillRange(l, 0.0f, kLd);
  bool skewed = false;  // gsk built (lazily: only band tiles read it)

  const VF v_neg_inf = hn::Set(d, neg_inf);
  const VF v_slack = hn::Set(d, kMaxSlack);
  for (int64_t j0 = t.key_begin; j0 < t.key_end; j0 += kKeyTile) {
    const int64_t kn = std::min(kKeyTile, t.key_end - j0);
    const TileBase base = ChooseBase(p, t, j0, kn);
    MatMul(kn, cols, dk, hd.k + j0 * dk, dk, 1, qt, kLd, st, kLd, 1.0f, false);
    // Key-side term s_ij = S_ij + G[i, r(i,j)+k]: the base bucket's
    // G[i, base] is one scalar per column, folded into the column's max and
    // exponent below; a band tile adds G[i, r+k] - G[i, base] pair by pair
    // for the pairs outside the base.
    const float* g_base = nullptr;
    if (p.VectorScore()) {
      if (base.folded) g_base = gt + (base.bucket - t.bucket_lo) * kLd;
      if (base.band) {
        // k = 0 has no diagonal strip (and no skewed copy).
        if (!skewed && fused::Reach(p).top() > 0) {
          SkewTable(gt, t.buckets, cols, gsk);
        }
        skewed = true;
        const BandTerm term{gt, gsk, st};
        AddBandDelta(p, t, j0, base, &term, 1, delta);
      }
    }
    // ALiBi: in the max loop below (masked scores stay -inf), or a pass.
    const bool alibi_loop = p.AlibiScore() && AlibiInLoop(t, j0, kn);
    if (p.AlibiScore() && !alibi_loop)
      AddAlibi(t, j0, kn, cols, hd.alibi_slope, st);
    const int64_t rel0 = j0 - t.i0 - t.off;
    ScalarTile sbt;
    if (p.scalar_table) {
      sbt = ScalarBandBias(t, j0, kn, hd, sbias);
      if (sbt.band) AddScalarBand(kn, cols, sbias, st);
    }
    // A far tile's scalar bias is one constant, folded like G's base bucket.
    const VF v_const = hn::Set(d, sbt.constant);
    ApplyCausalMask(p, t, j0, kn, st);

    // Online softmax, one vector of query columns at a time.
    bool rescale = false;
    for (int64_t c0 = 0; c0 < cols; c0 += lanes) {
      const VF g = hn::Add(
          g_base ? hn::LoadU(d, g_base + c0) : hn::Zero(d), v_const);
      VF tile_max = v_neg_inf;
      if (alibi_loop) {  // s -= m |r|, stored for the exponent pass
        // Even and odd key rows on their own cursor and running maximum, so
        // neither the distance's add nor the maximum waits on the previous
        // row (the maximum is exact, so the order does not matter).
        AlibiCursor even(d, rel0, c0, hd.alibi_slope, 2.0f);
        AlibiCursor odd(d, rel0 + 1, c0, hd.alibi_slope, 2.0f);
        VF odd_max = v_neg_inf;
        int64_t jj = 0;
        for (; jj + 1 < kn; jj += 2) {
          float* s0 = st + jj * kLd + c0;
          float* s1 = s0 + kLd;
          const VF x0 = even.Apply(hn::LoadU(d, s0));
          const VF x1 = odd.Apply(hn::LoadU(d, s1));
          hn::StoreU(x0, d, s0);
          hn::StoreU(x1, d, s1);
          tile_max = hn::Max(tile_max, x0);
          odd_max = hn::Max(odd_max, x1);
        }
        if (jj < kn) {
          float* s0 = st + jj * kLd + c0;
          const VF x0 = even.Apply(hn::LoadU(d, s0));
          hn::StoreU(x0, d, s0);
          tile_max = hn::Max(tile_max, x0);
        }
        tile_max = hn::Max(tile_max, odd_max);
      } else {
        for (int64_t jj = 0; jj < kn; ++jj) {
          tile_max = hn::Max(tile_max, hn::LoadU(d, st + jj * kLd + c0));
        }
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
      // W and the output accumulator share the reference m (docs/math.md section 4).
      for (int64_t i = 0; i < rows; ++i) {
        const float a = alpha[i];
        if (a == 1.0f) continue;
        float* o = oacc + i * dv;
        for (int64_t c = 0; c < dv; ++c) o[c] *= a;
      }
      if (p.value_term) ScaleBucketAcc(w_acc, t.buckets, cols, alpha);
    }
    // O_I += P V_J: A(i, jj) = P^T[jj][i].
    MatMul(rows, dv, kn, st, 1, kLd, hd.v + j0 * dv, dv, oacc, dv, 1.0f, true);
    if (p.value_term) {
      const AccTerm term{st, colsum, moved, &w_acc};
      AccumulateTile(p, t, j0, base, &term, 1);
    }
  }
  if (p.value_term) {
    // O_I += W AV[lo : lo+nb]: A(i, b) = skew[(b + i) * kLd + i]; distance
    // rows: W summed by bucket first, A(i, b) = wc[b * kLd + i].
    FoldEnds(p, t, w_acc);
    if (dist_rows) {
      CompactAcc(p, t, hd, slice, w_acc.skew, wc);
      MatMul(rows, dv, slice.count, wc, 1, kLd, hd.av + slice.lo * dv, dv,
             oacc, dv, 1.0f, true);
    } else {
      MatMul(rows, dv, t.buckets, w_acc.skew, kLd + 1, kLd,
             hd.av + t.bucket_lo * dv, dv, oacc, dv, 1.0f, true);
    }
  }
  for (int64_t i = 0; i < rows; ++i) {
    float* o = out + i * dv;
    const float* acc = oacc + i * dv;
    if (l[i] > 0.0f) {
      const float inv = 1.0f / l[i];
      for (int64_t c = 0; c < dv; ++c) o[c] = acc[c] * inv;
      if (lse) lse[i] = m[i] + std::log(l[i]);
    } else {  // the row sees no key: zeros, lse = -inf (docs/math.md section 1)
      std::fill(o, o + dv, 0.0f);
      if (lse) lse[i] = neg_inf;
    }
  }
}

// ---------------------------------------------------------------------------
// Backward: one query tile of one (batch, head), docs/math.md section 3, recomputing
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
//
// One function of about 175 lines, deliberately: it is the kernel's inner
// loop, and every step below reads and writes the same per-thread scratch in
// the order of the equations above. The steps that stand alone (MatMul,
// AddBandDelta, AccumulateTile, AddAlibi, the scalar-table helpers) are
// already functions of their own; cutting the rest would only pass the
// scratch pointers through more calls.
HWY_NOINLINE void BackwardQueryTile(const AttentionProblem& p,
                                    const fused::QueryTile& t,
                                    const fused::HeadData& hd, float* scratch,
                                    int64_t key_tile_first,
                                    int64_t key_tile_step) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t dk = p.dk, dv = p.dv, rows = t.rows;
  if (t.key_end == t.key_begin) {  // no row sees a key: zero gradient
    if (hd.dq) std::fill(hd.dq + t.i0 * dk, hd.dq + (t.i0 + rows) * dk, 0.0f);
    return;
  }
  const int64_t cols = Cols(t);
  const fused::BackwardScratch sz(p);
  float* qt = scratch;
  float* dot = qt + sz.qt;
  float* st = dot + sz.dot;
  float* dpt = st + sz.st;
  float* gt = dpt + sz.dpt;
  float* ut = gt + sz.gt;
  float* gsk = ut + sz.ut;
  float* usk = gsk + sz.gsk;
  float* et = usk + sz.usk;
  float* wt = et + sz.et;
  float* dqacc = wt + sz.wt;
  float* drow = dqacc + sz.dqacc;
  float* lse_row = drow + kLd;
  float* p_colsum = lse_row + kLd;
  float* ds_colsum = p_colsum + kLd;
  float* delta = ds_colsum + kLd;  // four rows
  float* moved = delta + 4 * kLd;  // two rows
  float* gc = drow + sz.stats;     // distance rows: compact G^T, U^T, E, W
  float* uc = gc + sz.gc;
  float* ec = uc + sz.uc;
  float* wc = ec + sz.ec;
  float* sbias = scratch + (sz.Floats() - sz.sb);  // ScalarBandBias row
  float* sacc = sbias + kKeyTile + kLd;             // its dS sums

  const float scale = p.ScoreScale<float>();
  const float* q = hd.q + t.i0 * dk;
  const float* dout = hd.dout + t.i0 * dv;
  PackTransposed(q, rows, dk, scale, qt);
  PackTransposed(dout, rows, dv, 1.0f, dot);
  for (int64_t i = 0; i < kLd; ++i) {
    if (i < rows) {
      // D_i = dO_i . o_i (o_i includes the AV term), docs/math.md section 3.
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
  const bool dist_rows = fused::DistanceRows(p);
  const CompactSlice slice =
      dist_rows ? MakeCompactSlice(p, t, hd) : CompactSlice{};
  if (p.VectorScore())
    KeyScoreSlice(p, t, hd, dist_rows ? &slice : nullptr, qt, scale, gc, gt);
  const BucketAcc e_acc = CarveBucketAcc(et, t.buckets);
  const BucketAcc w_acc = CarveBucketAcc(wt, t.buckets);
  if (p.VectorScore()) ZeroBucketAcc(e_acc, t.buckets);
  if (p.value_term) {
    // U^T slice = AV[lo : lo+nb] dO_I^T (distance rows: compact, copied out).
    if (dist_rows) {
      MatMul(slice.count, cols, dv, hd.av + slice.lo * dv, dv, 1, dot, kLd,
             uc, kLd, 1.0f, false);
      ExpandRows(p, t, hd, slice, uc, cols, ut);
    } else {
      MatMul(t.buckets, cols, dv, hd.av + t.bucket_lo * dv, dv, 1, dot, kLd,
             ut, kLd, 1.0f, false);
    }
  }
  if (want_w) ZeroBucketAcc(w_acc, t.buckets);
  if (hd.dq) FillRange(dqacc, 0.0f, rows * dk);
  bool skewed = false;  // gsk / usk built (lazily: only band tiles read them)

  for (int64_t j0 = t.key_begin + key_tile_first * kKeyTile; j0 < t.key_end;
       j0 += key_tile_step * kKeyTile) {
    const int64_t kn = std::min(kKeyTile, t.key_end - j0);
    const TileBase base = ChooseBase(p, t, j0, kn);
    MatMul(kn, cols, dk, hd.k + j0 * dk, dk, 1, qt, kLd, st, kLd, 1.0f, false);
    MatMul(kn, cols, dv, hd.v + j0 * dv, dv, 1, dot, kLd, dpt, kLd, 1.0f,
           false);
    // As in the forward, the base bucket is folded into per-column constants:
    // p = exp(S + g - lse) = exp(S - (lse - g)) and
    // dS = p (dP + u - D) = p (dP - (D - u)) with g = G[i, base], u = U[i,
    // base]; band tiles add the differences for pairs outside the base.
    const float* g_base = nullptr;
    const float* u_base = nullptr;
    BandTerm terms[2];
    int count = 0;
    if (p.VectorScore()) {
      if (base.folded) g_base = gt + (base.bucket - t.bucket_lo) * kLd;
      terms[count++] = {gt, gsk, st};
    }
    if (p.value_term) {
      if (base.folded) u_base = ut + (base.bucket - t.bucket_lo) * kLd;
      terms[count++] = {ut, usk, dpt};
    }
    if (base.band && count > 0) {
      // left = right = 0: no diagonal strip
      if (!skewed && fused::Reach(p).top() > 0) {
        if (p.VectorScore()) SkewTable(gt, t.buckets, cols, gsk);
        if (p.value_term) SkewTable(ut, t.buckets, cols, usk);
      }
      skewed = true;
      AddBandDelta(p, t, j0, base, terms, count, delta);
    }
    // ALiBi: inside the exponent loop below, or a pass of its own.
    const bool alibi_loop = p.AlibiScore() && AlibiInLoop(t, j0, kn);
    if (p.AlibiScore() && !alibi_loop)
      AddAlibi(t, j0, kn, cols, hd.alibi_slope, st);
    const int64_t rel0 = j0 - t.i0 - t.off;
    ScalarTile sbt;
    if (p.scalar_table) {
      sbt = ScalarBandBias(t, j0, kn, hd, sbias);
      if (sbt.band) AddScalarBand(kn, cols, sbias, st);
    }
    const VF v_const = hn::Set(d, sbt.constant);
    ApplyCausalMask(p, t, j0, kn, st);
    for (int64_t c0 = 0; c0 < cols; c0 += lanes) {
      const VF g = hn::Add(
          g_base ? hn::LoadU(d, g_base + c0) : hn::Zero(d), v_const);
      const VF u = u_base ? hn::LoadU(d, u_base + c0) : hn::Zero(d);
      const VF shift = hn::Sub(hn::LoadU(d, lse_row + c0), g);
      const VF d_shift = hn::Sub(hn::LoadU(d, drow + c0), u);
      VF p_sum = hn::Zero(d), ds_sum = hn::Zero(d);
      // kAlibi (a std::bool_constant): s -= m |r| on the way in.
      auto key_rows = [&](auto kAlibi) {
        AlibiCursor alibi(d, rel0, c0, hd.alibi_slope);
        for (int64_t jj = 0; jj < kn; ++jj) {
          float* s = st + jj * kLd + c0;
          float* gp = dpt + jj * kLd + c0;
          VF x = hn::LoadU(d, s);
          if constexpr (decltype(kAlibi)::value) x = alibi.Apply(x);
          const VF pr = hwy::HWY_NAMESPACE::Exp(d, hn::Sub(x, shift));
          hn::StoreU(pr, d, s);
          const VF ds = hn::Mul(pr, hn::Sub(hn::LoadU(d, gp), d_shift));
          hn::StoreU(ds, d, gp);
          p_sum = hn::Add(p_sum, pr);
          ds_sum = hn::Add(ds_sum, ds);
        }
      };
      if (alibi_loop) {
        key_rows(std::true_type());
      } else {
        key_rows(std::false_type());
      }
      hn::StoreU(p_sum, d, p_colsum + c0);
      hn::StoreU(ds_sum, d, ds_colsum + c0);
    }
    AccTerm acc_terms[2];
    int acc_count = 0;
    if (want_w) acc_terms[acc_count++] = {st, p_colsum, moved, &w_acc};
    if (p.VectorScore()) {
      acc_terms[acc_count++] = {dpt, ds_colsum, moved + kLd, &e_acc};
    }
    if (acc_count > 0) AccumulateTile(p, t, j0, base, acc_terms, acc_count);
    if (p.scalar_table) AccumulateScalarBias(hd, sbt, kn, cols, dpt, ds_colsum, sacc);
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
  // with A strides (kLd + 1, kLd) and E^T with (kLd, kLd + 1). Distance
  // rows: E and W summed by bucket first, E(i, b) = ec[b * kLd + i].
  if (p.VectorScore() && dist_rows) {
    FoldEnds(p, t, e_acc);
    CompactAcc(p, t, hd, slice, e_acc.skew, ec);
    if (hd.dq) {
      MatMul(rows, dk, slice.count, ec, 1, kLd, hd.ak + slice.lo * dk, dk,
             dqacc, dk, 1.0f, true);
    }
    if (hd.dak) {
      MatMul(slice.count, dk, rows, ec, kLd, 1, q, dk,
             hd.dak + (slice.lo - hd.bucket_base) * dk, dk, scale, true);
    }
    if (p.position_query_bias) {
      PositionBiasGrads(p, slice.lo, slice.count, rows, hd, scale, ec, kLd, 1);
    }
  } else if (p.VectorScore()) {
    FoldEnds(p, t, e_acc);
    if (hd.dq) {
      MatMul(rows, dk, t.buckets, e_acc.skew, kLd + 1, kLd,
             hd.ak + t.bucket_lo * dk, dk, dqacc, dk, 1.0f, true);
    }
    if (hd.dak) {
      MatMul(t.buckets, dk, rows, e_acc.skew, kLd, kLd + 1, q, dk,
             hd.dak + (t.bucket_lo - hd.bucket_base) * dk, dk, scale, true);
    }
    if (p.position_query_bias) {
      PositionBiasGrads(p, t.bucket_lo, t.buckets, rows, hd, scale,
                        e_acc.skew, kLd, kLd + 1);
    }
  }
  if (want_w) {
    FoldEnds(p, t, w_acc);
    if (dist_rows) {
      CompactAcc(p, t, hd, slice, w_acc.skew, wc);
      MatMul(slice.count, dv, rows, wc, kLd, 1, dout, dv,
             hd.dav + (slice.lo - hd.bucket_base) * dv, dv, 1.0f, true);
    } else {
      MatMul(t.buckets, dv, rows, w_acc.skew, kLd, kLd + 1, dout, dv,
             hd.dav + (t.bucket_lo - hd.bucket_base) * dv, dv, 1.0f, true);
    }
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

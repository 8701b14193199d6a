// Target-independent pieces of the fused kernel (docs/math.md section 4): tile
// sizes, the geometry of one query tile, and the layout of the per-thread
// scratch. Both the SIMD bodies (fused_attention-inl.h, compiled once per
// Highway target) and the driver (fused_attention.cc) include it, so the
// bytes FusedExtraBytes reports are exactly the bytes the driver allocates.
#ifndef RELPOS_SRC_OP_KERNELS_FUSED_TILES_H_
#define RELPOS_SRC_OP_KERNELS_FUSED_TILES_H_

#include <algorithm>
#include <cstdint>
#include <vector>

#include "core/attention_problem.h"
#include "relpos/position_schemes.h"

namespace relpos {
namespace fused {

// Query rows and keys per tile. 64 x 64 keeps the working set of one tile
// pair (Q^T, K, V tiles, S^T: 16 KiB each at d = 64) inside L1 + L2, and 64 is
// a multiple of every Highway vector length (1 .. 16 floats), so the row
// operations over a query tile never need a tail.
inline constexpr int64_t kQueryTile = 64;
inline constexpr int64_t kKeyTile = 64;

// Where one query tile [i0, i0 + rows) of batch item b looks: keys
// [key_begin, key_end) (key_end is nondecreasing in the row, so the last
// row's KeyEnd bounds the tile; key_end == key_begin: no key at all), and
// the table rows [bucket_lo, bucket_lo + buckets) any visible pair can
// reach. Only that slice of G = Q AK^T and of W is computed and stored: for
// k >> n it is far narrower than 2k+1. `off` is the item's query offset:
// row i sits at position i + off, and the distance of (i, j) is j - i - off.
// Key tiles start at key_begin (left padding shifts the tile grid, so no
// key tile is masked from the left).
struct QueryTile {
  int64_t b = 0, h = 0, i0 = 0, rows = 0;
  int64_t off = 0;
  int64_t key_begin = 0, key_end = 0;
  int64_t bucket_lo = 0, buckets = 0;
};

// The clip of the vector / value terms' bucket map: row clamp(r, -left,
// right) + left, left + right + 1 rows (docs/math.md section 8). Shaw's
// symmetric clip is left = right = k; BucketKind::kClip gives its own
// reaches. Row 0 collects every r <= -left, row top() every r >= right.
// T5's log buckets (shaw-log) are constant beyond their reach R too, so the
// kernel runs them as the clip left = right = R over DISTANCE rows: kernel
// row e stands for r = e - R, and its table row is the bucket of that
// distance (DistanceRows below). The tile machinery (far tiles, folded and
// direct band tiles, skewed strips) is then the clip's, unchanged.
struct ClipReach {
  int64_t left = 0, right = 0;
  int64_t top() const { return left + right; }
};

inline ClipReach Reach(const AttentionProblem& p) {
  if (p.buckets.kind == BucketKind::kClip)
    return {p.buckets.clip.left, p.buckets.clip.right};
  if (p.buckets.kind == BucketKind::kT5) return {p.t5_reach, p.t5_reach};
  return {p.max_distance, p.max_distance};
}

// Whether the vector / value terms run over distance rows (T5 buckets): the
// kernel's rows are then distances, and the products with AK / AV go
// through a compact slice of bucket rows (docs/kernel.md, shaw-log).
inline bool DistanceRows(const AttentionProblem& p) {
  return p.buckets.kind == BucketKind::kT5 &&
         (p.VectorScore() || p.value_term);
}

inline QueryTile MakeQueryTile(const AttentionProblem& p, int64_t b, int64_t h,
                               int64_t tile) {
  QueryTile t;
  t.b = b;
  t.h = h;
  t.i0 = tile * kQueryTile;
  t.rows = std::min(kQueryTile, p.q_len - t.i0);
  t.off = p.QueryOffset(b);
  t.key_begin = p.KeyBegin(b);
  t.key_end = std::max(p.KeyEnd(b, t.i0 + t.rows - 1), t.key_begin);
  if (t.key_end > t.key_begin) {
    const ClipReach cr = Reach(p);
    // Distances j - (i + off) over j in [key_begin, key_end), i in the tile.
    const int64_t d_min = t.key_begin - (t.i0 + t.rows - 1) - t.off;
    const int64_t d_max = (t.key_end - 1) - t.i0 - t.off;
    t.bucket_lo = std::clamp(d_min, -cr.left, cr.right) + cr.left;
    t.buckets =
        std::clamp(d_max, -cr.left, cr.right) + cr.left - t.bucket_lo + 1;
  }
  return t;
}

inline int64_t NumQueryTiles(const AttentionProblem& p) {
  return (p.q_len + kQueryTile - 1) / kQueryTile;
}

// Upper bound of QueryTile::buckets over all tiles: 2k+1 (the clip's rows,
// or the 2R+1 distance rows of T5 buckets), and never more than the
// distances a tile can see (Nk + kQueryTile - 1).
inline int64_t MaxTileBuckets(const AttentionProblem& p) {
  return std::min(Reach(p).top() + 1, p.k_len + kQueryTile - 1);
}

// Distance rows: the most table rows (buckets) of one query tile's compact
// slice [lo, hi] of the buckets its distance rows reach: nb, and no fewer
// even for few distance rows, since a bidirectional map puts the two signs
// in the two halves (distances -1, 0, 1 reach buckets 0 .. nb/2 + 1). 0 for
// the clips.
inline int64_t CompactRows(const AttentionProblem& p) {
  return DistanceRows(p) ? p.TableRows() : 0;
}

// A bucketed accumulator (W or E) of one query tile: the skewed array of
// (buckets + kQueryTile - 1) rows plus three plain rows (see BucketAcc in
// fused_attention-inl.h).
inline int64_t BucketAccFloats(const AttentionProblem& p) {
  return (MaxTileBuckets(p) + kQueryTile - 1 + 3) * kQueryTile;
}

// A skewed copy of a G^T or U^T slice (SkewTable in fused_attention-inl.h):
// buckets + kQueryTile - 1 rows. Not needed when left = right = 0 (no
// diagonal strip).
inline int64_t SkewTableFloats(const AttentionProblem& p) {
  if (Reach(p).top() == 0) return 0;
  return (MaxTileBuckets(p) + kQueryTile - 1) * kQueryTile;
}

// Table rows any pair of the whole problem can reach: [lo, lo + count)
// (over every batch item's query offset). The per-thread dAK / dAV
// accumulators cover only this range.
struct BucketRange {
  int64_t lo = 0, count = 0;
};
inline BucketRange ReachableBuckets(const AttentionProblem& p) {
  const ClipReach cr = Reach(p);
  if (p.q_len == 0 || p.k_len == 0) return {};
  // Distance rows accumulate dAK / dAV by bucket: all nb table rows.
  if (DistanceRows(p)) return {0, p.TableRows()};
  const int64_t d_min = -(p.q_len - 1) - p.max_offset;
  const int64_t d_max = (p.k_len - 1) - p.min_offset;
  const int64_t lo = std::clamp(d_min, -cr.left, cr.right) + cr.left;
  return {lo, std::clamp(d_max, -cr.left, cr.right) + cr.left - lo + 1};
}

// Per-thread scratch of the forward pass, in floats. Every transposed tile
// has leading dimension kQueryTile (one column per query row of the tile).
struct ForwardScratch {
  int64_t qt, st, gt, gsk, wt, oacc, stats;  // sizes in floats
  explicit ForwardScratch(const AttentionProblem& p) {
    const int64_t nb = MaxTileBuckets(p);
    qt = p.dk * kQueryTile;                      // (Q_I / sqrt(dk))^T
    st = kKeyTile * kQueryTile;                  // S^T, then P^T
    gt = p.VectorScore() ? nb * kQueryTile : 0;       // G^T slice
    gsk = p.VectorScore() ? SkewTableFloats(p) : 0;   // G^T slice, skewed
    wt = p.value_term ? BucketAccFloats(p) : 0;  // W, skewed + 3 end rows
    oacc = kQueryTile * p.dv;                    // unnormalised output
    // m, l, alpha, m_use, column sum, two delta rows, moved sums
    stats = 8 * kQueryTile;
    // Distance rows: the compact G^T slice and W by bucket.
    const int64_t nc = CompactRows(p);
    gc = p.VectorScore() ? nc * kQueryTile : 0;
    wc = p.value_term ? nc * kQueryTile : 0;
    sb = p.scalar_table ? kKeyTile + kQueryTile : 0;  // band bias by distance
  }
  int64_t gc, wc;
  int64_t sb;  // last: the scalar table's band row (ScalarBandBias)
  int64_t Floats() const {
    return qt + st + gt + gsk + wt + oacc + stats + gc + wc + sb;
  }
};

// Per-thread scratch of the backward pass, in floats.
struct BackwardScratch {
  int64_t qt, dot, st, dpt, gt, ut, gsk, usk, et, wt, dqacc, stats;
  explicit BackwardScratch(const AttentionProblem& p) {
    const int64_t nb = MaxTileBuckets(p);
    qt = p.dk * kQueryTile;                      // (Q_I / sqrt(dk))^T
    dot = p.dv * kQueryTile;                     // dO_I^T
    st = kKeyTile * kQueryTile;                  // S^T, then P^T
    dpt = kKeyTile * kQueryTile;                 // dP^T, then dS^T
    gt = p.VectorScore() ? nb * kQueryTile : 0;       // G^T slice
    ut = p.value_term ? nb * kQueryTile : 0;     // U^T = (dO AV^T)^T slice
    gsk = p.VectorScore() ? SkewTableFloats(p) : 0;   // skewed copies of both
    usk = p.value_term ? SkewTableFloats(p) : 0;
    et = p.VectorScore() ? BucketAccFloats(p) : 0;    // E, skewed + 3 end rows
    wt = p.value_term ? BucketAccFloats(p) : 0;  // W, skewed + 3 end rows
    dqacc = kQueryTile * p.dk;                   // dQ_I before the 1/sqrt(dk)
    // D, lse (finite), P and dS column sums, four delta rows, two moved sums
    stats = 10 * kQueryTile;
    // Distance rows: compact G^T, U^T, E and W slices by bucket.
    const int64_t nc = CompactRows(p);
    gc = p.VectorScore() ? nc * kQueryTile : 0;
    uc = p.value_term ? nc * kQueryTile : 0;
    ec = gc;
    wc = uc;
    // The scalar table's band row and its per-distance dS sums.
    sb = p.scalar_table ? 2 * (kKeyTile + kQueryTile) : 0;
  }
  int64_t gc, uc, ec, wc;
  int64_t sb;  // last
  int64_t Floats() const {
    return qt + dot + st + dpt + gt + ut + gsk + usk + et + wt + dqacc + stats +
           gc + uc + ec + wc + sb;
  }
};

// Pointers of one (batch, head) pair; tables already offset to head h.
struct HeadData {
  const float *q = nullptr, *k = nullptr, *v = nullptr;
  const float *ak = nullptr, *av = nullptr;  // null when the term is off
  // Forward outputs.
  float *out = nullptr, *lse = nullptr;
  // Backward inputs and accumulators (any may be null: not wanted).
  const float *o = nullptr, *lse_in = nullptr, *dout = nullptr;
  float *dq = nullptr, *dk = nullptr, *dv = nullptr;  // dk, dv accumulated
  float *dak = nullptr, *dav = nullptr;  // accumulated, row 0 = bucket_base
  int64_t bucket_base = 0;
  // ALiBi (p.AlibiScore()): this head's slope m_h, rounded to float.
  float alibi_slope = 0.0f;
  // Scalar score table (p.scalar_table): row h of bias [H, nb], and (in the
  // backward, may be null) this thread's dbias accumulator for head h.
  const float* bias = nullptr;
  float* dbias = nullptr;
  // The scalar table and distance rows (T5 buckets) read the bucket of a
  // distance here (DistanceBuckets).
  const int64_t* dist_bucket = nullptr;  // DistanceBuckets::bucket
  int64_t r_lo = 0, r_hi = 0;            // DistanceBuckets::r_lo / r_hi
  // Position query bias (p.position_query_bias): row h of pb [H, dk], and
  // (backward, may be null) this thread's dpb accumulator for head h.
  const float* pb = nullptr;
  float* dpb = nullptr;
};

// The bucket of every distance a scalar-table or distance-row problem
// needs: the problem's distances [-(Nq - 1) - max off, Nk - 1 - min off]
// (over the batch items' query offsets) clamped to
// the bucket map's reach (beyond it a side's bucket is constant), so
// distance r uses bucket[clamp(r, r_lo, r_hi) - r_lo]. At most
// min(left + right + 1, Nq + Nk - 1) entries, computed once per call (T5's
// map takes a logarithm).
struct DistanceBuckets {
  int64_t r_lo = 0, r_hi = 0;
  std::vector<int64_t> bucket;
};

// Fills *db for the problem, reusing its storage (no allocation once it is
// large enough: the few-query path keeps one per thread across calls).
inline void FillDistanceBuckets(const AttentionProblem& p,
                                DistanceBuckets* db) {
  int64_t left = p.max_distance, right = p.max_distance;
  if (p.buckets.kind == BucketKind::kClip) {
    left = p.buckets.clip.left;
    right = p.buckets.clip.right;
  } else if (p.buckets.kind == BucketKind::kT5) {
    left = right = p.t5_reach;
  }
  const int64_t d_min = -(std::max<int64_t>(p.q_len, 1) - 1) - p.max_offset;
  const int64_t d_max = (std::max<int64_t>(p.k_len, 1) - 1) - p.min_offset;
  db->r_lo = std::clamp(d_min, -left, right);
  db->r_hi = std::clamp(d_max, -left, right);
  const int64_t count = db->r_hi - db->r_lo + 1;
  db->bucket.resize(static_cast<size_t>(count));
  if (p.buckets.kind == BucketKind::kT5) {
    T5BucketRange(db->r_lo, count, p.buckets.t5, db->bucket.data());
  } else {
    for (int64_t e = 0; e < count; ++e)
      db->bucket[e] = p.BucketOf(db->r_lo + e);
  }
}

inline DistanceBuckets MakeDistanceBuckets(const AttentionProblem& p) {
  DistanceBuckets db;
  FillDistanceBuckets(p, &db);
  return db;
}

}  // namespace fused
}  // namespace relpos

#endif  // RELPOS_SRC_OP_KERNELS_FUSED_TILES_H_

// SIMD body of the few-query forward path (docs/kernel.md, "The few-query
// path"; few_query.h has the work items), compiled once per Highway target
// inside fused_attention.cc after fused_attention-inl.h, whose row helpers
// and MatMul it uses.
//
// The tiled kernel puts query rows in the vector lanes; with Nq <= 4 (a
// decoding, speculative or beam step) most lanes would be padding. Here
// the lanes run along dk for the scores (dot_rows-inl.h: every key row is
// loaded once for all the item's query rows) and along the keys for
// everything after: each query row's scores of a key chunk are one
// contiguous row, so the relative terms, the maximum, the exponentials and
// the bucketed sums are plain vector passes over it. The band and far
// structure of docs/math.md section 4 carry over per row: with reach
// [-left, right], the chunk's keys split into at most three runs, keys at
// distance <= -left (table row 0), the band (one row per key, rising with
// the key) and keys at distance >= right (the top row), so
//   - the score term adds one constant to each end run and a contiguous
//     slice of the row's per-distance term A to the band, where A[e] =
//     (q + pb) . AK[e] / sqrt(dk) (a gather of the row's reachable table
//     rows, computed once per row) or bias[h, bucket(e)] for the scalar
//     table;
//   - the value term sums the probabilities of each end run into one entry
//     of W and adds the band's to W's slice, and the row's output adds
//     W AV once at the end.
// ALiBi's -m |r| has no reach; it is added along the keys directly. T5
// buckets run over distance rows as in the tiled kernel (few_query.h,
// fused_tiles.h DistanceRows): A and W are by distance, and the products
// with AK / AV go through the compact range of buckets the row reaches.
//
// Per-target toggle guard: included once per target.
#if defined(RELPOS_SRC_KERNELS_FEW_QUERY_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef RELPOS_SRC_KERNELS_FEW_QUERY_INL_H_
#undef RELPOS_SRC_KERNELS_FEW_QUERY_INL_H_
#else
#define RELPOS_SRC_KERNELS_FEW_QUERY_INL_H_
#endif

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/dot_rows-inl.h"
#include "kernels/few_query.h"

HWY_BEFORE_NAMESPACE();
namespace relpos {
namespace HWY_NAMESPACE {
namespace fused_simd {

// x[0, n) = op(x, c) lane by lane (op: AddOp, MulOp).
struct AddOp {
  HWY_INLINE VF operator()(VF a, VF b) const { return hn::Add(a, b); }
};
struct MulOp {
  HWY_INLINE VF operator()(VF a, VF b) const { return hn::Mul(a, b); }
};
template <class Op>
HWY_INLINE void WithConstant(float* HWY_RESTRICT x, float c, int64_t n,
                             Op op) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF vc = hn::Set(d, c);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes)
    hn::StoreU(op(hn::LoadU(d, x + i), vc), d, x + i);
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i);
    StoreN(op(LoadN(d, x + i, rest), vc), d, x + i, rest);
  }
}

// dst[0, n) += c
HWY_INLINE void AddConstant(float* HWY_RESTRICT dst, float c, int64_t n) {
  WithConstant(dst, c, n, AddOp());
}

// x[0, n) *= a
HWY_INLINE void ScaleRange(float* HWY_RESTRICT x, float a, int64_t n) {
  WithConstant(x, a, n, MulOp());
}

// sum of x[0, n)
HWY_INLINE float SumRange(const float* HWY_RESTRICT x, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  VF acc = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) acc = hn::Add(acc, hn::LoadU(d, x + i));
  if (i < n) acc = hn::Add(acc, LoadN(d, x + i, static_cast<size_t>(n - i)));
  return hn::GetLane(hn::SumOfLanes(d, acc));
}

// max of x[0, n), n >= 1
HWY_INLINE float MaxRange(const float* HWY_RESTRICT x, int64_t n) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF neg_inf = hn::Set(d, -std::numeric_limits<float>::infinity());
  VF acc = neg_inf;
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) acc = hn::Max(acc, hn::LoadU(d, x + i));
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i);
    acc = hn::Max(acc, hn::IfThenElse(hn::FirstN(d, rest),
                                      LoadN(d, x + i, rest), neg_inf));
  }
  return hn::GetLane(hn::MaxOfLanes(d, acc));
}

// x[0, n) = exp(x - ref); returns their sum.
HWY_INLINE float ExpRange(float* HWY_RESTRICT x, int64_t n, float ref) {
  const DF d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const VF vref = hn::Set(d, ref);
  VF sum = hn::Zero(d);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const VF e = hwy::HWY_NAMESPACE::Exp(d, hn::Sub(hn::LoadU(d, x + i), vref));
    hn::StoreU(e, d, x + i);
    sum = hn::Add(sum, e);
  }
  if (i < n) {
    const size_t rest = static_cast<size_t>(n - i);
    const VF e = hn::IfThenElseZero(
        hn::FirstN(d, rest),
        hwy::HWY_NAMESPACE::Exp(d, hn::Sub(LoadN(d, x + i, rest), vref)));
    StoreN(e, d, x + i, rest);
    sum = hn::Add(sum, e);
  }
  return hn::GetLane(hn::SumOfLanes(d, sum));
}

// ALiBi along the keys: x[jj] -= m |rel0 + jj| for jj in [0, n). Distances
// formed in float are exact below 2^24; beyond, a scalar loop rounds |r|
// to float as the reference does.
HWY_INLINE void AlibiAlongKeys(float* HWY_RESTRICT x, int64_t n, int64_t rel0,
                               float slope) {
  constexpr int64_t kExact = int64_t{1} << 24;
  if (rel0 > -kExact && rel0 + n < kExact) {
    const DF d;
    const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
    const VF vm = hn::Set(d, slope);
    const VF step = hn::Set(d, static_cast<float>(lanes));
    VF r = hn::Iota(d, static_cast<float>(rel0));
    int64_t i = 0;
    for (; i + lanes <= n; i += lanes, r = hn::Add(r, step)) {
      hn::StoreU(hn::NegMulAdd(vm, hn::Abs(r), hn::LoadU(d, x + i)), d, x + i);
    }
    if (i < n) {
      const size_t rest = static_cast<size_t>(n - i);
      StoreN(hn::NegMulAdd(vm, hn::Abs(r), LoadN(d, x + i, rest)), d, x + i,
             rest);
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) {
    const int64_t r = rel0 + i;
    x[i] -= slope * static_cast<float>(r < 0 ? -r : r);
  }
}

// The runs of one row's keys [j0, j0 + n) (docs/kernel.md): [0, a) at
// distance <= -left (kernel row 0), [a, b) the band (key a at kernel row
// e_band, rising by one per key), [b, n) at distance >= right (row top).
// With left = right = 0 every key is in the first run (row 0 = top).
struct FewRuns {
  int64_t a = 0, b = 0, e_band = 0;
};

HWY_INLINE FewRuns MakeFewRuns(const fused::ClipReach& cr, int64_t rel0,
                               int64_t n) {
  FewRuns r;
  r.a = std::clamp<int64_t>(0 - cr.left - rel0, 0, n);
  r.b = std::clamp<int64_t>(cr.right - rel0, r.a, n);
  r.e_band = rel0 + r.a + cr.left;
  return r;
}

// Kernel rows [e_lo, e_hi] (clamped distances) one query row can reach.
struct FewWindow {
  int64_t lo = 0, count = 0;
};

HWY_INLINE FewWindow MakeFewWindow(const fused::ClipReach& cr, int64_t pos,
                                   int64_t key_begin, int64_t key_end) {
  if (key_end <= key_begin) return {};
  const int64_t lo = std::clamp(key_begin - pos, -cr.left, cr.right) + cr.left;
  const int64_t hi =
      std::clamp(key_end - 1 - pos, -cr.left, cr.right) + cr.left;
  return {lo, hi - lo + 1};
}

// The table row (bucket) of kernel row e: e itself for the clips; under T5
// buckets the bucket of the distance e - R.
HWY_INLINE int64_t FewTableRow(const AttentionProblem& p,
                               const fused::FewPass& fp, int64_t e) {
  if (p.buckets.kind != BucketKind::kT5) return e;
  const int64_t r = std::clamp(e - p.t5_reach, fp.r_lo, fp.r_hi);
  return fp.dist_bucket[r - fp.r_lo];
}

// Buckets [lo, lo + count) the window's kernel rows reach.
HWY_INLINE FewWindow FewBuckets(const AttentionProblem& p,
                                const fused::FewPass& fp, const FewWindow& w) {
  int64_t lo = std::numeric_limits<int64_t>::max(), hi = -1;
  for (int64_t e = w.lo; e < w.lo + w.count; ++e) {
    const int64_t b = FewTableRow(p, fp, e);
    lo = std::min(lo, b);
    hi = std::max(hi, b);
  }
  if (hi < 0) return {};
  return {lo, hi - lo + 1};
}

// The row's score term by kernel row, a[e - w.lo] for e in the window:
// (q + pb) . AK[row(e)] / sqrt(dk) (qk: the scaled, biased query), or
// bias[row(e)]. gb: scratch of nb floats (T5 buckets).
HWY_INLINE void FewScoreTerm(const AttentionProblem& p,
                             const fused::FewPass& fp, const fused::FewRow& row,
                             const FewWindow& w, const float* qk, float* gb,
                             float* a) {
  if (w.count == 0) return;
  if (p.scalar_table) {
    for (int64_t x = 0; x < w.count; ++x)
      a[x] = row.bias[FewTableRow(p, fp, w.lo + x)];
    return;
  }
  const int64_t dk = p.dk;
  if (p.buckets.kind != BucketKind::kT5) {
    dot_rows::DotRows(1, qk, 0, row.ak + w.lo * dk, dk, dk, w.count, 1.0f,
                      false, a, 0);
    return;
  }
  const FewWindow bw = FewBuckets(p, fp, w);
  dot_rows::DotRows(1, qk, 0, row.ak + bw.lo * dk, dk, dk, bw.count, 1.0f,
                    false, gb, 0);
  for (int64_t x = 0; x < w.count; ++x)
    a[x] = gb[FewTableRow(p, fp, w.lo + x) - bw.lo];
}

// o += W AV for the row's window (T5 buckets: W summed by bucket first).
HWY_INLINE void FewValueTerm(const AttentionProblem& p,
                             const fused::FewPass& fp, const fused::FewRow& row,
                             const FewWindow& w, const float* wrow, float* wc,
                             float* o) {
  if (w.count == 0) return;
  const int64_t dv = p.dv;
  if (p.buckets.kind != BucketKind::kT5) {
    MatMul(1, dv, w.count, wrow, w.count, 1, row.av + w.lo * dv, dv, o, dv,
           1.0f, true);
    return;
  }
  const FewWindow bw = FewBuckets(p, fp, w);
  FillRange(wc, 0.0f, bw.count);
  for (int64_t x = 0; x < w.count; ++x)
    wc[FewTableRow(p, fp, w.lo + x) - bw.lo] += wrow[x];
  MatMul(1, dv, bw.count, wc, bw.count, 1, row.av + bw.lo * dv, dv, o, dv,
         1.0f, true);
}

// One row's part of a key chunk: s holds its scores against keys [j0, j0 +
// n) (n >= 1 visible ones). Adds the relative terms, runs the online
// softmax step (m, l, and the rescale of o and W when the reference moves)
// and leaves the unnormalised probabilities in s; adds them to W.
HWY_INLINE void FewRowChunk(const AttentionProblem& p,
                            const fused::FewRow& row, const FewWindow& w,
                            int64_t j0, int64_t n, const float* a, float* wrow,
                            float* o, float* s, float& m, float& l) {
  const fused::ClipReach cr = fused::Reach(p);
  const int64_t rel0 = j0 - row.pos;
  const FewRuns runs = MakeFewRuns(cr, rel0, n);
  const int64_t top = cr.top();
  if (a != nullptr) {
    if (runs.a > 0) AddConstant(s, a[0 - w.lo], runs.a);
    if (runs.b > runs.a)
      AddRange(s + runs.a, a + (runs.e_band - w.lo), runs.b - runs.a);
    if (runs.b < n) AddConstant(s + runs.b, a[top - w.lo], n - runs.b);
  }
  if (p.AlibiScore()) AlibiAlongKeys(s, n, rel0, row.alibi_slope);
  const float neg_inf = -std::numeric_limits<float>::infinity();
  const float cmax = MaxRange(s, n);
  // Lazy reference (as the tiled kernel's kMaxSlack): raised only when the
  // chunk exceeds it by more than kMaxSlack, so o and W are rarely rescaled.
  const float m_new = (m == neg_inf || cmax > m + kMaxSlack) ? cmax : m;
  if (m_new != m && m != neg_inf) {
    const float alpha = std::exp(m - m_new);
    l *= alpha;
    ScaleRange(o, alpha, p.dv);
    if (wrow) ScaleRange(wrow, alpha, w.count);
  }
  m = m_new;
  l += ExpRange(s, n, m_new);
  if (wrow) {
    if (runs.a > 0) wrow[0 - w.lo] += SumRange(s, runs.a);
    if (runs.b > runs.a)
      AddRange(wrow + (runs.e_band - w.lo), s + runs.a, runs.b - runs.a);
    if (runs.b < n) wrow[top - w.lo] += SumRange(s + runs.b, n - runs.b);
  }
}

// One work item (few_query.h): every row's output [dv] and lse.
// `scratch` holds fused::FewScratch(p).Floats() floats.
HWY_NOINLINE void FewQueryPassBody(const AttentionProblem& p,
                                   const fused::FewPass& fp, float* scratch) {
  const fused::FewScratch sz(p);
  const int64_t dk = p.dk, dv = p.dv, rows = fp.rows, ldq = sz.ldq;
  constexpr int64_t kChunk = fused::kFewKeyChunk;
  float* st = scratch;
  float* qs = st + sz.s;
  float* qp = qs + sz.q;
  float* at = qp + sz.qp;
  float* wt = at + sz.a;
  float* ot = wt + sz.w;
  float* gb = ot + sz.o;
  float* wc = gb + sz.gb;
  const fused::ClipReach cr = fused::Reach(p);
  const float scale = p.ScoreScale<float>();
  const float neg_inf = -std::numeric_limits<float>::infinity();
  float m[fused::kFewPassRows], l[fused::kFewPassRows];
  FewWindow win[fused::kFewPassRows];
  int64_t key_end = fp.key_begin;
  for (int64_t r = 0; r < rows; ++r) {
    const fused::FewRow& row = fp.row[r];
    key_end = std::max(key_end, row.key_end);
    float* q = qs + r * ldq;
    for (int64_t c = 0; c < dk; ++c) q[c] = row.q[c] * scale;
    for (int64_t c = dk; c < ldq; ++c) q[c] = 0.0f;
    win[r] = MakeFewWindow(cr, row.pos, fp.key_begin, row.key_end);
    const bool uses_a = p.VectorScore() || p.scalar_table;
    if (uses_a) {
      const float* qk = q;
      if (p.position_query_bias) {  // (q + pb) / sqrt(dk)
        float* b = qp + r * ldq;
        for (int64_t c = 0; c < ldq; ++c)
          b[c] = c < dk ? (row.q[c] + row.pb[c]) * scale : 0.0f;
        qk = b;
      }
      FewScoreTerm(p, fp, row, win[r], qk, gb, at + r * sz.na);
    }
    if (p.value_term) FillRange(wt + r * sz.na, 0.0f, win[r].count);
    FillRange(ot + r * dv, 0.0f, dv);
    m[r] = neg_inf;
    l[r] = 0.0f;
  }
  for (int64_t j0 = fp.key_begin; j0 < key_end; j0 += kChunk) {
    const int64_t kn = std::min(kChunk, key_end - j0);
    dot_rows::DotRows(rows, qs, ldq, fp.k + j0 * dk, dk, dk, kn, 1.0f, false,
                      st, kChunk);
    for (int64_t r = 0; r < rows; ++r) {
      const fused::FewRow& row = fp.row[r];
      float* s = st + r * kChunk;
      const int64_t n = std::clamp<int64_t>(row.key_end - j0, 0, kn);
      if (n > 0) {
        FewRowChunk(p, row, win[r], j0, n, sz.a ? at + r * sz.na : nullptr,
                    p.value_term ? wt + r * sz.na : nullptr, ot + r * dv, s,
                    m[r], l[r]);
      }
      FillRange(s + n, 0.0f, kn - n);  // keys this row does not see
    }
    // O += P V_chunk for every row at once: A(r, jj) = st[r * kChunk + jj].
    MatMul(rows, dv, kn, st, kChunk, 1, fp.v + j0 * dv, dv, ot, dv, 1.0f,
           true);
  }
  for (int64_t r = 0; r < rows; ++r) {
    const fused::FewRow& row = fp.row[r];
    float* o = ot + r * dv;
    if (l[r] > 0.0f) {
      if (p.value_term)
        FewValueTerm(p, fp, row, win[r], wt + r * sz.na, wc, o);
      const float inv = 1.0f / l[r];
      for (int64_t c = 0; c < dv; ++c) row.out[c] = o[c] * inv;
      if (row.lse) *row.lse = m[r] + std::log(l[r]);
    } else {  // the row sees no key: zeros, lse = -inf (docs/math.md section 1)
      std::fill(row.out, row.out + dv, 0.0f);
      if (row.lse) *row.lse = neg_inf;
    }
  }
}

}  // namespace fused_simd
}  // namespace HWY_NAMESPACE
}  // namespace relpos
HWY_AFTER_NAMESPACE();

#endif  // per-target include guard

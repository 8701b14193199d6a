// Shared, table-driven test cases for relative attention (tests, benchmarks).
//
// How to use:
//
//   for (const AttentionCase& c : StandardCases()) {        // or your own list
//     AttentionData<double> data = MakeRandomData<double>(c, /*seed=*/1);
//     AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
//     AttentionForward<double>(data.Inputs(), fwd.Out(), fwd.Lse(), c.options);
//     std::vector<double> dout = RandomVector<double>(c.OutNumel(), 2);
//     AttentionGradBuffers<double> g = MakeGrads<double>(c, data);
//     AttentionBackward<double>(data.Inputs(), fwd.Out(), fwd.Lse(),
//                               OutShaped(c, dout), g.Grads(), c.options);
//   }
//
// With gtest: INSTANTIATE_TEST_SUITE_P(All, MyTest,
//     testing::ValuesIn(StandardCases()),
//     [](const auto& info) { return info.param.name; });
// Every case name is unique and a valid gtest name ([A-Za-z0-9_]).
//
// Decisions:
// - Data: q, k, v ~ N(0, 1); tables ~ N(0, table_scale^2) (default 1, so the
//   relative terms move scores and outputs as much as the content terms do and
//   a wrong bucket is visible). Drawn from relpos::Rng in a fixed order
//   (q, k, v, ak, av), so a (case, seed) pair gives the same numbers on every
//   platform, and MakeRandomData<float> is exactly MakeRandomData<double>
//   rounded to float.
// - A table whose term is off is EMPTY in AttentionData (the API allows that);
//   tests that need a present-but-unused table build it themselves.
// - Output and gradient buffers start filled with NaN, so an element the
//   implementation forgets to write (gradients are overwritten, never
//   accumulated: include/relpos/attention.h) shows up as a failure.
// - Flops(): docs/math.md section 7's vanilla forward convention, 4 B H Nq Nk d with
//   d = (dk + dv) / 2, i.e. 2 B H Nq Nk (dk + dv): the Q K^T and P V GEMMs,
//   dense (no discount for causal or padding masks). Backward is 2.5x that.
#ifndef RELPOS_TESTS_SUPPORT_ATTENTION_CASES_H_
#define RELPOS_TESTS_SUPPORT_ATTENTION_CASES_H_

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "base/rng.h"
#include "relpos/attention.h"
#include "relpos/position_schemes.h"
#include "relpos/tensor_view.h"

namespace relpos {

struct AttentionCase {
  std::string name;  // unique, [A-Za-z0-9_]
  int64_t batch = 1, heads = 1, q_len = 1, k_len = 1, dk = 1, dv = 1;
  // Key/value heads (grouped-query attention); 0 means `heads`.
  int64_t kv_heads = 0;
  AttentionOptions options;

  // docs/math.md section 7 convention (see the comment at the top of this file).
  double Flops() const;
  // docs/math.md section 4's extra work of the relative terms: the two small GEMMs
  // Q AK^T and W AV, 2 B H Nq (2k+1) dk + 2 B H Nq (2k+1) dv (only for the
  // terms that are on).
  double RelativeFlops() const;

  // Table rows nb of the bucket map (2k+1 by default; docs/math.md section 8).
  int64_t TableRows() const;
  // Row b(r) of the pair (query row i, key j) of batch item b, r = j - (i +
  // off_b), computed here from the public bucket functions independently
  // of src/op/core. The two-argument form is batch item 0's.
  int64_t Bucket(int64_t b, int64_t i, int64_t j) const;
  int64_t Bucket(int64_t i, int64_t j) const { return Bucket(0, i, j); }
  // Which optional inputs the scheme reads.
  bool UsesAk() const {
    return options.key_term && options.score_term == ScoreTerm::kVector;
  }
  bool UsesBias() const {
    return options.key_term && options.score_term == ScoreTerm::kScalarTable;
  }
  bool UsesPb() const { return options.position_query_bias; }
  // ALiBi slope of head h (options.alibi_slopes or the paper's rule); 0 when
  // the score term is not ALiBi.
  double AlibiSlope(int64_t h) const;
  // Number of table copies: H for per-head tables, 1 for shared ones.
  int64_t TableHeads() const { return options.per_head_tables ? heads : 1; }
  // Resolved query offset of batch item b: options.query_offsets[b],
  // options.query_offset or Nk - Nq (docs/math.md section 1).
  int64_t QueryOffset(int64_t b = 0) const {
    if (!options.query_offsets.empty()) return options.query_offsets[b];
    return options.query_offset.value_or(k_len - q_len);
  }
  // First visible key of batch item b (left padding).
  int64_t KeyBegin(int64_t b) const {
    return options.key_starts.empty() ? 0 : options.key_starts[b];
  }
  int64_t KvHeads() const { return kv_heads > 0 ? kv_heads : heads; }
  // Index of the [Nk, d] slice of k / v that query head h of item b reads
  // (head h / (H / Hkv), as transformers' repeat_kv).
  int64_t KvSlice(int64_t b, int64_t h) const {
    return b * KvHeads() + h / (heads / KvHeads());
  }
  // The score scale: options.scale or 1 / sqrt(dk).
  double ScoreScale() const {
    return options.scale.value_or(1.0 / std::sqrt(static_cast<double>(dk)));
  }
  int64_t QNumel() const { return batch * heads * q_len * dk; }
  int64_t KNumel() const { return batch * KvHeads() * k_len * dk; }
  int64_t VNumel() const { return batch * KvHeads() * k_len * dv; }
  int64_t AkNumel() const { return TableHeads() * TableRows() * dk; }
  int64_t AvNumel() const { return TableHeads() * TableRows() * dv; }
  int64_t BiasNumel() const { return heads * TableRows(); }
  int64_t PbNumel() const { return heads * dk; }
  int64_t OutNumel() const { return batch * heads * q_len * dv; }
  int64_t LseNumel() const { return batch * heads * q_len; }
  // Keys visible to row i of batch item b are exactly [KeyBegin(b),
  // KeyEnd(b, i)), none when KeyEnd <= KeyBegin (docs/math.md section 1
  // masks), computed here independently of src/op/core.
  int64_t KeyEnd(int64_t b, int64_t i) const;
  // Whether row i of item b sees any key.
  bool Sees(int64_t b, int64_t i) const { return KeyEnd(b, i) > KeyBegin(b); }
  // One line: shapes and options, for failure messages.
  std::string Describe() const;
};

std::ostream& operator<<(std::ostream& os, const AttentionCase& c);

// The standard option matrix, small enough for element-wise finite
// differences in double (every case: B*H*Nq*Nk*d <= a few thousand):
//   {shared, per-head tables} x {both terms, key only, value only, neither}
//   x {no mask, causal, padding with a length-0 item, causal + padding}
//   on B=2, H=2, Nq=5, Nk=7, dk=3, dv=4, k=2 (default offset Nk-Nq = 2),
// plus special cases: Nq > Nk (negative default offset), explicit positive /
// zero / negative query_offset (causal rows that see nothing), k = 0,
// k = n - 1, k = n, k >> n, n = 1, dk = dv = 1, dk > dv, three batch items
// with lengths {Nk, 2, 0}.
// A case with the given sizes and k, every other option at its default.
AttentionCase MakeCase(std::string name, int64_t batch, int64_t heads,
                       int64_t q_len, int64_t k_len, int64_t dk, int64_t dv,
                       int64_t max_distance);

std::vector<AttentionCase> StandardCases();

// The scheme family of docs/math.md section 8 over the awkward-size matrix
// of StandardCases (same small sizes, for finite differences): shaw-asym
// (clip left 3 / right 1, and left 0), shaw-log (T5 bidirectional buckets
// with Shaw tables on both sides), t5 bidirectional and causal (scalar
// table), alibi (paper's slopes and user slopes, causal and bidirectional),
// xl (position query bias, vector key term, k >= n), each with causal,
// padding with an empty item, Nq != Nk with explicit offset, Nq > Nk, n = 1,
// n < reach, dk != dv, per-head tables where the scheme has tables.
std::vector<AttentionCase> SchemeCases();

// Every scheme of the registry (relpos/schemes.h) with a term inside
// attention, at its paper's defaults and with the options the registry
// gives a layer (shaw k = 16, shaw-asym 64 / 8 as w2v-BERT 2.0, shaw-log and
// t5 with T5's 32 buckets and max distance 128, bidirectional, or causal
// with the causal mask, ALiBi with the paper's slopes, XL unclipped), on
// sizes around the fused kernel's tiles (63/64/65/129, Nq != Nk, decoding,
// dk != dv, padding, per-head tables): for comparing a fast path against
// the reference in float. A scheme added to the registry joins the sweep.
// Each case well under 1e8 FLOPs.
std::vector<AttentionCase> SchemeSweepCases();

// Awkward sizes for fast paths (tile boundaries 1, primes, 63/64/65, 127/129,
// n < k, n = k, Nq != Nk, causal and padded), dk = dv = 64 and dk != dv; too
// big for finite differences, fine for forward/backward comparisons against
// the reference in float (each case well under 1e8 FLOPs).
std::vector<AttentionCase> SizeSweepCases();

// The options of row layout, over the scheme family at the small sizes of
// StandardCases (finite differences): grouped-query attention (H = 4 with
// Hkv = 2 and multi-query Hkv = 1), per-row query offsets, left padding
// (key_starts, with rows that see nothing, and with right padding too),
// an explicit score scale, each under shaw (per-head tables, both terms),
// shaw-asym, shaw-log, t5 (both bucket kinds), alibi and xl with values.
std::vector<AttentionCase> LayoutCases();

// The same options at the fused kernel's awkward sizes (63/64/65/129 key
// starts around tile edges, decoding with a cache, Nq != Nk, a single
// key/value head split over key-tile chunks) under realistic scheme
// settings, for fast-path-vs-reference comparisons in float.
std::vector<AttentionCase> LayoutSweepCases();

// The few-query path's cases (Nq <= 4: decoding, speculative and beam
// steps): every scheme of SchemeCases and SchemeSweepCases, Shaw in each
// term combination, shared and per-head, k = 0 and plain attention, on
// Nq in 1..4 against key ranges across the path's 512-key chunks (1 to
// 2100 keys), widths from 1 to 64 (1, 3, 5, 9 and 17 no multiple of the
// vector length), causal and bidirectional, per-row offsets with left and right
// padding, rows that see nothing, Nq > Nk, every key far on either side,
// grouped-query and multi-query heads (up to 16 query rows per key/value
// head), an explicit scale, and ALiBi's distances around 2^24.
std::vector<AttentionCase> FewQueryCases();

// ALiBi (score term only, slopes 1e-6 and -2e-6 on two heads) with the
// queries at offset 100 - 2^24, so the distances cross 2^24, where float
// stops representing them exactly; small slopes keep the scores O(1).
AttentionCase AlibiExactnessEdgeCase(const std::string& name, int64_t q_len,
                                     int64_t k_len);

template <typename T>
struct AttentionData {
  AttentionCase c;
  std::vector<T> q, k, v, ak, av;  // ak / av empty when their term is off
  std::vector<T> bias, pb;  // empty unless the scheme reads them

  // Views with the API's shapes; an empty vector gives an empty view.
  AttentionInputs<T> Inputs() const {
    AttentionInputs<T> in;
    in.q = ConstView<T>(q.data(), {c.batch, c.heads, c.q_len, c.dk});
    in.k = ConstView<T>(k.data(), {c.batch, c.KvHeads(), c.k_len, c.dk});
    in.v = ConstView<T>(v.data(), {c.batch, c.KvHeads(), c.k_len, c.dv});
    in.ak = TableView(ak, c.dk);
    in.av = TableView(av, c.dv);
    if (!bias.empty())
      in.bias = ConstView<T>(bias.data(), {c.heads, c.TableRows()});
    if (!pb.empty()) in.pb = ConstView<T>(pb.data(), {c.heads, c.dk});
    return in;
  }

  // Pointers to the five tensors in a fixed order (q, k, v, ak, av), for
  // loops that perturb every input element.
  std::vector<std::vector<T>*> Tensors() { return {&q, &k, &v, &ak, &av}; }
  // The same followed by the scheme inputs (bias, pb), possibly empty.
  std::vector<std::vector<T>*> AllTensors() {
    return {&q, &k, &v, &ak, &av, &bias, &pb};
  }

 private:
  ConstView<T> TableView(const std::vector<T>& t, int64_t d) const {
    if (t.empty()) return ConstView<T>();
    if (c.options.per_head_tables)
      return ConstView<T>(t.data(), {c.heads, c.TableRows(), d});
    return ConstView<T>(t.data(), {c.TableRows(), d});
  }
};

// n values ~ N(0, scale^2) from Rng(seed).
template <typename T>
std::vector<T> RandomVector(int64_t n, uint64_t seed, double scale = 1.0) {
  Rng rng(seed);
  std::vector<T> out(n);
  for (T& x : out) x = static_cast<T>(scale * rng.Normal());
  return out;
}

// Reproducible random inputs for `c` (see the file comment).
template <typename T>
AttentionData<T> MakeRandomData(const AttentionCase& c, uint64_t seed,
                                double table_scale = 1.0) {
  Rng rng(seed);
  auto fill = [&rng](std::vector<T>& v, int64_t n, double scale) {
    v.resize(n);
    for (T& x : v) x = static_cast<T>(scale * rng.Normal());
  };
  AttentionData<T> d;
  d.c = c;
  fill(d.q, c.QNumel(), 1.0);
  fill(d.k, c.KNumel(), 1.0);
  fill(d.v, c.VNumel(), 1.0);
  if (c.UsesAk()) fill(d.ak, c.AkNumel(), table_scale);
  if (c.options.value_term) fill(d.av, c.AvNumel(), table_scale);
  // Drawn after the Shaw tables, so Shaw cases keep their numbers.
  if (c.UsesBias()) fill(d.bias, c.BiasNumel(), table_scale);
  if (c.UsesPb()) fill(d.pb, c.PbNumel(), table_scale);
  return d;
}

// Element-wise static_cast of every tensor (e.g. double data -> float, so a
// float run and a double run see exactly the same input values).
template <typename U, typename T>
AttentionData<U> CastData(const AttentionData<T>& d) {
  auto cast = [](const std::vector<T>& v) {
    return std::vector<U>(v.begin(), v.end());
  };
  AttentionData<U> out;
  out.c = d.c;
  out.q = cast(d.q);
  out.k = cast(d.k);
  out.v = cast(d.v);
  out.ak = cast(d.ak);
  out.av = cast(d.av);
  out.bias = cast(d.bias);
  out.pb = cast(d.pb);
  return out;
}

// out [B, H, Nq, dv] and lse [B, H, Nq], NaN-filled.
template <typename T>
struct AttentionOutputBuffers {
  AttentionCase c;
  std::vector<T> out, lse;
  TensorView<T> Out() {
    return {out.data(), {c.batch, c.heads, c.q_len, c.dv}};
  }
  TensorView<T> Lse() { return {lse.data(), {c.batch, c.heads, c.q_len}}; }
  ConstView<T> Out() const {
    return {out.data(), {c.batch, c.heads, c.q_len, c.dv}};
  }
  ConstView<T> Lse() const { return {lse.data(), {c.batch, c.heads, c.q_len}}; }
};

template <typename T>
AttentionOutputBuffers<T> MakeOutputs(const AttentionCase& c) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  return {c, std::vector<T>(c.OutNumel(), nan),
          std::vector<T>(c.LseNumel(), nan)};
}

// Gradient buffers shaped like `data`'s inputs (dak / dav empty exactly when
// data.ak / data.av are), NaN-filled.
template <typename T>
struct AttentionGradBuffers {
  AttentionCase c;
  std::vector<T> dq, dk, dv, dak, dav;
  std::vector<T> dbias, dpb;  // empty exactly when data.bias / data.pb are
  AttentionGrads<T> Grads() {
    AttentionGrads<T> g;
    g.dq = {dq.data(), {c.batch, c.heads, c.q_len, c.dk}};
    g.dk = {dk.data(), {c.batch, c.KvHeads(), c.k_len, c.dk}};
    g.dv = {dv.data(), {c.batch, c.KvHeads(), c.k_len, c.dv}};
    g.dak = Table(dak, c.dk);
    g.dav = Table(dav, c.dv);
    if (!dbias.empty())
      g.dbias = TensorView<T>(dbias.data(), {c.heads, c.TableRows()});
    if (!dpb.empty()) g.dpb = TensorView<T>(dpb.data(), {c.heads, c.dk});
    return g;
  }
  std::vector<std::vector<T>*> Tensors() { return {&dq, &dk, &dv, &dak, &dav}; }
  std::vector<std::vector<T>*> AllTensors() {
    return {&dq, &dk, &dv, &dak, &dav, &dbias, &dpb};
  }

 private:
  TensorView<T> Table(std::vector<T>& t, int64_t d) {
    if (t.empty()) return TensorView<T>();
    if (c.options.per_head_tables)
      return TensorView<T>(t.data(), {c.heads, c.TableRows(), d});
    return TensorView<T>(t.data(), {c.TableRows(), d});
  }
};

template <typename T>
AttentionGradBuffers<T> MakeGrads(const AttentionCase& c,
                                  const AttentionData<T>& data) {
  const T nan = std::numeric_limits<T>::quiet_NaN();
  AttentionGradBuffers<T> g;
  g.c = c;
  g.dq.assign(c.QNumel(), nan);
  g.dk.assign(c.KNumel(), nan);
  g.dv.assign(c.VNumel(), nan);
  if (!data.ak.empty()) g.dak.assign(c.AkNumel(), nan);
  if (!data.av.empty()) g.dav.assign(c.AvNumel(), nan);
  if (!data.bias.empty()) g.dbias.assign(c.BiasNumel(), nan);
  if (!data.pb.empty()) g.dpb.assign(c.PbNumel(), nan);
  return g;
}

// A [B, H, Nq, dv] view of `v` (e.g. dout), v.size() == c.OutNumel().
template <typename T>
ConstView<T> OutShaped(const AttentionCase& c, const std::vector<T>& v) {
  return ConstView<T>(v.data(), {c.batch, c.heads, c.q_len, c.dv});
}

// ---- tolerances for comparing two implementations -------------------------
//
// Rounding-error scales of one case (docs/math.md sections 2-3), computed in double
// from the data: for every output tensor, an upper bound on the sum of the
// absolute values of the terms one of its elements adds up, and a bound on
// the relative error of each term. Two implementations of the same case with
// unit roundoff u (2^-24 for float, 2^-53 for double) then agree within
//   Tolerance(u, term) = 4 (2 (dk + 3) u max_score_abs + growth u) * term
// where the first part is the score error amplified by exp (it moves every
// probability by that relative amount) and the second the accumulation over
// growth = Nq + Nk + dk + dv terms (worst case, linear). This holds for any
// summation order (tiling, online softmax), so it serves the fused kernel too.
// Cancellation is covered: a far bucket's dAK is exactly zero in exact
// arithmetic (sum_j dS_ij = 0) yet its computed value is ~u * terms.
struct TermScales {
  // max over pairs of sum_t |q_t| (|k_t| + |AK_t|) / sqrt(dk).
  double max_score_abs = 0;
  double growth = 0;
  double out = 0;  // max_j |w_j|_inf, w = v + AV (outputs are convex sums)
  double lse = 0;  // 1 + max |s| (lse - max is a log of a sum of <= Nk terms)
  // sum_j |dS_ij| <= 2 G_i / sqrt(dk), G_i = ||dO_i||_1 max_j |w_ij|_inf;
  // dQ: max_i of that times max|k + AK|; dK, dAK: the sum over all rows times
  // max|q|; dV, dAV: the sum over rows of max|dO_i|.
  double dq = 0, dk = 0, dv = 0, dak = 0, dav = 0;
  // dbias: the sum over all rows of sum_j |dS_ij| (unscaled); dpb: that
  // scaled by 1/sqrt(dk) times max|AK|.
  double dbias = 0, dpb = 0;
  int64_t dk_dim = 1;

  double RelativeError(double u) const {
    return 2 * (dk_dim + 3) * u * max_score_abs + growth * u;
  }
  double Tolerance(double u, double term) const {
    return 4 * RelativeError(u) * term;
  }
};

// `dout` may be empty (then only out and lse scales are meaningful).
TermScales ComputeTermScales(const AttentionData<double>& data,
                             const std::vector<double>& dout);

// ---- error norms (all computed in double; `expected` is the reference) ----

// max_i |actual_i - expected_i|; +inf if the sizes differ or any entry is
// NaN. Equal infinities (lse = -inf rows) count as zero error.
template <typename A, typename B>
double MaxAbsError(const std::vector<A>& actual,
                   const std::vector<B>& expected) {
  if (actual.size() != expected.size())
    return std::numeric_limits<double>::infinity();
  double m = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (a == e) continue;              // includes equal infinities
    const double d = std::abs(a - e);  // NaN if either is NaN
    if (std::isnan(d)) return std::numeric_limits<double>::infinity();
    m = std::max(m, d);
  }
  return m;
}

// ||actual - expected||_2 / ||expected||_2 (the absolute norm when expected
// is all zeros); +inf for size mismatch or non-finite entries.
template <typename A, typename B>
double RelFrobeniusError(const std::vector<A>& actual,
                         const std::vector<B>& expected) {
  if (actual.size() != expected.size())
    return std::numeric_limits<double>::infinity();
  double num = 0, den = 0;
  for (size_t i = 0; i < actual.size(); ++i) {
    const double a = actual[i], e = expected[i];
    if (!std::isfinite(a) || !std::isfinite(e))
      return std::numeric_limits<double>::infinity();
    num += (a - e) * (a - e);
    den += e * e;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

// Normalised mean squared error sum (a-e)^2 / sum e^2 (the square of
// RelFrobeniusError); 0 for two all-zero vectors.
template <typename A, typename B>
double Nmse(const std::vector<A>& actual, const std::vector<B>& expected) {
  const double r = RelFrobeniusError(actual, expected);
  return r * r;
}

// max_i |x_i| over finite entries (0 for an empty vector).
template <typename T>
double MaxAbs(const std::vector<T>& x) {
  double m = 0;
  for (const T& v : x)
    if (std::isfinite(static_cast<double>(v)))
      m = std::max(m, std::abs(static_cast<double>(v)));
  return m;
}

template <typename T>
bool AllFinite(const std::vector<T>& x) {
  for (const T& v : x)
    if (!std::isfinite(static_cast<double>(v))) return false;
  return true;
}

}  // namespace relpos

#endif  // RELPOS_TESTS_SUPPORT_ATTENTION_CASES_H_

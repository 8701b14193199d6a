// Properties of the scheme family (docs/math.md section 8) in the reference
// path: each scheme against a direct dense formula written here from the
// equations, and the identities that tie the schemes to each other:
//
// - a constant T5 table is vanilla attention (softmax shift invariance);
// - ALiBi with every slope 0 is vanilla attention, bit for bit;
// - the asymmetric clip with left = right = k is the symmetric clip, bit for
//   bit, forward and backward;
// - any bucket map with all table rows equal is the symmetric clip with
//   k = 0 and that row (bit for bit for out, lse, dq, dk, dv; the table
//   gradients of the k = 0 call are the row sums of the other call's);
// - a zero position query bias is Shaw, bit for bit.
//
// The finite-difference gradient checks of every scheme are in
// attention_grad_test.cc (SchemeCases).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <string>
#include <vector>

#include "core/attention_problem.h"
#include "relpos/attention.h"
#include "relpos/position_schemes.h"
#include "support/attention_cases.h"

namespace relpos {
namespace {

// Pair terms of a scheme for the direct formula: what the scheme adds to the
// score s_ij (after the content score's 1/sqrt(dk)) and to the value v_j.
struct PairTerms {
  std::function<double(int64_t b, int64_t h, int64_t i, int64_t j)> score;
  std::function<double(int64_t h, int64_t i, int64_t j, int64_t t)> value;
};

// Dense attention straight from the definition, in double: for every row,
// s_ij = q_i . k_j / sqrt(dk) + score(i, j) over the visible keys,
// p = softmax(s), o_i = sum_j p_ij (v_j + value(i, j)).
std::vector<double> DirectForward(const AttentionCase& c,
                                  const AttentionData<double>& d,
                                  const PairTerms& terms) {
  std::vector<double> out(c.OutNumel(), 0.0);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t bh = b * c.heads + h;
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t end = c.KeyEnd(b, i);
        if (end == 0) continue;
        std::vector<double> s(end);
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < end; ++j) {
          double dot = 0;
          for (int64_t t = 0; t < c.dk; ++t)
            dot += d.q[(bh * c.q_len + i) * c.dk + t] *
                   d.k[(bh * c.k_len + j) * c.dk + t];
          s[j] = dot / std::sqrt(static_cast<double>(c.dk));
          if (terms.score) s[j] += terms.score(b, h, i, j);
          mx = std::max(mx, s[j]);
        }
        double sum = 0;
        for (double& x : s) sum += (x = std::exp(x - mx));
        for (int64_t j = 0; j < end; ++j) {
          for (int64_t t = 0; t < c.dv; ++t) {
            double w = d.v[(bh * c.k_len + j) * c.dv + t];
            if (terms.value) w += terms.value(h, i, j, t);
            out[(bh * c.q_len + i) * c.dv + t] += s[j] / sum * w;
          }
        }
      }
    }
  }
  return out;
}

template <typename T>
struct RunT {
  AttentionOutputBuffers<T> fwd;
  AttentionGradBuffers<T> grads;
};
using RunD = RunT<double>;

// Forward and backward through the public API with dout = R(seed 77).
template <typename T>
RunT<T> ForwardBackward(const AttentionData<T>& d, const AttentionOptions& o) {
  RunT<T> run{MakeOutputs<T>(d.c), MakeGrads<T>(d.c, d)};
  AttentionForward<T>(d.Inputs(), run.fwd.Out(), run.fwd.Lse(), o);
  const std::vector<double> r = RandomVector<double>(d.c.OutNumel(), 77);
  const std::vector<T> rt(r.begin(), r.end());
  AttentionBackward<T>(d.Inputs(), run.fwd.Out(), run.fwd.Lse(),
                       OutShaped(d.c, rt), run.grads.Grads(), o);
  return run;
}

// A small case with both masks in play: causal plus an item with padding.
AttentionCase MaskedCase(const std::string& name, bool causal) {
  AttentionCase c = MakeCase(name, 2, 3, 6, 9, 4, 3, 2);
  c.options.causal = causal;
  c.options.key_lengths = {9, 5};
  return c;
}

constexpr double kDirectTol = 1e-13;  // relative Frobenius, double vs double

TEST(SchemeDirect, T5ScalarTableMatchesDirectFormula) {
  for (bool bidirectional : {true, false}) {
    for (bool causal : {false, true}) {
      AttentionCase c = MaskedCase("t5", causal);
      c.options.buckets.kind = BucketKind::kT5;
      c.options.buckets.t5 = {bidirectional ? 10 : 6, 7, bidirectional};
      c.options.score_term = ScoreTerm::kScalarTable;
      c.options.value_term = false;
      SCOPED_TRACE(c.Describe());
      const AttentionData<double> d = MakeRandomData<double>(c, 3);
      const int64_t off = c.QueryOffset();
      PairTerms terms;
      terms.score = [&](int64_t, int64_t h, int64_t i, int64_t j) {
        const int64_t row = T5Bucket(j - (i + off), c.options.buckets.t5);
        return d.bias[h * c.options.buckets.t5.num_buckets + row];
      };
      const RunD run = ForwardBackward<double>(d, c.options);
      EXPECT_LT(RelFrobeniusError(run.fwd.out, DirectForward(c, d, terms)),
                kDirectTol);
    }
  }
}

// The paper's slopes for 6 heads (docs/math.md section 8), written out: the
// 4 slopes of 4 heads, then the first 2 odd-numbered slopes of 8 heads.
TEST(SchemeDirect, AlibiMatchesDirectFormula) {
  const std::vector<double> paper6 = {1.0 / 4,   1.0 / 16, 1.0 / 64,
                                      1.0 / 256, 1.0 / 2,  1.0 / 8};
  for (bool causal : {false, true}) {
    for (bool user : {false, true}) {
      AttentionCase c = MaskedCase("alibi", causal);
      c.heads = 6;
      c.options.score_term = ScoreTerm::kAlibi;
      c.options.key_term = true;
      c.options.value_term = false;
      std::vector<double> slopes = paper6;
      if (user) {
        slopes = {0.9, -0.2, 0.0, 1.5, 0.05, 3.0};
        c.options.alibi_slopes = slopes;
      }
      SCOPED_TRACE(c.Describe());
      const AttentionData<double> d = MakeRandomData<double>(c, 4);
      const int64_t off = c.QueryOffset();
      PairTerms terms;
      terms.score = [&](int64_t, int64_t h, int64_t i, int64_t j) {
        // Causal: the paper's -m (i + off - j); otherwise -m |j - (i + off)|.
        const double dist = causal ? static_cast<double>(i + off - j)
                                   : std::abs(static_cast<double>(j - i - off));
        return -slopes[h] * dist;
      };
      const RunD run = ForwardBackward<double>(d, c.options);
      EXPECT_LT(RelFrobeniusError(run.fwd.out, DirectForward(c, d, terms)),
                kDirectTol);
    }
  }
}

TEST(SchemeDirect, ShawLogAndAsymMatchDirectFormula) {
  for (bool per_head : {false, true}) {
    for (int map = 0; map < 2; ++map) {
      AttentionCase c = MaskedCase(map == 0 ? "shawlog" : "asym", true);
      c.options.per_head_tables = per_head;
      if (map == 0) {
        c.options.buckets.kind = BucketKind::kT5;
        c.options.buckets.t5 = {8, 5, true};
      } else {
        c.options.buckets.kind = BucketKind::kClip;
        c.options.buckets.clip = {4, 1};
      }
      c.options.causal = map == 1;
      SCOPED_TRACE(c.Describe());
      const AttentionData<double> d = MakeRandomData<double>(c, 5);
      const int64_t off = c.QueryOffset(), rows = c.TableRows();
      auto row = [&](int64_t i, int64_t j) {
        const int64_t r = j - (i + off);
        return map == 0 ? T5Bucket(r, c.options.buckets.t5)
                        : std::clamp<int64_t>(r, -4, 1) + 4;
      };
      PairTerms terms;
      terms.score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
        const int64_t tab = per_head ? h * rows : 0;
        double dot = 0;
        for (int64_t t = 0; t < c.dk; ++t)
          dot += d.q[((b * c.heads + h) * c.q_len + i) * c.dk + t] *
                 d.ak[(tab + row(i, j)) * c.dk + t];
        return dot / std::sqrt(static_cast<double>(c.dk));
      };
      terms.value = [&](int64_t h, int64_t i, int64_t j, int64_t t) {
        return d.av[((per_head ? h * rows : 0) + row(i, j)) * c.dv + t];
      };
      const RunD run = ForwardBackward<double>(d, c.options);
      EXPECT_LT(RelFrobeniusError(run.fwd.out, DirectForward(c, d, terms)),
                kDirectTol);
    }
  }
}

TEST(SchemeDirect, PositionQueryBiasMatchesDirectFormula) {
  AttentionCase c = MaskedCase("xl", true);
  c.options.max_distance = 20;  // no pair clipped: Transformer-XL
  c.options.position_query_bias = true;
  c.options.value_term = false;
  const AttentionData<double> d = MakeRandomData<double>(c, 6);
  const int64_t off = c.QueryOffset(), k = c.options.max_distance;
  PairTerms terms;
  terms.score = [&](int64_t b, int64_t h, int64_t i, int64_t j) {
    const int64_t row = j - (i + off) + k;
    double dot = 0;
    for (int64_t t = 0; t < c.dk; ++t)
      dot += (d.q[((b * c.heads + h) * c.q_len + i) * c.dk + t] +
              d.pb[h * c.dk + t]) *
             d.ak[row * c.dk + t];
    return dot / std::sqrt(static_cast<double>(c.dk));
  };
  const RunD run = ForwardBackward<double>(d, c.options);
  EXPECT_LT(RelFrobeniusError(run.fwd.out, DirectForward(c, d, terms)),
            kDirectTol);
}

// Vanilla attention of the same q, k, v (both relative terms off).
template <typename T>
RunT<T> Vanilla(const AttentionData<T>& d) {
  AttentionData<T> plain = d;
  plain.c.options = d.c.options;
  plain.c.options.key_term = plain.c.options.value_term = false;
  plain.c.options.score_term = ScoreTerm::kVector;
  plain.c.options.alibi_slopes.clear();
  plain.c.options.position_query_bias = false;
  plain.ak.clear();
  plain.av.clear();
  plain.bias.clear();
  plain.pb.clear();
  return ForwardBackward<T>(plain, plain.c.options);
}

TEST(SchemeProperty, ConstantT5TableIsVanilla) {
  for (const AttentionCase& base : SchemeCases()) {
    if (!base.UsesBias()) continue;
    SCOPED_TRACE(base.Describe());
    AttentionData<double> d = MakeRandomData<double>(base, 8);
    std::fill(d.bias.begin(), d.bias.end(), 1.75);
    const RunD run = ForwardBackward<double>(d, base.options);
    const RunD van = Vanilla(d);
    // Shifting every score of a row by 1.75 moves lse by 1.75 and nothing
    // else; the errors are rounding of O(1) numbers in double.
    EXPECT_LT(RelFrobeniusError(run.fwd.out, van.fwd.out), 1e-14);
    for (size_t t = 0; t < run.fwd.lse.size(); ++t) {
      if (std::isinf(van.fwd.lse[t])) {
        EXPECT_EQ(run.fwd.lse[t], van.fwd.lse[t]);
      } else {
        EXPECT_NEAR(run.fwd.lse[t], van.fwd.lse[t] + 1.75, 1e-13);
      }
    }
    EXPECT_LT(RelFrobeniusError(run.grads.dq, van.grads.dq), 1e-13);
    EXPECT_LT(RelFrobeniusError(run.grads.dk, van.grads.dk), 1e-13);
    EXPECT_LT(RelFrobeniusError(run.grads.dv, van.grads.dv), 1e-13);
    // dB[h, :] sums dS over every pair of head h, and each row of dS sums
    // to zero (sum_j p_ij (dP_ij - D_i) = 0).
    const int64_t nb = base.TableRows();
    for (int64_t h = 0; h < base.heads; ++h) {
      double sum = 0, mag = 0;
      for (int64_t r = 0; r < nb; ++r) {
        sum += run.grads.dbias[h * nb + r];
        mag += std::abs(run.grads.dbias[h * nb + r]);
      }
      EXPECT_LE(std::abs(sum), 1e-13 * (1 + mag)) << "head " << h;
    }
  }
}

template <typename T>
void ExpectAlibiZeroSlopeIsVanilla() {
  for (const AttentionCase& base : SchemeCases()) {
    if (base.options.score_term != ScoreTerm::kAlibi) continue;
    AttentionCase c = base;
    c.options.alibi_slopes.assign(c.heads, 0.0);
    SCOPED_TRACE(c.Describe());
    const AttentionData<T> d = CastData<T>(MakeRandomData<double>(c, 9));
    AttentionOptions o = c.options;
    o.path = AttentionPath::kReference;
    const RunT<T> run = ForwardBackward<T>(d, o);
    AttentionData<T> plain = d;
    plain.c.options.key_term = false;
    plain.c.options.alibi_slopes.clear();
    AttentionOptions po = plain.c.options;
    po.path = AttentionPath::kReference;
    const RunT<T> van = ForwardBackward<T>(plain, po);
    // s - 0 * |r| is s exactly.
    EXPECT_EQ(run.fwd.out, van.fwd.out);
    EXPECT_EQ(run.fwd.lse, van.fwd.lse);
    EXPECT_EQ(run.grads.dq, van.grads.dq);
    EXPECT_EQ(run.grads.dk, van.grads.dk);
    EXPECT_EQ(run.grads.dv, van.grads.dv);
  }
}

TEST(SchemeProperty, AlibiZeroSlopeIsVanillaBitForBit) {
  ExpectAlibiZeroSlopeIsVanilla<double>();
  ExpectAlibiZeroSlopeIsVanilla<float>();
}

// Nonzero slopes do change the result (the property above can fail).
TEST(SchemeProperty, AlibiNonzeroSlopeChangesOutput) {
  AttentionCase c = MaskedCase("alibi", false);
  c.options.score_term = ScoreTerm::kAlibi;
  c.options.value_term = false;
  const AttentionData<double> d = MakeRandomData<double>(c, 10);
  const RunD run = ForwardBackward<double>(d, c.options);
  EXPECT_GT(RelFrobeniusError(run.fwd.out, Vanilla(d).fwd.out), 1e-3);
}

template <typename T>
void ExpectEqualRuns(const RunT<T>& a, const RunT<T>& b, bool tables) {
  EXPECT_EQ(a.fwd.out, b.fwd.out);
  EXPECT_EQ(a.fwd.lse, b.fwd.lse);
  EXPECT_EQ(a.grads.dq, b.grads.dq);
  EXPECT_EQ(a.grads.dk, b.grads.dk);
  EXPECT_EQ(a.grads.dv, b.grads.dv);
  if (tables) {
    EXPECT_EQ(a.grads.dak, b.grads.dak);
    EXPECT_EQ(a.grads.dav, b.grads.dav);
    EXPECT_EQ(a.grads.dbias, b.grads.dbias);
    EXPECT_EQ(a.grads.dpb, b.grads.dpb);
  }
}

template <typename T>
void ExpectEqualClipIsSymmetric() {
  for (const AttentionCase& c : StandardCases()) {
    SCOPED_TRACE(c.Describe());
    const AttentionData<T> d = CastData<T>(MakeRandomData<double>(c, 11));
    AttentionOptions sym = c.options;
    sym.path = AttentionPath::kReference;
    AttentionOptions asym = sym;
    asym.buckets.kind = BucketKind::kClip;
    asym.buckets.clip = {c.options.max_distance, c.options.max_distance};
    asym.max_distance = 0;  // unused by kClip
    AttentionData<T> da = d;
    da.c.options = asym;
    ExpectEqualRuns(ForwardBackward<T>(d, sym), ForwardBackward<T>(da, asym),
                    true);
  }
}

TEST(SchemeProperty, EqualClipIsSymmetricBitForBit) {
  ExpectEqualClipIsSymmetric<double>();
  ExpectEqualClipIsSymmetric<float>();
}

// With every row of AK equal to a and every row of AV equal to c, each pair
// sees the same a and c whichever bucket it falls in, so any bucket map
// computes exactly what the symmetric clip with k = 0 (one row) computes.
TEST(SchemeProperty, EqualRowsMakeTheBucketMapIrrelevant) {
  for (const AttentionCase& base : SchemeCases()) {
    if (!base.UsesAk() || base.UsesPb()) continue;
    if (base.options.buckets.kind == BucketKind::kSymmetricClip) continue;
    SCOPED_TRACE(base.Describe());
    AttentionData<double> d = MakeRandomData<double>(base, 12);
    const int64_t rows = base.TableRows(), th = base.TableHeads();
    auto flatten = [&](std::vector<double>& table, int64_t width) {
      for (int64_t h = 0; h < th; ++h)
        for (int64_t r = 1; r < rows; ++r)
          for (int64_t t = 0; t < width; ++t)
            table[(h * rows + r) * width + t] = table[h * rows * width + t];
    };
    flatten(d.ak, base.dk);
    if (!d.av.empty()) flatten(d.av, base.dv);
    const RunD run = ForwardBackward<double>(d, base.options);

    AttentionCase c0 = base;
    c0.options.buckets = BucketMap{};
    c0.options.max_distance = 0;
    AttentionData<double> d0 = d;
    d0.c = c0;
    auto first_rows = [&](const std::vector<double>& table, int64_t width) {
      std::vector<double> out;
      for (int64_t h = 0; h < th; ++h)
        out.insert(out.end(), table.begin() + h * rows * width,
                   table.begin() + h * rows * width + width);
      return out;
    };
    d0.ak = first_rows(d.ak, base.dk);
    if (!d.av.empty()) d0.av = first_rows(d.av, base.dv);
    const RunD run0 = ForwardBackward<double>(d0, c0.options);
    ExpectEqualRuns(run, run0, false);
    // The one row's gradient is the sum of the rows' gradients.
    auto row_sums = [&](const std::vector<double>& g, int64_t width) {
      std::vector<double> out(th * width, 0.0);
      for (int64_t h = 0; h < th; ++h)
        for (int64_t r = 0; r < rows; ++r)
          for (int64_t t = 0; t < width; ++t)
            out[h * width + t] += g[(h * rows + r) * width + t];
      return out;
    };
    // For AK the sum is sum_ij dS_ij (q_i + pb) = 0 in exact arithmetic
    // (each row of dS sums to zero), so only rounding-sized values remain:
    // compare absolutely, against the size of the per-row gradients.
    EXPECT_LE(MaxAbsError(row_sums(run.grads.dak, base.dk), run0.grads.dak),
              1e-13 * (1 + MaxAbs(run.grads.dak)));
    if (!d.av.empty()) {
      EXPECT_LT(RelFrobeniusError(row_sums(run.grads.dav, base.dv),
                                  run0.grads.dav),
                1e-13);
    }
  }
}

TEST(SchemeProperty, ZeroPositionQueryBiasIsShawBitForBit) {
  double max_dpb = 0;
  for (const AttentionCase& base : SchemeCases()) {
    if (!base.UsesPb()) continue;
    SCOPED_TRACE(base.Describe());
    AttentionData<double> d = MakeRandomData<double>(base, 13);
    std::fill(d.pb.begin(), d.pb.end(), 0.0);
    const RunD run = ForwardBackward<double>(d, base.options);
    AttentionData<double> shaw = d;
    shaw.c.options.position_query_bias = false;
    shaw.pb.clear();
    const RunD run0 = ForwardBackward<double>(shaw, shaw.c.options);
    ExpectEqualRuns(run, run0, false);
    EXPECT_EQ(run.grads.dak, run0.grads.dak);
    EXPECT_EQ(run.grads.dav, run0.grads.dav);
    // dpb = sum over pairs of dS_ij AK[b] / sqrt(dk): zero when every pair
    // of a head shares one bucket (n = 1, far offsets), not in general.
    max_dpb = std::max(max_dpb, MaxAbs(run.grads.dpb));
  }
  EXPECT_GT(max_dpb, 1e-3);
}

// The float reference against the double reference within the rounding
// bounds of TermScales (tests/support/attention_cases.h), extended to the
// scheme terms: the bounds a fused path for these schemes will be held to.
class SchemeFloatTest : public testing::TestWithParam<AttentionCase> {};

TEST_P(SchemeFloatTest, FloatMatchesDoubleWithinTermScales) {
  const AttentionCase& c = GetParam();
  SCOPED_TRACE(c.Describe());
  AttentionOptions o = c.options;
  o.path = AttentionPath::kReference;
  const AttentionData<double> d = MakeRandomData<double>(c, 15);
  const RunT<double> want = ForwardBackward<double>(d, o);
  const RunT<float> got = ForwardBackward<float>(CastData<float>(d), o);
  const std::vector<double> r = RandomVector<double>(c.OutNumel(), 77);
  const TermScales ts = ComputeTermScales(d, r);
  const double u = std::numeric_limits<float>::epsilon() / 2;
  EXPECT_LE(MaxAbsError(got.fwd.out, want.fwd.out), ts.Tolerance(u, ts.out));
  EXPECT_LE(MaxAbsError(got.fwd.lse, want.fwd.lse), ts.Tolerance(u, ts.lse));
  RunT<float> g = got;
  RunT<double> w = want;
  const std::vector<std::vector<float>*> gt = g.grads.AllTensors();
  const std::vector<std::vector<double>*> wt = w.grads.AllTensors();
  const double scale[] = {ts.dq, ts.dk,    ts.dv, ts.dak,
                          ts.dav, ts.dbias, ts.dpb};
  const char* names[] = {"dq", "dk", "dv", "dak", "dav", "dbias", "dpb"};
  for (size_t t = 0; t < gt.size(); ++t)
    EXPECT_LE(MaxAbsError(*gt[t], *wt[t]), ts.Tolerance(u, scale[t]))
        << names[t];
}

INSTANTIATE_TEST_SUITE_P(Small, SchemeFloatTest,
                         testing::ValuesIn(SchemeCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Sweep, SchemeFloatTest,
                         testing::ValuesIn(SchemeSweepCases()),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace relpos

// Finite-difference gradient checks of the reference attention in double
// (docs/math.md section 3), over the standard option matrix of
// tests/support/attention_cases.h: shared / per-head tables, each term on and
// off, causal, padding with an empty batch item, Nq != Nk with default,
// positive, zero and negative offsets, k = 0, k >= n, dk != dv, n = 1.
//
// The same checks run over the scheme family of docs/math.md section 8
// (SchemeCases: asymmetric clip, T5 buckets with Shaw tables, T5 scalar
// tables bidirectional and causal, ALiBi, the position query bias), which
// adds the learned inputs bias (dB) and pb (dpb), and over the row layouts
// of LayoutCases (grouped-query and multi-query heads, per-row query
// offsets, left padding, an explicit score scale) under those schemes.
//
// The scalar loss is L = sum(out * R) for a fixed random R, so dL/dout = R and
// the analytic gradients are AttentionBackward(dout = R). Every element of
// every input (q, k, v, ak, av, bias, pb) is perturbed, and both the 2-point
// central difference and the 4-point formula are compared with the analytic
// value.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <vector>

#include "relpos/attention.h"
#include "support/attention_cases.h"

namespace relpos {
namespace {

constexpr double kUnitRoundoff = std::numeric_limits<double>::epsilon() / 2;

// Step sizes. With a truncation bound T_n |f^(n)| h^m and a rounding bound
// c delta / h (delta = absolute error of one evaluation of L), the error of
// each formula is minimised near h ~ (delta / |f^(n)|)^(1/(m+1)): about
// 1e-5 for the 2-point rule (m = 2) and a few 1e-4 for the 4-point rule
// (m = 4) at delta ~ 1e-13, |f^(n)| ~ 10. The 4-point rule then reaches a
// tolerance ~ 30x smaller than the 2-point rule.
constexpr double kStep2 = 1e-5;
constexpr double kStep4 = 5e-4;

double Loss(const AttentionData<double>& data, const std::vector<double>& r) {
  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(data.c);
  AttentionForward<double>(data.Inputs(), fwd.Out(), TensorView<double>(),
                           data.c.options);
  double loss = 0;
  for (size_t t = 0; t < r.size(); ++t) loss += fwd.out[t] * r[t];
  return loss;
}

// Table row of the pair (i, j) of batch item b: clip(j - (i + off_b), -k,
// k) + k (docs/math.md section 1) for Shaw, the scheme's bucket map
// otherwise, written independently of src/op/core (AttentionCase::Bucket).
int64_t Bucket(const AttentionCase& c, int64_t b, int64_t i, int64_t j) {
  return c.Bucket(b, i, j);
}

// Per-element bounds on |d^n L / dx^n| (n = 3 for the 2-point rule, n = 5 for
// the 4-point rule) for every input element, computed from the data.
//
// Along one input coordinate x, L = sum_i R_i . E_{p_i(x)}[w_ij] where
// w_ij = v_j + AV[r(i,j)] and p_i(x) = softmax_j(s_ij(x)) with every score
// affine in x: s_ij = s_ij(0) + x a_ij. The n-th derivative of such an
// exponential-family mean is the joint cumulant kappa(R_i.w, a, ..., a) of
// order n+1 under p_i, which is bounded by n! (2 A_i)^n W_i, where A_i is the
// range of the slopes a_ij over the visible keys of row i and
// W_i = max_j |R_i . w_ij| (a generous version of the standard bound for
// cumulants of bounded variables). Slopes:
//   q_i[t]      : a_ij = (k_j[t] + AK[r(i,j)][t]) / sqrt(dk), one row;
//   k_j[t]      : a_ij = q_i[t] / sqrt(dk) for the pair (i, j), 0 for the
//                 other keys of row i, for every row i that sees key j;
//   AK[r][t]    : a_ij = (q_i[t] + pb[t]) / sqrt(dk) for the pairs in bucket
//                 r, summed over the rows (and, when shared, the heads) that
//                 use r (pb = 0 without the position query bias);
//   bias[h][r]  : a_ij = 1 for the pairs of head h in bucket r, 0 otherwise
//                 (range 1 in every row that uses r);
//   pb[h][t]    : a_ij = AK[b(i,j)][t] / sqrt(dk), for every row of head h;
//   v, AV       : L is linear in them, so f''' = f^(5) = 0.
struct DerivativeBounds {
  std::vector<double> q3, q5, k3, k5, ak3, ak5, bias3, bias5, pb3, pb5;
};

DerivativeBounds ComputeBounds(const AttentionData<double>& d,
                               const std::vector<double>& r) {
  const AttentionCase& c = d.c;
  // The scale (1 / sqrt(dk) unless the case sets one).
  const double inv_sqrt_dk = c.ScoreScale();
  DerivativeBounds bd;
  bd.q3.assign(c.QNumel(), 0);
  bd.q5.assign(c.QNumel(), 0);
  bd.k3.assign(c.KNumel(), 0);
  bd.k5.assign(c.KNumel(), 0);
  bd.ak3.assign(d.ak.size(), 0);
  bd.ak5.assign(d.ak.size(), 0);
  bd.bias3.assign(d.bias.size(), 0);
  bd.bias5.assign(d.bias.size(), 0);
  bd.pb3.assign(d.pb.size(), 0);
  bd.pb5.assign(d.pb.size(), 0);
  auto add = [](double& b3, double& b5, double range, double w) {
    const double x = 2 * range;
    b3 += 6 * x * x * x * w;
    b5 += 120 * x * x * x * x * x * w;
  };
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t bh = b * c.heads + h, kvh = c.KvSlice(b, h);
      const int64_t tab_h = c.options.per_head_tables ? h : 0;
      const int64_t begin = c.KeyBegin(b);
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t end = c.KeyEnd(b, i);
        if (end <= begin) continue;
        const double* ri = r.data() + (bh * c.q_len + i) * c.dv;
        double w = 0;
        for (int64_t j = begin; j < end; ++j) {
          double dot = 0;
          for (int64_t t = 0; t < c.dv; ++t) {
            double wt = d.v[(kvh * c.k_len + j) * c.dv + t];
            if (!d.av.empty())
              wt += d.av[(tab_h * c.TableRows() + Bucket(c, b, i, j)) * c.dv +
                         t];
            dot += ri[t] * wt;
          }
          w = std::max(w, std::abs(dot));
        }
        if (!d.bias.empty()) {
          std::vector<bool> used(c.TableRows(), false);
          for (int64_t j = begin; j < end; ++j) used[Bucket(c, b, i, j)] = true;
          for (int64_t row = 0; row < c.TableRows(); ++row) {
            const int64_t be = h * c.TableRows() + row;
            if (used[row]) add(bd.bias3[be], bd.bias5[be], 1.0, w);
          }
        }
        for (int64_t t = 0; t < c.dk; ++t) {
          const double pbt = d.pb.empty() ? 0 : d.pb[h * c.dk + t];
          const double qit = d.q[(bh * c.q_len + i) * c.dk + t] * inv_sqrt_dk;
          const double qpt =
              (d.q[(bh * c.q_len + i) * c.dk + t] + pbt) * inv_sqrt_dk;
          if (!d.pb.empty()) {
            double lo = std::numeric_limits<double>::infinity(), hi = -lo;
            for (int64_t j = begin; j < end; ++j) {
              const double a =
                  d.ak[(tab_h * c.TableRows() + Bucket(c, b, i, j)) * c.dk +
                       t];
              lo = std::min(lo, a * inv_sqrt_dk);
              hi = std::max(hi, a * inv_sqrt_dk);
            }
            add(bd.pb3[h * c.dk + t], bd.pb5[h * c.dk + t], hi - lo, w);
          }
          double lo = std::numeric_limits<double>::infinity(), hi = -lo;
          for (int64_t j = begin; j < end; ++j) {
            double a = d.k[(kvh * c.k_len + j) * c.dk + t];
            if (!d.ak.empty())
              a += d.ak[(tab_h * c.TableRows() + Bucket(c, b, i, j)) * c.dk +
                        t];
            lo = std::min(lo, a * inv_sqrt_dk);
            hi = std::max(hi, a * inv_sqrt_dk);
          }
          const int64_t qe = (bh * c.q_len + i) * c.dk + t;
          add(bd.q3[qe], bd.q5[qe], hi - lo, w);
          for (int64_t j = begin; j < end; ++j) {
            const int64_t ke = (kvh * c.k_len + j) * c.dk + t;
            add(bd.k3[ke], bd.k5[ke], std::abs(qit), w);
          }
          if (!d.ak.empty()) {
            // Each bucket used by row i contributes once.
            std::vector<bool> used(c.TableRows(), false);
            for (int64_t j = begin; j < end; ++j)
              used[Bucket(c, b, i, j)] = true;
            for (int64_t row = 0; row < c.TableRows(); ++row) {
              if (!used[row]) continue;
              const int64_t ae = (tab_h * c.TableRows() + row) * c.dk + t;
              add(bd.ak3[ae], bd.ak5[ae], std::abs(qpt), w);
            }
          }
        }
      }
    }
  }
  return bd;
}

// Absolute rounding error of one evaluation of L. Each output element is a
// sum over <= Nk keys of p_ij w_ij, where p_ij comes from a dk-term score
// (two dot products), an exp and a normalisation: m = 2 dk + 2 Nk + dv + 10
// rounded operations on each term, whose errors add up like a random walk
// (the usual sqrt(m) u model; the worst case m u is ~5x larger here),
// amplified by |s| through exp (the score error is relative to |s|). Summing
// |R_i . o_i|-sized terms over the rows gives
//   delta = sqrt(m) u (1 + max|s|) sum_i ||R_i||_1 max_j |w_ij|_inf.
double RoundingDelta(const AttentionData<double>& d,
                     const std::vector<double>& r) {
  const AttentionCase& c = d.c;
  const double max_w = MaxAbs(d.v) + MaxAbs(d.av);
  // Largest |r| a pair can have, for the ALiBi term.
  int64_t max_offset = 0;
  for (int64_t b = 0; b < c.batch; ++b)
    max_offset = std::max(max_offset, std::abs(c.QueryOffset(b)));
  const double max_r = static_cast<double>(c.k_len + c.q_len + max_offset);
  double max_slope = 0;
  for (int64_t h = 0; h < c.heads; ++h)
    max_slope = std::max(max_slope, std::abs(c.AlibiSlope(h)));
  const double max_s = (MaxAbs(d.k) + MaxAbs(d.ak)) *
                           (MaxAbs(d.q) + MaxAbs(d.pb)) *
                           static_cast<double>(c.dk) * c.ScoreScale() +
                       MaxAbs(d.bias) + max_slope * max_r;
  double r_l1 = 0;
  for (double x : r) r_l1 += std::abs(x);
  const double gamma =
      std::sqrt(static_cast<double>(2 * c.dk + 2 * c.k_len + c.dv + 10)) *
      kUnitRoundoff;
  return gamma * (1 + max_s) * r_l1 * max_w;
}

class AttentionGradTest : public testing::TestWithParam<AttentionCase> {};

TEST_P(AttentionGradTest, FiniteDifferencesMatchBackward) {
  const AttentionCase& c = GetParam();
  SCOPED_TRACE(c.Describe());
  AttentionData<double> data = MakeRandomData<double>(c, /*seed=*/1234);
  const std::vector<double> r = RandomVector<double>(c.OutNumel(), 99);

  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
  AttentionForward<double>(data.Inputs(), fwd.Out(), fwd.Lse(), c.options);
  ASSERT_TRUE(AllFinite(fwd.out)) << "forward output has NaN/inf";
  AttentionGradBuffers<double> g = MakeGrads<double>(c, data);
  AttentionBackward<double>(data.Inputs(), fwd.Out(), fwd.Lse(),
                            OutShaped(c, r), g.Grads(), c.options);

  const DerivativeBounds bd = ComputeBounds(data, r);
  const double delta = RoundingDelta(data, r);
  const std::vector<double> zero;
  const std::vector<const std::vector<double>*> b3 = {
      &bd.q3, &bd.k3, &zero, &bd.ak3, &zero, &bd.bias3, &bd.pb3};
  const std::vector<const std::vector<double>*> b5 = {
      &bd.q5, &bd.k5, &zero, &bd.ak5, &zero, &bd.bias5, &bd.pb5};
  const char* names[] = {"dq", "dk", "dv", "dak", "dav", "dbias", "dpb"};
  std::vector<std::vector<double>*> inputs = data.AllTensors();
  std::vector<std::vector<double>*> grads = g.AllTensors();
  ASSERT_EQ(inputs.size(), b3.size());
  // For the log: max error and max error / tolerance of each rule.
  double worst2 = 0, worst4 = 0, max_err2 = 0, max_err4 = 0;
  for (size_t t = 0; t < inputs.size(); ++t) {
    std::vector<double>& x = *inputs[t];
    const std::vector<double>& grad = *grads[t];
    ASSERT_EQ(grad.size(), x.size()) << names[t];
    ASSERT_TRUE(AllFinite(grad)) << names[t] << " not fully written / NaN";
    for (size_t e = 0; e < x.size(); ++e) {
      const double x0 = x[e];
      auto f = [&](double step) {
        x[e] = x0 + step;
        const double l = Loss(data, r);
        x[e] = x0;
        return l;
      };
      const double d2 = (f(kStep2) - f(-kStep2)) / (2 * kStep2);
      const double fp1 = f(kStep4), fm1 = f(-kStep4);
      const double fp2 = f(2 * kStep4), fm2 = f(-2 * kStep4);
      const double d4 = (-fp2 + 8 * fp1 - 8 * fm1 + fm2) / (12 * kStep4);
      // 2-point: f' - D2 = -h^2/6 f'''(xi); rounding: 2 delta / (2h).
      // 4-point: f' - D4 = h^4/30 f^(5)(xi); rounding: 18 delta / (12h).
      // The derivative bounds hold on the whole interval [x - 2h, x + 2h]
      // only approximately (they are computed at x); the factor 2 covers
      // the change of p over a step of 1e-3 times a slope of O(1).
      const double b3e = b3[t]->empty() ? 0 : (*b3[t])[e];
      const double b5e = b5[t]->empty() ? 0 : (*b5[t])[e];
      const double tol2 =
          2 * (kStep2 * kStep2 / 6 * b3e + delta / kStep2) + 1e-14;
      const double tol4 =
          2 * (std::pow(kStep4, 4) / 30 * b5e + 1.5 * delta / kStep4) + 1e-14;
      EXPECT_NEAR(d2, grad[e], tol2) << names[t] << "[" << e << "] 2-point";
      EXPECT_NEAR(d4, grad[e], tol4) << names[t] << "[" << e << "] 4-point";
      EXPECT_LT(tol4, tol2) << "4-point tolerance must be the tighter one";
      worst2 = std::max(worst2, std::abs(d2 - grad[e]) / tol2);
      worst4 = std::max(worst4, std::abs(d4 - grad[e]) / tol4);
      max_err2 = std::max(max_err2, std::abs(d2 - grad[e]));
      max_err4 = std::max(max_err4, std::abs(d4 - grad[e]));
    }
  }
  std::printf(
      "  %-27s max |err| (err/tol): 2-point %.1e (%.4f), "
      "4-point %.1e (%.4f)\n",
      c.name.c_str(), max_err2, worst2, max_err4, worst4);
}

// Rows that see no key get zero dQ; keys no row sees get zero dK and dV;
// table rows no visible pair uses get zero dAK and dAV (and dB entries). Exact zeros: these
// elements never enter the loss.
TEST_P(AttentionGradTest, UnseenElementsGetExactlyZeroGradient) {
  const AttentionCase& c = GetParam();
  SCOPED_TRACE(c.Describe());
  AttentionData<double> data = MakeRandomData<double>(c, 5);
  const std::vector<double> r = RandomVector<double>(c.OutNumel(), 6);
  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
  AttentionForward<double>(data.Inputs(), fwd.Out(), fwd.Lse(), c.options);
  AttentionGradBuffers<double> g = MakeGrads<double>(c, data);
  AttentionBackward<double>(data.Inputs(), fwd.Out(), fwd.Lse(),
                            OutShaped(c, r), g.Grads(), c.options);
  std::vector<bool> row_used(c.TableHeads() * c.TableRows(), false);
  std::vector<bool> bias_used(c.heads * c.TableRows(), false);  // [H, nb]
  // Keys of each key/value slice that some query head of its group sees.
  std::vector<bool> key_seen(c.batch * c.KvHeads() * c.k_len, false);
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      const int64_t bh = b * c.heads + h;
      const int64_t begin = c.KeyBegin(b);
      for (int64_t i = 0; i < c.q_len; ++i) {
        const int64_t end = c.KeyEnd(b, i);
        for (int64_t j = begin; j < end; ++j) {
          key_seen[c.KvSlice(b, h) * c.k_len + j] = true;
          row_used[(c.options.per_head_tables ? h : 0) * c.TableRows() +
                   Bucket(c, b, i, j)] = true;
          bias_used[h * c.TableRows() + Bucket(c, b, i, j)] = true;
        }
        if (end > begin) continue;
        EXPECT_EQ(fwd.lse[bh * c.q_len + i],
                  -std::numeric_limits<double>::infinity());
        for (int64_t t = 0; t < c.dv; ++t)
          EXPECT_EQ(fwd.out[(bh * c.q_len + i) * c.dv + t], 0.0);
        for (int64_t t = 0; t < c.dk; ++t)
          EXPECT_EQ(g.dq[(bh * c.q_len + i) * c.dk + t], 0.0)
              << "b=" << b << " h=" << h << " i=" << i;
      }
    }
  }
  for (int64_t kj = 0; kj < c.batch * c.KvHeads() * c.k_len; ++kj) {
    if (key_seen[kj]) continue;
    for (int64_t t = 0; t < c.dk; ++t)
      EXPECT_EQ(g.dk[kj * c.dk + t], 0.0) << "key slot " << kj;
    for (int64_t t = 0; t < c.dv; ++t)
      EXPECT_EQ(g.dv[kj * c.dv + t], 0.0) << "key slot " << kj;
  }
  for (int64_t row = 0; row < c.TableHeads() * c.TableRows(); ++row) {
    if (row_used[row]) continue;
    for (int64_t t = 0; t < c.dk && !g.dak.empty(); ++t)
      EXPECT_EQ(g.dak[row * c.dk + t], 0.0) << "table row " << row;
    for (int64_t t = 0; t < c.dv && !g.dav.empty(); ++t)
      EXPECT_EQ(g.dav[row * c.dv + t], 0.0) << "table row " << row;
  }
  for (size_t e = 0; e < g.dbias.size(); ++e) {
    if (!bias_used[e]) {
      EXPECT_EQ(g.dbias[e], 0.0) << "bias entry " << e;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Standard, AttentionGradTest,
                         testing::ValuesIn(StandardCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Schemes, AttentionGradTest,
                         testing::ValuesIn(SchemeCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Layout, AttentionGradTest,
                         testing::ValuesIn(LayoutCases()),
                         [](const auto& info) { return info.param.name; });

// A table passed for a term that is off does not enter the loss: its
// gradient is written as zeros (include/relpos/attention.h), and the other
// gradients equal those of the call without the table.
TEST(AttentionGrad, GradientOfUnusedTableIsZero) {
  AttentionCase c;
  c.name = "unused_tables";
  c.batch = 1;
  c.heads = 2;
  c.q_len = 4;
  c.k_len = 5;
  c.dk = 3;
  c.dv = 2;
  c.options.max_distance = 2;
  c.options.key_term = false;
  c.options.value_term = false;
  AttentionData<double> data = MakeRandomData<double>(c, 3);
  AttentionCase with = c;
  with.options.key_term = with.options.value_term = true;
  AttentionData<double> full = MakeRandomData<double>(with, 3);
  ASSERT_EQ(full.q, data.q);  // same stream for q, k, v
  full.c = c;                 // tables present, terms off
  const std::vector<double> r = RandomVector<double>(c.OutNumel(), 4);
  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
  AttentionForward<double>(full.Inputs(), fwd.Out(), fwd.Lse(), c.options);
  AttentionGradBuffers<double> g = MakeGrads<double>(c, full);
  ASSERT_FALSE(g.dak.empty());
  AttentionBackward<double>(full.Inputs(), fwd.Out(), fwd.Lse(),
                            OutShaped(c, r), g.Grads(), c.options);
  for (double x : g.dak) EXPECT_EQ(x, 0.0);
  for (double x : g.dav) EXPECT_EQ(x, 0.0);

  AttentionOutputBuffers<double> fwd0 = MakeOutputs<double>(c);
  AttentionForward<double>(data.Inputs(), fwd0.Out(), fwd0.Lse(), c.options);
  AttentionGradBuffers<double> g0 = MakeGrads<double>(c, data);
  AttentionBackward<double>(data.Inputs(), fwd0.Out(), fwd0.Lse(),
                            OutShaped(c, r), g0.Grads(), c.options);
  EXPECT_EQ(fwd.out, fwd0.out);
  EXPECT_EQ(g.dq, g0.dq);
  EXPECT_EQ(g.dk, g0.dk);
  EXPECT_EQ(g.dv, g0.dv);
}

// Gradients are overwritten, not accumulated: a second backward call into
// the same buffers gives the same values.
TEST(AttentionGrad, BackwardOverwritesGradients) {
  AttentionCase c = StandardCases().front();
  AttentionData<double> data = MakeRandomData<double>(c, 8);
  const std::vector<double> r = RandomVector<double>(c.OutNumel(), 9);
  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
  AttentionForward<double>(data.Inputs(), fwd.Out(), fwd.Lse(), c.options);
  AttentionGradBuffers<double> g = MakeGrads<double>(c, data);
  AttentionBackward<double>(data.Inputs(), fwd.Out(), fwd.Lse(),
                            OutShaped(c, r), g.Grads(), c.options);
  const AttentionGradBuffers<double> first = g;
  for (std::vector<double>* t : g.Tensors())
    std::fill(t->begin(), t->end(), 1e3);
  AttentionBackward<double>(data.Inputs(), fwd.Out(), fwd.Lse(),
                            OutShaped(c, r), g.Grads(), c.options);
  EXPECT_EQ(g.dq, first.dq);
  EXPECT_EQ(g.dk, first.dk);
  EXPECT_EQ(g.dv, first.dv);
  EXPECT_EQ(g.dak, first.dak);
  EXPECT_EQ(g.dav, first.dav);
}

}  // namespace
}  // namespace relpos

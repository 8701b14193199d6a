// The fused kernel (float) against the reference run in double on the same
// (float-representable) inputs, over every option and awkward sizes, on
// every Highway target compiled into the library; plus determinism,
// thread-count agreement, fully masked rows and the memory bound.
//
// Tolerances. With unit roundoff u = 2^-24, a float sum of L terms has error
// about u sqrt(L) sum|terms| (rounding errors behave like a random walk; the
// worst case is u L). Every tensor here is the end of a chain of such sums
// (scores: dk terms; softmax and P V: Nk terms; W AV: 2k+1; gradients add Nq
// and, for shared tables, B H Nq terms), and relative errors of the scores
// become relative errors of p_ij of the same size (|d e^s| = e^s |ds|). So
// the normwise relative error of each tensor is c u sqrt(L) with L the total
// chain length and c a modest constant covering sum|terms| / |sum| (the
// inputs are N(0, 1), scores N(0, 2), so |s| <~ 6 and cancellation is mild).
// We use c = 4 for the forward and 16 for the gradients (dS = P (dP - D)
// subtracts two O(1) numbers and dK, dQ sum signed terms). Measured: the
// largest forward error over all cases is 0.11 of its bound (4 u sqrt(L)), the
// largest gradient error 0.34 of its bound (16 u sqrt(L)); a wrong bucket,
// mask or rescale gives errors of order 1e-2 .. 1, far above them.
#include "kernels/fused_attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/attention_problem.h"
#include "hwy/targets.h"
#include "relpos/attention.h"
#include "support/attention_cases.h"

namespace relpos {
namespace {

constexpr double kUnitRoundoff = 0x1.0p-24;

struct Results {
  std::vector<float> out, lse, dq, dk, dv, dak, dav, dbias, dpb;
};

struct Reference {
  std::vector<double> out, lse, dq, dk, dv, dak, dav, dbias, dpb;
};

// Runs the fused path (forward + backward) on float data.
Results RunFused(const AttentionCase& c, const AttentionData<float>& data,
                 const std::vector<float>& dout, int threads) {
  AttentionOptions o = c.options;
  o.path = AttentionPath::kFused;
  o.num_threads = threads;
  AttentionOutputBuffers<float> fwd = MakeOutputs<float>(c);
  AttentionForward<float>(data.Inputs(), fwd.Out(), fwd.Lse(), o);
  AttentionGradBuffers<float> g = MakeGrads<float>(c, data);
  AttentionBackward<float>(data.Inputs(), fwd.Out(), fwd.Lse(),
                           OutShaped(c, dout), g.Grads(), o);
  return {fwd.out, fwd.lse, g.dq, g.dk, g.dv, g.dak, g.dav, g.dbias, g.dpb};
}

Reference RunReference(const AttentionCase& c,
                       const AttentionData<double>& data,
                       const std::vector<double>& dout) {
  AttentionOptions o = c.options;
  o.path = AttentionPath::kReference;
  AttentionOutputBuffers<double> fwd = MakeOutputs<double>(c);
  AttentionForward<double>(data.Inputs(), fwd.Out(), fwd.Lse(), o);
  AttentionGradBuffers<double> g = MakeGrads<double>(c, data);
  AttentionBackward<double>(data.Inputs(), fwd.Out(), fwd.Lse(),
                            OutShaped(c, dout), g.Grads(), o);
  return {fwd.out, fwd.lse, g.dq, g.dk, g.dv, g.dak, g.dav, g.dbias, g.dpb};
}

double Norm(const std::vector<double>& x) {
  double s = 0;
  for (double v : x) s += v * v;
  return std::sqrt(s);
}

// ||got - want|| / max(||want||, floor).
double ScaledError(const std::vector<float>& got,
                   const std::vector<double>& want, double floor) {
  const double rel = RelFrobeniusError(got, want);
  const double norm = Norm(want);
  if (!std::isfinite(rel)) return rel;
  const double abs_err = norm > 0 ? rel * norm : rel;
  return abs_err == 0 ? 0 : abs_err / std::max(norm, floor);
}

// Longest float reduction chain feeding any output (see file comment).
double ChainLength(const AttentionCase& c) {
  return static_cast<double>(c.dk + c.dv + c.k_len + c.TableRows()) +
         static_cast<double>(c.batch * c.heads * c.q_len);
}

void CompareToReference(const AttentionCase& c, int threads) {
  SCOPED_TRACE(c.Describe() + " threads=" + std::to_string(threads));
  // The double reference sees exactly the float inputs.
  const AttentionData<float> data32 = MakeRandomData<float>(c, 7);
  const AttentionData<double> data64 = CastData<double>(data32);
  std::vector<double> dout64 = RandomVector<double>(c.OutNumel(), 11);
  std::vector<float> dout32(dout64.begin(), dout64.end());
  for (size_t e = 0; e < dout32.size(); ++e) dout64[e] = dout32[e];

  const Reference want = RunReference(c, data64, dout64);
  const Results got = RunFused(c, data32, dout32, threads);

  // A float score s carries an absolute rounding error ~u |s|, which moves
  // p = exp(s - lse) by that much relatively; the scores that matter lie
  // within a few units of lse, so |lse| bounds them. It is small (< sqrt(L))
  // for Shaw's terms, but ALiBi's -m |r| grows with the distance (query
  // offsets far beyond the keys), and so does lse: use the larger of the two.
  double lse_scale = 0;
  for (double x : want.lse) {
    if (std::isfinite(x)) lse_scale = std::max(lse_scale, std::abs(x));
  }
  const double root = std::max(std::sqrt(ChainLength(c)), lse_scale);
  const double fwd_tol = 4 * kUnitRoundoff * root;
  const double grad_tol = 16 * kUnitRoundoff * root;
  EXPECT_LE(RelFrobeniusError(got.out, want.out), fwd_tol) << "out";
  // lse = m + log l: absolute error ~ u sqrt(L) times the score scale.
  EXPECT_LE(MaxAbsError(got.lse, want.lse),
            fwd_tol * std::max(1.0, MaxAbs(want.lse)))
      << "lse";
  EXPECT_LE(RelFrobeniusError(got.dq, want.dq), grad_tol) << "dq";
  EXPECT_LE(RelFrobeniusError(got.dk, want.dk), grad_tol) << "dk";
  EXPECT_LE(RelFrobeniusError(got.dv, want.dv), grad_tol) << "dv";
  // E[i, r] sums dS_ij over a bucket; a bucket holding a whole row sums to
  // exactly zero (rows of dS sum to zero: k = 0, all-far tiles, n = 1), so
  // dAK can vanish while its float rounding does not. Measure its error
  // against the scale of the terms it sums: P- and dS-weighted sums of rows,
  // which is what dK = dS^T Q / sqrt(dk) and dV = P^T dO hold.
  EXPECT_LE(ScaledError(got.dak, want.dak, Norm(want.dk) + Norm(want.dv)),
            grad_tol)
      << "dak";
  EXPECT_LE(RelFrobeniusError(got.dav, want.dav), grad_tol) << "dav";
  // dbias[h, b] sums dS over the pairs of bucket b (T5's scalar table): like
  // dAK it can vanish (whole rows of dS sum to zero), so it is held to the
  // rounding bound of its terms, sum_i sum_j |dS_ij| (TermScales).
  if (!want.dbias.empty()) {
    const TermScales ts = ComputeTermScales(data64, dout64);
    EXPECT_LE(MaxAbsError(got.dbias, want.dbias),
              ts.Tolerance(kUnitRoundoff, ts.dbias))
        << "dbias";
  } else {
    EXPECT_TRUE(got.dbias.empty());
  }
  // dpb (Transformer-XL) sums E AK over all rows, bucketed like dAK: the
  // same rounding bound of its terms.
  if (!want.dpb.empty()) {
    const TermScales ts = ComputeTermScales(data64, dout64);
    EXPECT_LE(MaxAbsError(got.dpb, want.dpb),
              ts.Tolerance(kUnitRoundoff, ts.dpb))
        << "dpb";
  } else {
    EXPECT_TRUE(got.dpb.empty());
  }
}

// ---- covering design -------------------------------------------------------

struct Spec {
  const char* name;
  int64_t batch, heads, q_len, k_len, dk, dv, k;
  bool per_head, key_term, value_term, causal;
  std::vector<int64_t> key_lengths;
  std::optional<int64_t> offset;
};

AttentionCase ToCase(const Spec& s) {
  AttentionCase c;
  c.name = s.name;
  c.batch = s.batch;
  c.heads = s.heads;
  c.q_len = s.q_len;
  c.k_len = s.k_len;
  c.dk = s.dk;
  c.dv = s.dv;
  c.options.max_distance = s.k;
  c.options.per_head_tables = s.per_head;
  c.options.key_term = s.key_term;
  c.options.value_term = s.value_term;
  c.options.causal = s.causal;
  c.options.key_lengths = s.key_lengths;
  c.options.query_offset = s.offset;
  return c;
}

// Every value of every axis appears at least once: n in {1, 2, 7, 63, 64, 65,
// 127, 129, 1000} (tile size 64: 63/64/65 and 127/129 straddle one and two
// tiles, for queries and keys), k in {0, 1, 3, 16, 64, 200}, dk and dv in
// {16, 64, 80}, shared / per-head, all four term combinations, causal,
// padding (including a zero-length item), Nq != Nk with default, positive,
// zero and negative offsets, offsets so large every tile is far, and several
// (batch, head) pairs feeding one shared table gradient.
std::vector<AttentionCase> CoveringCases() {
  // clang-format off
  const std::vector<Spec> specs = {
      // name, B, H, Nq, Nk, dk, dv, k, per_head, key, value, causal, lens, off
      {"n1", 1, 1, 1, 1, 16, 16, 0, false, true, true, false, {}, {}},
      {"n2_causal_perhead", 1, 2, 2, 2, 16, 64, 1, true, true, true, true, {}, {}},
      {"n7_pad_value_only", 2, 2, 7, 7, 80, 16, 3, false, false, true, false, {7, 3}, {}},
      {"n63_causal_key_only", 1, 1, 63, 63, 64, 64, 16, false, true, false, true, {}, {}},
      {"n64_perhead_pad0", 2, 1, 64, 64, 64, 80, 64, true, true, true, false, {64, 0}, {}},
      {"n65_k200_causal_pad", 2, 1, 65, 65, 16, 16, 200, false, true, true, true, {65, 30}, {}},
      {"n127_vanilla_causal", 1, 2, 127, 127, 64, 64, 1, false, false, false, true, {}, {}},
      {"n129_pad", 2, 1, 129, 129, 80, 80, 3, false, true, true, false, {129, 100}, {}},
      {"q65_k129_causal", 1, 1, 65, 129, 64, 16, 16, false, true, true, true, {}, {}},
      {"q129_k65_causal_negoff", 1, 1, 129, 65, 16, 80, 16, true, true, true, true, {}, {}},
      {"q63_k127_off0_causal", 1, 1, 63, 127, 16, 16, 3, false, true, true, true, {}, 0},
      {"q64_k65_offneg10_causal", 1, 2, 64, 65, 64, 64, 64, true, true, true, true, {}, -10},
      {"q127_k64_off100", 1, 1, 127, 64, 80, 64, 16, false, true, true, false, {}, 100},
      {"n1000_causal", 1, 1, 1000, 1000, 16, 16, 16, false, true, true, true, {}, {}},
      {"q129_k1000_pad", 2, 1, 129, 1000, 64, 64, 64, false, true, true, false, {1000, 513}, {}},
      {"n129_k0_causal", 1, 1, 129, 129, 16, 64, 0, false, true, true, true, {}, {}},
      {"q129_k63_k200", 1, 1, 129, 63, 64, 16, 200, true, true, true, false, {}, {}},
      {"q2_k7_value_only_perhead", 1, 2, 2, 7, 16, 16, 1, true, false, true, false, {}, {}},
      {"far_right_all", 1, 1, 7, 7, 16, 16, 3, false, true, true, false, {}, int64_t{1} << 40},
      {"far_left_all", 1, 1, 70, 70, 16, 16, 3, false, true, true, false, {}, -(int64_t{1} << 40)},
      {"all_masked_causal", 1, 1, 7, 7, 16, 16, 3, false, true, true, true, {}, -(int64_t{1} << 40)},
      {"shared_many_heads", 2, 3, 65, 65, 16, 16, 3, false, true, true, false, {65, 17}, {}},
      {"perhead_causal", 2, 2, 64, 64, 64, 64, 16, true, true, true, true, {}, {}},
      {"n128_k64_key_only_perhead", 1, 2, 128, 128, 80, 80, 64, true, true, false, false, {}, {}},
      {"q1_decode", 2, 2, 1, 129, 64, 64, 16, false, true, true, true, {}, {}},
      // Band tiles of both kinds (direct on the diagonal, folded beside it,
      // with only the key rows that reach the strip), the diagonal crossing
      // tiles off their corners (offset 7).
      {"q300_k280_k16_off7", 1, 1, 300, 280, 64, 64, 16, false, true, true, false, {}, 7},
      // Widths that are no multiple of any vector length (partial vectors).
      {"odd_dims_causal", 1, 2, 70, 67, 17, 9, 5, false, true, true, true, {}, {}},
  };
  // clang-format on
  std::vector<AttentionCase> cases;
  for (const Spec& s : specs) cases.push_back(ToCase(s));
  return cases;
}

// ---- tests ----------------------------------------------------------------

class FusedVsReference : public testing::TestWithParam<AttentionCase> {};

TEST_P(FusedVsReference, TwoThreads) { CompareToReference(GetParam(), 2); }

INSTANTIATE_TEST_SUITE_P(Covering, FusedVsReference,
                         testing::ValuesIn(CoveringCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Standard, FusedVsReference,
                         testing::ValuesIn(StandardCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(SizeSweep, FusedVsReference,
                         testing::ValuesIn(SizeSweepCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(Layout, FusedVsReference,
                         testing::ValuesIn(LayoutCases()),
                         [](const auto& info) { return info.param.name; });
INSTANTIATE_TEST_SUITE_P(LayoutSweep, FusedVsReference,
                         testing::ValuesIn(LayoutSweepCases()),
                         [](const auto& info) { return info.param.name; });
// Nq <= 4: the forward runs the few-query path (kernels/few_query-inl.h),
// the backward the tiled kernel from its lse, so the gradients check the
// lse it returns. The bounds are the forward's above: its float sums are
// the same chains (dk terms per score, Nk per softmax and P V, 2k+1 per
// W AV) in another order.
INSTANTIATE_TEST_SUITE_P(FewQuery, FusedVsReference,
                         testing::ValuesIn(FewQueryCases()),
                         [](const auto& info) { return info.param.name; });

// The few-query path on every compiled Highway target (the dot products'
// block reductions and masked tails differ per vector width; EMU128 and
// SCALAR take other branches), on the shapes with chunk edges, per-row
// windows, grouped and multi-query heads and Nq > Nk, in four schemes that
// cover the clip, T5's buckets, ALiBi and the position query bias.
TEST(FewQueryTargets, EveryCompiledTarget) {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : FewQueryCases()) {
    for (const char* scheme : {"shaw_", "t5_", "alibi_", "xlv_"}) {
      if (c.name.rfind(scheme, 0) != 0) continue;
      for (const char* shape : {"q1_k513", "q4_k1100_rows", "q3_gqa_k200",
                                "q2_mqa8_k65", "q4_k3"}) {
        if (c.name == std::string(scheme) + shape) cases.push_back(c);
      }
    }
  }
  ASSERT_EQ(cases.size(), 20u);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const AttentionCase& c : cases) CompareToReference(c, 1);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Work items write disjoint rows, so the forward's outputs and lse are
// bitwise the same for any thread count and on every repeat.
TEST(FewQueryDeterminism, BitwiseAcrossThreadCounts) {
  int checked = 0;
  for (const AttentionCase& c : FewQueryCases()) {
    if (c.name != "shaw16perhead_q4_k1100_rows" &&
        c.name != "t5_defaults_q3_k2100_mid" &&
        c.name != "xlv_q2_mqa8_k65" && c.name != "alibi_q3_gqa_k200") {
      continue;
    }
    SCOPED_TRACE(c.Describe());
    ++checked;
    const AttentionData<float> data = MakeRandomData<float>(c, 13);
    const std::vector<float> dout = RandomVector<float>(c.OutNumel(), 14);
    const Results one = RunFused(c, data, dout, 1);
    for (int threads : {1, 2, 3}) {
      const Results r = RunFused(c, data, dout, threads);
      EXPECT_EQ(r.out, one.out) << threads;
      EXPECT_EQ(r.lse, one.lse) << threads;
    }
  }
  EXPECT_EQ(checked, 4);
}

// Every compiled Highway target (AVX2, SSE4, EMU128, ... as this CPU allows)
// on a handful of cases that hit far and band tiles (folded and direct),
// masks, partial vectors (dk = 17, dv = 9) and every table-gradient path.
TEST(FusedTargets, EveryCompiledTarget) {
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : CoveringCases()) {
    if (c.name == "n129_pad" || c.name == "q64_k65_offneg10_causal" ||
        c.name == "n7_pad_value_only" || c.name == "q129_k63_k200" ||
        c.name == "n129_k0_causal" || c.name == "odd_dims_causal" ||
        c.name == "q300_k280_k16_off7" || c.name == "q129_k1000_pad" ||
        c.name == "n1000_causal") {
      cases.push_back(c);
    }
  }
  ASSERT_EQ(cases.size(), 9u);
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    EXPECT_STREQ(FusedTargetName(), hwy::TargetName(target));
    SCOPED_TRACE(hwy::TargetName(target));
    for (const AttentionCase& c : cases) CompareToReference(c, 1);
  }
  hwy::SetSupportedTargetsForTest(0);
}

// Same thread count -> bitwise identical results, including the shared table
// gradients summed over (batch, head) pairs in per-thread buffers and (with
// one pair and two threads) dQ summed over key-tile chunks.
TEST(FusedDeterminism, BitwiseRunToRun) {
  for (const auto& [batch, heads] : {std::pair{1, 1}, std::pair{2, 3}}) {
    AttentionCase c = ToCase({"det",
                              batch,
                              heads,
                              200,
                              200,
                              64,
                              64,
                              16,
                              false,
                              true,
                              true,
                              true,
                              {},
                              {}});
    SCOPED_TRACE(c.Describe());
    const AttentionData<float> data = MakeRandomData<float>(c, 3);
    const std::vector<float> dout = RandomVector<float>(c.OutNumel(), 4);
    const Results a = RunFused(c, data, dout, 2);
    for (int rep = 0; rep < 3; ++rep) {
      const Results b = RunFused(c, data, dout, 2);
      EXPECT_EQ(a.out, b.out);
      EXPECT_EQ(a.lse, b.lse);
      EXPECT_EQ(a.dq, b.dq);
      EXPECT_EQ(a.dk, b.dk);
      EXPECT_EQ(a.dv, b.dv);
      EXPECT_EQ(a.dak, b.dak);
      EXPECT_EQ(a.dav, b.dav);
    }
  }
}

// 1 vs 2 threads may sum dAK, dAV (and, for a single head split over key
// tiles, dQ) in a different order: equal within rounding, 8 u sqrt(L)
// relative. dK and dV rows are always formed by one thread in query-tile
// order, so they match bitwise.
TEST(FusedDeterminism, ThreadCountsAgree) {
  AttentionCase c = ToCase({"threads",
                            1,
                            1,
                            300,
                            300,
                            64,
                            64,
                            16,
                            false,
                            true,
                            true,
                            false,
                            {},
                            {}});
  const AttentionData<float> data = MakeRandomData<float>(c, 5);
  const std::vector<float> dout = RandomVector<float>(c.OutNumel(), 6);
  const Results one = RunFused(c, data, dout, 1);
  const Results two = RunFused(c, data, dout, 2);
  // The forward does not depend on the thread count at all.
  EXPECT_EQ(one.out, two.out);
  EXPECT_EQ(one.lse, two.lse);
  EXPECT_EQ(one.dk, two.dk);
  EXPECT_EQ(one.dv, two.dv);
  const double tol = 8 * kUnitRoundoff * std::sqrt(ChainLength(c));
  EXPECT_LE(RelFrobeniusError(two.dq, one.dq), tol);
  EXPECT_LE(RelFrobeniusError(two.dak, one.dak), tol);
  EXPECT_LE(RelFrobeniusError(two.dav, one.dav), tol);
}

// Rows that see no key (causal with a negative offset; a zero-length batch
// item) output exact zeros, lse = -inf, and get exactly zero gradient.
TEST(FusedMasks, FullyMaskedRowsAreZeroNotNan) {
  AttentionCase c = ToCase({"masked",
                            2,
                            1,
                            70,
                            70,
                            16,
                            16,
                            3,
                            false,
                            true,
                            true,
                            true,
                            {70, 0},
                            -5});
  const AttentionData<float> data = MakeRandomData<float>(c, 8);
  const std::vector<float> dout = RandomVector<float>(c.OutNumel(), 9);
  const Results r = RunFused(c, data, dout, 2);
  EXPECT_TRUE(AllFinite(r.out));
  EXPECT_TRUE(AllFinite(r.dq));
  EXPECT_TRUE(AllFinite(r.dk));
  EXPECT_TRUE(AllFinite(r.dv));
  EXPECT_TRUE(AllFinite(r.dak));
  EXPECT_TRUE(AllFinite(r.dav));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t i = 0; i < c.q_len; ++i) {
      const int64_t row = b * c.q_len + i;
      const bool sees = c.KeyEnd(b, i) > 0;
      EXPECT_EQ(std::isinf(r.lse[row]) && r.lse[row] < 0, !sees) << row;
      if (sees) continue;
      for (int64_t e = 0; e < c.dv; ++e) EXPECT_EQ(r.out[row * c.dv + e], 0.0f);
      for (int64_t e = 0; e < c.dk; ++e) EXPECT_EQ(r.dq[row * c.dk + e], 0.0f);
    }
  }
  // Keys of the zero-length item are seen by nobody.
  for (int64_t e = c.k_len * c.dk; e < 2 * c.k_len * c.dk; ++e) {
    ASSERT_EQ(r.dk[e], 0.0f);
  }
}

// A table passed although its term is off: its gradient is zeros, and the
// outputs equal the run without the table.
TEST(FusedOptions, UnusedTableGetsZeroGradient) {
  AttentionCase c = ToCase(
      {"unused", 1, 2, 65, 65, 16, 16, 3, false, false, true, false, {}, {}});
  AttentionData<float> data = MakeRandomData<float>(c, 10);
  const std::vector<float> dout = RandomVector<float>(c.OutNumel(), 11);
  const Results plain = RunFused(c, data, dout, 2);
  std::vector<float> ak = RandomVector<float>(c.TableRows() * c.dk, 12);
  std::vector<float> dak(ak.size(), std::nanf(""));
  AttentionInputs<float> in = data.Inputs();
  in.ak = ConstView<float>(ak.data(), {c.TableRows(), c.dk});
  AttentionOptions o = c.options;
  o.path = AttentionPath::kFused;
  AttentionOutputBuffers<float> fwd = MakeOutputs<float>(c);
  AttentionForward<float>(in, fwd.Out(), fwd.Lse(), o);
  EXPECT_EQ(fwd.out, plain.out);
  AttentionGradBuffers<float> g = MakeGrads<float>(c, data);
  AttentionGrads<float> grads = g.Grads();
  grads.dak = TensorView<float>(dak.data(), {c.TableRows(), c.dk});
  AttentionBackward<float>(in, fwd.Out(), fwd.Lse(), OutShaped(c, dout), grads,
                           o);
  for (float x : dak) EXPECT_EQ(x, 0.0f);
  EXPECT_EQ(g.dq, plain.dq);
}

// docs/math.md sections 4 and 6 (the memory target): at n = 4096, d = 64, k = 16..64 the kernel's extra
// memory stays under 2 MiB per (batch, head) (B = 1, H = 8, 2 threads).
TEST(FusedMemory, ExtraBytesBounded) {
  for (int64_t k : {16, 64}) {
    AttentionProblem p;
    p.batch = 1;
    p.heads = 8;
    p.q_len = p.k_len = 4096;
    p.dk = p.dv = 64;
    p.max_distance = k;
    p.key_lengths.assign(1, 4096);
    const int64_t bytes = FusedExtraBytes(p, 2);
    EXPECT_GT(bytes, 0);
    EXPECT_LE(bytes, p.heads * (int64_t{2} << 20)) << "k=" << k;
    // Linear in n, never Nq x Nk: it does not grow when n doubles beyond
    // the table width (only the per-tile buffers and the tables count).
    p.q_len = p.k_len = 8192;
    p.key_lengths.assign(1, 8192);
    EXPECT_EQ(FusedExtraBytes(p, 2), bytes) << "k=" << k;
    // One (batch, head) over two threads: the backward splits it by key
    // tiles and keeps one partial dQ (Nq x dk) per extra thread.
    p.heads = 1;
    p.q_len = p.k_len = 4096;
    p.key_lengths.assign(1, 4096);
    EXPECT_LE(FusedExtraBytes(p, 2), int64_t{2} << 20) << "k=" << k;
  }
}


// Empty batches and zero heads are legal shapes: nothing to compute, the
// table gradients are zeros, and nothing divides by batch x heads.
TEST(FusedShapes, EmptyBatchOrHeads) {
  for (auto [batch, heads] : {std::pair<int64_t, int64_t>{0, 2}, {2, 0}}) {
    // Buffers hold one spare element so their data() is not null (a null
    // pointer means "no tensor" to the API), as with numpy's empty arrays.
    const int64_t n = 5, d = 4, k = 2, rows = 2 * k + 1;
    std::vector<float> q(batch * heads * n * d + 1), ak(rows * d, 1.0f),
        av(rows * d, 1.0f), out(q.size()), lse(batch * heads * n + 1);
    std::vector<float> dq(q.size()), dk(q.size()), dv(q.size()),
        dak(ak.size(), std::nanf("")), dav(av.size(), std::nanf(""));
    const ConstView<float> qv(q.data(), {batch, heads, n, d});
    const AttentionInputs<float> in{.q = qv, .k = qv, .v = qv,
                                    .ak = {ak.data(), {rows, d}},
                                    .av = {av.data(), {rows, d}}};
    AttentionOptions o;
    o.max_distance = k;
    o.path = AttentionPath::kFused;
    o.num_threads = 2;
    AttentionForward<float>(in, {out.data(), {batch, heads, n, d}},
                            {lse.data(), {batch, heads, n}}, o);
    AttentionBackward<float>(
        in, {out.data(), {batch, heads, n, d}}, {lse.data(), {batch, heads, n}},
        {out.data(), {batch, heads, n, d}},
        {.dq = {dq.data(), {batch, heads, n, d}},
         .dk = {dk.data(), {batch, heads, n, d}},
         .dv = {dv.data(), {batch, heads, n, d}},
         .dak = {dak.data(), {rows, d}},
         .dav = {dav.data(), {rows, d}}},
        o);
    for (float x : dak) EXPECT_EQ(x, 0.0f) << batch << "x" << heads;
    for (float x : dav) EXPECT_EQ(x, 0.0f) << batch << "x" << heads;
  }
}

// ---- relative schemes (docs/math.md section 8) ------------------------------

// The cases of SchemeSweepCases (realistic settings on tile-boundary sizes)
// and SchemeCases (the small awkward-size matrix) whose name starts with one
// of `prefixes`. They run with AttentionPath::kFused, which throws if the
// kernel does not take the scheme, so a scheme listed here cannot silently
// fall back to the reference.
std::vector<AttentionCase> FusedSchemeCases(
    const std::vector<std::string>& prefixes) {
  std::vector<AttentionCase> all = SchemeSweepCases();
  for (AttentionCase& c : SchemeCases()) all.push_back(std::move(c));
  std::vector<AttentionCase> cases;
  for (const AttentionCase& c : all) {
    for (const std::string& prefix : prefixes) {
      if (c.name.rfind(prefix + "_", 0) == 0) {
        cases.push_back(c);
        break;
      }
    }
  }
  return cases;
}

// Extra cases for the schemes: several key tiles with a causal mask and an
// offset (far tiles on both sides), and one far beyond every reach.
std::vector<AttentionCase> SchemeExtraCases(const std::string& scheme) {
  std::vector<AttentionCase> cases;
  AttentionCase a = MakeCase("q200_k300_off40", 1, 2, 200, 300, 32, 32, 16);
  a.options.query_offset = 40;
  AttentionCase b = MakeCase("n300_causal_pad", 2, 2, 300, 300, 17, 9, 16);
  b.options.causal = true;
  b.options.key_lengths = {300, 130};
  AttentionCase far = MakeCase("far_left", 1, 2, 70, 70, 16, 16, 16);
  far.options.query_offset = 5000;
  for (AttentionCase c : {a, b, far}) {
    c.name = scheme + "_" + c.name;
    c.options.value_term = false;
    if (scheme == "alibi") {
      c.options.score_term = ScoreTerm::kAlibi;
    } else if (scheme == "t5" || scheme == "t5causal") {
      c.options.score_term = ScoreTerm::kScalarTable;
      c.options.buckets.kind = BucketKind::kT5;
      c.options.buckets.t5 = {32, 128, scheme == "t5"};
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

std::vector<AttentionCase> AlibiCases() {
  std::vector<AttentionCase> cases = FusedSchemeCases({"alibi", "alibiuser"});
  for (AttentionCase& c : SchemeExtraCases("alibi")) cases.push_back(c);
  // ALiBi with Shaw's value table (symmetric clip) also runs fused.
  AttentionCase v = MakeCase("alibi_value_k3", 1, 2, 130, 130, 16, 16, 3);
  v.options.score_term = ScoreTerm::kAlibi;
  v.options.causal = true;
  cases.push_back(v);
  // Distances around 2^24, where they stop being exact in float: tile pairs
  // on both sides of the split between the term inside the softmax loop
  // and its separate pass (small slopes keep the scores O(1)).
  cases.push_back(AlibiExactnessEdgeCase("alibi_exactness_edge", 200, 300));
  return cases;
}

class FusedAlibi : public testing::TestWithParam<AttentionCase> {};
TEST_P(FusedAlibi, MatchesDoubleReference) { CompareToReference(GetParam(), 2); }
INSTANTIATE_TEST_SUITE_P(Schemes, FusedAlibi, testing::ValuesIn(AlibiCases()),
                         [](const auto& info) { return info.param.name; });

// Every compiled Highway target on every scheme case, one thread.
void EveryTarget(const std::vector<AttentionCase>& cases) {
  ASSERT_FALSE(cases.empty());
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    for (const AttentionCase& c : cases) CompareToReference(c, 1);
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(FusedSchemeTargets, Alibi) { EveryTarget(AlibiCases()); }

// Bitwise equal on repeat (2 threads, one (batch, head) split over key
// tiles and several pairs sharing the per-thread buffers), 1 vs 2 threads
// within rounding; fully masked rows exactly zero.
void CheckSchemeDeterminism(AttentionCase c) {
  SCOPED_TRACE(c.Describe());
  for (int64_t heads : {1, 3}) {
    c.heads = heads;
    if (!c.options.alibi_slopes.empty()) c.options.alibi_slopes.resize(heads, 0.25);
    const AttentionData<float> data = MakeRandomData<float>(c, 3);
    const std::vector<float> dout = RandomVector<float>(c.OutNumel(), 4);
    const Results a = RunFused(c, data, dout, 2);
    const Results b = RunFused(c, data, dout, 2);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.lse, b.lse);
    EXPECT_EQ(a.dq, b.dq);
    EXPECT_EQ(a.dk, b.dk);
    EXPECT_EQ(a.dv, b.dv);
    EXPECT_EQ(a.dbias, b.dbias);
    EXPECT_EQ(a.dpb, b.dpb);
    EXPECT_EQ(a.dak, b.dak);
    const Results one = RunFused(c, data, dout, 1);
    EXPECT_EQ(one.out, a.out);
    EXPECT_EQ(one.lse, a.lse);
    const double tol = 8 * kUnitRoundoff * std::sqrt(ChainLength(c));
    EXPECT_LE(RelFrobeniusError(a.dq, one.dq), tol);
    EXPECT_LE(RelFrobeniusError(a.dk, one.dk), tol);
    EXPECT_LE(RelFrobeniusError(a.dv, one.dv), tol);
    EXPECT_LE(RelFrobeniusError(a.dbias, one.dbias), tol);
    EXPECT_LE(RelFrobeniusError(a.dpb, one.dpb), tol);
  }
}

void CheckSchemeMaskedRows(AttentionCase c) {
  SCOPED_TRACE(c.Describe());
  c.options.causal = true;
  c.options.query_offset = -5;
  c.options.key_lengths = {c.k_len, 0};
  c.batch = 2;
  const AttentionData<float> data = MakeRandomData<float>(c, 8);
  const std::vector<float> dout = RandomVector<float>(c.OutNumel(), 9);
  const Results r = RunFused(c, data, dout, 2);
  EXPECT_TRUE(AllFinite(r.out));
  EXPECT_TRUE(AllFinite(r.dq));
  EXPECT_TRUE(AllFinite(r.dk));
  EXPECT_TRUE(AllFinite(r.dv));
  EXPECT_TRUE(AllFinite(r.dbias));
  for (int64_t b = 0; b < c.batch; ++b) {
    for (int64_t h = 0; h < c.heads; ++h) {
      for (int64_t i = 0; i < c.q_len; ++i) {
        if (c.KeyEnd(b, i) > 0) continue;
        const int64_t row = (b * c.heads + h) * c.q_len + i;
        EXPECT_TRUE(std::isinf(r.lse[row]) && r.lse[row] < 0) << row;
        for (int64_t e = 0; e < c.dv; ++e)
          EXPECT_EQ(r.out[row * c.dv + e], 0.0f);
        for (int64_t e = 0; e < c.dk; ++e)
          EXPECT_EQ(r.dq[row * c.dk + e], 0.0f);
      }
    }
  }
}

AttentionCase SchemeStressCase(const std::string& scheme) {
  AttentionCase c = SchemeExtraCases(scheme)[0];
  c.q_len = c.k_len = 200;
  c.options.query_offset.reset();
  c.options.causal = true;
  return c;
}

std::vector<AttentionCase> T5Cases() {
  std::vector<AttentionCase> cases = FusedSchemeCases({"t5", "t5causal"});
  for (const char* s : {"t5", "t5causal"}) {
    for (AttentionCase& c : SchemeExtraCases(s)) cases.push_back(c);
  }
  // The scalar table under the other bucket maps: Shaw's symmetric clip with
  // the value table (both bucketed terms in one tile pair), and an
  // asymmetric clip (w2v-BERT's reaches) with a causal mask.
  AttentionCase v = MakeCase("scalar_clip_value", 1, 2, 130, 150, 16, 16, 5);
  v.options.score_term = ScoreTerm::kScalarTable;
  v.options.per_head_tables = true;
  cases.push_back(v);
  AttentionCase a = MakeCase("scalar_asym_causal", 2, 2, 200, 200, 16, 16, 0);
  a.options.score_term = ScoreTerm::kScalarTable;
  a.options.buckets.kind = BucketKind::kClip;
  a.options.buckets.clip = {64, 8};
  a.options.value_term = false;
  a.options.causal = true;
  a.options.key_lengths = {200, 77};
  cases.push_back(a);
  return cases;
}

class FusedT5 : public testing::TestWithParam<AttentionCase> {};
TEST_P(FusedT5, MatchesDoubleReference) { CompareToReference(GetParam(), 2); }
INSTANTIATE_TEST_SUITE_P(Schemes, FusedT5, testing::ValuesIn(T5Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(FusedSchemeTargets, T5) { EveryTarget(T5Cases()); }

TEST(FusedSchemeDeterminism, T5) {
  CheckSchemeDeterminism(SchemeStressCase("t5"));
  CheckSchemeDeterminism(SchemeStressCase("t5causal"));
}
TEST(FusedSchemeMasks, T5) {
  CheckSchemeMaskedRows(SchemeStressCase("t5"));
  CheckSchemeMaskedRows(SchemeStressCase("t5causal"));
}

// Shaw's vector tables under T5 buckets (shaw-log, the kernel's distance
// rows): the awkward-size matrix, T5's usual 32 / 128 on several key tiles
// with masks, offsets and far tiles on both sides, one term or both,
// causal buckets with and without the mask, a reach beyond n, the position
// query bias, and a scalar table plus value table under the same map.
std::vector<AttentionCase> ShawLogCases() {
  std::vector<AttentionCase> cases = FusedSchemeCases({"log", "shaw_log"});
  struct Log {
    const char* name;
    int64_t nq, nk, buckets, max_distance;
    bool bidirectional, causal, key, value, per_head;
    std::optional<int64_t> offset;
  };
  const Log specs[] = {
      {"32_128", 300, 300, 32, 128, true, false, true, true, false, {}},
      {"32_128_causal_perhead", 300, 300, 32, 128, true, true, true, true, true,
       {}},
      {"32_128_off40", 200, 330, 32, 128, true, false, true, true, false, 40},
      {"32_128_key_only", 260, 200, 32, 128, true, false, true, false, true,
       -30},
      {"32_128_value_only_causal", 200, 260, 32, 128, true, true, false, true,
       false, {}},
      {"causal_buckets_masked", 250, 250, 32, 128, false, true, true, true,
       false, {}},
      {"causal_buckets_unmasked", 150, 170, 16, 40, false, false, true, true,
       true, {}},
      {"8_20", 200, 230, 8, 20, true, false, true, true, false, 7},
      {"64_1000_reach_beyond_n", 130, 150, 64, 1000, true, false, true, true,
       false, {}},
      {"far", 70, 70, 32, 128, true, false, true, true, false, 5000},
      {"far_neg", 70, 70, 32, 128, true, false, true, true, true, -5000},
      // Reach 9 < nb = 32: 19 distance rows, whose buckets span all 32 rows
      // (both halves); one query tile, few keys.
      {"32_9_short_reach", 30, 20, 32, 9, true, false, true, true, false, {}},
      {"32_9_short_reach_k1", 70, 1, 32, 9, true, false, true, true, true, {}},
  };
  for (const Log& l : specs) {
    AttentionCase c = MakeCase(std::string("log_") + l.name, 2, 2, l.nq, l.nk,
                               17, 9, 0);
    c.options.buckets.kind = BucketKind::kT5;
    c.options.buckets.t5 = {l.buckets, l.max_distance, l.bidirectional};
    c.options.causal = l.causal;
    c.options.key_term = l.key;
    c.options.value_term = l.value;
    c.options.per_head_tables = l.per_head;
    c.options.query_offset = l.offset;
    c.options.key_lengths = {l.nk, l.nk / 2 + 1};
    cases.push_back(std::move(c));
  }
  AttentionCase x = MakeCase("log_xl_pb", 1, 2, 130, 150, 16, 16, 0);
  x.options.buckets.kind = BucketKind::kT5;
  x.options.buckets.t5 = {32, 128, true};
  x.options.position_query_bias = true;
  x.options.query_offset = 9;
  cases.push_back(x);
  AttentionCase t = MakeCase("log_scalar_value", 1, 2, 200, 200, 16, 16, 0);
  t.options.buckets.kind = BucketKind::kT5;
  t.options.buckets.t5 = {32, 128, true};
  t.options.score_term = ScoreTerm::kScalarTable;
  t.options.causal = true;
  cases.push_back(t);
  AttentionCase a = MakeCase("log_alibi_value", 1, 2, 200, 200, 16, 16, 0);
  a.options.buckets.kind = BucketKind::kT5;
  a.options.buckets.t5 = {16, 64, true};
  a.options.score_term = ScoreTerm::kAlibi;
  cases.push_back(a);
  return cases;
}

class FusedShawLog : public testing::TestWithParam<AttentionCase> {};
TEST_P(FusedShawLog, MatchesDoubleReference) {
  CompareToReference(GetParam(), 2);
}
INSTANTIATE_TEST_SUITE_P(Schemes, FusedShawLog,
                         testing::ValuesIn(ShawLogCases()),
                         [](const auto& info) { return info.param.name; });

TEST(FusedSchemeTargets, ShawLog) { EveryTarget(ShawLogCases()); }

TEST(FusedSchemeDeterminism, ShawLog) {
  AttentionCase c = SchemeStressCase("alibi");
  c.options.score_term = ScoreTerm::kVector;
  c.options.value_term = true;
  c.options.buckets.kind = BucketKind::kT5;
  c.options.buckets.t5 = {32, 128, true};
  CheckSchemeDeterminism(c);
  CheckSchemeMaskedRows(c);
}

// Under T5 buckets every distance beyond the reach is its side's last
// bucket, so Shaw's symmetric clip at k = reach with the tables expanded to
// one row per distance (row r + k holds the table row of bucket(r)) is the
// same attention: the distance rows against the clip path, within rounding
// (the two sum W and E in different orders).
TEST(FusedSchemeProperties, ShawLogIsClipOverExpandedTables) {
  AttentionCase log = MakeCase("log", 2, 2, 230, 210, 16, 16, 0);
  log.options.buckets.kind = BucketKind::kT5;
  log.options.buckets.t5 = {16, 40, true};
  log.options.causal = true;
  log.options.key_lengths = {210, 100};
  const int64_t reach = T5BucketReach(log.options.buckets.t5);
  AttentionCase clip = log;
  clip.options.buckets.kind = BucketKind::kSymmetricClip;
  clip.options.max_distance = reach;
  SCOPED_TRACE(log.Describe());
  const AttentionData<float> data = MakeRandomData<float>(log, 31);
  AttentionData<float> wide = MakeRandomData<float>(clip, 31);
  wide.q = data.q;
  wide.k = data.k;
  wide.v = data.v;
  const int64_t rows = 2 * reach + 1;
  for (int64_t e = 0; e < rows; ++e) {
    const int64_t b = T5Bucket(e - reach, log.options.buckets.t5);
    for (int64_t c = 0; c < log.dk; ++c)
      wide.ak[e * log.dk + c] = data.ak[b * log.dk + c];
    for (int64_t c = 0; c < log.dv; ++c)
      wide.av[e * log.dv + c] = data.av[b * log.dv + c];
  }
  const std::vector<float> dout = RandomVector<float>(log.OutNumel(), 32);
  const Results a = RunFused(log, data, dout, 2);
  const Results b = RunFused(clip, wide, dout, 2);
  const double tol = 8 * kUnitRoundoff * std::sqrt(ChainLength(clip));
  EXPECT_LE(RelFrobeniusError(a.out, b.out), tol);
  EXPECT_LE(RelFrobeniusError(a.dq, b.dq), tol);
  EXPECT_LE(RelFrobeniusError(a.dk, b.dk), tol);
  EXPECT_LE(RelFrobeniusError(a.dv, b.dv), tol);
  // dAK / dAV: the clip's per-distance rows summed by bucket.
  std::vector<float> dak(a.dak.size(), 0.0f), dav(a.dav.size(), 0.0f);
  for (int64_t e = 0; e < rows; ++e) {
    const int64_t bk = T5Bucket(e - reach, log.options.buckets.t5);
    for (int64_t c = 0; c < log.dk; ++c)
      dak[bk * log.dk + c] += b.dak[e * log.dk + c];
    for (int64_t c = 0; c < log.dv; ++c)
      dav[bk * log.dv + c] += b.dav[e * log.dv + c];
  }
  EXPECT_LE(RelFrobeniusError(a.dak, dak), tol);
  EXPECT_LE(RelFrobeniusError(a.dav, dav), tol);
}

// Shaw's tables under the asymmetric clip (shaw-asym): both terms, one of
// them, masks, left or right reach 0, reaches beyond n, far tiles.
std::vector<AttentionCase> AsymCases() {
  std::vector<AttentionCase> cases =
      FusedSchemeCases({"asym", "asym0", "shaw_asym"});
  struct Reaches {
    const char* name;
    int64_t left, right;
    bool causal, key, value;
    std::optional<int64_t> offset;
  };
  const Reaches specs[] = {
      {"l64_r8", 64, 8, false, true, true, {}},
      {"l8_r64_causal", 8, 64, true, true, true, {}},
      {"l0_r5", 0, 5, false, true, true, 7},
      {"l5_r0_causal", 5, 0, true, true, true, {}},
      {"l0_r0", 0, 0, false, true, true, {}},
      {"l3_r200_key_only", 3, 200, false, true, false, {}},
      {"l200_r3_value_only_causal", 200, 3, true, false, true, -10},
      {"l16_r1_far", 16, 1, false, true, true, 5000},
  };
  for (const Reaches& r : specs) {
    AttentionCase c = MakeCase(std::string("asym_") + r.name, 2, 2, 200, 230,
                               17, 9, 16);
    c.options.buckets.kind = BucketKind::kClip;
    c.options.buckets.clip = {r.left, r.right};
    c.options.causal = r.causal;
    c.options.key_term = r.key;
    c.options.value_term = r.value;
    c.options.query_offset = r.offset;
    c.options.key_lengths = {230, 101};
    c.options.per_head_tables = r.left > r.right;
    cases.push_back(std::move(c));
  }
  // ALiBi's score with an asymmetric-clip value table.
  AttentionCase a = MakeCase("asym_alibi_value", 1, 2, 130, 130, 16, 16, 3);
  a.options.score_term = ScoreTerm::kAlibi;
  a.options.buckets.kind = BucketKind::kClip;
  a.options.buckets.clip = {9, 2};
  a.options.causal = true;
  cases.push_back(a);
  return cases;
}

class FusedAsym : public testing::TestWithParam<AttentionCase> {};
TEST_P(FusedAsym, MatchesDoubleReference) { CompareToReference(GetParam(), 2); }
INSTANTIATE_TEST_SUITE_P(Schemes, FusedAsym, testing::ValuesIn(AsymCases()),
                         [](const auto& info) { return info.param.name; });

TEST(FusedSchemeTargets, Asym) { EveryTarget(AsymCases()); }

TEST(FusedSchemeDeterminism, Asym) {
  AttentionCase c = SchemeStressCase("alibi");
  c.options.score_term = ScoreTerm::kVector;
  c.options.value_term = true;
  c.options.buckets.kind = BucketKind::kClip;
  c.options.buckets.clip = {64, 8};
  CheckSchemeDeterminism(c);
  CheckSchemeMaskedRows(c);
}

// kClip with left = right = k is the symmetric clip, bit for bit.
TEST(FusedSchemeProperties, SymmetricAsymClipIsShaw) {
  for (int64_t k : {0, 3, 16, 70}) {
    AttentionCase sym = MakeCase("sym", 2, 2, 150, 170, 16, 16, k);
    sym.options.causal = k % 2 == 1;
    sym.options.key_lengths = {170, 90};
    AttentionCase asym = sym;
    asym.options.buckets.kind = BucketKind::kClip;
    asym.options.buckets.clip = {k, k};
    SCOPED_TRACE(asym.Describe());
    const AttentionData<float> data = MakeRandomData<float>(sym, 21);
    const std::vector<float> dout = RandomVector<float>(sym.OutNumel(), 22);
    const Results a = RunFused(sym, data, dout, 2);
    const Results b = RunFused(asym, data, dout, 2);
    EXPECT_EQ(a.out, b.out);
    EXPECT_EQ(a.lse, b.lse);
    EXPECT_EQ(a.dq, b.dq);
    EXPECT_EQ(a.dk, b.dk);
    EXPECT_EQ(a.dv, b.dv);
    EXPECT_EQ(a.dak, b.dak);
    EXPECT_EQ(a.dav, b.dav);
  }
}

// Transformer-XL's position query bias (xl: k >= every distance, no value
// term; xlv: with Shaw's value table) and pb with clipping and both terms.
std::vector<AttentionCase> XlCases() {
  std::vector<AttentionCase> cases = FusedSchemeCases({"xl", "xlv"});
  AttentionCase c = MakeCase("xl_clip16_causal_pad", 2, 2, 200, 230, 17, 9, 16);
  c.options.position_query_bias = true;
  c.options.causal = true;
  c.options.key_lengths = {230, 101};
  c.options.per_head_tables = true;
  cases.push_back(c);
  AttentionCase a = MakeCase("xl_asym_offset", 1, 2, 130, 150, 16, 16, 0);
  a.options.position_query_bias = true;
  a.options.buckets.kind = BucketKind::kClip;
  a.options.buckets.clip = {40, 3};
  a.options.query_offset = 9;
  cases.push_back(a);
  return cases;
}

class FusedXl : public testing::TestWithParam<AttentionCase> {};
TEST_P(FusedXl, MatchesDoubleReference) { CompareToReference(GetParam(), 2); }
INSTANTIATE_TEST_SUITE_P(Schemes, FusedXl, testing::ValuesIn(XlCases()),
                         [](const auto& info) { return info.param.name; });

TEST(FusedSchemeTargets, Xl) { EveryTarget(XlCases()); }

TEST(FusedSchemeDeterminism, Xl) {
  AttentionCase c = SchemeStressCase("alibi");
  c.options.score_term = ScoreTerm::kVector;
  c.options.position_query_bias = true;
  CheckSchemeDeterminism(c);
  CheckSchemeMaskedRows(c);
}

TEST(FusedSchemeDeterminism, Alibi) {
  CheckSchemeDeterminism(SchemeStressCase("alibi"));
}
TEST(FusedSchemeMasks, Alibi) { CheckSchemeMaskedRows(SchemeStressCase("alibi")); }

}  // namespace
}  // namespace relpos

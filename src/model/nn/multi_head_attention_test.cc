// Gradient checks of the multi-head attention layer in double (the public
// attention API runs its reference path for double), over every position
// variant the model uses, causal and padded; plus float-vs-double agreement.
#include "model/nn/multi_head_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <ostream>
#include <string>
#include <utility>
#include <vector>

#include "base/rng.h"
#include "model/nn/grad_check_test_util.h"

namespace relpos::nn {
namespace {

using testing::CheckGradient;
using testing::Dot;
using testing::RandomVector;

struct MhaCase {
  std::string name;
  int64_t max_distance;
  bool key_term, value_term, per_head, causal;
  std::vector<int64_t> lengths;  // batch = lengths.size()
};

void PrintTo(const MhaCase& c, std::ostream* os) { *os << c.name; }

// The attention options a case describes.
AttentionOptions OptionsFor(const MhaCase& tc) {
  AttentionOptions o;
  o.max_distance = tc.max_distance;
  o.key_term = tc.key_term;
  o.value_term = tc.value_term;
  o.per_head_tables = tc.per_head;
  o.causal = tc.causal;
  o.key_lengths = tc.lengths;
  return o;
}

// Awkward sizes: N = 5 (odd), k = 2 < N so both far buckets are used, one
// fully padded sequence (length 0: rows see no key and must output zeros).
std::vector<MhaCase> Cases() {
  return {
      {"plain", 0, false, false, false, false, {5, 3}},
      {"plain_causal", 0, false, false, false, true, {5, 3}},
      {"relative_shared", 2, true, true, false, false, {5, 3}},
      {"relative_per_head_causal", 2, true, true, true, true, {4, 5}},
      {"keys_only_padded_empty", 2, true, false, false, false, {5, 0}},
      {"values_only_causal", 1, false, true, true, true, {2, 5}},
      {"k_zero", 0, true, true, false, false, {5, 5}},
  };
}

class MhaGradTest : public ::testing::TestWithParam<MhaCase> {};

TEST_P(MhaGradTest, GradientsMatchFiniteDifferences) {
  const MhaCase& tc = GetParam();
  const MhaShape s{static_cast<int64_t>(tc.lengths.size()), 5, 8, 2};
  const int64_t d = s.d_model, dh = s.head_dim();
  const int64_t table =
      (tc.per_head ? s.heads : 1) * (2 * tc.max_distance + 1) * dh;
  const AttentionOptions o = OptionsFor(tc);

  Rng rng(42);
  std::vector<double> x = RandomVector(s.rows() * d, rng);
  const double ws = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<double> wq = RandomVector(d * d, rng, ws),
                      bq = RandomVector(d, rng, 0.1);
  std::vector<double> wk = RandomVector(d * d, rng, ws),
                      bk = RandomVector(d, rng, 0.1);
  std::vector<double> wv = RandomVector(d * d, rng, ws),
                      bv = RandomVector(d, rng, 0.1);
  std::vector<double> wo = RandomVector(d * d, rng, ws),
                      bo = RandomVector(d, rng, 0.1);
  std::vector<double> rk = RandomVector(table, rng, 0.5);
  std::vector<double> rv = RandomVector(table, rng, 0.5);
  const std::vector<double> r = RandomVector(s.rows() * d, rng);
  auto weights = [&] {
    return MhaWeights<double>{wq.data(),
                              bq.data(),
                              wk.data(),
                              bk.data(),
                              wv.data(),
                              bv.data(),
                              wo.data(),
                              bo.data(),
                              tc.key_term ? rk.data() : nullptr,
                              tc.value_term ? rv.data() : nullptr};
  };
  MhaCache<double> cache;
  std::vector<double> y(s.rows() * d);
  auto loss = [&] {
    MultiHeadAttentionForward<double>(x.data(), weights(), y.data(), &cache, s,
                                      o);
    return Dot(r, y);
  };
  loss();
  for (double v : y) ASSERT_TRUE(std::isfinite(v));
  // A sequence with no valid key: attention output is zero, so every row of
  // y is exactly the output bias.
  for (size_t b = 0; b < tc.lengths.size(); ++b) {
    if (tc.lengths[b] != 0) continue;
    for (int64_t n = 0; n < s.length; ++n) {
      for (int64_t c = 0; c < d; ++c) {
        EXPECT_EQ(y[(b * s.length + n) * d + c], bo[c]);
      }
    }
  }

  std::vector<double> dx(x.size()), dwq(wq.size()), dbq(d), dwk(wk.size()),
      dbk(d), dwv(wv.size()), dbv(d), dwo(wo.size()), dbo(d), drk(table),
      drv(table);
  MhaGrads<double> g{dwq.data(),
                     dbq.data(),
                     dwk.data(),
                     dbk.data(),
                     dwv.data(),
                     dbv.data(),
                     dwo.data(),
                     dbo.data(),
                     tc.key_term ? drk.data() : nullptr,
                     tc.value_term ? drv.data() : nullptr};
  MhaScratch<double> scratch;
  MultiHeadAttentionBackward<double>(x.data(), weights(), cache, r.data(),
                                     dx.data(), g, &scratch, s, o);
  CheckGradient("dx", &x, dx, loss, 80);
  CheckGradient("dwq", &wq, dwq, loss);
  CheckGradient("dbq", &bq, dbq, loss);
  CheckGradient("dwk", &wk, dwk, loss);
  CheckGradient("dbk", &bk, dbk, loss);
  CheckGradient("dwv", &wv, dwv, loss);
  CheckGradient("dbv", &bv, dbv, loss);
  CheckGradient("dwo", &wo, dwo, loss);
  CheckGradient("dbo", &bo, dbo, loss);
  if (tc.key_term) CheckGradient("drel_k", &rk, drk, loss, 200);
  if (tc.value_term) CheckGradient("drel_v", &rv, drv, loss, 200);
}

// The packed layout (MhaShape::lengths: only valid rows in x, y, dy, dx;
// attention per length group) computes exactly what the padded layout
// computes at the valid rows, and the same parameter gradients when the
// padded rows' dy is zero. In double the layer's products are plain loops
// whose every entry sums in a fixed order, and the padded rows only add exact
// zeros, so equality is exact except for the relative tables (below).
// Returns the packed layout's attention tensor size (elements of q).
size_t CheckPackedMatchesPadded(const MhaCase& tc, int64_t N) {
  const int64_t B = static_cast<int64_t>(tc.lengths.size()), d = 8;
  const MhaShape padded{B, N, d, 2};
  const MhaShape packed{B, N, d, 2, tc.lengths.data()};
  const int64_t dh = padded.head_dim();
  const int64_t table =
      (tc.per_head ? padded.heads : 1) * (2 * tc.max_distance + 1) * dh;
  const AttentionOptions o = OptionsFor(tc);
  Rng rng(7);
  std::vector<std::vector<double>> w;
  for (int i = 0; i < 4; ++i) {
    w.push_back(RandomVector(d * d, rng, 0.35));
    w.push_back(RandomVector(d, rng, 0.1));
  }
  w.push_back(RandomVector(table, rng, 0.5));
  w.push_back(RandomVector(table, rng, 0.5));
  const MhaWeights<double> weights{w[0].data(),
                                   w[1].data(),
                                   w[2].data(),
                                   w[3].data(),
                                   w[4].data(),
                                   w[5].data(),
                                   w[6].data(),
                                   w[7].data(),
                                   tc.key_term ? w[8].data() : nullptr,
                                   tc.value_term ? w[9].data() : nullptr};
  // Padded inputs; dy is zero at padded rows. Packed: the valid rows.
  std::vector<double> x = RandomVector(B * N * d, rng);
  std::vector<double> dy = RandomVector(B * N * d, rng);
  std::vector<double> xp, dyp;
  std::vector<int64_t> valid_rows;  // padded row of each packed row
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = b * N + n;
      if (n < tc.lengths[b]) {
        valid_rows.push_back(row);
        xp.insert(xp.end(), x.begin() + row * d, x.begin() + (row + 1) * d);
        dyp.insert(dyp.end(), dy.begin() + row * d, dy.begin() + (row + 1) * d);
      } else {
        std::fill(dy.begin() + row * d, dy.begin() + (row + 1) * d, 0.0);
      }
    }
  }
  EXPECT_EQ(packed.rows(), static_cast<int64_t>(valid_rows.size()));
  struct Run {
    std::vector<double> y, dx;
    std::vector<std::vector<double>> g;
    size_t attention_size = 0;
  };
  auto run = [&](const MhaShape& s, const std::vector<double>& xin,
                 const std::vector<double>& dyin) {
    Run out;
    out.y.assign(s.rows() * d, -1.0);
    out.dx.assign(s.rows() * d, -1.0);
    for (const auto& wi : w) out.g.emplace_back(wi.size(), -1.0);
    MhaCache<double> cache;
    MhaScratch<double> scratch;
    MultiHeadAttentionForward<double>(xin.data(), weights, out.y.data(), &cache,
                                      s, o);
    MhaGrads<double> g{out.g[0].data(),
                       out.g[1].data(),
                       out.g[2].data(),
                       out.g[3].data(),
                       out.g[4].data(),
                       out.g[5].data(),
                       out.g[6].data(),
                       out.g[7].data(),
                       tc.key_term ? out.g[8].data() : nullptr,
                       tc.value_term ? out.g[9].data() : nullptr};
    MultiHeadAttentionBackward<double>(xin.data(), weights, cache, dyin.data(),
                                       out.dx.data(), g, &scratch, s, o);
    out.attention_size = cache.q.size();
    return out;
  };
  const Run a = run(padded, x, dy), p = run(packed, xp, dyp);
  for (size_t r = 0; r < valid_rows.size(); ++r) {
    for (int64_t c = 0; c < d; ++c) {
      EXPECT_EQ(p.y[r * d + c], a.y[valid_rows[r] * d + c]) << r << "," << c;
      EXPECT_EQ(p.dx[r * d + c], a.dx[valid_rows[r] * d + c]) << r << "," << c;
    }
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(p.g[i], a.g[i]) << "parameter " << i;
  // The table gradients sum over every query-key pair; the packed layout
  // runs attention per length group and adds the groups' sums, so only the
  // order of the additions differs: a few double roundings of the largest
  // partial sum, far below 1e-12 of the gradient's largest entry.
  for (int i = 8; i < 10; ++i) {
    if ((i == 8 && !tc.key_term) || (i == 9 && !tc.value_term)) continue;
    double scale = 1e-300;
    for (double v : a.g[i]) scale = std::max(scale, std::abs(v));
    for (size_t e = 0; e < a.g[i].size(); ++e) {
      EXPECT_NEAR(p.g[i][e], a.g[i][e], 1e-12 * scale) << i << "[" << e << "]";
    }
  }
  return p.attention_size;
}

TEST_P(MhaGradTest, PackedRowsMatchPaddedRows) {
  CheckPackedMatchesPadded(GetParam(), 5);
}

// Spread-out lengths make the packed layout split the batch into length
// groups (its attention tensors then hold less than the padded B H N dh).
TEST(MhaTest, PackedLengthGroupsMatchPaddedRows) {
  const int64_t N = 40, H = 2, dh = 4;
  for (const MhaCase& tc : std::vector<MhaCase>{
           {"groups_relative",
            3,
            true,
            true,
            false,
            false,
            {40, 3, 38, 1, 0, 12, 39, 2}},
           {"groups_per_head_causal",
            2,
            true,
            true,
            true,
            true,
            {7, 40, 1, 33, 0, 36}},
           {"groups_plain", 0, false, false, false, false, {2, 40, 3, 37}}}) {
    SCOPED_TRACE(tc.name);
    const size_t packed = CheckPackedMatchesPadded(tc, N);
    EXPECT_LT(packed, tc.lengths.size() * H * N * dh);
  }
}

INSTANTIATE_TEST_SUITE_P(Variants, MhaGradTest, ::testing::ValuesIn(Cases()),
                         [](const auto& info) { return info.param.name; });

TEST(MhaTest, FloatMatchesDouble) {
  // Same layer in float (Sgemm + whatever attention path kAuto picks) and in
  // double. Float rounding through two GEMMs (K = 32) and a softmax keeps
  // relative errors near sqrt(K) eps_float ~ 1e-6; 1e-4 relative to the
  // output's largest entry leaves room for the attention path's own rounding.
  const MhaShape s{2, 37, 32, 4};
  const int64_t d = s.d_model, dh = s.head_dim(), k = 4;
  const int64_t table = (2 * k + 1) * dh;
  AttentionOptions o;
  o.max_distance = k;
  o.causal = true;
  o.key_lengths = {37, 20};
  Rng rng(9);
  const double ws = 1.0 / std::sqrt(static_cast<double>(d));
  std::vector<std::vector<double>> wd;
  for (int i = 0; i < 4; ++i) {
    wd.push_back(RandomVector(d * d, rng, ws));
    wd.push_back(RandomVector(d, rng, 0.1));
  }
  wd.push_back(RandomVector(table, rng, 0.5));
  wd.push_back(RandomVector(table, rng, 0.5));
  const std::vector<double> xd = RandomVector(s.rows() * d, rng);
  std::vector<std::vector<float>> wf;
  for (const auto& w : wd) wf.emplace_back(w.begin(), w.end());
  const std::vector<float> xf(xd.begin(), xd.end());
  MhaWeights<double> wdd{wd[0].data(), wd[1].data(), wd[2].data(), wd[3].data(),
                         wd[4].data(), wd[5].data(), wd[6].data(), wd[7].data(),
                         wd[8].data(), wd[9].data()};
  MhaWeights<float> wff{wf[0].data(), wf[1].data(), wf[2].data(), wf[3].data(),
                        wf[4].data(), wf[5].data(), wf[6].data(), wf[7].data(),
                        wf[8].data(), wf[9].data()};
  std::vector<double> yd(s.rows() * d);
  std::vector<float> yf(s.rows() * d);
  MhaCache<double> cd;
  MhaCache<float> cf;
  MultiHeadAttentionForward<double>(xd.data(), wdd, yd.data(), &cd, s, o);
  MultiHeadAttentionForward<float>(xf.data(), wff, yf.data(), &cf, s, o);
  double scale = 0;
  for (double v : yd) scale = std::max(scale, std::abs(v));
  for (size_t i = 0; i < yd.size(); ++i) {
    ASSERT_NEAR(yf[i], yd[i], 1e-4 * scale) << i;
  }
  // Backward with dy = y: compare dx and the table gradients.
  std::vector<double> dxd(xd.size()), gd[10];
  std::vector<float> dxf(xd.size()), gf[10];
  for (int i = 0; i < 10; ++i) {
    gd[i].resize(wd[i].size());
    gf[i].resize(wd[i].size());
  }
  MhaGrads<double> gdd{gd[0].data(), gd[1].data(), gd[2].data(), gd[3].data(),
                       gd[4].data(), gd[5].data(), gd[6].data(), gd[7].data(),
                       gd[8].data(), gd[9].data()};
  MhaGrads<float> gff{gf[0].data(), gf[1].data(), gf[2].data(), gf[3].data(),
                      gf[4].data(), gf[5].data(), gf[6].data(), gf[7].data(),
                      gf[8].data(), gf[9].data()};
  MhaScratch<double> sd;
  MhaScratch<float> sf;
  MultiHeadAttentionBackward<double>(xd.data(), wdd, cd, yd.data(), dxd.data(),
                                     gdd, &sd, s, o);
  MultiHeadAttentionBackward<float>(xf.data(), wff, cf, yf.data(), dxf.data(),
                                    gff, &sf, s, o);
  auto check = [](const char* what, const auto& f,
                  const std::vector<double>& dd, double scale = 0) {
    for (double v : dd) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < dd.size(); ++i) {
      ASSERT_NEAR(f[i], dd[i], 1e-4 * scale) << what << "[" << i << "]";
    }
  };
  check("dx", dxf, dxd);
  double dwk_scale = 0;
  for (double v : gd[2]) dwk_scale = std::max(dwk_scale, std::abs(v));
  for (int i = 0; i < 10; ++i) {
    // The key bias adds q_i . bk to every score of row i, which softmax
    // ignores: its exact gradient is 0 and float leaves only rounding, so
    // measure it on the scale of the key weights' gradient instead.
    check(("param" + std::to_string(i)).c_str(), gf[i], gd[i],
          i == 3 ? dwk_scale : 0.0);
  }
}

// ---------------------------------------------------------------------------
// The other schemes of the family (docs/math.md section 8) through the layer:
// their extra weights (T5's bias, XL's W, u, v), RoPE's rotations, all
// gradient-checked, packed length groups against the padded layout, and the
// float layer (fused kernel where supported) against the double one.

struct SchemeLayerCase {
  std::string name;
  AttentionOptions options;  // scheme part; causal and lengths set per test
  MhaPositions positions;
};

void PrintTo(const SchemeLayerCase& c, std::ostream* os) { *os << c.name; }

std::vector<SchemeLayerCase> SchemeLayerCases(int64_t xl_keys) {
  std::vector<SchemeLayerCase> cases;
  auto add = [&](const std::string& name, auto&& set) {
    SchemeLayerCase c;
    c.name = name;
    set(c.options, c.positions);
    cases.push_back(std::move(c));
  };
  add("shaw_asym", [](AttentionOptions& o, MhaPositions&) {
    o.buckets.kind = BucketKind::kClip;
    o.buckets.clip = {3, 1};
  });
  add("shaw_log_per_head", [](AttentionOptions& o, MhaPositions&) {
    o.buckets.kind = BucketKind::kT5;
    o.buckets.t5 = {8, 5, true};
    o.per_head_tables = true;
  });
  add("t5", [](AttentionOptions& o, MhaPositions&) {
    o.buckets.kind = BucketKind::kT5;
    o.buckets.t5 = {8, 5, true};
    o.score_term = ScoreTerm::kScalarTable;
    o.value_term = false;
  });
  add("alibi", [](AttentionOptions& o, MhaPositions&) {
    o.score_term = ScoreTerm::kAlibi;
    o.value_term = false;
  });
  add("rope", [](AttentionOptions& o, MhaPositions& p) {
    o.key_term = o.value_term = false;
    p.rope = true;
  });
  add("rope_interleaved", [](AttentionOptions& o, MhaPositions& p) {
    o.key_term = o.value_term = false;
    p.rope = true;
    p.rope_base = 100.0;
    p.rope_layout = RopeLayout::kInterleaved;
  });
  add("xl", [&](AttentionOptions& o, MhaPositions& p) {
    o.max_distance = xl_keys - 1;
    o.per_head_tables = true;
    o.value_term = false;
    o.position_query_bias = true;
    p.xl = true;
  });
  return cases;
}

// Every weight of one layer, with the scheme's extra ones.
template <typename T>
struct SchemeLayer {
  std::vector<std::vector<T>> w;  // wq bq wk bk wv bv wo bo rel_k rel_v
                                  // bias xl_w xl_u xl_v
  std::vector<std::vector<T>> g;
  bool vector = false, values = false, bias = false, xl = false;

  SchemeLayer(const SchemeLayerCase& c, const MhaShape& s, Rng& rng) {
    const int64_t d = s.d_model, dh = s.head_dim(), H = s.heads;
    const int64_t rows = TableRows(c.options);
    const int64_t table = (c.options.per_head_tables ? H : 1) * rows * dh;
    xl = c.positions.xl;
    vector =
        c.options.key_term && c.options.score_term == ScoreTerm::kVector && !xl;
    values = c.options.value_term;
    bias =
        c.options.key_term && c.options.score_term == ScoreTerm::kScalarTable;
    const double ws = 1.0 / std::sqrt(static_cast<double>(d));
    auto random = [&](int64_t n, double scale) {
      const std::vector<double> v = testing::RandomVector(n, rng, scale);
      return std::vector<T>(v.begin(), v.end());
    };
    for (int i = 0; i < 4; ++i) {
      w.push_back(random(d * d, ws));
      w.push_back(random(d, 0.1));
    }
    w.push_back(vector ? random(table, 0.5) : std::vector<T>());
    w.push_back(values ? random(table, 0.5) : std::vector<T>());
    w.push_back(bias ? random(H * rows, 0.5) : std::vector<T>());
    w.push_back(xl ? random(d * d, ws) : std::vector<T>());
    w.push_back(xl ? random(H * dh, 0.3) : std::vector<T>());
    w.push_back(xl ? random(H * dh, 0.3) : std::vector<T>());
    for (const auto& wi : w) g.emplace_back(wi.size(), T(-1));
  }
  template <typename P>
  static P* Or(std::vector<P>& v) {
    return v.empty() ? nullptr : v.data();
  }
  MhaWeights<T> Weights() {
    return {w[0].data(), w[1].data(), w[2].data(), w[3].data(), w[4].data(),
            w[5].data(), w[6].data(), w[7].data(), Or(w[8]),    Or(w[9]),
            Or(w[10]),   Or(w[11]),   Or(w[12]),   Or(w[13])};
  }
  MhaGrads<T> Grads() {
    return {g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(),
            g[5].data(), g[6].data(), g[7].data(), Or(g[8]),    Or(g[9]),
            Or(g[10]),   Or(g[11]),   Or(g[12]),   Or(g[13])};
  }
};

// The parameter's case for sequences of `keys` positions (XL's reach), with
// the causality and key lengths of a test (T5 buckets causal when the mask
// is).
SchemeLayerCase CaseFor(const std::string& name, int64_t keys, bool causal,
                        std::vector<int64_t> key_lengths) {
  SchemeLayerCase c = SchemeLayerCases(keys)[0];
  for (const SchemeLayerCase& sc : SchemeLayerCases(keys)) {
    if (sc.name == name) c = sc;
  }
  c.options.causal = causal;
  c.options.key_lengths = std::move(key_lengths);
  c.options.buckets.t5.bidirectional = !causal;
  return c;
}

class MhaSchemeTest : public ::testing::TestWithParam<SchemeLayerCase> {};

TEST_P(MhaSchemeTest, GradientsMatchFiniteDifferences) {
  for (bool causal : {false, true}) {
    SCOPED_TRACE(causal ? "causal" : "bidirectional");
    const MhaShape s{2, 6, 8, 2};
    const SchemeLayerCase c =
        CaseFor(GetParam().name, s.length, causal, {6, 4});
    const AttentionOptions& o = c.options;
    Rng rng(42);
    SchemeLayer<double> layer(c, s, rng);
    std::vector<double> x = RandomVector(s.rows() * s.d_model, rng);
    const std::vector<double> r = RandomVector(s.rows() * s.d_model, rng);
    MhaCache<double> cache;
    std::vector<double> y(x.size());
    auto loss = [&] {
      MultiHeadAttentionForward<double>(x.data(), layer.Weights(), y.data(),
                                        &cache, s, o, c.positions);
      return Dot(r, y);
    };
    loss();
    std::vector<double> dx(x.size());
    MhaScratch<double> scratch;
    MultiHeadAttentionBackward<double>(x.data(), layer.Weights(), cache,
                                       r.data(), dx.data(), layer.Grads(),
                                       &scratch, s, o, c.positions);
    CheckGradient("dx", &x, dx, loss, 40);
    const char* names[] = {"wq",   "bq",   "wk",   "bk",    "wv",
                           "bv",   "wo",   "bo",   "rel_k", "rel_v",
                           "bias", "xl_w", "xl_u", "xl_v"};
    int extra = 0;
    for (int i = 0; i < 14; ++i) {
      if (layer.w[i].empty()) continue;
      const int n = CheckGradient(names[i], &layer.w[i], layer.g[i], loss, 60);
      if (i >= 8) extra += n;
    }
    // The scheme's own weights were checked (none for ALiBi and RoPE).
    EXPECT_EQ(extra > 0, !c.positions.rope && c.name != "alibi");
  }
}

// Spread-out lengths split the packed batch into length groups; the layer
// must give the padded layout's outputs and gradients (table, bias and pb
// gradients of later groups are added to the first group's).
TEST_P(MhaSchemeTest, PackedLengthGroupsMatchPaddedRows) {
  const std::vector<int64_t> lengths = {40, 3, 38, 1, 0, 12, 39, 2};
  const int64_t B = static_cast<int64_t>(lengths.size()), N = 40, d = 8;
  const MhaShape padded{B, N, d, 2};
  const MhaShape packed{B, N, d, 2, lengths.data()};
  const SchemeLayerCase c = CaseFor(GetParam().name, N, true, lengths);
  const AttentionOptions& o = c.options;
  Rng rng(7);
  SchemeLayer<double> a(c, padded, rng);
  SchemeLayer<double> p = a;
  std::vector<double> x = RandomVector(B * N * d, rng);
  std::vector<double> dy = RandomVector(B * N * d, rng);
  std::vector<double> xp, dyp;
  std::vector<int64_t> valid_rows;
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t n = 0; n < N; ++n) {
      const int64_t row = b * N + n;
      if (n < lengths[b]) {
        valid_rows.push_back(row);
        xp.insert(xp.end(), x.begin() + row * d, x.begin() + (row + 1) * d);
        dyp.insert(dyp.end(), dy.begin() + row * d, dy.begin() + (row + 1) * d);
      } else {
        std::fill(dy.begin() + row * d, dy.begin() + (row + 1) * d, 0.0);
      }
    }
  }
  auto run = [&](SchemeLayer<double>& layer, const MhaShape& s,
                 const std::vector<double>& xin,
                 const std::vector<double>& dyin, std::vector<double>* y,
                 std::vector<double>* dx) {
    y->assign(xin.size(), -1.0);
    dx->assign(xin.size(), -1.0);
    MhaCache<double> cache;
    MhaScratch<double> scratch;
    MultiHeadAttentionForward<double>(xin.data(), layer.Weights(), y->data(),
                                      &cache, s, o, c.positions);
    MultiHeadAttentionBackward<double>(xin.data(), layer.Weights(), cache,
                                       dyin.data(), dx->data(), layer.Grads(),
                                       &scratch, s, o, c.positions);
    return cache.q.size();
  };
  std::vector<double> ya, dxa, yp, dxp;
  run(a, padded, x, dy, &ya, &dxa);
  const size_t packed_size = run(p, packed, xp, dyp, &yp, &dxp);
  EXPECT_LT(packed_size, static_cast<size_t>(B * N * d));
  // Row-wise results agree to rounding (the XL and RoPE paths add per-row
  // terms in the same order; only sums over groups are reordered).
  auto near = [](double u, double v, double scale) {
    return std::abs(u - v) <= 1e-12 * scale;
  };
  double ys = 1e-300, dxs = 1e-300;
  for (double v : ya) ys = std::max(ys, std::abs(v));
  for (double v : dxa) dxs = std::max(dxs, std::abs(v));
  for (size_t r = 0; r < valid_rows.size(); ++r) {
    for (int64_t col = 0; col < d; ++col) {
      ASSERT_TRUE(near(yp[r * d + col], ya[valid_rows[r] * d + col], ys))
          << r << "," << col;
      ASSERT_TRUE(near(dxp[r * d + col], dxa[valid_rows[r] * d + col], dxs))
          << r << "," << col;
    }
  }
  for (int i = 0; i < 14; ++i) {
    double scale = 1e-300;
    for (double v : a.g[i]) scale = std::max(scale, std::abs(v));
    for (size_t e = 0; e < a.g[i].size(); ++e) {
      ASSERT_TRUE(near(p.g[i][e], a.g[i][e], scale))
          << "parameter " << i << "[" << e << "]: " << p.g[i][e] << " vs "
          << a.g[i][e];
    }
  }
}

// The float layer (the fused kernel wherever it supports the scheme) against
// the double layer (reference), with the tolerance of
// MhaTest.FloatMatchesDouble.
TEST_P(MhaSchemeTest, FloatMatchesDouble) {
  const MhaShape s{2, 37, 32, 4};
  const SchemeLayerCase c = CaseFor(GetParam().name, s.length, true, {37, 20});
  const AttentionOptions& o = c.options;
  Rng rd(9), rf(9);
  SchemeLayer<double> ld(c, s, rd);
  SchemeLayer<float> lf(c, s, rf);
  const std::vector<double> xd = RandomVector(s.rows() * s.d_model, rd);
  const std::vector<float> xf(xd.begin(), xd.end());
  std::vector<double> yd(xd.size()), dxd(xd.size());
  std::vector<float> yf(xd.size()), dxf(xd.size());
  MhaCache<double> cd;
  MhaCache<float> cf;
  MhaScratch<double> sd;
  MhaScratch<float> sf;
  MultiHeadAttentionForward<double>(xd.data(), ld.Weights(), yd.data(), &cd, s,
                                    o, c.positions);
  MultiHeadAttentionForward<float>(xf.data(), lf.Weights(), yf.data(), &cf, s,
                                   o, c.positions);
  const std::vector<float> dyf(yd.begin(), yd.end());
  MultiHeadAttentionBackward<double>(xd.data(), ld.Weights(), cd, yd.data(),
                                     dxd.data(), ld.Grads(), &sd, s, o,
                                     c.positions);
  MultiHeadAttentionBackward<float>(xf.data(), lf.Weights(), cf, dyf.data(),
                                    dxf.data(), lf.Grads(), &sf, s, o,
                                    c.positions);
  auto check = [](const std::string& what, const auto& f,
                  const std::vector<double>& dd, double scale = 0) {
    for (double v : dd) scale = std::max(scale, std::abs(v));
    for (size_t i = 0; i < dd.size(); ++i) {
      ASSERT_NEAR(f[i], dd[i], 1e-4 * scale) << what << "[" << i << "]";
    }
  };
  check("y", yf, yd);
  check("dx", dxf, dxd);
  double dwk_scale = 0;
  for (double v : ld.g[2]) dwk_scale = std::max(dwk_scale, std::abs(v));
  for (int i = 0; i < 14; ++i) {
    // As in MhaTest.FloatMatchesDouble: the key bias's exact gradient is 0.
    check("param" + std::to_string(i), lf.g[i], ld.g[i],
          i == 3 ? dwk_scale : 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Schemes, MhaSchemeTest,
                         ::testing::ValuesIn(SchemeLayerCases(1)),
                         [](const auto& info) { return info.param.name; });

}  // namespace
}  // namespace relpos::nn

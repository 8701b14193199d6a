// Cross-attention (nn::CrossAttentionForward / Backward): gradients of x,
// the memory and every projection against finite differences in double,
// padded and packed (queries and keys of different lengths per sequence,
// sequences with no key, length groups), packed == padded, float (the fused
// kernel with Nq != Nk) against double, that cross-attention of x on itself
// is plain self-attention, and the argument checks.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "base/rng.h"
#include "model/nn/grad_check_test_util.h"
#include "model/nn/multi_head_attention.h"
#include "relpos/error.h"

namespace relpos::nn {
namespace {

using testing::CheckGradient;
using testing::Dot;
using testing::RandomVector;

constexpr int64_t kD = 8, kHeads = 2;

// The eight projection tensors: wq, bq, wk, bk, wv, bv, wo, bo.
template <typename T>
struct Projections {
  std::vector<std::vector<T>> w;
  MhaWeights<T> weights() const {
    return {w[0].data(), w[1].data(), w[2].data(), w[3].data(),
            w[4].data(), w[5].data(), w[6].data(), w[7].data()};
  }
};

Projections<double> RandomProjections(Rng& rng) {
  Projections<double> p;
  const double ws = 1.0 / std::sqrt(static_cast<double>(kD));
  for (int i = 0; i < 4; ++i) {
    p.w.push_back(RandomVector(kD * kD, rng, ws));
    p.w.push_back(RandomVector(kD, rng, 0.1));
  }
  return p;
}

// Plain attention over the memory: the options a decoder's cross-attention
// uses (no position term, not causal), with the padded layout's key lengths.
AttentionOptions CrossOptions(const std::vector<int64_t>& key_lengths) {
  AttentionOptions o;
  o.key_term = false;
  o.value_term = false;
  o.max_distance = 0;
  o.key_lengths = key_lengths;
  return o;
}

// Sequences: query lengths and key lengths (batch = their size), padded to
// nq and nk; packed or padded.
struct CrossCase {
  std::string name;
  std::vector<int64_t> q_lengths, k_lengths;
  int64_t nq, nk;
  bool packed;
};

std::vector<CrossCase> GradCases() {
  return {
      {"padded_nq_lt_nk", {4, 4, 4}, {6, 2, 0}, 4, 6, false},
      {"padded_nq_gt_nk", {7, 7}, {3, 1}, 7, 3, false},
      {"packed_uneven", {4, 1, 3, 0}, {6, 0, 5, 2}, 4, 6, true},
  };
}

struct Shapes {
  MhaShape q, k;
};

Shapes ShapesFor(const CrossCase& c) {
  const int64_t B = static_cast<int64_t>(c.q_lengths.size());
  return {{B, c.nq, kD, kHeads, c.packed ? c.q_lengths.data() : nullptr},
          {B, c.nk, kD, kHeads, c.packed ? c.k_lengths.data() : nullptr}};
}

class CrossGradTest : public ::testing::TestWithParam<CrossCase> {};

// loss = r . y + s . (something added to dmemory): the memory's gradient is
// ADDED to what dmemory holds, so it starts from a known `base` and the
// check subtracts it.
TEST_P(CrossGradTest, GradientsMatchFiniteDifferences) {
  const CrossCase& tc = GetParam();
  const Shapes sh = ShapesFor(tc);
  const AttentionOptions o = CrossOptions(tc.k_lengths);
  Rng rng(17);
  Projections<double> p = RandomProjections(rng);
  std::vector<double> x = RandomVector(sh.q.rows() * kD, rng);
  std::vector<double> m = RandomVector(sh.k.rows() * kD, rng);
  const std::vector<double> r = RandomVector(sh.q.rows() * kD, rng);
  MhaCache<double> cache;
  std::vector<double> y(sh.q.rows() * kD);
  auto loss = [&] {
    CrossAttentionForward<double>(x.data(), m.data(), p.weights(), y.data(),
                                  &cache, sh.q, sh.k, o);
    return Dot(r, y);
  };
  loss();
  for (double v : y) ASSERT_TRUE(std::isfinite(v));
  // A sequence with no key: its rows are exactly the output bias.
  for (size_t b = 0; b < tc.k_lengths.size(); ++b) {
    if (tc.k_lengths[b] != 0) continue;
    int64_t first = static_cast<int64_t>(b) * tc.nq, count = tc.nq;
    if (tc.packed) {
      first = 0;
      for (size_t i = 0; i < b; ++i) first += tc.q_lengths[i];
      count = tc.q_lengths[b];
    }
    for (int64_t n = 0; n < count; ++n) {
      for (int64_t c = 0; c < kD; ++c) {
        EXPECT_EQ(y[(first + n) * kD + c], p.w[7][c]);
      }
    }
  }
  std::vector<double> dx(x.size());
  const std::vector<double> base = RandomVector(m.size(), rng);
  std::vector<double> dm = base;
  std::vector<std::vector<double>> g;
  for (const auto& w : p.w) g.emplace_back(w.size(), -1.0);
  const MhaGrads<double> grads{g[0].data(), g[1].data(), g[2].data(),
                               g[3].data(), g[4].data(), g[5].data(),
                               g[6].data(), g[7].data()};
  MhaScratch<double> scratch;
  CrossAttentionBackward<double>(x.data(), m.data(), p.weights(), cache,
                                 r.data(), dx.data(), dm.data(), grads,
                                 &scratch, sh.q, sh.k, o);
  for (size_t i = 0; i < dm.size(); ++i) dm[i] -= base[i];
  CheckGradient("dx", &x, dx, loss, 80);
  CheckGradient("dmemory", &m, dm, loss, 80);
  const char* names[] = {"dwq", "dbq", "dwk", "dbk", "dwv", "dbv", "dwo", "dbo"};
  for (int i = 0; i < 8; ++i) CheckGradient(names[i], &p.w[i], g[i], loss);
}

INSTANTIATE_TEST_SUITE_P(Cases, CrossGradTest,
                         ::testing::ValuesIn(GradCases()),
                         [](const auto& info) { return info.param.name; });

// Forward and backward of one layout; the outputs at the rows it holds.
struct CrossRun {
  std::vector<double> y, dx, dm;
  std::vector<std::vector<double>> g;
  size_t q_size = 0, k_size = 0;
};

CrossRun RunCross(const Projections<double>& p, const MhaShape& qs,
                  const MhaShape& ks, const std::vector<double>& x,
                  const std::vector<double>& m, const std::vector<double>& dy,
                  const AttentionOptions& o) {
  CrossRun out;
  out.y.assign(qs.rows() * kD, -1.0);
  out.dx.assign(qs.rows() * kD, -1.0);
  out.dm.assign(ks.rows() * kD, 0.0);
  for (const auto& w : p.w) out.g.emplace_back(w.size(), -1.0);
  MhaCache<double> cache;
  MhaScratch<double> scratch;
  CrossAttentionForward<double>(x.data(), m.data(), p.weights(), out.y.data(),
                                &cache, qs, ks, o);
  const MhaGrads<double> g{out.g[0].data(), out.g[1].data(), out.g[2].data(),
                           out.g[3].data(), out.g[4].data(), out.g[5].data(),
                           out.g[6].data(), out.g[7].data()};
  CrossAttentionBackward<double>(x.data(), m.data(), p.weights(), cache,
                                 dy.data(), out.dx.data(), out.dm.data(), g,
                                 &scratch, qs, ks, o);
  out.q_size = cache.q.size();
  out.k_size = cache.k.size();
  return out;
}

// The valid rows of a padded [B * n, kD] buffer, packed.
std::vector<double> PackRows(const std::vector<double>& padded, int64_t n,
                             const std::vector<int64_t>& lengths) {
  std::vector<double> out;
  for (size_t b = 0; b < lengths.size(); ++b) {
    for (int64_t i = 0; i < lengths[b]; ++i) {
      const int64_t row = static_cast<int64_t>(b) * n + i;
      out.insert(out.end(), padded.begin() + row * kD,
                 padded.begin() + (row + 1) * kD);
    }
  }
  return out;
}

// The packed layout (only valid rows; length groups) computes exactly what
// the padded layout computes at the valid rows, and the same gradients when
// the padded query rows' dy is zero (in double every product sums in a
// fixed order and padding adds exact zeros). Returns the packed run.
CrossRun CheckPackedMatchesPadded(const std::vector<int64_t>& q_lengths,
                                  const std::vector<int64_t>& k_lengths,
                                  int64_t nq, int64_t nk) {
  const int64_t B = static_cast<int64_t>(q_lengths.size());
  const MhaShape q_padded{B, nq, kD, kHeads}, k_padded{B, nk, kD, kHeads};
  const MhaShape q_packed{B, nq, kD, kHeads, q_lengths.data()};
  const MhaShape k_packed{B, nk, kD, kHeads, k_lengths.data()};
  Rng rng(23);
  const Projections<double> p = RandomProjections(rng);
  const std::vector<double> x = RandomVector(B * nq * kD, rng);
  const std::vector<double> m = RandomVector(B * nk * kD, rng);
  std::vector<double> dy = RandomVector(B * nq * kD, rng);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t i = q_lengths[b]; i < nq; ++i) {
      std::fill_n(dy.begin() + (b * nq + i) * kD, kD, 0.0);
    }
  }
  const CrossRun a =
      RunCross(p, q_padded, k_padded, x, m, dy, CrossOptions(k_lengths));
  const CrossRun c =
      RunCross(p, q_packed, k_packed, PackRows(x, nq, q_lengths),
               PackRows(m, nk, k_lengths), PackRows(dy, nq, q_lengths),
               CrossOptions({}));
  EXPECT_EQ(c.y, PackRows(a.y, nq, q_lengths));
  EXPECT_EQ(c.dx, PackRows(a.dx, nq, q_lengths));
  EXPECT_EQ(c.dm, PackRows(a.dm, nk, k_lengths));
  // Padded memory rows get exactly zero gradient.
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t j = k_lengths[b] * kD; j < nk * kD; ++j) {
      EXPECT_EQ(a.dm[b * nk * kD + j], 0.0);
    }
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c.g[i], a.g[i]) << "tensor " << i;
  return c;
}

TEST(CrossAttentionTest, PackedRowsMatchPaddedRows) {
  CheckPackedMatchesPadded({4, 1, 3, 0}, {6, 0, 5, 2}, 4, 6);
}

// Spread-out lengths split the batch into length groups, each padded to
// its own longest query and key: less than the padded B H N dh.
TEST(CrossAttentionTest, PackedLengthGroupsMatchPaddedRows) {
  const std::vector<int64_t> q = {30, 2, 28, 1, 0, 9, 29, 3};
  const std::vector<int64_t> k = {12, 40, 3, 1, 7, 38, 0, 2};
  const CrossRun c = CheckPackedMatchesPadded(q, k, 30, 40);
  EXPECT_LT(c.q_size, q.size() * kHeads * 30 * (kD / kHeads));
  EXPECT_LT(c.k_size, k.size() * kHeads * 40 * (kD / kHeads));
}

// Cross-attention of x over itself is the self-attention layer with no
// position term: the same projections and the same attention call.
TEST(CrossAttentionTest, OverItselfIsPlainSelfAttention) {
  const std::vector<int64_t> lengths = {5, 2, 4};
  const MhaShape s{3, 5, kD, kHeads, lengths.data()};
  Rng rng(5);
  const Projections<double> p = RandomProjections(rng);
  const std::vector<double> x = RandomVector(s.rows() * kD, rng);
  const std::vector<double> dy = RandomVector(s.rows() * kD, rng);
  const AttentionOptions o = CrossOptions({});
  const CrossRun c = RunCross(p, s, s, x, x, dy, o);
  std::vector<double> y(x.size()), dx(x.size());
  std::vector<std::vector<double>> g;
  for (const auto& w : p.w) g.emplace_back(w.size());
  MhaCache<double> cache;
  MhaScratch<double> scratch;
  MultiHeadAttentionForward<double>(x.data(), p.weights(), y.data(), &cache, s,
                                    o);
  MultiHeadAttentionBackward<double>(
      x.data(), p.weights(), cache, dy.data(), dx.data(),
      {g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(),
       g[5].data(), g[6].data(), g[7].data()},
      &scratch, s, o);
  EXPECT_EQ(c.y, y);
  for (size_t i = 0; i < dx.size(); ++i) {
    // Self-attention adds the q, k and v paths into one dx; here they are
    // split between dx and dmemory: equal up to the order of two additions.
    EXPECT_NEAR(c.dx[i] + c.dm[i], dx[i], 1e-14 * (1 + std::abs(dx[i])));
  }
  for (int i = 0; i < 8; ++i) EXPECT_EQ(c.g[i], g[i]) << "tensor " << i;
}

// Float (the fused kernel, Nq != Nk, key lengths) against double. Float
// rounding through two GEMMs (K = 32) and a softmax keeps relative errors
// near sqrt(K) eps_float ~ 1e-6; 1e-4 of the largest entry leaves room for
// the kernel's own rounding.
TEST(CrossAttentionTest, FloatMatchesDouble) {
  const int64_t d = 32, H = 4, B = 3, nq = 9, nk = 23;
  const std::vector<int64_t> ql = {9, 4, 7}, kl = {23, 0, 11};
  const MhaShape qs{B, nq, d, H, ql.data()}, ks{B, nk, d, H, kl.data()};
  Rng rng(31);
  std::vector<std::vector<double>> wd;
  for (int i = 0; i < 4; ++i) {
    wd.push_back(RandomVector(d * d, rng, 1.0 / std::sqrt(double(d))));
    wd.push_back(RandomVector(d, rng, 0.1));
  }
  const std::vector<double> xd = RandomVector(qs.rows() * d, rng);
  const std::vector<double> md = RandomVector(ks.rows() * d, rng);
  const std::vector<double> dyd = RandomVector(qs.rows() * d, rng);
  auto to_float = [](const std::vector<double>& v) {
    return std::vector<float>(v.begin(), v.end());
  };
  std::vector<std::vector<float>> wf;
  for (const auto& w : wd) wf.push_back(to_float(w));
  auto run = [&](auto zero, const auto& w, const auto& x, const auto& m,
                 const auto& dy) {
    using T = decltype(zero);
    const MhaWeights<T> weights{w[0].data(), w[1].data(), w[2].data(),
                                w[3].data(), w[4].data(), w[5].data(),
                                w[6].data(), w[7].data()};
    std::vector<std::vector<T>> out(3);
    out[0].resize(qs.rows() * d);
    out[1].resize(qs.rows() * d);
    out[2].assign(ks.rows() * d, T(0));
    std::vector<std::vector<T>> g;
    for (const auto& wi : w) g.emplace_back(wi.size());
    MhaCache<T> cache;
    MhaScratch<T> scratch;
    CrossAttentionForward<T>(x.data(), m.data(), weights, out[0].data(), &cache,
                             qs, ks, CrossOptions({}));
    CrossAttentionBackward<T>(
        x.data(), m.data(), weights, cache, dy.data(), out[1].data(),
        out[2].data(),
        {g[0].data(), g[1].data(), g[2].data(), g[3].data(), g[4].data(),
         g[5].data(), g[6].data(), g[7].data()},
        &scratch, qs, ks, CrossOptions({}));
    for (auto& gi : g) out.push_back(std::move(gi));
    return out;
  };
  const auto d_out = run(0.0, wd, xd, md, dyd);
  const auto f_out =
      run(0.0f, wf, to_float(xd), to_float(md), to_float(dyd));
  // Outputs: y, dx, dmemory, then wq, bq, wk, bk, ... The key bias's
  // gradient is zero in exact arithmetic (q . bk is the same for every key,
  // and softmax ignores a constant), so it is held to the key weight's scale.
  auto scale_of = [&](size_t t) {
    double scale = 1e-30;
    for (double v : d_out[t]) scale = std::max(scale, std::abs(v));
    return scale;
  };
  for (size_t t = 0; t < d_out.size(); ++t) {
    const double scale = scale_of(t == 6 ? 5 : t);
    for (size_t i = 0; i < d_out[t].size(); ++i) {
      ASSERT_NEAR(f_out[t][i], d_out[t][i], 1e-4 * scale)
          << "output " << t << "[" << i << "]";
    }
  }
}

TEST(CrossAttentionTest, RefusesPositionTermsAndMismatchedShapes) {
  const std::vector<int64_t> ql = {2}, kl = {3};
  const MhaShape qs{1, 2, kD, kHeads, ql.data()}, ks{1, 3, kD, kHeads,
                                                     kl.data()};
  Rng rng(1);
  const Projections<double> p = RandomProjections(rng);
  const std::vector<double> x = RandomVector(2 * kD, rng);
  const std::vector<double> m = RandomVector(3 * kD, rng);
  std::vector<double> y(2 * kD);
  MhaCache<double> cache;
  AttentionOptions relative = CrossOptions({});
  relative.key_term = true;
  relative.max_distance = 2;
  EXPECT_THROW(CrossAttentionForward<double>(x.data(), m.data(), p.weights(),
                                             y.data(), &cache, qs, ks,
                                             relative),
               InvalidArgument);
  const MhaShape padded_keys{1, 3, kD, kHeads};
  EXPECT_THROW(CrossAttentionForward<double>(x.data(), m.data(), p.weights(),
                                             y.data(), &cache, qs, padded_keys,
                                             CrossOptions({})),
               InvalidArgument);
  const std::vector<int64_t> two = {3, 3};
  const MhaShape wrong_batch{2, 3, kD, kHeads, two.data()};
  EXPECT_THROW(CrossAttentionForward<double>(x.data(), m.data(), p.weights(),
                                             y.data(), &cache, qs, wrong_batch,
                                             CrossOptions({})),
               InvalidArgument);
}

}  // namespace
}  // namespace relpos::nn

// Gradient checks (central differences in double, see grad_check_test_util.h)
// and behaviour tests for the small layers in src/model/nn/.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/rng.h"
#include "hwy/targets.h"
#include "model/nn/cross_entropy.h"
#include "model/nn/dropout.h"
#include "model/nn/embedding.h"
#include "model/nn/gelu.h"
#include "model/nn/grad_check_test_util.h"
#include "model/nn/layer_norm.h"
#include "model/nn/linear.h"
#include "model/nn/matmul.h"
#include "model/nn/position_encoding.h"

namespace relpos::nn {
namespace {

using testing::CheckGradient;
using testing::Dot;
using testing::RandomVector;

TEST(MatmulTest, FloatSgemmMatchesDoubleLoopsForEveryTransposition) {
  // The float path is oneDNN, the double path a loop nest: agreement to
  // float rounding (|error| <= K eps_float |a||b| per entry, K = 37) checks
  // the row-major/transpose plumbing of both.
  Rng rng(1);
  const int64_t m = 5, n = 7, k = 37;
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    for (Trans tb : {Trans::kNo, Trans::kYes}) {
      const std::vector<double> a = RandomVector(m * k, rng);
      const std::vector<double> b = RandomVector(k * n, rng);
      const std::vector<double> c0 = RandomVector(m * n, rng);
      std::vector<double> c = c0;
      std::vector<float> af(a.begin(), a.end()), bf(b.begin(), b.end()),
          cf(c.begin(), c.end());
      const int64_t lda = ta == Trans::kNo ? k : m;
      const int64_t ldb = tb == Trans::kNo ? n : k;
      Matmul<double>(ta, tb, m, n, k, 0.5, a.data(), lda, b.data(), ldb, 2.0,
                     c.data(), n);
      Matmul<float>(ta, tb, m, n, k, 0.5f, af.data(), lda, bf.data(), ldb, 2.0f,
                    cf.data(), n);
      for (int64_t i = 0; i < m; ++i) {
        for (int64_t j = 0; j < n; ++j) {
          // Also recompute the entry from the definition (checks the double
          // path's indexing) and bound the float error by the classic
          // (K + 2) eps_float * sum |terms| (inputs rounded to float too).
          double exact = 0, magnitude = 0;
          for (int64_t p = 0; p < k; ++p) {
            const double av =
                ta == Trans::kNo ? a[i * lda + p] : a[p * lda + i];
            const double bv =
                tb == Trans::kNo ? b[p * ldb + j] : b[j * ldb + p];
            exact += 0.5 * av * bv;
            magnitude += 0.5 * std::abs(av * bv);
          }
          exact += 2.0 * c0[i * n + j];
          magnitude += 2.0 * std::abs(c0[i * n + j]);
          EXPECT_NEAR(c[i * n + j], exact, 1e-12 * magnitude);
          EXPECT_NEAR(cf[i * n + j], exact, (k + 2) * 6e-8 * magnitude)
              << i << "," << j;
        }
      }
    }
  }
  // Direct check of one entry of the double path against a hand sum.
  std::vector<double> a = {1, 2, 3, 4}, b = {5, 6, 7, 8}, c(4, 99.0);
  Matmul<double>(Trans::kNo, Trans::kNo, 2, 2, 2, 1.0, a.data(), 2, b.data(), 2,
                 0.0, c.data(), 2);
  EXPECT_EQ(c, (std::vector<double>{19, 22, 43, 50}));
}

TEST(MatmulTest, ColumnSumIsIndependentOfThreadCount) {
  Rng rng(2);
  const int64_t rows = 301, cols = 130;
  std::vector<float> x(rows * cols);
  for (float& v : x) v = static_cast<float>(rng.Normal());
  std::vector<float> one(cols), two(cols);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  ColumnSum<float>(x.data(), rows, cols, one.data());
  omp_set_num_threads(2);
  ColumnSum<float>(x.data(), rows, cols, two.data());
  omp_set_num_threads(saved);
  EXPECT_EQ(one, two);
  // Recursive float summation: |error| <= (rows - 1) eps_float sum |x|.
  double expect = 0, magnitude = 0;
  for (int64_t r = 0; r < rows; ++r) {
    expect += x[r * cols + 129];
    magnitude += std::abs(x[r * cols + 129]);
  }
  EXPECT_NEAR(one[129], expect, rows * 6e-8 * magnitude);
}

TEST(LinearTest, GradientsMatchFiniteDifferences) {
  Rng rng(3);
  const LinearShape s{3, 5, 4};
  std::vector<double> x = RandomVector(s.rows * s.in, rng);
  std::vector<double> w = RandomVector(s.out * s.in, rng);
  std::vector<double> b = RandomVector(s.out, rng);
  const std::vector<double> r = RandomVector(s.rows * s.out, rng);
  auto loss = [&] {
    std::vector<double> y(s.rows * s.out);
    LinearForward<double>(x.data(), w.data(), b.data(), y.data(), s);
    return Dot(r, y);
  };
  std::vector<double> dx(x.size(), 7.0), dw(w.size(), 7.0), db(b.size(), 7.0);
  LinearBackward<double>(x.data(), w.data(), r.data(), dx.data(), dw.data(),
                         db.data(), s);
  CheckGradient("dx", &x, dx, loss);
  CheckGradient("dw", &w, dw, loss);
  CheckGradient("db", &b, db, loss);

  // accumulate_dx adds to what is there.
  std::vector<double> dx2(x.size(), 1.0);
  LinearBackward<double>(x.data(), w.data(), r.data(), dx2.data(), dw.data(),
                         db.data(), s, {.accumulate_dx = true});
  for (size_t i = 0; i < dx.size(); ++i)
    EXPECT_NEAR(dx2[i], dx[i] + 1.0, 1e-12);

  // No bias: y = x W^T exactly.
  std::vector<double> y(s.rows * s.out);
  LinearForward<double>(x.data(), w.data(), nullptr, y.data(), s);
  double y00 = 0;
  for (int64_t i = 0; i < s.in; ++i) y00 += x[i] * w[i];
  EXPECT_NEAR(y[0], y00, 1e-12);
}

TEST(LayerNormTest, GradientsMatchFiniteDifferences) {
  Rng rng(4);
  const LayerNormShape s{3, 7};
  std::vector<double> x = RandomVector(s.rows * s.dim, rng, 2.0);
  std::vector<double> g = RandomVector(s.dim, rng);
  std::vector<double> b = RandomVector(s.dim, rng);
  const std::vector<double> r = RandomVector(s.rows * s.dim, rng);
  std::vector<double> mean(s.rows), rstd(s.rows), y(x.size());
  auto loss = [&] {
    LayerNormForward<double>(x.data(), g.data(), b.data(), y.data(),
                             mean.data(), rstd.data(), s);
    return Dot(r, y);
  };
  loss();
  // Forward: every row of (y - beta) / gamma has mean 0 and variance
  // var / (var + eps) (just under 1).
  for (int64_t row = 0; row < s.rows; ++row) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < s.dim; ++c) m += (y[row * s.dim + c] - b[c]) / g[c];
    m /= s.dim;
    for (int64_t c = 0; c < s.dim; ++c) {
      const double z = (y[row * s.dim + c] - b[c]) / g[c] - m;
      v += z * z;
    }
    v /= s.dim;
    EXPECT_NEAR(m, 0.0, 1e-12);
    const double var = 1.0 / (rstd[row] * rstd[row]) - s.eps;
    EXPECT_NEAR(v, var / (var + s.eps), 1e-12);
  }
  std::vector<double> dx(x.size()), dg(g.size()), db(b.size());
  LayerNormBackward<double>(x.data(), g.data(), mean.data(), rstd.data(),
                            r.data(), dx.data(), dg.data(), db.data(), s);
  CheckGradient("dx", &x, dx, loss);
  CheckGradient("dgamma", &g, dg, loss);
  CheckGradient("dbeta", &b, db, loss);

  std::vector<double> dx2(x.size(), -2.0);
  LayerNormBackward<double>(x.data(), g.data(), mean.data(), rstd.data(),
                            r.data(), dx2.data(), dg.data(), db.data(), s,
                            {.accumulate_dx = true});
  for (size_t i = 0; i < dx.size(); ++i)
    EXPECT_NEAR(dx2[i], dx[i] - 2.0, 1e-12);
}

TEST(LayerNormTest, ConstantRowGivesBetaAndNoNaN) {
  // A zero-variance row (e.g. an all-zero padding row): rstd = 1/sqrt(eps),
  // y = beta, finite gradients.
  const LayerNormShape s{1, 4};
  std::vector<float> x(4, 3.0f), g = {1, 2, 3, 4}, b = {0.5f, 0, -1, 2};
  std::vector<float> y(4), mean(1), rstd(1), dy = {1, -1, 2, 0.5f}, dx(4),
                                             dg(4), db(4);
  LayerNormForward<float>(x.data(), g.data(), b.data(), y.data(), mean.data(),
                          rstd.data(), s);
  for (int c = 0; c < 4; ++c) EXPECT_FLOAT_EQ(y[c], b[c]);
  LayerNormBackward<float>(x.data(), g.data(), mean.data(), rstd.data(),
                           dy.data(), dx.data(), dg.data(), db.data(), s);
  for (int c = 0; c < 4; ++c) EXPECT_TRUE(std::isfinite(dx[c]));
}

// The row-blocked LayerNorm (several rows' statistics accumulated side by
// side) gives each row exactly what normalising it alone gives, and the
// fused residual form exactly LayerNorm(x + branch), on sizes that leave a
// partial last block (rows = 21) and an odd dimension.
TEST(LayerNormTest, BlockedRowsAndFusedResidualMatchRowByRow) {
  const LayerNormShape s{21, 37};
  Rng rng(5);
  auto random = [&](int64_t n, double scale) {
    std::vector<float> v(n);
    for (float& e : v) e = static_cast<float>(scale * rng.Normal());
    return v;
  };
  const std::vector<float> x = random(s.rows * s.dim, 3.0),
                           branch = random(s.rows * s.dim, 1.0),
                           g = random(s.dim, 1.0), b = random(s.dim, 1.0),
                           dy = random(s.rows * s.dim, 1.0);
  std::vector<float> h(x.size()), y(x.size()), mean(s.rows), rstd(s.rows);
  AddLayerNormForward<float>(x.data(), branch.data(), g.data(), b.data(),
                             h.data(), y.data(), mean.data(), rstd.data(), s);
  std::vector<float> dx(x.size(), 0.5f), dg(s.dim), db(s.dim);
  LayerNormBackward<float>(h.data(), g.data(), mean.data(), rstd.data(),
                           dy.data(), dx.data(), dg.data(), db.data(), s,
                           {.accumulate_dx = true});
  for (int64_t r = 0; r < s.rows; ++r) {
    const LayerNormShape one{1, s.dim};
    const int64_t o = r * s.dim;
    std::vector<float> hr(s.dim), yr(s.dim), dxr(s.dim, 0.5f), dgr(s.dim),
        dbr(s.dim);
    float m = 0, rs = 0;
    for (int64_t c = 0; c < s.dim; ++c) hr[c] = x[o + c] + branch[o + c];
    LayerNormForward<float>(hr.data(), g.data(), b.data(), yr.data(), &m, &rs,
                            one);
    LayerNormBackward<float>(hr.data(), g.data(), &m, &rs, dy.data() + o,
                             dxr.data(), dgr.data(), dbr.data(), one,
                             {.accumulate_dx = true});
    ASSERT_EQ(mean[r], m) << r;
    ASSERT_EQ(rstd[r], rs) << r;
    for (int64_t c = 0; c < s.dim; ++c) {
      ASSERT_EQ(h[o + c], hr[c]) << r << "," << c;
      ASSERT_EQ(y[o + c], yr[c]) << r << "," << c;
      ASSERT_EQ(dx[o + c], dxr[c]) << r << "," << c;
    }
  }
}

TEST(GeluTest, ValuesAndGradient) {
  // gelu(0) = 0, gelu(1) = Phi(1) = 0.8413447460685429, gelu(-1) = -0.1586...
  std::vector<double> x = {-4, -2.5, -1, -0.3, 0, 0.2, 1, 1.7, 3, 5};
  std::vector<double> y(x.size());
  GeluForward<double>(x.data(), y.data(), x.size());
  EXPECT_EQ(y[4], 0.0);
  EXPECT_NEAR(y[6], 0.8413447460685429, 1e-15);
  EXPECT_NEAR(y[2], -0.15865525393145707, 1e-15);
  Rng rng(5);
  const std::vector<double> r = RandomVector(x.size(), rng);
  auto loss = [&] {
    std::vector<double> out(x.size());
    GeluForward<double>(x.data(), out.data(), x.size());
    return Dot(r, out);
  };
  std::vector<double> dx(x.size());
  GeluBackward<double>(x.data(), r.data(), dx.data(), x.size());
  CheckGradient("dx", &x, dx, loss);
}

TEST(GeluTest, FloatSimdMatchesExactDouble) {
  // The float path's erf has |error| <= 1.5e-7 (Abramowitz-Stegun 7.1.26)
  // plus float roundings (eps 6e-8) in t, the five-term polynomial, exp and
  // the final combination, ~10 of them on values <= 1:
  // |Phi error| <= 0.5 (1.5e-7 + 10 eps) ~ 4e-7 (measured max: 2.9e-7 over
  // 2e6 points in [-15, 15] on AVX2). Hence
  //   |gelu error|  <= 4e-7 |x| + eps |y|
  //   |dgelu error| <= 4e-7 + |x| |phi error| + eps, phi error ~ 4 eps phi.
  // n = 20011 (prime): exercises the vector tail and the parallel chunks.
  const int64_t n = 20011;
  std::vector<float> x(n), y(n), dx(n), ones(n, 1.0f);
  for (int64_t i = 0; i < n; ++i) x[i] = -15.0f + 30.0f * i / (n - 1);
  x[0] = 0.0f;
  x[1] = -0.0f;
  x[2] = 1e-30f;
  x[3] = -40.0f;
  x[4] = 40.0f;
  GeluForward<float>(x.data(), y.data(), n);
  GeluBackward<float>(x.data(), ones.data(), dx.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    const double v = x[i];
    const double cdf = 0.5 * (1.0 + std::erf(v * M_SQRT1_2));
    const double pdf = std::exp(-0.5 * v * v) / std::sqrt(2.0 * M_PI);
    const double want = v * cdf, dwant = cdf + v * pdf;
    ASSERT_NEAR(y[i], want, 4e-7 * std::abs(v) + 6e-8 * std::abs(want))
        << "x = " << v;
    ASSERT_NEAR(dx[i], dwant, 4e-7 + 3e-7 * std::abs(v) * pdf + 6e-8)
        << "x = " << v;
  }
  EXPECT_EQ(y[0], 0.0f);
  EXPECT_EQ(y[3], -0.0f);  // far left: exactly zero, not a tiny negative
  EXPECT_EQ(y[4], 40.0f);
}

TEST(EmbeddingTest, GradientsWithRepeatedAndPaddingTokens) {
  Rng rng(6);
  const EmbeddingShape s{6, 4, 3};
  const std::vector<int32_t> tokens = {2, 0, 2, -1, 3, 2};
  std::vector<double> table = RandomVector(s.vocab * s.dim, rng);
  const std::vector<double> r = RandomVector(s.rows * s.dim, rng);
  std::vector<double> out(s.rows * s.dim);
  auto loss = [&] {
    EmbeddingForward<double>(tokens.data(), table.data(), out.data(), s);
    return Dot(r, out);
  };
  loss();
  for (int c = 0; c < 3; ++c) {
    EXPECT_EQ(out[3 * 3 + c], 0.0);               // padding slot
    EXPECT_EQ(out[4 * 3 + c], table[3 * 3 + c]);  // token 3
  }
  std::vector<double> dt(table.size(), 5.0);
  EmbeddingBackward<double>(tokens.data(), r.data(), dt.data(), s);
  CheckGradient("dtable", &table, dt, loss);
  for (int c = 0; c < 3; ++c) EXPECT_EQ(dt[1 * 3 + c], 0.0);  // unused id 1
  // accumulate: adds the same gradient to what the table held.
  std::vector<double> acc(table.size(), 5.0);
  EmbeddingBackward<double>(tokens.data(), r.data(), acc.data(), s,
                            {.accumulate = true});
  // (The additions start from 5 instead of 0: equal up to rounding.)
  for (size_t i = 0; i < acc.size(); ++i) {
    EXPECT_NEAR(acc[i], dt[i] + 5.0, 1e-14);
  }
}

TEST(PositionEncodingTest, AddPositionGradient) {
  Rng rng(7);
  const PositionShape s{3, 4, 5};
  std::vector<double> table = RandomVector(6 * s.dim, rng);  // longer than 4
  const std::vector<double> x0 = RandomVector(s.batch * s.length * s.dim, rng);
  const std::vector<double> r = RandomVector(x0.size(), rng);
  auto loss = [&] {
    std::vector<double> x = x0;
    AddPositionForward<double>(table.data(), x.data(), s);
    return Dot(r, x);
  };
  std::vector<double> dt(table.size(), 0.0);
  AddPositionBackward<double>(r.data(), dt.data(), s);
  CheckGradient("dtable", &table, dt, loss);
}

TEST(DropoutTest, KeepRateScaleAndBackwardMask) {
  const int64_t n = 100000;
  const DropoutOptions o{0.3, 1234};
  std::vector<float> x(n, 1.0f), y(n), dx(n);
  DropoutForward<float>(x.data(), y.data(), n, o);
  int64_t kept = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (y[i] != 0.0f) {
      ++kept;
      EXPECT_FLOAT_EQ(y[i], 1.0f / 0.7f);
    }
  }
  // Binomial(n, 0.7): std = sqrt(n * 0.7 * 0.3) ~ 145; allow 6 sigma.
  EXPECT_NEAR(static_cast<double>(kept), 0.7 * n, 6 * 145.0);
  // The backward pass applies the same mask (y = x * mask * scale is linear).
  DropoutBackward<float>(x.data(), dx.data(), n, o);
  EXPECT_EQ(dx, y);
  // Independent of thread count.
  std::vector<float> y1(n);
  const int saved = omp_get_max_threads();
  omp_set_num_threads(1);
  DropoutForward<float>(x.data(), y1.data(), n, o);
  omp_set_num_threads(saved);
  EXPECT_EQ(y1, y);
  // Another seed gives another mask; p = 0 is the identity.
  DropoutForward<float>(x.data(), y1.data(), n, {0.3, 1235});
  EXPECT_NE(y1, y);
  DropoutForward<float>(x.data(), y1.data(), n, {0.0, 1});
  EXPECT_EQ(y1, x);
}

TEST(DropoutTest, SimdMaskEqualsTheScalarDefinitionAtEverySize) {
  // The float path hashes a vector of indices at a time; every element
  // must get exactly DropoutKeep's mask and in * scale, whatever the size
  // (tails), the index offset (packed rows) and p.
  for (const double p : {1e-12, 0.1, 0.5, 0.999}) {
    for (const int64_t n : {int64_t{1}, int64_t{7}, int64_t{16}, int64_t{17},
                            int64_t{63}, int64_t{4096 * 3 + 5}}) {
      const DropoutOptions o{p, 0x9e3779b9ULL * 77, 12345};
      std::vector<float> x(n), y(n);
      std::vector<double> xd(n), yd(n);
      for (int64_t i = 0; i < n; ++i) {
        x[i] = static_cast<float>(i % 13) - 6.25f;
        xd[i] = x[i];
      }
      DropoutForward<float>(x.data(), y.data(), n, o);
      DropoutForward<double>(xd.data(), yd.data(), n, o);
      const float scale = static_cast<float>(1.0 / (1.0 - p));
      for (int64_t i = 0; i < n; ++i) {
        const bool keep = DropoutKeep(o.seed, o.index_offset + i, p);
        ASSERT_EQ(y[i], keep ? x[i] * scale : 0.0f)
            << "p " << p << " n " << n << " i " << i;
        ASSERT_EQ(yd[i], keep ? xd[i] * (1.0 / (1.0 - p)) : 0.0)
            << "p " << p << " n " << n << " i " << i;
      }
    }
  }
}

TEST(CrossEntropyTest, LossPredictionsAndGradient) {
  Rng rng(8);
  const CrossEntropyShape s{4, 5};
  std::vector<double> logits = RandomVector(s.rows * s.vocab, rng, 2.0);
  const std::vector<int32_t> targets = {3, -1, 0, 4};
  std::vector<int32_t> pred(s.rows);
  const CrossEntropyResult res = CrossEntropyForward<double>(
      logits.data(), targets.data(), pred.data(), s);
  EXPECT_EQ(res.count, 3);
  double expect = 0;
  int64_t correct = 0;
  for (int64_t r = 0; r < s.rows; ++r) {
    double mx = -1e300;
    int32_t arg = 0;
    double sum = 0;
    for (int64_t v = 0; v < s.vocab; ++v) {
      if (logits[r * s.vocab + v] > mx) {
        mx = logits[r * s.vocab + v];
        arg = static_cast<int32_t>(v);
      }
    }
    for (int64_t v = 0; v < s.vocab; ++v)
      sum += std::exp(logits[r * s.vocab + v]);
    EXPECT_EQ(pred[r], arg);
    if (targets[r] < 0) continue;
    expect += std::log(sum) - logits[r * s.vocab + targets[r]];
    correct += arg == targets[r];
  }
  EXPECT_NEAR(res.loss_sum, expect, 1e-12);
  EXPECT_EQ(res.correct, correct);

  auto loss = [&] {
    return 0.25 * CrossEntropyForward<double>(logits.data(), targets.data(),
                                              nullptr, s)
                      .loss_sum;
  };
  std::vector<double> d(logits.size(), 9.0);
  CrossEntropyBackward<double>(logits.data(), targets.data(), 0.25, d.data(),
                               s);
  CheckGradient("dlogits", &logits, d, loss);
  for (int64_t v = 0; v < s.vocab; ++v) EXPECT_EQ(d[1 * s.vocab + v], 0.0);
}

// Label smoothing against PyTorch 2.15 (double):
//   z = torch.tensor([[0.5, -1.25, 2.0, 0.0, 0.75], [1.0] * 5,
//                     [-0.5, 0.25, 0.0, 3.0, -2.0]], dtype=torch.float64,
//                    requires_grad=True)
//   l = F.cross_entropy(z, torch.tensor([2, -1, 4]), ignore_index=-1,
//                       label_smoothing=0.1); l.backward()
// gives l = 2.8031736887140335 and the z.grad below (the mean over the two
// counted rows, so scale = 1/2). The plain loss_sum stays the unsmoothed
// cross-entropy, and the gradient matches finite differences.
TEST(CrossEntropyTest, LabelSmoothingMatchesPyTorch) {
  const CrossEntropyShape s{3, 5};
  std::vector<double> logits = {0.5, -1.25, 2.0, 0.0, 0.75, 1, 1, 1, 1, 1,
                                -0.5, 0.25, 0.0, 3.0, -2.0};
  const std::vector<int32_t> targets = {2, -1, 4};
  const CrossEntropyOptions o{.label_smoothing = 0.1};
  const CrossEntropyResult res = CrossEntropyForward<double>(
      logits.data(), targets.data(), nullptr, s, o);
  ASSERT_EQ(res.count, 2);
  EXPECT_NEAR(res.smoothed_sum / 2, 2.8031736887140335, 1e-14);
  const CrossEntropyResult plain =
      CrossEntropyForward<double>(logits.data(), targets.data(), nullptr, s);
  EXPECT_EQ(res.loss_sum, plain.loss_sum);
  EXPECT_EQ(plain.smoothed_sum, plain.loss_sum);
  const std::vector<double> torch_grad = {
      0.05626010271430212,   0.0015142793420958207, -0.16304282186583474,
      0.03018878381193251,   0.07507965599750432,   0, 0, 0, 0, 0,
      0.0031218774601520158, 0.017779014801131296,  0.011634318480073203,
      0.4245369026395116,    -0.45707211338086823};
  std::vector<double> d(logits.size(), 9.0);
  CrossEntropyBackward<double>(logits.data(), targets.data(), 0.5, d.data(), s,
                               o);
  for (size_t i = 0; i < d.size(); ++i) EXPECT_NEAR(d[i], torch_grad[i], 1e-15);
  auto loss = [&] {
    return 0.5 * CrossEntropyForward<double>(logits.data(), targets.data(),
                                             nullptr, s, o)
                     .smoothed_sum;
  };
  CheckGradient("dlogits", &logits, d, loss);
}

TEST(CrossEntropyTest, FloatSimdMatchesDoubleAtAwkwardVocabularies) {
  // The float path computes e = exp(z - max) in float (Highway's Exp, 1 ulp)
  // after the float subtraction z - max (rounding <= 2^-24 |z - max|), sums
  // e in double, and forms scale (e / sum - eps / V) with one fused
  // multiply-add and a multiply. So per row, with gap = max_v |z_v - max|:
  //   |lse_f - lse| <= (gap + 2) 2^-24,  and normwise over the row
  //   ||d_f - d|| <= (gap + 8) 2^-24 ||d||   (+ eps / V's float rounding).
  // Checked with a margin of 2 against the double path, on vocabularies that
  // leave every SIMD tail and on rows offset by +-3000 (large logits).
  Rng rng(11);
  const double eps24 = std::ldexp(1.0, -24);
  for (const int64_t vocab : {int64_t{1}, int64_t{5}, int64_t{17},
                              int64_t{8003}}) {
    for (const double smoothing : {0.0, 0.1}) {
      const CrossEntropyShape s{6, vocab};
      std::vector<float> logits(s.rows * vocab);
      std::vector<int32_t> targets(s.rows);
      for (int64_t r = 0; r < s.rows; ++r) {
        const double offset = r == 2 ? 3000.0 : r == 3 ? -3000.0 : 0.0;
        for (int64_t v = 0; v < vocab; ++v) {
          logits[r * vocab + v] =
              static_cast<float>(offset + 4.0 * rng.Normal());
        }
        targets[r] = r == 4 ? -1 : static_cast<int32_t>(rng.Below(vocab));
      }
      const std::vector<double> logits_d(logits.begin(), logits.end());
      const CrossEntropyOptions o{.label_smoothing = smoothing};
      std::vector<int32_t> pred_f(s.rows), pred_d(s.rows);
      const CrossEntropyResult f = CrossEntropyForward<float>(
          logits.data(), targets.data(), pred_f.data(), s, o);
      const CrossEntropyResult d = CrossEntropyForward<double>(
          logits_d.data(), targets.data(), pred_d.data(), s, o);
      EXPECT_EQ(pred_f, pred_d);
      EXPECT_EQ(f.count, d.count);
      EXPECT_EQ(f.correct, d.correct);
      std::vector<float> grad_f(logits.size());
      std::vector<double> grad_d(logits.size());
      CrossEntropyBackward<float>(logits.data(), targets.data(), 0.5f,
                                  grad_f.data(), s, o);
      CrossEntropyBackward<double>(logits_d.data(), targets.data(), 0.5,
                                   grad_d.data(), s, o);
      double loss_bound = 0.0;
      for (int64_t r = 0; r < s.rows; ++r) {
        const double* row = logits_d.data() + r * vocab;
        double mx = row[0], mn = row[0];
        for (int64_t v = 0; v < vocab; ++v) {
          mx = std::max(mx, row[v]);
          mn = std::min(mn, row[v]);
        }
        const double gap = mx - mn;
        if (targets[r] >= 0) loss_bound += 2 * (gap + 2) * eps24;
        double diff = 0.0, ref = 0.0;
        for (int64_t v = 0; v < vocab; ++v) {
          const double e = grad_f[r * vocab + v] - grad_d[r * vocab + v];
          diff += e * e;
          ref += grad_d[r * vocab + v] * grad_d[r * vocab + v];
        }
        EXPECT_LE(std::sqrt(diff),
                  2 * (gap + 8) * eps24 * std::sqrt(ref) + 1e-12)
            << "vocab " << vocab << " row " << r;
      }
      EXPECT_NEAR(f.loss_sum, d.loss_sum, loss_bound + 1e-12) << vocab;
      EXPECT_NEAR(f.smoothed_sum, d.smoothed_sum, loss_bound + 1e-9) << vocab;
    }
  }
}

TEST(SimdTargetsTest, LossAndDropoutGiveTheSameBitsOnEveryTarget) {
  // Run the float loss, its gradient and dropout on each SIMD target this
  // CPU has (AVX-512 and AVX2 on an AVX-512 machine): dropout is integer
  // hashing and one multiply, the same bits everywhere; the loss uses fused
  // multiply-adds, so it is the same on the targets that have them (AVX2 and
  // later: bits at or below HWY_AVX2) and within rounding on the others.
  const CrossEntropyShape s{4, 8003};
  Rng rng(5);
  std::vector<float> logits(s.rows * s.vocab);
  for (float& z : logits) z = static_cast<float>(4.0 * rng.Normal());
  const std::vector<int32_t> targets = {3, -1, 8002, 17};
  const int64_t n = 4099;
  std::vector<float> x(n);
  for (int64_t i = 0; i < n; ++i) x[i] = static_cast<float>(rng.Normal());
  struct Result {
    int64_t target;
    double loss;
    std::vector<float> grad, dropped;
  };
  std::vector<Result> results;
  for (const int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    Result r{target, 0.0, std::vector<float>(logits.size()),
             std::vector<float>(n)};
    r.loss = CrossEntropyForward<float>(logits.data(), targets.data(), nullptr,
                                        s, {.label_smoothing = 0.1})
                 .smoothed_sum;
    CrossEntropyBackward<float>(logits.data(), targets.data(), 0.25f,
                                r.grad.data(), s, {.label_smoothing = 0.1});
    DropoutForward<float>(x.data(), r.dropped.data(), n, {0.1, 99, 7});
    results.push_back(std::move(r));
  }
  hwy::SetSupportedTargetsForTest(0);
  ASSERT_FALSE(results.empty());
  const Result* fma = nullptr;
  for (const Result& r : results) {
    if (r.target <= HWY_AVX2 && (fma == nullptr || r.target < fma->target)) {
      fma = &r;
    }
  }
  for (const Result& r : results) {
    const char* name = hwy::TargetName(r.target);
    EXPECT_EQ(r.dropped, results[0].dropped) << name;
    if (fma != nullptr && r.target <= HWY_AVX2) {
      EXPECT_EQ(r.loss, fma->loss) << name;
      EXPECT_EQ(r.grad, fma->grad) << name;
    } else {
      EXPECT_NEAR(r.loss, results[0].loss, 1e-9 * std::abs(results[0].loss))
          << name;
    }
  }
}

TEST(CrossEntropyTest, TiesGoToTheLowestIdAndLargeLogitsStayFinite) {
  const CrossEntropyShape s{1, 4};
  std::vector<float> logits = {1000.0f, 3000.0f, 3000.0f, -3000.0f};
  const std::vector<int32_t> targets = {2};
  std::vector<int32_t> pred(1);
  const CrossEntropyResult res =
      CrossEntropyForward<float>(logits.data(), targets.data(), pred.data(), s);
  EXPECT_EQ(pred[0], 1);
  EXPECT_NEAR(res.loss_sum, std::log(2.0), 1e-6);
  std::vector<float> d(4);
  CrossEntropyBackward<float>(logits.data(), targets.data(), 1.0f, d.data(), s);
  EXPECT_NEAR(d[1], 0.5, 1e-6);
  EXPECT_NEAR(d[2], -0.5, 1e-6);
  EXPECT_EQ(d[0], 0.0f);
}

}  // namespace
}  // namespace relpos::nn

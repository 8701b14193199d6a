// The matrix-vector product (kernels/gemv.h) against a double loop on every
// compiled Highway target and awkward sizes, with the classic rounding bound
// per entry; bitwise independence of the thread count; beta's cases (0
// ignores NaNs in y, 1 accumulates, others scale); and Sgemm's routing of
// its M = 1 products to it (both storage orders of the one row).
#include "kernels/gemv.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <vector>

#include "core/gemm.h"
#include "base/rng.h"
#include "hwy/targets.h"

namespace relpos {
namespace {

constexpr double kEpsF = std::numeric_limits<float>::epsilon();

struct Inputs {
  int64_t n, k, ldw;
  std::vector<float> w, x, y0;
};

Inputs MakeInputs(int64_t n, int64_t k, int64_t ldw, uint64_t seed) {
  Rng rng(seed);
  Inputs in{n, k, ldw, std::vector<float>(n * ldw), std::vector<float>(k),
            std::vector<float>(n)};
  // Padding columns hold NaN: reading past a row's k elements would show.
  for (int64_t j = 0; j < n; ++j) {
    for (int64_t c = 0; c < ldw; ++c) {
      in.w[j * ldw + c] = c < k ? static_cast<float>(rng.Normal())
                                : std::numeric_limits<float>::quiet_NaN();
    }
  }
  for (float& v : in.x) v = static_cast<float>(rng.Normal());
  for (float& v : in.y0) v = static_cast<float>(rng.Normal());
  return in;
}

// Every entry of y against the double sum of the same float inputs, within
// (k + 2) eps_float times the sum of the terms' magnitudes.
void ExpectMatchesDouble(const Inputs& in, float alpha, float beta,
                         const std::vector<float>& y) {
  for (int64_t j = 0; j < in.n; ++j) {
    double exact = 0, magnitude = 0;
    for (int64_t c = 0; c < in.k; ++c) {
      const double t = double{alpha} * in.w[j * in.ldw + c] * in.x[c];
      exact += t;
      magnitude += std::abs(t);
    }
    if (beta != 0.0f) {
      exact += double{beta} * in.y0[j];
      magnitude += std::abs(double{beta} * in.y0[j]);
    }
    ASSERT_TRUE(std::isfinite(y[j])) << "row " << j;
    EXPECT_LE(std::abs(y[j] - exact), (in.k + 2) * kEpsF * magnitude + 1e-30)
        << "n=" << in.n << " k=" << in.k << " row " << j;
  }
}

std::vector<float> Product(const Inputs& in, float alpha, float beta, int threads,
                       bool nan_y = false) {
  std::vector<float> y = in.y0;
  if (nan_y) y.assign(y.size(), std::numeric_limits<float>::quiet_NaN());
  Gemv(in.n, in.k, alpha, in.w.data(), in.ldw, in.x.data(), beta, y.data(),
       threads);
  return y;
}

// n: 1, under and just over a four-row block, prime, large enough to be
// threaded; k: 1, odd, around every vector length (4 .. 16 floats), large.
const int64_t kRows[] = {1, 3, 4, 5, 17, 515};
const int64_t kWidths[] = {1, 3, 7, 8, 15, 16, 17, 33, 257, 1031};

TEST(Gemv, MatchesDoubleOnEveryCompiledTarget) {
  int targets = 0;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    EXPECT_STREQ(GemvTargetName(), hwy::TargetName(target));
    SCOPED_TRACE(hwy::TargetName(target));
    std::printf("GEMV target %s\n", hwy::TargetName(target));
    ++targets;
    uint64_t seed = 1;
    for (int64_t n : kRows) {
      for (int64_t k : kWidths) {
        const Inputs in = MakeInputs(n, k, k + 3, seed++);
        ExpectMatchesDouble(in, 1.0f, 0.0f, Product(in, 1.0f, 0.0f, 1));
        ExpectMatchesDouble(in, -0.75f, 1.0f, Product(in, -0.75f, 1.0f, 2));
        ExpectMatchesDouble(in, 0.5f, 2.0f, Product(in, 0.5f, 2.0f, 3));
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  EXPECT_GE(targets, 1);
}

TEST(Gemv, ThreadCountDoesNotChangeABit) {
  // Large enough (n k >= kGemvSerialMacs) for the threaded path, with n
  // not a multiple of four or of the thread counts.
  const Inputs in = MakeInputs(1027, 515, 515, 7);
  ASSERT_GE(in.n * in.k, kGemvSerialMacs);
  const std::vector<float> one = Product(in, 1.0f, 1.0f, 1);
  for (int threads : {2, 3, 5, 64}) {
    EXPECT_EQ(Product(in, 1.0f, 1.0f, threads), one) << threads << " threads";
  }
  ExpectMatchesDouble(in, 1.0f, 1.0f, one);
}

TEST(Gemv, BetaZeroIgnoresNaNInY) {
  for (int threads : {1, 2}) {
    const Inputs in = MakeInputs(600, 300, 300, 11);
    ExpectMatchesDouble(in, 1.0f, 0.0f, Product(in, 1.0f, 0.0f, threads, true));
  }
}

TEST(Gemv, EmptyProductsLeaveOrClearY) {
  Inputs in = MakeInputs(5, 4, 4, 3);
  std::vector<float> y = in.y0;
  Gemv(0, 4, 1.0f, in.w.data(), 4, in.x.data(), 0.0f, y.data(), 1);
  EXPECT_EQ(y, in.y0);  // no rows: nothing written
  Gemv(5, 0, 1.0f, in.w.data(), 4, in.x.data(), 0.0f, y.data(), 1);
  EXPECT_EQ(y, std::vector<float>(5, 0.0f));  // k = 0: y = beta y = 0
}

TEST(Gemv, SgemmSendsOneRowTimesTransposedBHere) {
  // Sgemm(M = 1, op(B) = B^T) must give Gemv's bits, for the row stored as
  // a row (trans_a = N) and as a column of unit stride (trans_a = T,
  // lda = 1); the other M = 1 form (op(B) = B) stays with oneDNN and agrees
  // to rounding.
  const Inputs in = MakeInputs(37, 300, 301, 5);
  const std::vector<float> expected = Product(in, 0.5f, 1.0f, 1);
  for (Trans ta : {Trans::kNo, Trans::kYes}) {
    std::vector<float> y = in.y0;
    Sgemm(ta, Trans::kYes, 1, in.n, in.k, 0.5f, in.x.data(),
          ta == Trans::kNo ? in.k : 1, in.w.data(), in.ldw, 1.0f, y.data(),
          in.n);
    EXPECT_EQ(y, expected);
  }
  // B^T stored as B [k, n]: the same product through oneDNN.
  std::vector<float> bt(in.k * in.n);
  for (int64_t j = 0; j < in.n; ++j) {
    for (int64_t c = 0; c < in.k; ++c) bt[c * in.n + j] = in.w[j * in.ldw + c];
  }
  std::vector<float> y = in.y0;
  Sgemm(Trans::kNo, Trans::kNo, 1, in.n, in.k, 0.5f, in.x.data(), in.k,
        bt.data(), in.n, 1.0f, y.data(), in.n);
  ExpectMatchesDouble(in, 0.5f, 1.0f, y);
}

}  // namespace
}  // namespace relpos

// The int8 linear layer (kernels/int8_linear.h): quantization of the
// weights (scales, rounding, zero rows, padding, refusals); the product
// against a scalar integer reference, bit for bit, on every compiled Highway
// target and awkward sizes; against the float product within the
// quantization bound of the header; thread-count independence; rows that
// are not finite; the activation range's overflow guarantee.
#include "kernels/int8_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <limits>
#include <string>
#include <vector>

#include "base/check.h"
#include "base/rng.h"
#include "hwy/targets.h"

namespace relpos {
namespace {

std::vector<float> Normal(int64_t count, uint64_t seed, float scale = 1.0f) {
  Rng rng(seed);
  std::vector<float> v(static_cast<size_t>(count));
  for (float& e : v) e = scale * static_cast<float>(rng.Normal());
  return v;
}

// The kernel's arithmetic, one dot product at a time: the same
// quantization of x, exact int64 sums, the same final float operations.
std::vector<float> Reference(int64_t m, const std::vector<float>& x,
                             int64_t ldx, const Int8Matrix& w,
                             const float* bias) {
  const float range = static_cast<float>(Int8ActivationRange(w.stride));
  std::vector<float> y(static_cast<size_t>(m * w.rows));
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x.data() + r * ldx;
    float amax = 0.0f;
    for (int64_t c = 0; c < w.cols; ++c) amax = std::max(amax, std::abs(row[c]));
    const float scale = amax == 0.0f ? 0.0f : amax / range;
    const float inv = amax == 0.0f ? 0.0f : range / amax;
    for (int64_t j = 0; j < w.rows; ++j) {
      int64_t sum = 0;
      for (int64_t c = 0; c < w.cols; ++c) {
        const auto q = static_cast<int64_t>(std::nearbyint(row[c] * inv));
        sum += q * w.values[j * w.stride + c];
      }
      EXPECT_LE(std::abs(sum), int64_t{std::numeric_limits<int32_t>::max()});
      float v = static_cast<float>(sum) * (scale * w.scales[j]);
      if (bias != nullptr) v += bias[j];
      y[r * w.rows + j] = v;
    }
  }
  return y;
}

TEST(Int8Linear, QuantizesRowsSymmetrically) {
  const std::vector<float> w = {0.3f, -1.0f, 0.25f, 9.0f,  // ldw 4: col 3 unused
                                0.0f, 0.0f,  0.0f,  9.0f,  //
                                -3.0f, 1.2f, 0.01f, 9.0f};
  const Int8Matrix q = QuantizeRows(w.data(), 3, 3, 4);
  EXPECT_EQ(q.rows, 3);
  EXPECT_EQ(q.cols, 3);
  EXPECT_EQ(q.stride, kInt8RowAlign);
  ASSERT_EQ(q.values.size(), static_cast<size_t>(3 * kInt8RowAlign));
  EXPECT_FLOAT_EQ(q.scales[0], 1.0f / 127.0f);
  EXPECT_EQ(q.values[0], 38);  // 38.1
  EXPECT_EQ(q.values[1], -127);
  EXPECT_EQ(q.values[2], 32);  // 31.75
  EXPECT_EQ(q.scales[1], 0.0f);  // a row of zeros
  for (int64_t c = 0; c < q.stride; ++c) EXPECT_EQ(q.values[q.stride + c], 0);
  EXPECT_FLOAT_EQ(q.scales[2], 3.0f / 127.0f);
  EXPECT_EQ(q.values[2 * q.stride + 0], -127);
  EXPECT_EQ(q.values[2 * q.stride + 1], 51);  // 50.8
  EXPECT_EQ(q.values[2 * q.stride + 2], 0);
  // Padding columns are zeros.
  for (int64_t j = 0; j < 3; ++j) {
    for (int64_t c = 3; c < q.stride; ++c) EXPECT_EQ(q.values[j * q.stride + c], 0);
  }
  EXPECT_EQ(q.bytes(), 3 * kInt8RowAlign + 3 * 4);
}

TEST(Int8Linear, RefusesBadWeights) {
  std::vector<float> w = {1.0f, 2.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_THROW(QuantizeRows(w.data(), 1, 3, 3), InvalidArgument);
  w[2] = std::numeric_limits<float>::infinity();
  EXPECT_THROW(QuantizeRows(w.data(), 1, 3, 3), InvalidArgument);
  EXPECT_THROW(QuantizeRows(w.data(), 1, 3, 2), InvalidArgument);
  EXPECT_THROW(QuantizeRows(w.data(), -1, 3, 3), InvalidArgument);
  const Int8Matrix empty = QuantizeRows(w.data(), 0, 3, 3);
  EXPECT_EQ(empty.rows, 0);
  float y = 7.0f;
  Int8Linear(1, w.data(), 3, empty, nullptr, &y, 1, 1);  // nothing to write
  EXPECT_EQ(y, 7.0f);
  // Row strides below the matrix's sizes, and a negative row count.
  w = {1.0f, 2.0f, 3.0f};
  const Int8Matrix q = QuantizeRows(w.data(), 1, 3, 3);
  EXPECT_THROW(Int8Linear(1, w.data(), 2, q, nullptr, &y, 1, 1),
               InvalidArgument);
  EXPECT_THROW(Int8Linear(1, w.data(), 3, q, nullptr, &y, 0, 1),
               InvalidArgument);
  EXPECT_THROW(Int8Linear(-1, w.data(), 3, q, nullptr, &y, 1, 1),
               InvalidArgument);
}

TEST(Int8Linear, ActivationRangeNeverOverflows) {
  EXPECT_EQ(Int8ActivationRange(64), 32767);
  EXPECT_EQ(Int8ActivationRange(512), 32767);
  EXPECT_EQ(Int8ActivationRange(2048), 8256);
  for (int64_t stride = 64; stride <= (int64_t{1} << 20); stride *= 2) {
    const int64_t a = Int8ActivationRange(stride);
    EXPECT_LE(127 * a * stride, int64_t{std::numeric_limits<int32_t>::max()});
  }
  // The worst case, every product at its extreme, at a width where the
  // range is reduced: the reference checks the int64 sum fits int32.
  const int64_t k = 4096;
  std::vector<float> w(k, -1.0f), x(k, 1.0f);
  const Int8Matrix q = QuantizeRows(w.data(), 1, k, k);
  float y = 0;
  Int8Linear(1, x.data(), k, q, nullptr, &y, 1, 1);
  EXPECT_EQ(Reference(1, x, k, q, nullptr)[0], y);
  EXPECT_NEAR(y, -4096.0f, 1e-3f);
}

struct Case {
  int64_t m, n, k;
};

void CheckAgainstIntegerReference();

TEST(Int8Linear, MatchesIntegerReferenceOnEveryCompiledTarget) {
  CheckAgainstIntegerReference();
  // Where the CPU has AVX-512 VNNI, AVX3 ran its vpdpwssd kernel above:
  // the plain AVX3 path too.
  Int8LinearAllowVnniForTest(false);
  CheckAgainstIntegerReference();
  Int8LinearAllowVnniForTest(true);
}

void CheckAgainstIntegerReference() {
  const Case cases[] = {{1, 1, 1},   {1, 5, 63},    {2, 7, 64},
                        {3, 9, 65},  {4, 16, 130},  {5, 33, 257},
                        {9, 13, 700}, {16, 64, 512}, {1, 130, 2048}};
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    const std::string name = Int8LinearTargetName();
    EXPECT_EQ(name.substr(0, name.find('+')), hwy::TargetName(target));
    SCOPED_TRACE(hwy::TargetName(target));
    std::printf("int8 linear target %s\n", name.c_str());
    uint64_t seed = 1;
    for (const Case& cs : cases) {
      SCOPED_TRACE(testing::Message() << cs.m << " x " << cs.n << " x " << cs.k);
      const int64_t ldx = cs.k + 3, ldy = cs.n + 2;
      const std::vector<float> w = Normal(cs.n * cs.k, seed++, 0.1f);
      const std::vector<float> x = Normal(cs.m * ldx, seed++);
      const std::vector<float> bias = Normal(cs.n, seed++);
      const Int8Matrix q = QuantizeRows(w.data(), cs.n, cs.k, cs.k);
      for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
        std::vector<float> y(static_cast<size_t>(cs.m * ldy), -5.0f);
        Int8Linear(cs.m, x.data(), ldx, q, b, y.data(), ldy, 1);
        const std::vector<float> ref = Reference(cs.m, x, ldx, q, b);
        for (int64_t r = 0; r < cs.m; ++r) {
          for (int64_t j = 0; j < cs.n; ++j) {
            ASSERT_EQ(y[r * ldy + j], ref[r * cs.n + j]) << r << ", " << j;
          }
          for (int64_t j = cs.n; j < ldy; ++j) ASSERT_EQ(y[r * ldy + j], -5.0f);
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

TEST(Int8Linear, WithinTheQuantizationBoundOfTheFloatProduct) {
  const Case cases[] = {{1, 64, 256}, {4, 96, 512}, {3, 40, 2048}};
  uint64_t seed = 100;
  for (const Case& cs : cases) {
    const std::vector<float> w = Normal(cs.n * cs.k, seed++, 0.05f);
    const std::vector<float> x = Normal(cs.m * cs.k, seed++, 3.0f);
    const Int8Matrix q = QuantizeRows(w.data(), cs.n, cs.k, cs.k);
    std::vector<float> y(static_cast<size_t>(cs.m * cs.n));
    Int8Linear(cs.m, x.data(), cs.k, q, nullptr, y.data(), cs.n, 1);
    const double range = Int8ActivationRange(q.stride);
    double worst = 0;
    for (int64_t r = 0; r < cs.m; ++r) {
      double amax = 0;
      for (int64_t c = 0; c < cs.k; ++c) {
        amax = std::max(amax, std::abs(double{x[r * cs.k + c]}));
      }
      const double sx = amax / range;
      for (int64_t j = 0; j < cs.n; ++j) {
        double exact = 0, qx_sum = 0, qw_sum = 0, magnitude = 0;
        for (int64_t c = 0; c < cs.k; ++c) {
          const double xv = x[r * cs.k + c], wv = w[j * cs.k + c];
          exact += xv * wv;
          magnitude += std::abs(xv * wv);
          qx_sum += std::abs(xv) / sx + 0.5;
          qw_sum += std::abs(q.values[j * q.stride + c]);
        }
        const double bound = sx * q.scales[j] * 0.5 * (qx_sum + qw_sum + 0.5 * cs.k) +
                             4 * std::numeric_limits<float>::epsilon() * magnitude;
        const double err = std::abs(y[r * cs.n + j] - exact);
        ASSERT_LE(err, bound) << r << ", " << j;
        worst = std::max(worst, err / std::max(magnitude, 1e-30));
      }
    }
    std::printf("%ld x %ld x %ld: worst error / sum |x w| = %.2e\n",
                static_cast<long>(cs.m), static_cast<long>(cs.n),
                static_cast<long>(cs.k), worst);
  }
}

TEST(Int8Linear, ThreadCountDoesNotChangeResults) {
  const int64_t m = 6, n = 301, k = 520;
  const std::vector<float> w = Normal(n * k, 7, 0.1f);
  const std::vector<float> x = Normal(m * k, 8);
  const std::vector<float> bias = Normal(n, 9);
  const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
  std::vector<float> one(m * n), many(m * n);
  Int8Linear(m, x.data(), k, q, bias.data(), one.data(), n, 1);
  for (int threads : {2, 3, 8, 200}) {
    Int8Linear(m, x.data(), k, q, bias.data(), many.data(), n, threads);
    EXPECT_EQ(one, many) << threads << " threads";
  }
}

TEST(Int8Linear, RowsThatAreNotFiniteGiveNaN) {
  const int64_t m = 3, n = 5, k = 40;
  const std::vector<float> w = Normal(n * k, 11);
  std::vector<float> x = Normal(m * k, 12);
  x[1 * k + 7] = std::numeric_limits<float>::infinity();
  std::fill(x.begin() + 2 * k, x.end(), 0.0f);  // a row of zeros
  const std::vector<float> bias = Normal(n, 13);
  const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
  std::vector<float> y(m * n);
  Int8Linear(m, x.data(), k, q, bias.data(), y.data(), n, 1);
  for (int64_t j = 0; j < n; ++j) {
    EXPECT_TRUE(std::isfinite(y[j]));
    EXPECT_TRUE(std::isnan(y[n + j]));
    EXPECT_EQ(y[2 * n + j], bias[j]);
  }
}

}  // namespace
}  // namespace relpos

// The int8 linear layer (kernels/int8_linear.h): quantization of the
// weights (scales, rounding, zero rows, padding, refusals); the product
// against a scalar integer reference, bit for bit, on every compiled Highway
// target and awkward sizes; against the float product within the
// quantization bound of the header; thread-count independence; rows that
// are not finite; the activation range's overflow guarantee. The same for
// 8-bit activations (Int8Activations::k8), whose VNNI and AVX2 kernels must
// give the integers of every other target.
#include "kernels/int8_linear.h"

#include <gtest/gtest.h>

#include <algorithm>
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

// The 8-bit activations' quantization of one row (int8_linear.h): the
// span of [min(0, min x), max(0, max x)] (0 for a row of zeros) and the
// zero point z, q[c] = clamp(nearbyint(x[c] * 254 / span) + z, -127, 127).
struct ZeroPointRow {
  float span = 0.0f;
  int64_t zero = 0;
  std::vector<int64_t> q;
};

ZeroPointRow QuantizeWithZeroPoint(const float* row, int64_t k) {
  ZeroPointRow out;
  out.q.assign(static_cast<size_t>(k), 0);
  float lo = 0.0f, hi = 0.0f;
  for (int64_t c = 0; c < k; ++c) {
    lo = std::min(lo, row[c]);
    hi = std::max(hi, row[c]);
  }
  out.span = hi - lo;
  if (out.span == 0.0f) return out;
  const float inv = 254.0f / out.span;
  out.zero = static_cast<int64_t>(
      std::clamp(std::nearbyint(-127.0f - lo * inv), -127.0f, 127.0f));
  for (int64_t c = 0; c < k; ++c) {
    const auto n = static_cast<int64_t>(std::nearbyint(row[c] * inv));
    out.q[c] = std::clamp<int64_t>(n + out.zero, -127, 127);
  }
  return out;
}

// The kernel's arithmetic, one dot product at a time: the same
// quantization of x, exact int64 sums, the same final float operations.
// 8-bit activations: the zero-point quantization above, the sum
// sum_c (q_c - z) qw_c (the VNNI kernel's unsigned offset and every
// kernel's zero-point correction must come to this), scaled by span / 254.
std::vector<float> Reference(int64_t m, const std::vector<float>& x,
                             int64_t ldx, const Int8Matrix& w,
                             const float* bias,
                             Int8Activations activations = Int8Activations::k16) {
  const bool a8 = activations == Int8Activations::k8;
  const float range = static_cast<float>(Int8ActivationRange(w.stride));
  std::vector<float> y(static_cast<size_t>(m * w.rows));
  for (int64_t r = 0; r < m; ++r) {
    const float* row = x.data() + r * ldx;
    float amax = 0.0f;
    bool finite = true;
    for (int64_t c = 0; c < w.cols; ++c) {
      amax = std::max(amax, std::abs(row[c]));
      finite = finite && std::isfinite(row[c]);
    }
    if (!finite) {  // NaN in every output of the row
      for (int64_t j = 0; j < w.rows; ++j) {
        y[r * w.rows + j] = std::numeric_limits<float>::quiet_NaN();
      }
      continue;
    }
    float scale = amax == 0.0f ? 0.0f : amax / range;
    const float inv = amax == 0.0f ? 0.0f : range / amax;
    ZeroPointRow zp;
    if (a8) {
      zp = QuantizeWithZeroPoint(row, w.cols);
      scale = zp.span / 254.0f;
    }
    for (int64_t j = 0; j < w.rows; ++j) {
      int64_t sum = 0;
      for (int64_t c = 0; c < w.cols; ++c) {
        int64_t q = 0;
        if (a8) {
          q = zp.q[c] - zp.zero;
          EXPECT_LE(std::abs(zp.q[c]), 127);
        } else {
          q = static_cast<int64_t>(std::nearbyint(row[c] * inv));
          EXPECT_LE(std::abs(q), static_cast<int64_t>(range));
        }
        sum += q * w.Value(j, c);
      }
      EXPECT_LE(std::abs(sum), int64_t{std::numeric_limits<int32_t>::max()});
      float v = static_cast<float>(sum) * (scale * w.scales[j]);
      if (bias != nullptr) v += bias[j];
      y[r * w.rows + j] = v;
    }
  }
  return y;
}

// Which of the CPU's int8 kernels Int8Linear runs: the best (AMX where
// the CPU has it, else AVX-512 VNNI or AVX2 on packed weights), the packed
// ones without AMX, or Highway's row-major kernels.
enum class Kernels { kBest, kNoAmx, kRowMajor };
constexpr Kernels kEveryKernel[] = {Kernels::kBest, Kernels::kNoAmx,
                                    Kernels::kRowMajor};

void Use(Kernels k) {
  Int8LinearAllowPackedForTest(k != Kernels::kRowMajor);
  Int8LinearAllowAmx(k == Kernels::kBest);
}

std::ostream& operator<<(std::ostream& os, Kernels k) {
  return os << (k == Kernels::kBest    ? "best"
                : k == Kernels::kNoAmx ? "no AMX"
                                       : "row-major");
}

TEST(Int8Linear, QuantizesRowsSymmetrically) {
  const std::vector<float> w = {0.3f, -1.0f, 0.25f, 9.0f,  // ldw 4: col 3 unused
                                0.0f, 0.0f,  0.0f,  9.0f,  //
                                -3.0f, 1.2f, 0.01f, 9.0f};
  const Int8Matrix q = QuantizeRows(w.data(), 3, 3, 4);
  EXPECT_EQ(q.rows, 3);
  EXPECT_EQ(q.cols, 3);
  EXPECT_EQ(q.stride, kInt8RowAlign);
  // One layout holds the weights: row-major, or packed where the packed
  // kernels run (AVX-512 VNNI, AVX2; Value reads either).
  ASSERT_NE(q.values.empty(), q.packed.empty());
  EXPECT_FLOAT_EQ(q.scales[0], 1.0f / 127.0f);
  EXPECT_EQ(q.Value(0, 0), 38);  // 38.1
  EXPECT_EQ(q.Value(0, 1), -127);
  EXPECT_EQ(q.Value(0, 2), 32);  // 31.75
  EXPECT_EQ(q.scales[1], 0.0f);  // a row of zeros
  for (int64_t c = 0; c < q.stride; ++c) EXPECT_EQ(q.Value(1, c), 0);
  EXPECT_FLOAT_EQ(q.scales[2], 3.0f / 127.0f);
  EXPECT_EQ(q.Value(2, 0), -127);
  EXPECT_EQ(q.Value(2, 1), 51);  // 50.8
  EXPECT_EQ(q.Value(2, 2), 0);
  // Padding columns are zeros.
  for (int64_t j = 0; j < 3; ++j) {
    for (int64_t c = 3; c < q.stride; ++c) EXPECT_EQ(q.Value(j, c), 0);
  }
  // The row sums of the values (8-bit activations' correction).
  ASSERT_EQ(q.row_sums.size(), 3u);
  EXPECT_EQ(q.row_sums[0], 38 - 127 + 32);
  EXPECT_EQ(q.row_sums[1], 0);
  EXPECT_EQ(q.row_sums[2], -127 + 51 + 0);
  // Where the packed kernels run, the packed layout alone: one block of 16 rows
  // (rows 3..15 zeros); elsewhere the row-major one.
  const int64_t held = q.packed.empty() ? 3 * kInt8RowAlign : 16 * kInt8RowAlign;
  EXPECT_EQ(static_cast<int64_t>(q.values.size() + q.packed.size()), held);
  EXPECT_EQ(q.row_major_bytes(), 3 * kInt8RowAlign);
  EXPECT_EQ(q.bytes(), held + 3 * 4 + 3 * 4);
}

// The packed layout (Int8Matrix::packed): block b, column group g, row i,
// column c at (b * stride / 4 + g) * 64 + i * 4 + c; zeros past the rows.
TEST(Int8Linear, PackedWeightsHoldTheValuesInBlocks) {
  for (int64_t n : {1, 15, 16, 17, 37}) {
    const int64_t k = 70;
    // Integers in [-127, 127] with 127 in every row: scale 1, so each
    // quantized value is the weight itself.
    std::vector<float> w(static_cast<size_t>(n * k));
    for (int64_t j = 0; j < n; ++j) {
      for (int64_t c = 0; c < k; ++c) {
        w[j * k + c] = c == 0 ? 127.0f
                              : static_cast<float>((j * 31 + c * 7) % 255 - 127);
      }
    }
    const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
    if (q.packed.empty()) GTEST_SKIP() << "neither AVX-512 VNNI nor AVX2: nothing packed";
    EXPECT_TRUE(q.values.empty()) << "the packed copy is the only one";
    const int64_t blocks = (n + 15) / 16;
    ASSERT_EQ(q.packed.size(), static_cast<size_t>(blocks * 16 * q.stride));
    for (int64_t b = 0; b < blocks; ++b) {
      for (int64_t g = 0; g < q.stride / 4; ++g) {
        for (int64_t i = 0; i < 16; ++i) {
          for (int64_t c = 0; c < 4; ++c) {
            const int64_t j = 16 * b + i, col = 4 * g + c;
            const int8_t want =
                j < n && col < k ? static_cast<int8_t>(w[j * k + col])
                                 : int8_t{0};
            ASSERT_EQ(q.packed[(b * q.stride / 4 + g) * 64 + i * 4 + c], want)
                << n << " rows: " << j << ", " << col;
            if (j < n) {
              ASSERT_EQ(q.Value(j, col), want);
            }
          }
        }
      }
    }
  }
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
  // With x = -1 the AMX kernel's high bytes (-17 for qx = -4128) give
  // 256 (hi . qw) = 2.26e9, past int32, which its low bytes bring back
  // (8 rows: fewer take the VNNI kernel).
  const int64_t k = 4096, m = 8;
  for (float sign : {1.0f, -1.0f}) {
    std::vector<float> w(k, -1.0f), x(m * k, sign);
    const Int8Matrix q = QuantizeRows(w.data(), 1, k, k);
    for (Kernels kernels : kEveryKernel) {
      Use(kernels);
      std::vector<float> y(m);
      Int8Linear(m, x.data(), k, q, nullptr, y.data(), 1, 1);
      EXPECT_EQ(Reference(m, x, k, q, nullptr), y) << kernels;
      EXPECT_NEAR(y[0], -sign * 4096.0f, 1e-3f) << kernels;
    }
  }
  Use(Kernels::kBest);
}

struct Case {
  int64_t m, n, k;
};

void CheckAgainstIntegerReference();

TEST(Int8Linear, MatchesIntegerReferenceOnEveryCompiledTarget) {
  // Where the CPU has AMX, AVX3 runs its tile kernel first, then its
  // vpdpwssd kernel (AVX-512 VNNI); AVX2 its packed kernel; then Highway's
  // row-major kernels.
  for (Kernels kernels : kEveryKernel) {
    SCOPED_TRACE(testing::Message() << kernels);
    Use(kernels);
    CheckAgainstIntegerReference();
  }
  Use(Kernels::kBest);
}

void CheckAgainstIntegerReference() {
  const Case cases[] = {{1, 1, 1},   {1, 5, 63},    {2, 7, 64},
                        {3, 9, 65},  {4, 16, 130},  {5, 33, 257},
                        {9, 13, 700}, {16, 64, 512}, {1, 130, 2048},
                        {17, 33, 320}, {40, 70, 1024}};
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
          qw_sum += std::abs(q.Value(j, c));
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
  const int64_t m = 22, n = 301, k = 520;
  const std::vector<float> w = Normal(n * k, 7, 0.1f);
  const std::vector<float> x = Normal(m * k, 8);
  const std::vector<float> bias = Normal(n, 9);
  const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
  std::vector<float> one(m * n), many(m * n);
  Int8Linear(m, x.data(), k, q, bias.data(), one.data(), n, 1);
  EXPECT_EQ(one, Reference(m, x, k, q, bias.data()));
  // 301 rows: 18 blocks of 16 and 13 rows (the packed kernels
  // blocks, in pairs: the last alone); m 6: a tile of 4 and one of 2.
  for (Kernels packed : kEveryKernel) {
    Use(packed);
    for (int threads : {1, 2, 3, 8, 200}) {
      Int8Linear(m, x.data(), k, q, bias.data(), many.data(), n, threads);
      EXPECT_EQ(one, many) << threads << " threads, kernels " << packed;
    }
  }
  Use(Kernels::kBest);
}

TEST(Int8Linear, RowsThatAreNotFiniteGiveNaN) {
  for (int64_t m : {3, 9}) {  // 9 rows: AMX's kernel where the CPU has it
    const int64_t n = 5, k = 40;
    const std::vector<float> w = Normal(n * k, 11);
    std::vector<float> x = Normal(m * k, 12);
    x[1 * k + 7] = std::numeric_limits<float>::infinity();
    std::fill(x.begin() + 2 * k, x.begin() + 3 * k, 0.0f);  // a row of zeros
    const std::vector<float> bias = Normal(n, 13);
    const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
    std::vector<float> y(m * n);
    Int8Linear(m, x.data(), k, q, bias.data(), y.data(), n, 1);
    for (int64_t j = 0; j < n; ++j) {
      EXPECT_TRUE(std::isfinite(y[j]));
      EXPECT_TRUE(std::isnan(y[n + j]));
      EXPECT_EQ(y[2 * n + j], bias[j]);
      for (int64_t r = 3; r < m; ++r) EXPECT_TRUE(std::isfinite(y[r * n + j]));
    }
  }
}

// The quantized activations live in buffers reused from call to call; a
// call leaves nothing for the next: after a product of large values, a
// row of zeros gives +0 (not -0 from stale sums times a zero scale) and
// every row the reference's bits, for both widths, packed or not.
TEST(Int8Linear, ReusedActivationBuffersLeaveNoTrace) {
  const int64_t n = 21, k = 100;
  const std::vector<float> w = Normal(n * k, 31, 0.3f);
  const int64_t m = 10;  // AMX's kernel where the CPU has it: 8 rows or more
  const std::vector<float> big = Normal(m * k, 32, 50.0f);
  std::vector<float> x = Normal(m * k, 33);
  std::fill(x.begin() + k, x.begin() + 2 * k, 0.0f);  // row 1: zeros
  x[3 * k + 5] = std::numeric_limits<float>::quiet_NaN();
  for (Kernels packed : kEveryKernel) {
    Use(packed);
    const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
    for (Int8Activations a : {Int8Activations::k16, Int8Activations::k8}) {
      std::vector<float> y(m * n);
      Int8Linear(m, big.data(), k, q, nullptr, y.data(), n, 1, a);
      Int8Linear(m, x.data(), k, q, nullptr, y.data(), n, 1, a);
      const std::vector<float> ref = Reference(m, x, k, q, nullptr, a);
      for (int64_t j = 0; j < n; ++j) {
        SCOPED_TRACE(testing::Message() << "kernels " << packed << ", column "
                                        << j);
        EXPECT_EQ(y[j], ref[j]);
        EXPECT_EQ(y[n + j], 0.0f);
        EXPECT_FALSE(std::signbit(y[n + j]));
        EXPECT_EQ(y[2 * n + j], ref[2 * n + j]);
        EXPECT_TRUE(std::isnan(y[3 * n + j]));
        for (int64_t r = 4; r < m; ++r) {
          EXPECT_EQ(y[r * n + j], ref[r * n + j]);
        }
      }
    }
  }
  Use(Kernels::kBest);
}

// More rows than one pass takes (64): the rows go in chunks, with the
// reference's bits for every row (strides wider than the rows, a NaN row
// in the second chunk), both widths, packed or not, one and two threads.
TEST(Int8Linear, ManyRowsGoInChunksWithTheSameBits) {
  const int64_t m = 150, n = 37, k = 100, ldx = k + 5, ldy = n + 3;
  const std::vector<float> w = Normal(n * k, 41, 0.2f);
  std::vector<float> x = Normal(m * ldx, 42);
  x[70 * ldx + 9] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> bias = Normal(n, 43);
  for (Kernels packed : kEveryKernel) {
    Use(packed);
    const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
    for (Int8Activations a : {Int8Activations::k16, Int8Activations::k8}) {
      const std::vector<float> ref = Reference(m, x, ldx, q, bias.data(), a);
      for (int threads : {1, 2}) {
        std::vector<float> y(static_cast<size_t>(m * ldy), -5.0f);
        Int8Linear(m, x.data(), ldx, q, bias.data(), y.data(), ldy, threads,
                   a);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t j = 0; j < n; ++j) {
            if (r == 70) {
              EXPECT_TRUE(std::isnan(y[r * ldy + j]));
            } else {
              ASSERT_EQ(y[r * ldy + j], ref[r * n + j])
                  << r << ", " << j << ", kernels " << packed << ", "
                  << threads << " threads";
            }
          }
          for (int64_t j = n; j < ldy; ++j) ASSERT_EQ(y[r * ldy + j], -5.0f);
        }
      }
    }
  }
  Use(Kernels::kBest);
}

// 8-bit activations (Int8Activations::k8): Int8Linear on every compiled
// target, 1 and 2 threads, with and without bias, against the integer
// reference bit for bit; awkward sizes (m not a multiple of the row tile,
// columns not of 64, weight rows not of 4, an all-zero weight row).
// Returns every output, in order, to compare runs.
std::vector<float> CheckA8AgainstIntegerReference() {
  const int64_t ms[] = {1, 3, 5, 17, 64};
  const int64_t ks[] = {1, 33, 100, 257, 1024};
  const int64_t ns[] = {1, 6, 13, 37, 130};
  std::vector<float> all;
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(Int8LinearTargetName());
    uint64_t seed = 1;
    for (size_t mi = 0; mi < 5; ++mi) {
      for (size_t ki = 0; ki < 5; ++ki) {
        const int64_t m = ms[mi], k = ks[ki], n = ns[(mi + ki) % 5];
        SCOPED_TRACE(testing::Message() << m << " x " << n << " x " << k);
        const int64_t ldx = k + 3, ldy = n + 2;
        std::vector<float> w = Normal(n * k, seed++, 0.1f);
        if (n > 1) std::fill(w.begin() + (n / 2) * k, w.begin() + (n / 2 + 1) * k, 0.0f);
        const std::vector<float> x = Normal(m * ldx, seed++);
        const std::vector<float> bias = Normal(n, seed++);
        const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
        for (const float* b : {static_cast<const float*>(nullptr), bias.data()}) {
          const std::vector<float> ref =
              Reference(m, x, ldx, q, b, Int8Activations::k8);
          for (int threads : {1, 2}) {
            std::vector<float> y(static_cast<size_t>(m * ldy), -5.0f);
            Int8Linear(m, x.data(), ldx, q, b, y.data(), ldy, threads,
                       Int8Activations::k8);
            for (int64_t r = 0; r < m; ++r) {
              for (int64_t j = 0; j < n; ++j) {
                EXPECT_EQ(y[r * ldy + j], ref[r * n + j])
                    << r << ", " << j << ", " << threads << " threads";
              }
              for (int64_t j = n; j < ldy; ++j) EXPECT_EQ(y[r * ldy + j], -5.0f);
            }
            all.insert(all.end(), y.begin(), y.end());
          }
        }
      }
    }
  }
  hwy::SetSupportedTargetsForTest(0);
  return all;
}

TEST(Int8LinearA8, MatchesIntegerReferenceOnEveryCompiledTarget) {
  // Where the CPU has AVX-512 VNNI, AVX3 runs the vpdpbusd kernel first
  // (AVX2 its vpmaddubsw kernel), then Highway's row-major kernels
  // (vpmaddwd on the same 8-bit values): the same bits.
  const std::vector<float> best = CheckA8AgainstIntegerReference();
  for (Kernels kernels : {Kernels::kNoAmx, Kernels::kRowMajor}) {
    Use(kernels);
    EXPECT_EQ(best, CheckA8AgainstIntegerReference()) << kernels;
  }
  Use(Kernels::kBest);
}

TEST(Int8LinearA8, ThreadCountAndPackedKernelsDoNotChangeResults) {
  // 301 rows: 18 blocks of 16 and 13 rows (the packed kernel's blocks, in
  // groups of 4: the last group of 3); m 22: VNNI's tiles of 4 and one of
  // 2, AMX's tiles of 16 and 6.
  const int64_t m = 22, n = 301, k = 520;
  const std::vector<float> w = Normal(n * k, 7, 0.1f);
  const std::vector<float> x = Normal(m * k, 8);
  const std::vector<float> bias = Normal(n, 9);
  const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
  std::vector<float> one(m * n), many(m * n);
  Int8Linear(m, x.data(), k, q, bias.data(), one.data(), n, 1,
             Int8Activations::k8);
  EXPECT_EQ(one, Reference(m, x, k, q, bias.data(), Int8Activations::k8));
  for (Kernels packed : kEveryKernel) {
    Use(packed);
    for (int threads : {1, 2, 3, 8, 200}) {
      Int8Linear(m, x.data(), k, q, bias.data(), many.data(), n, threads,
                 Int8Activations::k8);
      EXPECT_EQ(one, many) << threads << " threads, kernels " << packed;
    }
  }
  Use(Kernels::kBest);
}

// Against the float product. With x[r, c] = sx_r (qx[r, c] + e[r, c]) and
// W[j, c] = sw_j (qw[j, c] + f[j, c]), |e|, |f| <= 1/2 (round to nearest;
// plus 1e-3 for the float rounding of x / sx, whose inverse scale 127 /
// max|x| is itself rounded: a few units of 127 eps), the quantized operands
// are X^ = X - dX and W^ = W - dW with
//   ||dX||_F <= (1/2 + 1e-3) sqrt(k sum_r sx_r^2),
//   ||dW||_F <= (1/2 + 1e-3) sqrt(k sum_j sw_j^2),
// and X^ W^T - X W^T = -dX W^T - X^ dW^T, so
//   ||Y - X W^T||_F <= ||dX||_F ||W||_F + ||X^||_F ||dW||_F + rounding,
// ||X^||_F <= ||X||_F + ||dX||_F. The integer sums are exact; the scaling
// rounds three times (the sum to float, sx * sw, the product): at most
// 4 eps |X^ W^T| per element, 4 eps ||X^||_F ||W^||_F in all. The
// header's element bound (sx sw (sum |qx| + sum |qw| + k/2) / 2) is
// checked too.
TEST(Int8LinearA8, WithinTheQuantizationBoundOfTheFloatProduct) {
  const Case cases[] = {{1, 64, 256}, {4, 96, 512}, {17, 40, 2048}, {3, 37, 100}};
  uint64_t seed = 200;
  const double eps = std::numeric_limits<float>::epsilon();
  for (const Case& cs : cases) {
    SCOPED_TRACE(testing::Message() << cs.m << " x " << cs.n << " x " << cs.k);
    const std::vector<float> w = Normal(cs.n * cs.k, seed++, 0.05f);
    const std::vector<float> x = Normal(cs.m * cs.k, seed++, 3.0f);
    const Int8Matrix q = QuantizeRows(w.data(), cs.n, cs.k, cs.k);
    std::vector<float> y(static_cast<size_t>(cs.m * cs.n));
    Int8Linear(cs.m, x.data(), cs.k, q, nullptr, y.data(), cs.n, 1,
               Int8Activations::k8);
    double x_norm2 = 0, w_norm2 = 0, sx2 = 0, sw2 = 0, err2 = 0, exact2 = 0;
    for (float v : x) x_norm2 += double{v} * v;
    for (float v : w) w_norm2 += double{v} * v;
    for (float s : q.scales) sw2 += double{s} * s;
    for (int64_t r = 0; r < cs.m; ++r) {
      // The activation step: the span of [min(0, min x), max(0, max x)]
      // over 254 steps (|q - z| <= |x| / sx + 1/2 as with max |x| / 127).
      double lo = 0, hi = 0;
      for (int64_t c = 0; c < cs.k; ++c) {
        lo = std::min(lo, double{x[r * cs.k + c]});
        hi = std::max(hi, double{x[r * cs.k + c]});
      }
      const double sx = (hi - lo) / 254;
      sx2 += sx * sx;
      for (int64_t j = 0; j < cs.n; ++j) {
        double exact = 0, qx_sum = 0, qw_sum = 0, magnitude = 0;
        for (int64_t c = 0; c < cs.k; ++c) {
          const double xv = x[r * cs.k + c], wv = w[j * cs.k + c];
          exact += xv * wv;
          magnitude += std::abs(xv * wv);
          qx_sum += std::abs(xv) / sx + 0.5;
          qw_sum += std::abs(q.Value(j, c));
        }
        const double err = y[r * cs.n + j] - exact;
        const double bound =
            sx * q.scales[j] * 0.5 * (qx_sum + qw_sum + 0.5 * cs.k) +
            4 * eps * magnitude;
        ASSERT_LE(std::abs(err), bound) << r << ", " << j;
        err2 += err * err;
        exact2 += exact * exact;
      }
    }
    const double step = 0.5 + 1e-3;
    const double dx = step * std::sqrt(cs.k * sx2);
    const double dw = step * std::sqrt(cs.k * sw2);
    const double xf = std::sqrt(x_norm2), wf = std::sqrt(w_norm2);
    const double bound =
        dx * wf + (xf + dx) * dw + 4 * eps * (xf + dx) * (wf + dw);
    EXPECT_LE(std::sqrt(err2), bound);
    std::printf("a8 %ld x %ld x %ld: ||error||_F %.3e, bound %.3e, "
                "||x W^T||_F %.3e\n",
                static_cast<long>(cs.m), static_cast<long>(cs.n),
                static_cast<long>(cs.k), std::sqrt(err2), bound,
                std::sqrt(exact2));
  }
}

// The zero point: through identity weights each output is the
// dequantized activation, within half a step of x, and the step is the
// span of [min(0, min x), max(0, max x)] over 254: for rows of one sign
// (and GELU-like rows, min -0.17) half the symmetric max |x| / 127, on
// every kernel.
TEST(Int8LinearA8, RowsOfOneSignGetTheWholeRange) {
  const int64_t k = 96, m = 20;
  std::vector<float> eye(static_cast<size_t>(k * k), 0.0f);
  for (int64_t c = 0; c < k; ++c) eye[c * k + c] = 1.0f;
  const Int8Matrix q = QuantizeRows(eye.data(), k, k, k);
  std::vector<float> x = Normal(m * k, 77, 2.0f);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < k; ++c) {
      float& v = x[r * k + c];
      if (r % 4 == 0) v = std::abs(v);         // >= 0
      if (r % 4 == 1) v = -std::abs(v) - 1.0f;  // < 0, not reaching 0
      if (r % 4 == 2) v = std::max(v, -0.17f);  // GELU-like
    }
  }
  for (Kernels kernels : kEveryKernel) {
    Use(kernels);
    std::vector<float> y(static_cast<size_t>(m * k));
    Int8Linear(m, x.data(), k, q, nullptr, y.data(), k, 1,
               Int8Activations::k8);
    EXPECT_EQ(Reference(m, x, k, q, nullptr, Int8Activations::k8), y)
        << kernels;
    for (int64_t r = 0; r < m; ++r) {
      float lo = 0.0f, hi = 0.0f;
      for (int64_t c = 0; c < k; ++c) {
        lo = std::min(lo, x[r * k + c]);
        hi = std::max(hi, x[r * k + c]);
      }
      const double half_step = (double{hi} - lo) / 254 / 2;
      for (int64_t c = 0; c < k; ++c) {
        ASSERT_LE(std::abs(double{y[r * k + c]} - x[r * k + c]),
                  half_step * (1 + 1e-5))
            << kernels << " row " << r << " column " << c;
      }
    }
  }
  Use(Kernels::kBest);
}

// A row holding NaN or an infinity gives NaN in every output of that row,
// as in the int16 path (its scale is NaN; the VNNI kernel's sums of that
// row, 128 x row sums minus the correction, are 0); a row of zeros gives the
// bias; the other rows are untouched by them.
TEST(Int8LinearA8, RowsThatAreNotFiniteBehaveAsTheInt16Paths) {
  const int64_t m = 5, n = 7, k = 70;
  const std::vector<float> w = Normal(n * k, 11);
  std::vector<float> x = Normal(m * k, 12);
  x[1 * k + 7] = std::numeric_limits<float>::infinity();
  x[3 * k + 69] = std::numeric_limits<float>::quiet_NaN();
  std::fill(x.begin() + 2 * k, x.begin() + 3 * k, 0.0f);  // a row of zeros
  const std::vector<float> bias = Normal(n, 13);
  const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
  std::vector<float> y16(m * n), y8(m * n), plain(m * n);
  Int8Linear(m, x.data(), k, q, bias.data(), y16.data(), n, 1);
  Int8Linear(m, x.data(), k, q, bias.data(), y8.data(), n, 1,
             Int8Activations::k8);
  Use(Kernels::kRowMajor);
  Int8Linear(m, x.data(), k, q, bias.data(), plain.data(), n, 1,
             Int8Activations::k8);
  Use(Kernels::kBest);
  const std::vector<float> ref =
      Reference(m, x, k, q, bias.data(), Int8Activations::k8);
  for (int64_t r = 0; r < m; ++r) {
    const bool finite = r != 1 && r != 3;
    for (int64_t j = 0; j < n; ++j) {
      SCOPED_TRACE(testing::Message() << r << ", " << j);
      EXPECT_EQ(std::isnan(y8[r * n + j]), std::isnan(y16[r * n + j]));
      EXPECT_EQ(std::isnan(y8[r * n + j]), !finite);
      EXPECT_EQ(std::isnan(plain[r * n + j]), !finite);
      if (finite) {
        EXPECT_EQ(y8[r * n + j], ref[r * n + j]);
        EXPECT_EQ(plain[r * n + j], y8[r * n + j]);
      }
      if (r == 2) {
        EXPECT_EQ(y8[r * n + j], bias[j]);
      }
    }
  }
}

// Weight rows of zeros (scale 0, row sum 0) give exactly the bias, in
// both kernels; the other rows match the reference.
TEST(Int8LinearA8, ZeroWeightRowsGiveTheBias) {
  const int64_t m = 4, n = 9, k = 130;
  std::vector<float> w = Normal(n * k, 21, 0.2f);
  for (int64_t j : {0, 4, 8}) {
    std::fill(w.begin() + j * k, w.begin() + (j + 1) * k, 0.0f);
  }
  const std::vector<float> x = Normal(m * k, 22);
  const std::vector<float> bias = Normal(n, 23);
  const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
  EXPECT_EQ(q.row_sums[4], 0);
  EXPECT_EQ(q.scales[4], 0.0f);
  const std::vector<float> ref =
      Reference(m, x, k, q, bias.data(), Int8Activations::k8);
  for (Kernels packed : kEveryKernel) {
    Use(packed);
    std::vector<float> y(m * n);
    Int8Linear(m, x.data(), k, q, bias.data(), y.data(), n, 1,
               Int8Activations::k8);
    EXPECT_EQ(y, ref) << "kernels " << packed;
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j : {0, 4, 8}) EXPECT_EQ(y[r * n + j], bias[j]);
    }
  }
  Use(Kernels::kBest);
}

// The widest rows the 8-bit path takes, at their extreme sums (every
// activation 127, so u = 255 in the VNNI kernel and pairs of -2 x 127 x 127
// in AVX2's vpmaddubsw, against weights -127):
// exact; one step wider is refused (the int16 path still takes it).
TEST(Int8LinearA8, WidestRowsAreExactAndWiderAreRefused) {
  for (float sign : {1.0f, -1.0f}) {
    const int64_t k = kInt8A8MaxStride;
    std::vector<float> w(k, -1.0f), x(k, sign);
    const Int8Matrix q = QuantizeRows(w.data(), 1, k, k);
    for (Kernels packed : kEveryKernel) {
      Use(packed);
      float y = 0;
      Int8Linear(1, x.data(), k, q, nullptr, &y, 1, 1, Int8Activations::k8);
      EXPECT_EQ(Reference(1, x, k, q, nullptr, Int8Activations::k8)[0], y);
      EXPECT_NEAR(y, -sign * k, 1e-4 * k);
    }
    Use(Kernels::kBest);
  }
  const int64_t k = kInt8A8MaxStride + 1;
  std::vector<float> w(k, 1.0f), x(k, 1.0f);
  const Int8Matrix q = QuantizeRows(w.data(), 1, k, k);
  float y = 0;
  EXPECT_THROW(Int8Linear(1, x.data(), k, q, nullptr, &y, 1, 1,
                          Int8Activations::k8),
               InvalidArgument);
  Int8Linear(1, x.data(), k, q, nullptr, &y, 1, 1);
  EXPECT_NEAR(y, k, 1e-3 * k);
}

}  // namespace
}  // namespace relpos

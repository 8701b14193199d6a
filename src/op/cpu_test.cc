#include "relpos/cpu.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "core/gemm.h"
#include "kernels/int8_linear.h"
#include "relpos/error.h"

namespace relpos {
namespace {

// An int8 product of awkward size: the same integers on every instruction
// set, so the same floats.
std::vector<float> Int8Product(int64_t m, int64_t n, int64_t k) {
  std::vector<float> w(n * k), x(m * k), y(m * n);
  for (int64_t i = 0; i < n * k; ++i) w[i] = static_cast<float>((i * 37) % 23) - 11.0f;
  for (int64_t i = 0; i < m * k; ++i) x[i] = static_cast<float>((i * 13) % 17) * 0.25f - 2.0f;
  const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
  Int8Linear(m, x.data(), k, q, nullptr, y.data(), n, 1);
  return y;
}

// The avx2 cap moves the int8 products to the AVX2 kernels (no VNNI, the
// weights in packed blocks) with the same results as before it.
TEST(Cpu, Avx2CapRunsTheAvx2PathWithTheSameResults) {
  if (!__builtin_cpu_supports("avx2") || !__builtin_cpu_supports("fma")) {
    GTEST_SKIP() << "no AVX2 on this CPU";
  }
  LimitCpuIsa("native");  // no cap: changes nothing
  const std::string native = CpuIsa();
  const std::vector<float> before = Int8Product(5, 70, 131);
  LimitCpuIsa("avx2");
  LimitCpuIsa("avx2");  // again: nothing more to do
  EXPECT_EQ(CpuIsa(), "AVX2") << "was " << native;
  EXPECT_THROW(LimitCpuIsa("avx512"), Error);  // one cap per process
  // The AVX2 kernels read the weights in packed blocks (not VNNI's
  // kernels, which a cap at AVX2 leaves out), with the same results.
  const std::vector<float> w(16 * 64, 1.0f);
  EXPECT_FALSE(QuantizeRows(w.data(), 16, 64, 64).packed.empty());
  EXPECT_EQ(Int8Product(5, 70, 131), before);
  // oneDNN's products run under the cap too.
  std::vector<float> a(4 * 3, 1.0f), b(3 * 2, 2.0f), c(4 * 2, 0.0f);
  Sgemm(Trans::kNo, Trans::kNo, 4, 2, 3, 1.0f, a.data(), 3, b.data(), 2, 0.0f,
        c.data(), 2);
  EXPECT_EQ(c, std::vector<float>(8, 6.0f));
}

TEST(Cpu, RefusesOtherNamesAndALateCap) {
  EXPECT_THROW(LimitCpuIsa("avx1024"), InvalidArgument);
  EXPECT_THROW(LimitCpuIsa(""), InvalidArgument);
  const std::string native = CpuIsa();
  // oneDNN fixes its instruction set at its first product.
  std::vector<float> a(4, 1.0f), c(4, 0.0f);
  Sgemm(Trans::kNo, Trans::kNo, 2, 2, 2, 1.0f, a.data(), 2, a.data(), 2, 0.0f,
        c.data(), 2);
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) {
    EXPECT_THROW(LimitCpuIsa("avx2"), Error);
  }
  EXPECT_EQ(CpuIsa(), native);  // nothing changed
}

}  // namespace
}  // namespace relpos

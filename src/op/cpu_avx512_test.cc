// The avx512 cap (relpos/cpu.h), in a process of its own: a process takes
// one cap (cpu_test.cc has avx2's).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "core/gemm.h"
#include "kernels/int8_linear.h"
#include "relpos/cpu.h"
#include "relpos/error.h"

namespace relpos {
namespace {

// The avx512 cap keeps AVX-512 (and VNNI's kernels) and leaves out AMX's
// tile unit: 20 activation rows, which take the AMX kernel where the CPU
// has it, give the same floats under the cap (the same integers).
TEST(CpuAvx512, CapLeavesOutAmxWithTheSameResults) {
  if (!__builtin_cpu_supports("avx512f") ||
      !__builtin_cpu_supports("avx512bw") ||
      !__builtin_cpu_supports("avx512vl") ||
      !__builtin_cpu_supports("avx512dq")) {
    EXPECT_THROW(LimitCpuIsa("avx512"), InvalidArgument);
    GTEST_SKIP() << "no AVX-512 on this CPU";
  }
  const int64_t m = 20, n = 70, k = 131;
  std::vector<float> w(n * k), x(m * k);
  for (int64_t i = 0; i < n * k; ++i)
    w[i] = static_cast<float>((i * 37) % 23) - 11.0f;
  for (int64_t i = 0; i < m * k; ++i)
    x[i] = static_cast<float>((i * 13) % 17) * 0.25f - 2.0f;
  const Int8Matrix q = QuantizeRows(w.data(), n, k, k);
  const std::string native = CpuIsa();
  const Int8Activations widths[] = {Int8Activations::k16, Int8Activations::k8};
  std::vector<float> before[2], after[2];
  for (int i = 0; i < 2; ++i) {
    before[i].resize(m * n);
    Int8Linear(m, x.data(), k, q, nullptr, before[i].data(), n, 1, widths[i]);
  }
  LimitCpuIsa("avx512");
  LimitCpuIsa("avx512");  // again: nothing more to do
  const std::string capped = CpuIsa();
  EXPECT_EQ(capped.rfind("AVX3", 0), 0u) << capped << ", was " << native;
  EXPECT_EQ(capped.find("AMX"), std::string::npos) << capped;
  if (native == "AVX3+AMX") {
    EXPECT_EQ(capped, "AVX3+VNNI");  // the same packed weights, VNNI's kernels
  }
  for (int i = 0; i < 2; ++i) {
    after[i].resize(m * n);
    Int8Linear(m, x.data(), k, q, nullptr, after[i].data(), n, 1, widths[i]);
    EXPECT_EQ(after[i], before[i]) << i;
  }
  EXPECT_THROW(LimitCpuIsa("avx2"), Error);  // one cap per process
  EXPECT_EQ(CpuIsa(), capped);
  // oneDNN's products run under the cap.
  std::vector<float> a(4 * 3, 1.0f), b(3 * 2, 2.0f), c(4 * 2, 0.0f);
  Sgemm(Trans::kNo, Trans::kNo, 4, 2, 3, 1.0f, a.data(), 3, b.data(), 2, 0.0f,
        c.data(), 2);
  EXPECT_EQ(c, std::vector<float>(8, 6.0f));
}

}  // namespace
}  // namespace relpos

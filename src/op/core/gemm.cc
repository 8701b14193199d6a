#include "core/gemm.h"

#include <oneapi/dnnl/dnnl.h>
#include <omp.h>

#include <optional>

#include "base/check.h"
#include "base/threads.h"
#include "kernels/gemv.h"

namespace relpos {
namespace {

// Products below this many multiply-adds run on the calling thread: waking the
// OpenMP team costs more than the product itself (and on a busy machine, where
// a spinning team waits for a descheduled member, far more).
constexpr int64_t kSerialMacs = int64_t{1} << 17;

}  // namespace

void Sgemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
           float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc) {
  if (m == 0 || n == 0) return;
  if (k == 0) {
    // oneDNN accepts K = 0, but make the beta semantics explicit.
    for (int64_t i = 0; i < m; ++i) {
      for (int64_t j = 0; j < n; ++j) {
        c[i * ldc + j] = beta == 0.0f ? 0.0f : beta * c[i * ldc + j];
      }
    }
    return;
  }
  if (m == 1 && trans_b == Trans::kYes && (trans_a == Trans::kNo || lda == 1)) {
    // One row through a linear layer: a matrix-vector product over B's rows.
    Gemv(n, k, alpha, b, ldb, a, beta, c, omp_get_max_threads());
    return;
  }
  std::optional<base::ScopedOmpThreads> serial;
  if (m * n * k < kSerialMacs && omp_get_max_threads() > 1) serial.emplace(1);
  const dnnl_status_t status =
      dnnl_sgemm(trans_a == Trans::kYes ? 'T' : 'N',
                 trans_b == Trans::kYes ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                 ldb, beta, c, ldc);
  if (status != dnnl_success) {
    RELPOS_THROW(Error, "dnnl_sgemm failed with status "
                            << static_cast<int>(status) << " (M=" << m
                            << ", N=" << n << ", K=" << k << ")");
  }
}

}  // namespace relpos

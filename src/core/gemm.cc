#include "core/gemm.h"

#include <oneapi/dnnl/dnnl.h>

#include "core/check.h"

namespace relpos {

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

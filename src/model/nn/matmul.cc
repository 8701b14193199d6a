#include "model/nn/matmul.h"

#include <algorithm>
#include <vector>

#include "base/threads.h"

namespace relpos::nn {

namespace {

void MatmulImpl(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                float alpha, const float* a, int64_t lda, const float* b,
                int64_t ldb, float beta, float* c, int64_t ldc) {
  Sgemm(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

void MatmulImpl(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
                double alpha, const double* a, int64_t lda, const double* b,
                int64_t ldb, double beta, double* c, int64_t ldc) {
  // Only the small gradient-check models run this, so clarity wins.
  const bool ta = trans_a == Trans::kYes, tb = trans_b == Trans::kYes;
#pragma omp parallel for schedule(static) if (m * n * k >= base::kMinParallelWork)
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double sum = 0.0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * lda + i] : a[i * lda + p];
        const double bv = tb ? b[j * ldb + p] : b[p * ldb + j];
        sum += av * bv;
      }
      double& out = c[i * ldc + j];
      out = alpha * sum + (beta == 0.0 ? 0.0 : beta * out);
    }
  }
}

}  // namespace

template <typename T>
void Matmul(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
            T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
            T* c, int64_t ldc) {
  MatmulImpl(trans_a, trans_b, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc);
}

template <typename T>
void ColumnSum(const T* x, int64_t rows, int64_t cols, T* out) {
  // Each thread owns a block of columns and walks all rows in order: the
  // summation order of every column is fixed (rows 0, 1, ...), and the inner
  // loop over contiguous columns vectorises.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (cols + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (rows * cols >= base::kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(cols, c0 + kBlock);
    T acc[kBlock] = {};
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = x + r * cols;
      for (int64_t c = c0; c < c1; ++c) acc[c - c0] += row[c];
    }
    for (int64_t c = c0; c < c1; ++c) out[c] = acc[c - c0];
  }
}

template void Matmul<float>(Trans, Trans, int64_t, int64_t, int64_t, float,
                            const float*, int64_t, const float*, int64_t, float,
                            float*, int64_t);
template void Matmul<double>(Trans, Trans, int64_t, int64_t, int64_t, double,
                             const double*, int64_t, const double*, int64_t,
                             double, double*, int64_t);
template void ColumnSum<float>(const float*, int64_t, int64_t, float*);
template void ColumnSum<double>(const double*, int64_t, int64_t, double*);

}  // namespace relpos::nn

// Row-major matrix multiply for the layers, templated on the number type:
// float goes to relpos::Sgemm (oneDNN, src/op/core/gemm.h); double runs a plain
// loop nest, used only by the small double-precision gradient checks.
#ifndef RELPOS_SRC_MODEL_NN_MATMUL_H_
#define RELPOS_SRC_MODEL_NN_MATMUL_H_

#include <cstdint>

#include "core/gemm.h"

namespace relpos::nn {

// C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C (row-major, leading
// dimensions lda, ldb, ldc). beta = 0 ignores C's old contents.
template <typename T>
void Matmul(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
            T alpha, const T* a, int64_t lda, const T* b, int64_t ldb, T beta,
            T* c, int64_t ldc);

// out[c] = sum over rows r of x[r, c], summed in row order for every column,
// so the result does not depend on the thread count. x: [rows, cols].
template <typename T>
void ColumnSum(const T* x, int64_t rows, int64_t cols, T* out);

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_MATMUL_H_

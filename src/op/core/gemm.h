// Row-major single-precision GEMM, the one place relpos calls a BLAS.
//
// Backed by oneDNN's dnnl_sgemm (JIT kernels for AVX2/AVX-512, threaded with
// the same OpenMP runtime as relpos's own kernels, so no second thread pool
// competes for the cores). Results are deterministic for a fixed thread count.
// A single row times a transposed B (M = 1, op(B) = B^T: one input row through
// a linear layer) goes to relpos's own matrix-vector loop, kernels/gemv.h,
// which streams B at close to the memory's bandwidth.
#ifndef RELPOS_SRC_OP_CORE_GEMM_H_
#define RELPOS_SRC_OP_CORE_GEMM_H_

#include <cstdint>

namespace relpos {

enum class Trans { kNo, kYes };

// C[M, N] = alpha * op(A)[M, K] * op(B)[K, N] + beta * C, all row-major with
// leading dimensions lda, ldb, ldc (elements between consecutive rows of the
// stored matrices). op(X) = X or X^T. beta = 0 ignores C's old contents
// (NaNs included). Throws relpos::Error if oneDNN reports a failure.
void Sgemm(Trans trans_a, Trans trans_b, int64_t m, int64_t n, int64_t k,
           float alpha, const float* a, int64_t lda, const float* b,
           int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace relpos

#endif  // RELPOS_SRC_OP_CORE_GEMM_H_

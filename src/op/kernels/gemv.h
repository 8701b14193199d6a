// Matrix-vector product with the matrix's rows as the dot products' second
// operand (Highway SIMD along the shared dimension, OpenMP over rows):
//
//   y[j] = alpha * sum_c w[j * ldw + c] x[c] + beta * y[j],   j < n
//
// the product one input row makes through a linear layer, y = W x with W
// stored [n, k] row-major. Sgemm (core/gemm.h) sends every M = 1 product of
// that form here: at one row the whole cost is streaming W from memory,
// and oneDNN's sgemm reached 28 GB/s on such products where this loop
// reaches 45 GB/s (docs/benchmarks.md, "Generation vs CTranslate2's
// Generator"). Each y[j] is summed in the same order whatever the thread
// count (threads take whole blocks of four rows), so results do not depend
// on it.
#ifndef RELPOS_SRC_OP_KERNELS_GEMV_H_
#define RELPOS_SRC_OP_KERNELS_GEMV_H_

#include <cstdint>

namespace relpos {

// beta = 0 ignores y's old contents (NaNs included). x has k elements, w is
// n rows of k with row stride ldw >= k, y has n elements and overlaps
// neither. Runs on up to num_threads threads (one below kGemvSerialMacs
// multiply-adds).
void Gemv(int64_t n, int64_t k, float alpha, const float* w, int64_t ldw,
          const float* x, float beta, float* y, int num_threads);

// Products below this many multiply-adds run on the calling thread: waking
// a second thread costs more than it saves.
inline constexpr int64_t kGemvSerialMacs = int64_t{1} << 17;

// Highway target Gemv dispatches to on this CPU ("AVX3", "AVX2", ...).
const char* GemvTargetName();

}  // namespace relpos

#endif  // RELPOS_SRC_OP_KERNELS_GEMV_H_

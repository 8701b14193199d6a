#include "model/nn/embedding.h"

#include <algorithm>

#include "base/threads.h"

namespace relpos::nn {

template <typename T>
void EmbeddingForward(const int32_t* tokens, const T* table, T* out,
                      const EmbeddingShape& s) {
  // Shapes: tokens [rows], table [vocab, dim], out [rows, dim].
#pragma omp parallel for schedule(static) if (s.rows * s.dim >= \
                                              base::kMinParallelWork)
  for (int64_t r = 0; r < s.rows; ++r) {
    T* o = out + r * s.dim;
    if (tokens[r] < 0) {
      std::fill(o, o + s.dim, T(0));
    } else {
      const T* src = table + static_cast<int64_t>(tokens[r]) * s.dim;
      std::copy(src, src + s.dim, o);
    }
  }
}

template <typename T>
void EmbeddingBackward(const int32_t* tokens, const T* dout, T* dtable,
                       const EmbeddingShape& s,
                       const EmbeddingBackwardOptions& options) {
  // Shapes: tokens [rows], dout [rows, dim], dtable [vocab, dim].
  // Differentiates `std::copy(src, src + s.dim, o)` (a gather): a scatter-add.
  if (!options.accumulate) std::fill(dtable, dtable + s.vocab * s.dim, T(0));
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (s.dim + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (s.rows * s.dim >= \
                                              base::kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(s.dim, c0 + kBlock);
    for (int64_t r = 0; r < s.rows; ++r) {
      if (tokens[r] < 0) continue;
      T* dst = dtable + static_cast<int64_t>(tokens[r]) * s.dim;
      const T* src = dout + r * s.dim;
      for (int64_t c = c0; c < c1; ++c) dst[c] += src[c];
    }
  }
}

template void EmbeddingForward<float>(const int32_t*, const float*, float*,
                                      const EmbeddingShape&);
template void EmbeddingForward<double>(const int32_t*, const double*, double*,
                                       const EmbeddingShape&);
template void EmbeddingBackward<float>(const int32_t*, const float*, float*,
                                       const EmbeddingShape&,
                                       const EmbeddingBackwardOptions&);
template void EmbeddingBackward<double>(const int32_t*, const double*, double*,
                                        const EmbeddingShape&,
                                        const EmbeddingBackwardOptions&);

}  // namespace relpos::nn

#include "model/nn/position_encoding.h"

#include "base/threads.h"

namespace relpos::nn {

template <typename T>
void AddPositionForward(const T* table, T* x, const PositionShape& s) {
  // Shapes: table [>= length, dim], x [batch, length, dim].
#pragma omp parallel for schedule(static) if (s.batch * s.length * s.dim >= \
                                              base::kMinParallelWork)
  for (int64_t row = 0; row < s.batch * s.length; ++row) {
    const T* t = table + (row % s.length) * s.dim;
    T* xr = x + row * s.dim;
    for (int64_t c = 0; c < s.dim; ++c) xr[c] += t[c];
  }
}

template <typename T>
void AddPositionBackward(const T* dx, T* dtable, const PositionShape& s) {
  // Shapes: dx [batch, length, dim], dtable [>= length, dim].
  // Differentiates `xr[c] += t[c]`.
#pragma omp parallel for schedule(static) if (s.batch * s.length * s.dim >= \
                                              base::kMinParallelWork)
  for (int64_t p = 0; p < s.length; ++p) {
    T* d = dtable + p * s.dim;
    for (int64_t c = 0; c < s.dim; ++c) d[c] = T(0);
    for (int64_t b = 0; b < s.batch; ++b) {
      const T* src = dx + (b * s.length + p) * s.dim;
      for (int64_t c = 0; c < s.dim; ++c) d[c] += src[c];
    }
  }
}

template void AddPositionForward<float>(const float*, float*,
                                        const PositionShape&);
template void AddPositionForward<double>(const double*, double*,
                                         const PositionShape&);
template void AddPositionBackward<float>(const float*, float*,
                                         const PositionShape&);
template void AddPositionBackward<double>(const double*, double*,
                                          const PositionShape&);

}  // namespace relpos::nn

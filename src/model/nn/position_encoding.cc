#include "model/nn/position_encoding.h"

#include <cmath>

#include "base/threads.h"

namespace relpos::nn {

template <typename T>
void SinusoidalTable(int64_t length, int64_t dim, T* table) {
  // Shapes: table [length, dim].
  for (int64_t p = 0; p < length; ++p) {
    for (int64_t c = 0; c < dim; ++c) {
      const int64_t pair = c / 2;  // dims 2i and 2i+1 share a frequency
      const double freq =
          std::exp(-std::log(10000.0) * static_cast<double>(2 * pair) /
                   static_cast<double>(dim));
      const double angle = static_cast<double>(p) * freq;
      table[p * dim + c] =
          static_cast<T>(c % 2 == 0 ? std::sin(angle) : std::cos(angle));
    }
  }
}

template <typename T>
void XlSinusoidTable(int64_t k, int64_t dim, T* table) {
  // Shapes: table [2k+1, dim].
  const int64_t half = dim / 2;
  for (int64_t row = 0; row <= 2 * k; ++row) {
    const double x = static_cast<double>(k - row);  // XL's i - j = -r
    for (int64_t t = 0; t < half; ++t) {
      const double freq =
          std::exp(-std::log(10000.0) * static_cast<double>(2 * t) /
                   static_cast<double>(dim));
      table[row * dim + t] = static_cast<T>(std::sin(x * freq));
      table[row * dim + half + t] = static_cast<T>(std::cos(x * freq));
    }
  }
}

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

template void SinusoidalTable<float>(int64_t, int64_t, float*);
template void SinusoidalTable<double>(int64_t, int64_t, double*);
template void XlSinusoidTable<float>(int64_t, int64_t, float*);
template void XlSinusoidTable<double>(int64_t, int64_t, double*);
template void AddPositionForward<float>(const float*, float*,
                                        const PositionShape&);
template void AddPositionForward<double>(const double*, double*,
                                         const PositionShape&);
template void AddPositionBackward<float>(const float*, float*,
                                         const PositionShape&);
template void AddPositionBackward<double>(const double*, double*,
                                          const PositionShape&);

}  // namespace relpos::nn

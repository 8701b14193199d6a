#include "nn/layer_norm.h"

#include <algorithm>
#include <cmath>

#include "nn/parallel.h"

namespace relpos::nn {

template <typename T>
void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean,
                      T* rstd, const LayerNormShape& s) {
  // Shapes: x, y [rows, dim]; gamma, beta [dim]; mean, rstd [rows].
  // Row statistics are accumulated in double: two passes (mean, then the
  // centred second moment) avoid the cancellation of E[x^2] - E[x]^2.
#pragma omp parallel for schedule(static) if (s.rows * s.dim >= \
                                              kMinParallelWork)
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* xr = x + r * s.dim;
    double sum = 0.0;
    for (int64_t c = 0; c < s.dim; ++c) sum += xr[c];
    const double mu = sum / static_cast<double>(s.dim);
    double sq = 0.0;
    for (int64_t c = 0; c < s.dim; ++c) {
      const double d = xr[c] - mu;
      sq += d * d;
    }
    const double var = sq / static_cast<double>(s.dim);
    const T m = static_cast<T>(mu);
    const T rs = static_cast<T>(1.0 / std::sqrt(var + s.eps));
    mean[r] = m;
    rstd[r] = rs;
    T* yr = y + r * s.dim;
    for (int64_t c = 0; c < s.dim; ++c) {
      yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
    }
  }
}

template <typename T>
void LayerNormBackward(const T* x, const T* gamma, const T* mean, const T* rstd,
                       const T* dy, T* dx, T* dgamma, T* dbeta,
                       const LayerNormShape& s,
                       const LayerNormBackwardOptions& options) {
  // Shapes: x, dy, dx [rows, dim]; gamma, dgamma, dbeta [dim].
  // Differentiates `yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c]`.
  const double inv_dim = 1.0 / static_cast<double>(s.dim);
#pragma omp parallel for schedule(static) if (s.rows * s.dim >= \
                                              kMinParallelWork)
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* xr = x + r * s.dim;
    const T* dyr = dy + r * s.dim;
    const T m = mean[r], rs = rstd[r];
    double sum_g = 0.0, sum_gx = 0.0;
    for (int64_t c = 0; c < s.dim; ++c) {
      const double g = static_cast<double>(dyr[c]) * gamma[c];
      sum_g += g;
      sum_gx += g * ((xr[c] - m) * rs);
    }
    const T mean_g = static_cast<T>(sum_g * inv_dim);
    const T mean_gx = static_cast<T>(sum_gx * inv_dim);
    T* dxr = dx + r * s.dim;
    for (int64_t c = 0; c < s.dim; ++c) {
      const T xhat = (xr[c] - m) * rs;
      const T v = rs * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
      dxr[c] = options.accumulate_dx ? dxr[c] + v : v;
    }
  }
  // Parameter gradients: column sums in row order (deterministic for any
  // thread count), each thread owning a block of columns.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (s.dim + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (s.rows * s.dim >= \
                                              kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t c0 = blk * kBlock, c1 = std::min(s.dim, c0 + kBlock);
    T acc_g[kBlock] = {}, acc_b[kBlock] = {};
    for (int64_t r = 0; r < s.rows; ++r) {
      const T* xr = x + r * s.dim;
      const T* dyr = dy + r * s.dim;
      const T m = mean[r], rs = rstd[r];
      for (int64_t c = c0; c < c1; ++c) {
        acc_g[c - c0] += dyr[c] * ((xr[c] - m) * rs);
        acc_b[c - c0] += dyr[c];
      }
    }
    for (int64_t c = c0; c < c1; ++c) {
      dgamma[c] = acc_g[c - c0];
      dbeta[c] = acc_b[c - c0];
    }
  }
}

template void LayerNormForward<float>(const float*, const float*, const float*,
                                      float*, float*, float*,
                                      const LayerNormShape&);
template void LayerNormForward<double>(const double*, const double*,
                                       const double*, double*, double*, double*,
                                       const LayerNormShape&);
template void LayerNormBackward<float>(const float*, const float*, const float*,
                                       const float*, const float*, float*,
                                       float*, float*, const LayerNormShape&,
                                       const LayerNormBackwardOptions&);
template void LayerNormBackward<double>(const double*, const double*,
                                        const double*, const double*,
                                        const double*, double*, double*,
                                        double*, const LayerNormShape&,
                                        const LayerNormBackwardOptions&);

}  // namespace relpos::nn

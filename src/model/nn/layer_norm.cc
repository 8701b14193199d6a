#include "model/nn/layer_norm.h"

#include <algorithm>
#include <cmath>

#include "base/threads.h"

namespace relpos::nn {

namespace {

// Rows are normalised kRows at a time: each row's statistics still
// accumulate in its own fixed order (column 0, 1, ...), so results are those
// of one row at a time, bit for bit, but the kRows independent
// accumulation chains overlap instead of waiting on each other's latency.
constexpr int64_t kRows = 8;

// Forward over `K` consecutive rows of x (the block's first row at x).
template <int64_t K, typename T>
void ForwardRows(const T* x, const T* gamma, const T* beta, T* y, T* mean,
                 T* rstd, const LayerNormShape& s) {
  const int64_t dim = s.dim;
  double sum[K] = {};
  for (int64_t c = 0; c < dim; ++c) {
    for (int64_t j = 0; j < K; ++j) sum[j] += x[j * dim + c];
  }
  double mu[K], sq[K] = {};
  for (int64_t j = 0; j < K; ++j) mu[j] = sum[j] / static_cast<double>(dim);
  for (int64_t c = 0; c < dim; ++c) {
    for (int64_t j = 0; j < K; ++j) {
      const double d = x[j * dim + c] - mu[j];
      sq[j] += d * d;
    }
  }
  for (int64_t j = 0; j < K; ++j) {
    const double var = sq[j] / static_cast<double>(dim);
    const T m = static_cast<T>(mu[j]);
    const T rs = static_cast<T>(1.0 / std::sqrt(var + s.eps));
    mean[j] = m;
    rstd[j] = rs;
    const T* xr = x + j * dim;
    T* yr = y + j * dim;
    for (int64_t c = 0; c < dim; ++c) {
      yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c];
    }
  }
}

// Runs body(first_row, count) over blocks of kRows rows (count < kRows only
// for the last block), in parallel when the work is large enough.
template <typename Body>
void ForRowBlocks(const LayerNormShape& s, Body body) {
  const int64_t blocks = (s.rows + kRows - 1) / kRows;
#pragma omp parallel for schedule(static) if (s.rows * s.dim >= \
                                              base::kMinParallelWork)
  for (int64_t blk = 0; blk < blocks; ++blk) {
    const int64_t r0 = blk * kRows;
    body(r0, std::min(kRows, s.rows - r0));
  }
}

template <typename T>
void ForwardBlock(const T* x, const T* gamma, const T* beta, T* y, T* mean,
                  T* rstd, const LayerNormShape& s, int64_t r0, int64_t count) {
  const int64_t o = r0 * s.dim;
  if (count == kRows) {
    ForwardRows<kRows>(x + o, gamma, beta, y + o, mean + r0, rstd + r0, s);
    return;
  }
  for (int64_t j = 0; j < count; ++j) {
    ForwardRows<1>(x + o + j * s.dim, gamma, beta, y + o + j * s.dim,
                   mean + r0 + j, rstd + r0 + j, s);
  }
}

// Backward's row pass over `K` consecutive rows (block's first row at x, dy,
// dx, mean, rstd).
template <int64_t K, typename T>
void BackwardRows(const T* x, const T* gamma, const T* mean, const T* rstd,
                  const T* dy, T* dx, const LayerNormShape& s,
                  bool accumulate_dx) {
  const int64_t dim = s.dim;
  const double inv_dim = 1.0 / static_cast<double>(dim);
  double sum_g[K] = {}, sum_gx[K] = {};
  for (int64_t c = 0; c < dim; ++c) {
    for (int64_t j = 0; j < K; ++j) {
      const double g = static_cast<double>(dy[j * dim + c]) * gamma[c];
      sum_g[j] += g;
      sum_gx[j] += g * ((x[j * dim + c] - mean[j]) * rstd[j]);
    }
  }
  for (int64_t j = 0; j < K; ++j) {
    const T m = mean[j], rs = rstd[j];
    const T mean_g = static_cast<T>(sum_g[j] * inv_dim);
    const T mean_gx = static_cast<T>(sum_gx[j] * inv_dim);
    const T* xr = x + j * dim;
    const T* dyr = dy + j * dim;
    T* dxr = dx + j * dim;
    for (int64_t c = 0; c < dim; ++c) {
      const T xhat = (xr[c] - m) * rs;
      const T v = rs * (dyr[c] * gamma[c] - mean_g - xhat * mean_gx);
      dxr[c] = accumulate_dx ? dxr[c] + v : v;
    }
  }
}

}  // namespace

template <typename T>
void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean,
                      T* rstd, const LayerNormShape& s) {
  // Shapes: x, y [rows, dim]; gamma, beta [dim]; mean, rstd [rows].
  // Row statistics are accumulated in double: two passes (mean, then the
  // centred second moment) avoid the cancellation of E[x^2] - E[x]^2.
  ForRowBlocks(s, [&](int64_t r0, int64_t count) {
    ForwardBlock(x, gamma, beta, y, mean, rstd, s, r0, count);
  });
}

template <typename T>
void AddLayerNormForward(const T* x, const T* branch, const T* gamma,
                         const T* beta, T* h, T* y, T* mean, T* rstd,
                         const LayerNormShape& s) {
  // Shapes: x, branch, h, y [rows, dim]; gamma, beta [dim]; mean, rstd
  // [rows]. h = x + branch, then exactly LayerNormForward(h), block by block
  // while the block's h is still in cache.
  ForRowBlocks(s, [&](int64_t r0, int64_t count) {
    const int64_t o = r0 * s.dim, n = count * s.dim;
    for (int64_t i = o; i < o + n; ++i) h[i] = x[i] + branch[i];
    ForwardBlock(h, gamma, beta, y, mean, rstd, s, r0, count);
  });
}

template <typename T>
void LayerNormBackward(const T* x, const T* gamma, const T* mean, const T* rstd,
                       const T* dy, T* dx, T* dgamma, T* dbeta,
                       const LayerNormShape& s,
                       const LayerNormBackwardOptions& options) {
  // Shapes: x, dy, dx [rows, dim]; gamma, dgamma, dbeta [dim].
  // Differentiates `yr[c] = (xr[c] - m) * rs * gamma[c] + beta[c]`.
  const bool acc = options.accumulate_dx;
  ForRowBlocks(s, [&](int64_t r0, int64_t count) {
    const int64_t o = r0 * s.dim;
    if (count == kRows) {
      BackwardRows<kRows>(x + o, gamma, mean + r0, rstd + r0, dy + o, dx + o, s,
                          acc);
      return;
    }
    for (int64_t j = 0; j < count; ++j) {
      const int64_t oj = o + j * s.dim;
      BackwardRows<1>(x + oj, gamma, mean + r0 + j, rstd + r0 + j, dy + oj,
                      dx + oj, s, acc);
    }
  });
  // Parameter gradients: column sums in row order (deterministic for any
  // thread count), each thread owning a block of columns.
  constexpr int64_t kBlock = 64;
  const int64_t blocks = (s.dim + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (s.rows * s.dim >= \
                                              base::kMinParallelWork)
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
template void AddLayerNormForward<float>(const float*, const float*,
                                         const float*, const float*, float*,
                                         float*, float*, float*,
                                         const LayerNormShape&);
template void AddLayerNormForward<double>(const double*, const double*,
                                          const double*, const double*, double*,
                                          double*, double*, double*,
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

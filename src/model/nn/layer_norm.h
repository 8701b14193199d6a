// Layer normalisation over the last dimension (Ba, Kiros and Hinton, 2016):
//   y = (x - mean) / sqrt(var + eps) * gamma + beta
// with the biased variance, as torch.nn.LayerNorm.
#ifndef RELPOS_SRC_MODEL_NN_LAYER_NORM_H_
#define RELPOS_SRC_MODEL_NN_LAYER_NORM_H_

#include <cstdint>

namespace relpos::nn {

struct LayerNormShape {
  int64_t rows = 0;
  int64_t dim = 0;
  double eps = 1e-5;
};

// x [rows, dim], gamma [dim], beta [dim] -> y [rows, dim]; saves mean [rows]
// and rstd [rows] = 1 / sqrt(var + eps) for the backward pass.
template <typename T>
void LayerNormForward(const T* x, const T* gamma, const T* beta, T* y, T* mean,
                      T* rstd, const LayerNormShape& shape);

// h = x + branch (a residual connection), then y = LayerNorm(h) exactly as
// LayerNormForward(h, ...) computes it, in one pass over the rows. x,
// branch, h, y [rows, dim]; h may alias x or branch.
template <typename T>
void AddLayerNormForward(const T* x, const T* branch, const T* gamma,
                         const T* beta, T* h, T* y, T* mean, T* rstd,
                         const LayerNormShape& shape);

struct LayerNormBackwardOptions {
  // true: dx += (gradient); used to add into a residual stream's gradient.
  bool accumulate_dx = false;
};

// Differentiates `y = (x - mean) * rstd * gamma + beta`. With xhat = (x -
// mean) rstd and g = dy * gamma:
//   dx     = rstd * (g - mean(g) - xhat * mean(g * xhat))     [rows, dim]
//   dgamma = sum_rows dy * xhat,  dbeta = sum_rows dy          (overwritten)
template <typename T>
void LayerNormBackward(const T* x, const T* gamma, const T* mean, const T* rstd,
                       const T* dy, T* dx, T* dgamma, T* dbeta,
                       const LayerNormShape& shape,
                       const LayerNormBackwardOptions& options = {});

}  // namespace relpos::nn

#endif  // RELPOS_SRC_MODEL_NN_LAYER_NORM_H_

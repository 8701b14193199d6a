// GELU forward/backward. double: std::erf, exact (the gradient checks run in
// double). float: a SIMD version (Highway dynamic dispatch, the
// hwy/examples/skeleton.cc recipe) because libm's scalar erff dominated the
// element-wise cost of a training step (~10% of it at d_model = 512).
//
// The float erf is Abramowitz and Stegun 7.1.26: for z >= 0,
//   erf(z) ~= 1 - (a1 t + a2 t^2 + a3 t^3 + a4 t^4 + a5 t^5) exp(-z^2),
//   t = 1 / (1 + p z),  |error| <= 1.5e-7,
// odd in z. With exp(-z^2) = exp(-x^2 / 2) shared with the normal density,
// the backward pass costs one exp per element as well.
#include "model/nn/gelu.h"

// foreach_target.h must come first: it re-includes this file once per SIMD
// target.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/nn/gelu.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace relpos::nn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// cdf = Phi(x) = 0.5 (1 + erf(x / sqrt(2))), pdf = phi(x).
template <class D, class V = hn::Vec<D>>
HWY_INLINE void NormalCdfPdf(D d, V x, V* cdf, V* pdf) {
  const V one = hn::Set(d, 1.0f);
  // z = |x| / sqrt(2), clamped at 9: erf(9) = 1 in float and exp(-81) is
  // still a normal float, so no denormals or underflow reach the result.
  const V z = hn::Min(hn::Mul(hn::Abs(x), hn::Set(d, 0.70710678118654752f)),
                      hn::Set(d, 9.0f));
  const V t = hn::Div(one, hn::MulAdd(hn::Set(d, 0.3275911f), z, one));
  V poly = hn::Set(d, 1.061405429f);
  poly = hn::MulAdd(poly, t, hn::Set(d, -1.453152027f));
  poly = hn::MulAdd(poly, t, hn::Set(d, 1.421413741f));
  poly = hn::MulAdd(poly, t, hn::Set(d, -0.284496736f));
  poly = hn::MulAdd(poly, t, hn::Set(d, 0.254829592f));
  poly = hn::Mul(poly, t);
  const V e = hn::Exp(d, hn::Neg(hn::Mul(z, z)));  // exp(-x^2 / 2)
  const V erf_abs = hn::NegMulAdd(poly, e, one);   // 1 - poly * e
  const V erf = hn::CopySign(erf_abs, x);
  *cdf = hn::Mul(hn::Set(d, 0.5f), hn::Add(one, erf));
  *pdf = hn::Mul(e, hn::Set(d, 0.39894228040143268f));  // 1 / sqrt(2 pi)
}

// Applies `op(d, x_vec, dy_vec)` to n elements; the tail goes through a
// zero-padded buffer so every element sees the same vector code.
template <class Op>
HWY_INLINE void ForEachVector(const float* x, const float* dy, float* out,
                              int64_t n, Op op) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const auto g = dy ? hn::LoadU(d, dy + i) : hn::Zero(d);
    hn::StoreU(op(d, hn::LoadU(d, x + i), g), d, out + i);
  }
  if (i < n) {
    HWY_ALIGN float bx[hn::MaxLanes(d)] = {}, bg[hn::MaxLanes(d)] = {},
                    bo[hn::MaxLanes(d)];
    for (int64_t j = i; j < n; ++j) {
      bx[j - i] = x[j];
      if (dy) bg[j - i] = dy[j];
    }
    hn::Store(op(d, hn::Load(d, bx), hn::Load(d, bg)), d, bo);
    for (int64_t j = i; j < n; ++j) out[j] = bo[j - i];
  }
}

void GeluForwardF32(const float* x, float* y, int64_t n) {
  ForEachVector(x, nullptr, y, n, [](auto d, auto v, auto) {
    hn::Vec<decltype(d)> cdf, pdf;
    NormalCdfPdf(d, v, &cdf, &pdf);
    return hn::Mul(v, cdf);
  });
}

void GeluBackwardF32(const float* x, const float* dy, float* dx, int64_t n) {
  ForEachVector(x, dy, dx, n, [](auto d, auto v, auto g) {
    hn::Vec<decltype(d)> cdf, pdf;
    NormalCdfPdf(d, v, &cdf, &pdf);
    return hn::Mul(g, hn::MulAdd(v, pdf, cdf));  // dy (Phi + x phi)
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace relpos::nn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <cmath>

#include "base/threads.h"

namespace relpos::nn {

HWY_EXPORT(GeluForwardF32);
HWY_EXPORT(GeluBackwardF32);

namespace {

// Chunks for the parallel loop: element-wise, so any split gives identical
// results; 4096 keeps the per-chunk dispatch overhead negligible.
constexpr int64_t kChunk = 4096;

void GeluForwardImpl(const float* x, float* y, int64_t n) {
  // Shapes: x, y [n].
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= base::kMinParallelWork)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
    HWY_DYNAMIC_DISPATCH(GeluForwardF32)(x + begin, y + begin, len);
  }
}

void GeluBackwardImpl(const float* x, const float* dy, float* dx, int64_t n) {
  // Shapes: x, dy, dx [n].
  // Differentiates `hn::Mul(v, cdf)`: dx = dy (Phi(x) + x phi(x)).
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= base::kMinParallelWork)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
    HWY_DYNAMIC_DISPATCH(GeluBackwardF32)
    (x + begin, dy + begin, dx + begin, len);
  }
}

void GeluForwardImpl(const double* x, double* y, int64_t n) {
  // Shapes: x, y [n].
#pragma omp parallel for schedule(static) if (n >= base::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    y[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] * M_SQRT1_2));
  }
}

void GeluBackwardImpl(const double* x, const double* dy, double* dx,
                      int64_t n) {
  // Shapes: x, dy, dx [n].
  // Differentiates `y[i] = 0.5 * x[i] * (1.0 + std::erf(x[i] * M_SQRT1_2))`.
  const double inv_sqrt_2pi = 0.5 * M_2_SQRTPI * M_SQRT1_2;
#pragma omp parallel for schedule(static) if (n >= base::kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    const double cdf = 0.5 * (1.0 + std::erf(x[i] * M_SQRT1_2));
    const double pdf = inv_sqrt_2pi * std::exp(-0.5 * x[i] * x[i]);
    dx[i] = dy[i] * (cdf + x[i] * pdf);
  }
}

}  // namespace

template <typename T>
void GeluForward(const T* x, T* y, int64_t n) {
  GeluForwardImpl(x, y, n);
}

template <typename T>
void GeluBackward(const T* x, const T* dy, T* dx, int64_t n) {
  GeluBackwardImpl(x, dy, dx, n);
}

template void GeluForward<float>(const float*, float*, int64_t);
template void GeluForward<double>(const double*, double*, int64_t);
template void GeluBackward<float>(const float*, const float*, float*, int64_t);
template void GeluBackward<double>(const double*, const double*, double*,
                                   int64_t);

}  // namespace relpos::nn
#endif  // HWY_ONCE

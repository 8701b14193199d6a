// Softmax cross-entropy. double: scalar, with libm's exp (the gradient
// checks run in double). float: the exponentials are a SIMD loop (Highway
// dynamic dispatch, as in gelu.cc) because libm's scalar exp dominated the
// loss: at a vocabulary of 8000 the loss and its gradient were a fifth of a
// seq2seq training step.
//
// The float path gives the same bits on AVX2 and AVX-512: the maximum, the
// exponentials exp(z - max) (Highway's Exp, 1 ulp) and the gradient
// scale (e / sum - eps / V) are element-wise, each lane the same
// instructions, with the fused multiply-adds both have; the sum of the
// exponentials is taken afterwards in double, in a fixed order (eight
// interleaved partial sums, then added in index order) that does not depend
// on the vector width.
#include "model/nn/cross_entropy.h"

// foreach_target.h must come first: it re-includes this file once per SIMD
// target.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/nn/cross_entropy.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "hwy/contrib/math/math-inl.h"
// clang-format on

HWY_BEFORE_NAMESPACE();
namespace relpos::nn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// The largest of row[0, n), n >= 1.
float RowMaxF32(const float* row, int64_t n) {
  const hn::ScalableTag<float> d;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  auto mx = hn::Set(d, row[0]);
  int64_t v = 0;
  for (; v + lanes <= n; v += lanes) mx = hn::Max(mx, hn::LoadU(d, row + v));
  float out = hn::GetLane(hn::MaxOfLanes(d, mx));
  for (; v < n; ++v) out = row[v] > out ? row[v] : out;
  return out;
}

// out[v] = f(in[v]) for v in [0, n), f a vector function; the tail goes
// through a buffer padded with `pad`, so every element sees the same vector
// code.
template <class D, class F>
HWY_INLINE void ForEachVector(D d, const float* in, int64_t n, float pad,
                              float* out, F f) {
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  int64_t v = 0;
  for (; v + lanes <= n; v += lanes) {
    hn::StoreU(f(hn::LoadU(d, in + v)), d, out + v);
  }
  if (v < n) {
    HWY_ALIGN float buf[hn::MaxLanes(d)];
    for (int64_t j = 0; j < lanes; ++j) buf[j] = v + j < n ? in[v + j] : pad;
    hn::Store(f(hn::Load(d, buf)), d, buf);
    for (int64_t j = v; j < n; ++j) out[j] = buf[j - v];
  }
}

// out[v] = exp(row[v] - shift) for v in [0, n).
void RowExpF32(const float* row, int64_t n, float shift, float* out) {
  const hn::ScalableTag<float> d;
  const auto vshift = hn::Set(d, shift);
  ForEachVector(d, row, n, shift, out, [&](auto z) {
    return hn::Exp(d, hn::Sub(z, vshift));
  });
}

// d[v] = scale * (e[v] inv_sum - uniform), the multiply-add fused.
void SoftmaxGradF32(const float* e, int64_t n, float inv_sum, float scale,
                    float uniform, float* out) {
  const hn::ScalableTag<float> d;
  const auto vinv = hn::Set(d, inv_sum), vscale = hn::Set(d, scale),
             vneg = hn::Set(d, -uniform);
  ForEachVector(d, e, n, 0.0f, out, [&](auto x) {
    return hn::Mul(vscale, hn::MulAdd(x, vinv, vneg));
  });
}

}  // namespace HWY_NAMESPACE
}  // namespace relpos::nn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <cmath>
#include <vector>

#include "base/threads.h"

namespace relpos::nn {

HWY_EXPORT(RowMaxF32);
HWY_EXPORT(RowExpF32);
HWY_EXPORT(SoftmaxGradF32);

namespace {

// sum_v x[v] in double, in an order fixed by n alone: eight interleaved
// partial sums (x[j], x[j + 8], ...), then added in index order.
template <typename T>
double FixedOrderSum(const T* x, int64_t n) {
  double part[8] = {};
  int64_t v = 0;
  for (; v + 8 <= n; v += 8) {
    for (int j = 0; j < 8; ++j) part[j] += static_cast<double>(x[v + j]);
  }
  for (int j = 0; v < n; ++v, ++j) part[j] += static_cast<double>(x[v]);
  double sum = 0.0;
  for (double p : part) sum += p;
  return sum;
}

// The first index of the largest value of row (ties to the lowest id).
template <typename T>
int32_t FirstIndexOf(const T* row, int64_t vocab, T value) {
  for (int64_t v = 0; v < vocab; ++v) {
    if (row[v] == value) return static_cast<int32_t>(v);
  }
  return 0;  // NaN in the row: no element equals the maximum
}

// Max, argmax and log-sum-exp of one row; `scratch` holds vocab values.
// double: libm's exp, summed in index order.
double RowLogSumExp(const double* row, int64_t vocab, double* /*scratch*/,
                    double* max_out, double* lse_out, int32_t* argmax) {
  double mx = row[0];
  int32_t arg = 0;
  for (int64_t v = 1; v < vocab; ++v) {
    if (row[v] > mx) {
      mx = row[v];
      arg = static_cast<int32_t>(v);
    }
  }
  double sum = 0.0;
  for (int64_t v = 0; v < vocab; ++v) sum += std::exp(row[v] - mx);
  *max_out = mx;
  *lse_out = mx + std::log(sum);
  *argmax = arg;
  return sum;
}

// float: the SIMD max and exponentials (left in scratch: exp(row - max)),
// the sum in double (FixedOrderSum). Returns the sum.
double RowLogSumExp(const float* row, int64_t vocab, float* scratch,
                    double* max_out, double* lse_out, int32_t* argmax) {
  const float mx = HWY_DYNAMIC_DISPATCH(RowMaxF32)(row, vocab);
  HWY_DYNAMIC_DISPATCH(RowExpF32)(row, vocab, mx, scratch);
  const double sum = FixedOrderSum(scratch, vocab);
  *max_out = mx;
  *lse_out = static_cast<double>(mx) + std::log(sum);
  *argmax = FirstIndexOf(row, vocab, mx);
  return sum;
}

// d[v] = scale * (softmax(row)[v] - uniform), after RowLogSumExp (its lse
// and sum; float: its scratch).
void SoftmaxMinusUniform(const double* row, int64_t vocab, const double*,
                         double lse, double /*sum*/, double scale,
                         double uniform, double* d) {
  for (int64_t v = 0; v < vocab; ++v) {
    d[v] = scale * (std::exp(row[v] - lse) - uniform);
  }
}

// float: softmax = exp(row - max) / sum from the scratch, so the relative
// error is a few ulp whatever the size of the logits (exp(row - lse) with
// lse rounded to float would lose |lse| 2^-24).
void SoftmaxMinusUniform(const float*, int64_t vocab, const float* scratch,
                         double /*lse*/, double sum, double scale,
                         double uniform, float* d) {
  HWY_DYNAMIC_DISPATCH(SoftmaxGradF32)
  (scratch, vocab, static_cast<float>(1.0 / sum), static_cast<float>(scale),
   static_cast<float>(uniform), d);
}

}  // namespace

template <typename T>
CrossEntropyResult CrossEntropyForward(const T* logits, const int32_t* targets,
                                       int32_t* predictions,
                                       const CrossEntropyShape& s,
                                       const CrossEntropyOptions& o) {
  // Shapes: logits [rows, vocab], targets [rows], predictions [rows].
  // Per-row results go to a buffer and are summed in row order afterwards,
  // so the total does not depend on the thread count.
  const double eps = o.label_smoothing;
  std::vector<double> row_loss(s.rows, 0.0);
  std::vector<double> row_smoothed(eps > 0 ? s.rows : 0, 0.0);
  std::vector<int32_t> row_arg(s.rows, 0);
#pragma omp parallel if (s.rows * s.vocab >= base::kMinParallelWork)
  {
    std::vector<T> scratch(s.vocab);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < s.rows; ++r) {
      const T* row = logits + r * s.vocab;
      double mx, lse;
      RowLogSumExp(row, s.vocab, scratch.data(), &mx, &lse, &row_arg[r]);
      if (targets[r] < 0) continue;
      row_loss[r] = lse - static_cast<double>(row[targets[r]]);
      if (eps > 0) {
        // (1 - eps) (lse - z_y) + (eps / V) sum_c (lse - z_c)
        const double sum = FixedOrderSum(row, s.vocab);
        row_smoothed[r] = (1.0 - eps) * row_loss[r] +
                          eps * (lse - sum / static_cast<double>(s.vocab));
      }
    }
  }
  CrossEntropyResult result;
  for (int64_t r = 0; r < s.rows; ++r) {
    if (predictions != nullptr) predictions[r] = row_arg[r];
    if (targets[r] < 0) continue;
    result.loss_sum += row_loss[r];
    if (eps > 0) result.smoothed_sum += row_smoothed[r];
    ++result.count;
    if (row_arg[r] == targets[r]) ++result.correct;
  }
  if (eps == 0) result.smoothed_sum = result.loss_sum;
  return result;
}

template <typename T>
void CrossEntropyBackward(const T* logits, const int32_t* targets, T scale,
                          T* dlogits, const CrossEntropyShape& s,
                          const CrossEntropyOptions& o) {
  // Shapes: logits, dlogits [rows, vocab], targets [rows].
  // Differentiates `row_loss[r] = lse - row[targets[r]]` or, with label
  // smoothing, `row_smoothed[r]`: softmax minus the target distribution.
  const double eps = o.label_smoothing;
  const double uniform = eps / static_cast<double>(s.vocab);
#pragma omp parallel if (s.rows * s.vocab >= base::kMinParallelWork)
  {
    std::vector<T> scratch(s.vocab);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < s.rows; ++r) {
      T* d = dlogits + r * s.vocab;
      if (targets[r] < 0) {
        std::fill(d, d + s.vocab, T(0));
        continue;
      }
      const T* row = logits + r * s.vocab;
      double mx, lse;
      int32_t arg;
      const double sum =
          RowLogSumExp(row, s.vocab, scratch.data(), &mx, &lse, &arg);
      SoftmaxMinusUniform(row, s.vocab, scratch.data(), lse, sum, scale,
                          uniform, d);
      d[targets[r]] -= static_cast<T>(scale * (1.0 - eps));
    }
  }
}

template <typename T>
void LogSumExpRows(const T* logits, int64_t rows, int64_t vocab, double* lse) {
#pragma omp parallel if (rows * vocab >= base::kMinParallelWork)
  {
    std::vector<T> scratch(vocab);
#pragma omp for schedule(static)
    for (int64_t r = 0; r < rows; ++r) {
      double mx;
      int32_t arg;
      RowLogSumExp(logits + r * vocab, vocab, scratch.data(), &mx, &lse[r],
                   &arg);
    }
  }
}

template CrossEntropyResult CrossEntropyForward<float>(
    const float*, const int32_t*, int32_t*, const CrossEntropyShape&,
    const CrossEntropyOptions&);
template CrossEntropyResult CrossEntropyForward<double>(
    const double*, const int32_t*, int32_t*, const CrossEntropyShape&,
    const CrossEntropyOptions&);
template void CrossEntropyBackward<float>(const float*, const int32_t*, float,
                                          float*, const CrossEntropyShape&,
                                          const CrossEntropyOptions&);
template void CrossEntropyBackward<double>(const double*, const int32_t*,
                                           double, double*,
                                           const CrossEntropyShape&,
                                           const CrossEntropyOptions&);
template void LogSumExpRows<float>(const float*, int64_t, int64_t, double*);
template void LogSumExpRows<double>(const double*, int64_t, int64_t, double*);

}  // namespace relpos::nn

#endif  // HWY_ONCE

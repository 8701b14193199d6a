#include "nn/cross_entropy.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "nn/parallel.h"

namespace relpos::nn {
namespace {

// Max and log-sum-exp of one row, in double (vocabularies are small here and
// the cost is negligible next to the output GEMM).
template <typename T>
void RowLogSumExp(const T* row, int64_t vocab, double* max_out, double* lse_out,
                  int32_t* argmax) {
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
#pragma omp parallel for schedule(static) if (s.rows * s.vocab >= \
                                              kMinParallelWork)
  for (int64_t r = 0; r < s.rows; ++r) {
    const T* row = logits + r * s.vocab;
    double mx, lse;
    RowLogSumExp(row, s.vocab, &mx, &lse, &row_arg[r]);
    if (targets[r] < 0) continue;
    row_loss[r] = lse - static_cast<double>(row[targets[r]]);
    if (eps > 0) {
      // (1 - eps) (lse - z_y) + (eps / V) sum_c (lse - z_c)
      double sum = 0.0;
      for (int64_t v = 0; v < s.vocab; ++v) sum += static_cast<double>(row[v]);
      row_smoothed[r] = (1.0 - eps) * row_loss[r] +
                        eps * (lse - sum / static_cast<double>(s.vocab));
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
#pragma omp parallel for schedule(static) if (s.rows * s.vocab >= \
                                              kMinParallelWork)
  for (int64_t r = 0; r < s.rows; ++r) {
    T* d = dlogits + r * s.vocab;
    if (targets[r] < 0) {
      std::fill(d, d + s.vocab, T(0));
      continue;
    }
    const T* row = logits + r * s.vocab;
    double mx, lse;
    int32_t arg;
    RowLogSumExp(row, s.vocab, &mx, &lse, &arg);
    if (eps == 0) {
      for (int64_t v = 0; v < s.vocab; ++v) {
        d[v] = static_cast<T>(scale * std::exp(row[v] - lse));
      }
      d[targets[r]] -= scale;
      continue;
    }
    for (int64_t v = 0; v < s.vocab; ++v) {
      d[v] = static_cast<T>(scale * (std::exp(row[v] - lse) - uniform));
    }
    d[targets[r]] -= static_cast<T>(scale * (1.0 - eps));
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

}  // namespace relpos::nn

// Driver of the matrix-vector product (src/op/kernels/gemv.h): the per-target
// loop is dot_rows-inl.h's one-row case (four matrix rows per pass over x,
// one masked vector for a width that is no multiple of the lanes), chosen by
// Highway's dynamic dispatch (this file re-includes itself once per target);
// threads split the rows in blocks of four.
#include "kernels/gemv.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/gemv.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/dot_rows-inl.h"

HWY_BEFORE_NAMESPACE();
namespace relpos {
namespace HWY_NAMESPACE {

// y[j] (+)= alpha * w_j . x for j in [0, n) of the rows given.
void GemvRows(int64_t n, int64_t k, float alpha, const float* w, int64_t ldw,
              const float* x, bool accumulate, float* y) {
  dot_rows::DotRows(1, x, k, w, ldw, k, n, alpha, accumulate, y, n);
}
const char* GemvTarget() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace relpos
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <omp.h>

#include <algorithm>

namespace relpos {

HWY_EXPORT(GemvRows);
HWY_EXPORT(GemvTarget);

void Gemv(int64_t n, int64_t k, float alpha, const float* w, int64_t ldw,
          const float* x, float beta, float* y, int num_threads) {
  if (n <= 0) return;
  if (beta != 0.0f && beta != 1.0f) {
    for (int64_t j = 0; j < n; ++j) y[j] *= beta;
  }
  const bool accumulate = beta != 0.0f;
  // Blocks of four rows (the kernel's unit: a block's sums do not depend on
  // where a thread's share starts), at most one share per thread.
  const int64_t blocks = (n + 3) / 4;
  const int threads = n * k < kGemvSerialMacs
                          ? 1
                          : static_cast<int>(std::clamp<int64_t>(
                                num_threads, 1, blocks));
  if (threads == 1) {
    HWY_DYNAMIC_DISPATCH(GemvRows)(n, k, alpha, w, ldw, x, accumulate, y);
    return;
  }
  const int64_t per = (blocks + threads - 1) / threads * 4;
  // Resolve the dispatch once, outside the parallel region.
  (void)HWY_DYNAMIC_DISPATCH(GemvTarget)();
#pragma omp parallel num_threads(threads)
  {
    const int64_t begin = omp_get_thread_num() * per;
    const int64_t end = std::min(n, begin + per);
    if (begin < end) {
      HWY_DYNAMIC_DISPATCH(GemvRows)
      (end - begin, k, alpha, w + begin * ldw, ldw, x, accumulate, y + begin);
    }
  }
}

const char* GemvTargetName() { return HWY_DYNAMIC_DISPATCH(GemvTarget)(); }

}  // namespace relpos

#endif  // HWY_ONCE

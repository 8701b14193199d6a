// Driver of the fast RoPE (src/kernels/rope.h): builds the per-position
// cosine / sine table in double, then rotates blocks of rows on OpenMP
// threads through the per-target SIMD bodies of rope-inl.h, chosen by
// Highway's dynamic dispatch (hwy/examples/skeleton.cc recipe: this file
// re-includes itself once per target).
#include "kernels/rope.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/rope.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
#include "kernels/rope-inl.h"

HWY_BEFORE_NAMESPACE();
namespace relpos {
namespace HWY_NAMESPACE {

// Exported wrappers (HWY_EXPORT needs a function in HWY_NAMESPACE).
void RopeRows(const float* x, float* y, const float* table, int64_t row_begin,
              int64_t row_end, int64_t n, int64_t d, bool interleaved) {
  rope_simd::RotateRows(x, y, table, row_begin, row_end, n, d, interleaved);
}
const char* RopeTarget() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace relpos
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <vector>

namespace relpos {

HWY_EXPORT(RopeRows);
HWY_EXPORT(RopeTarget);

namespace {

// Rows per OpenMP work item: enough to amortise the dispatch and scheduling
// (a row is only d multiply-adds), few enough to balance 2-16 threads.
constexpr int64_t kRowsPerBlock = 64;

// Positions per exact re-anchoring of the angle recurrence below.
constexpr int64_t kAnchorEvery = 64;

// Table rows of rope-inl.h for positions first_position .. + n - 1, with the
// rotation's sign folded into the sines, rounded to float once. In double:
// every kAnchorEvery-th position takes cos / sin of its angle directly (as
// RopeReference does for every position); the positions between advance by
// one rotation e^{i theta_t} per step, (c, s) <- (c c1 - s s1, s c1 + c s1),
// which costs four products instead of two trig calls. The recurrence drifts
// by about one double ulp per step, 64 ulps at most between anchors: far
// below float rounding.
std::vector<float> BuildTable(const RopeProblem& p, int sign, int threads) {
  const int64_t h = p.d / 2;
  const bool interleaved = p.layout == RopeLayout::kInterleaved;
  const int64_t stride = interleaved ? 2 * p.d : p.d;
  std::vector<double> theta(static_cast<size_t>(h));
  std::vector<double> step_c(static_cast<size_t>(h));
  std::vector<double> step_s(static_cast<size_t>(h));
  for (int64_t t = 0; t < h; ++t) {
    theta[t] = RopeTheta(p.base, t, p.d);
    step_c[t] = std::cos(sign * theta[t]);
    step_s[t] = std::sin(sign * theta[t]);
  }
  std::vector<float> table(static_cast<size_t>(p.n * stride));
  const int64_t anchors = (p.n + kAnchorEvery - 1) / kAnchorEvery;
#pragma omp parallel num_threads(threads)
  {
    std::vector<double> c(static_cast<size_t>(h)), s(static_cast<size_t>(h));
#pragma omp for schedule(static)
    for (int64_t a = 0; a < anchors; ++a) {
      const int64_t first = a * kAnchorEvery;
      const int64_t last = std::min(p.n, first + kAnchorEvery);
      const double pos = static_cast<double>(p.first_position + first);
      for (int64_t t = 0; t < h; ++t) {
        c[t] = std::cos(sign * pos * theta[t]);
        s[t] = std::sin(sign * pos * theta[t]);
      }
      for (int64_t i = first; i < last; ++i) {
        float* row = table.data() + i * stride;
        for (int64_t t = 0; t < h; ++t) {
          if (i > first) {
            const double c_next = c[t] * step_c[t] - s[t] * step_s[t];
            s[t] = s[t] * step_c[t] + c[t] * step_s[t];
            c[t] = c_next;
          }
          const float cf = static_cast<float>(c[t]);
          const float sf = static_cast<float>(s[t]);
          if (interleaved) {
            row[2 * t] = row[2 * t + 1] = cf;
            row[p.d + 2 * t] = -sf;
            row[p.d + 2 * t + 1] = sf;
          } else {
            row[t] = cf;
            row[h + t] = sf;
          }
        }
      }
    }
  }
  return table;
}

}  // namespace

void RopeFast(const RopeProblem& p, const float* x, float* y, int sign,
              int num_threads) {
  const int64_t rows = p.outer * p.n;
  if (rows == 0) return;
  // Small calls stay on one thread: starting a team costs more than the
  // work (about 2 flops per element).
  const int threads =
      rows * p.d < (int64_t{1} << 15)
          ? 1
          : (num_threads > 0 ? num_threads
                             : std::max(1, omp_get_max_threads()));
  const std::vector<float> table = BuildTable(p, sign, threads);
  const bool interleaved = p.layout == RopeLayout::kInterleaved;
  const int64_t blocks = (rows + kRowsPerBlock - 1) / kRowsPerBlock;
  // Resolve the dispatch once, outside the parallel region.
  (void)HWY_DYNAMIC_DISPATCH(RopeTarget)();
#pragma omp parallel for num_threads(threads) schedule(static)
  for (int64_t b = 0; b < blocks; ++b) {
    const int64_t begin = b * kRowsPerBlock;
    const int64_t end = std::min(rows, begin + kRowsPerBlock);
    HWY_DYNAMIC_DISPATCH(RopeRows)
    (x, y, table.data(), begin, end, p.n, p.d, interleaved);
  }
}

const char* RopeTargetName() { return HWY_DYNAMIC_DISPATCH(RopeTarget)(); }

}  // namespace relpos

#endif  // HWY_ONCE

// Driver of the fast RoPE (src/op/kernels/rope.h). Work items are blocks of 64
// positions (times a chunk of the leading B x H slices when there are few
// blocks); each item computes its positions' cosines and sines in double
// into a small per-thread table, then rotates its rows through the
// per-target SIMD bodies of rope-inl.h, chosen by Highway's dynamic
// dispatch (hwy/examples/skeleton.cc recipe: this file re-includes itself
// once per target). One OpenMP region per call and no n-sized buffer: the
// op is memory-bound, and on a busy machine every extra barrier costs a
// scheduler time slice.
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
void RopeBlock(const float* x, float* y, const float* table,
               int64_t outer_begin, int64_t outer_end, int64_t pos_begin,
               int64_t pos_end, int64_t n, int64_t d, bool interleaved) {
  rope_simd::RotateBlock(x, y, table, outer_begin, outer_end, pos_begin,
                         pos_end, n, d, interleaved);
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

#include "base/threads.h"

namespace relpos {

HWY_EXPORT(RopeBlock);
HWY_EXPORT(RopeTarget);

namespace {

// Positions per work item, and per exact re-anchoring of the angle
// recurrence in FillTable.
constexpr int64_t kBlock = 64;

// Table rows of rope-inl.h for positions first_position + [pos_begin,
// pos_end), with the rotation's sign folded into the sines, rounded to float
// once. In double: the block's first position takes cos / sin of its angle
// directly (as RopeReference does for every position); the following ones
// advance by one rotation e^{i theta_t} per step,
// (c, s) <- (c c1 - s s1, s c1 + c s1), four products instead of two trig
// calls. The recurrence drifts by about one double ulp per step, at most 63
// steps: far below float rounding.
void FillTable(const RopeProblem& p, const std::vector<double>& theta,
               const std::vector<double>& step_c,
               const std::vector<double>& step_s, int sign, int64_t pos_begin,
               int64_t pos_end, double* c, double* s, float* table) {
  const int64_t h = p.d / 2;
  const bool interleaved = p.layout == RopeLayout::kInterleaved;
  const int64_t stride = interleaved ? 2 * p.d : p.d;
  const double pos = static_cast<double>(p.first_position + pos_begin);
  for (int64_t t = 0; t < h; ++t) {
    c[t] = std::cos(sign * pos * theta[t]);
    s[t] = std::sin(sign * pos * theta[t]);
  }
  for (int64_t i = pos_begin; i < pos_end; ++i) {
    float* row = table + (i - pos_begin) * stride;
    for (int64_t t = 0; t < h; ++t) {
      if (i > pos_begin) {
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

}  // namespace

void RopeFast(const RopeProblem& p, const float* x, float* y, int sign,
              int num_threads) {
  if (p.outer * p.n == 0) return;
  const int64_t h = p.d / 2;
  const bool interleaved = p.layout == RopeLayout::kInterleaved;
  const int64_t stride = interleaved ? 2 * p.d : p.d;
  // Small calls stay on one thread: starting a team costs more than the
  // work (about 2 flops per element).
  const int threads = p.outer * p.n * p.d < base::kMinParallelWork
                          ? 1
                          : base::ResolveThreads(num_threads);
  std::vector<double> theta(static_cast<size_t>(h));
  std::vector<double> step_c(static_cast<size_t>(h));
  std::vector<double> step_s(static_cast<size_t>(h));
  for (int64_t t = 0; t < h; ++t) {
    theta[t] = RopeTheta(p.base, t, p.d);
    step_c[t] = std::cos(sign * theta[t]);
    step_s[t] = std::sin(sign * theta[t]);
  }
  // Work items: position blocks x chunks of the outer slices. With few
  // position blocks (short sequences, many heads) the outer slices are
  // split too, so every thread gets about four items; each item then
  // recomputes its block's table, which costs ~d/2 trig pairs plus 64 d
  // products against 64 d x (outer chunk) rotated values.
  const int64_t pos_blocks = (p.n + kBlock - 1) / kBlock;
  const int64_t outer_chunks = std::clamp<int64_t>(
      (4 * threads + pos_blocks - 1) / pos_blocks, 1, p.outer);
  const int64_t outer_per_chunk = (p.outer + outer_chunks - 1) / outer_chunks;
  const int64_t items = pos_blocks * outer_chunks;
  // Resolve the dispatch once, outside the parallel region.
  (void)HWY_DYNAMIC_DISPATCH(RopeTarget)();
#pragma omp parallel num_threads(threads)
  {
    std::vector<double> c(static_cast<size_t>(h)), s(static_cast<size_t>(h));
    std::vector<float> table(static_cast<size_t>(kBlock * stride));
#pragma omp for schedule(static)
    for (int64_t item = 0; item < items; ++item) {
      const int64_t pb = item / outer_chunks;
      const int64_t oc = item % outer_chunks;
      const int64_t pos_begin = pb * kBlock;
      const int64_t pos_end = std::min(p.n, pos_begin + kBlock);
      const int64_t outer_begin = oc * outer_per_chunk;
      const int64_t outer_end =
          std::min(p.outer, outer_begin + outer_per_chunk);
      if (outer_begin >= outer_end) continue;
      FillTable(p, theta, step_c, step_s, sign, pos_begin, pos_end, c.data(),
                s.data(), table.data());
      HWY_DYNAMIC_DISPATCH(RopeBlock)
      (x, y, table.data(), outer_begin, outer_end, pos_begin, pos_end, p.n, p.d,
       interleaved);
    }
  }
}

const char* RopeTargetName() { return HWY_DYNAMIC_DISPATCH(RopeTarget)(); }

}  // namespace relpos

#endif  // HWY_ONCE

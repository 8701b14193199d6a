#include "nn/dropout.h"

#include "nn/parallel.h"

namespace relpos::nn {
namespace {

// SplitMix64's output function applied to a counter: a stateless hash of
// (seed, index) that passes BigCrush when used as a stream.
uint64_t Mix(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * 0x9e3779b97f4a7c15ULL;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

template <typename T>
void Apply(const T* in, T* out, int64_t n, const DropoutOptions& o) {
  if (o.p <= 0.0) {
    if (in != out) {
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
      for (int64_t i = 0; i < n; ++i) out[i] = in[i];
    }
    return;
  }
  const T scale = static_cast<T>(1.0 / (1.0 - o.p));
#pragma omp parallel for schedule(static) if (n >= kMinParallelWork)
  for (int64_t i = 0; i < n; ++i) {
    out[i] =
        DropoutKeep(o.seed, o.index_offset + i, o.p) ? in[i] * scale : T(0);
  }
}

}  // namespace

bool DropoutKeep(uint64_t seed, int64_t index, double p) {
  const double u =
      static_cast<double>(Mix(seed, static_cast<uint64_t>(index)) >> 11) *
      0x1.0p-53;
  return u >= p;
}

template <typename T>
void DropoutForward(const T* x, T* y, int64_t n, const DropoutOptions& o) {
  // Shapes: x, y [n].
  Apply(x, y, n, o);
}

template <typename T>
void DropoutBackward(const T* dy, T* dx, int64_t n, const DropoutOptions& o) {
  // Shapes: dy, dx [n].
  // Differentiates `out[i] = DropoutKeep(o.seed, i, o.p) ? in[i] * scale : 0`:
  // the same mask and scale, applied to the gradient.
  Apply(dy, dx, n, o);
}

template void DropoutForward<float>(const float*, float*, int64_t,
                                    const DropoutOptions&);
template void DropoutForward<double>(const double*, double*, int64_t,
                                     const DropoutOptions&);
template void DropoutBackward<float>(const float*, float*, int64_t,
                                     const DropoutOptions&);
template void DropoutBackward<double>(const double*, double*, int64_t,
                                      const DropoutOptions&);

}  // namespace relpos::nn

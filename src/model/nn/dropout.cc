// Inverted dropout. The mask's hash (SplitMix64's output function of the
// element index) is a SIMD loop for float (Highway dynamic dispatch, as in
// gelu.cc): one scalar hash per element was 6% of a seq2seq training step.
// The hash is integer arithmetic and the kept values are in[i] * scale, so
// every SIMD target, the scalar tail and the double path give the same bits.
#include "model/nn/dropout.h"

// foreach_target.h must come first: it re-includes this file once per SIMD
// target.
// clang-format off
#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "model/nn/dropout.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"
// clang-format on

namespace relpos::nn {
#ifndef RELPOS_NN_DROPOUT_CONSTANTS_
#define RELPOS_NN_DROPOUT_CONSTANTS_
inline constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
inline constexpr uint64_t kMix1 = 0xbf58476d1ce4e5b9ULL;
inline constexpr uint64_t kMix2 = 0x94d049bb133111ebULL;
#endif
}  // namespace relpos::nn

HWY_BEFORE_NAMESPACE();
namespace relpos::nn {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

#if HWY_TARGET != HWY_SCALAR
// a * c modulo 2^64 from 32 x 32 -> 64-bit products (this Highway has no
// 64-bit lane multiply on every target).
template <class D64, class V64 = hn::Vec<D64>>
HWY_INLINE V64 MulConst(D64 d64, V64 a, uint64_t c) {
  const hn::Repartition<uint32_t, D64> d32;
  const auto c_lo = hn::BitCast(d32, hn::Set(d64, c & 0xffffffffULL));
  const auto c_hi = hn::BitCast(d32, hn::Set(d64, c >> 32));
  const auto a_lo = hn::BitCast(d32, a);
  const auto a_hi = hn::BitCast(d32, hn::ShiftRight<32>(a));
  const V64 cross = hn::Add(hn::MulEven(a_hi, c_lo), hn::MulEven(a_lo, c_hi));
  return hn::Add(hn::MulEven(a_lo, c_lo), hn::ShiftLeft<32>(cross));
}

// The 53 high bits of Mix(seed, index) for the lanes' indices.
template <class D64, class V64 = hn::Vec<D64>>
HWY_INLINE V64 HashBits(D64 d64, uint64_t seed, V64 index) {
  V64 z = hn::Add(hn::Set(d64, seed),
                  MulConst(d64, hn::Add(index, hn::Set(d64, 1)), kGolden));
  z = MulConst(d64, hn::Xor(z, hn::ShiftRight<30>(z)), kMix1);
  z = MulConst(d64, hn::Xor(z, hn::ShiftRight<27>(z)), kMix2);
  return hn::ShiftRight<11>(hn::Xor(z, hn::ShiftRight<31>(z)));
}
#endif  // HWY_TARGET != HWY_SCALAR

// out[i] = keep(index0 + i) ? in[i] * scale : 0 for the first
// floor(n / lanes) * lanes elements; returns how many it did. An element is
// kept when its 53 hash bits are >= threshold (>= 1).
int64_t DropoutF32(const float* in, float* out, int64_t n, uint64_t seed,
                   int64_t index0, uint64_t threshold, float scale) {
#if HWY_TARGET == HWY_SCALAR
  // One lane: the caller's scalar loop does it all.
  (void)in, (void)out, (void)n, (void)seed, (void)index0, (void)threshold,
      (void)scale;
  return 0;
#else
  const hn::ScalableTag<float> df;
  const hn::RebindToUnsigned<decltype(df)> du32;
  const hn::Repartition<uint64_t, decltype(df)> du64;
  const hn::RebindToSigned<decltype(du64)> di64;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(df));
  const int64_t half = static_cast<int64_t>(hn::Lanes(du64));
  const auto below = hn::Set(di64, static_cast<int64_t>(threshold - 1));
  const auto vscale = hn::Set(df, scale);
  int64_t i = 0;
  for (; i + lanes <= n; i += lanes) {
    const uint64_t first = static_cast<uint64_t>(index0 + i);
    // Lanes i .. i + half - 1 and i + half .. i + lanes - 1: all ones
    // where kept (the hash bits are below 2^53, so signed compares hold).
    const auto lo = hn::VecFromMask(
        di64, hn::Gt(hn::BitCast(di64, HashBits(du64, seed,
                                                hn::Iota(du64, first))),
                     below));
    const auto hi = hn::VecFromMask(
        di64, hn::Gt(hn::BitCast(di64, HashBits(du64, seed,
                                                hn::Iota(du64, first + half))),
                     below));
    // The low 32 bits of each 64-bit flag, in element order.
    const auto keep = hn::BitCast(
        df, hn::ConcatEven(du32, hn::BitCast(du32, hi), hn::BitCast(du32, lo)));
    hn::StoreU(hn::And(keep, hn::Mul(hn::LoadU(df, in + i), vscale)), df,
               out + i);
  }
  return i;
#endif
}

}  // namespace HWY_NAMESPACE
}  // namespace relpos::nn
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <algorithm>
#include <cmath>

#include "base/threads.h"

namespace relpos::nn {

HWY_EXPORT(DropoutF32);

namespace {

// SplitMix64's output function applied to a counter: a stateless hash of
// (seed, index) that passes BigCrush when used as a stream.
uint64_t Mix(uint64_t seed, uint64_t index) {
  uint64_t z = seed + (index + 1) * kGolden;
  z = (z ^ (z >> 30)) * kMix1;
  z = (z ^ (z >> 27)) * kMix2;
  return z ^ (z >> 31);
}

// u = (Mix >> 11) 2^-53 is exact, so u >= p exactly when the integer
// Mix >> 11 >= p 2^53, that is >= ceil(p 2^53) (p 2^53 is exact too).
uint64_t KeepThreshold(double p) {
  return static_cast<uint64_t>(std::ceil(std::ldexp(p, 53)));
}

bool Keep(uint64_t seed, int64_t index, uint64_t threshold) {
  return (Mix(seed, static_cast<uint64_t>(index)) >> 11) >= threshold;
}

// Elements [begin, end) of the scalar form.
template <typename T>
void ApplyScalar(const T* in, T* out, int64_t begin, int64_t end,
                 uint64_t seed, int64_t index0, uint64_t threshold, T scale) {
  for (int64_t i = begin; i < end; ++i) {
    out[i] = Keep(seed, index0 + i, threshold) ? in[i] * scale : T(0);
  }
}

void ApplyChunk(const double* in, double* out, int64_t n, uint64_t seed,
                int64_t index0, uint64_t threshold, double scale) {
  ApplyScalar(in, out, 0, n, seed, index0, threshold, scale);
}

void ApplyChunk(const float* in, float* out, int64_t n, uint64_t seed,
                int64_t index0, uint64_t threshold, float scale) {
  const int64_t done = HWY_DYNAMIC_DISPATCH(DropoutF32)(
      in, out, n, seed, index0, threshold, scale);
  ApplyScalar(in, out, done, n, seed, index0, threshold, scale);
}

// Chunks for the parallel loop: element-wise, so any split gives identical
// results.
constexpr int64_t kChunk = 4096;

template <typename T>
void Apply(const T* in, T* out, int64_t n, const DropoutOptions& o) {
  if (o.p <= 0.0) {
    if (in != out) {
#pragma omp parallel for schedule(static) if (n >= base::kMinParallelWork)
      for (int64_t i = 0; i < n; ++i) out[i] = in[i];
    }
    return;
  }
  const T scale = static_cast<T>(1.0 / (1.0 - o.p));
  const uint64_t threshold = KeepThreshold(o.p);
  const int64_t chunks = (n + kChunk - 1) / kChunk;
#pragma omp parallel for schedule(static) if (n >= base::kMinParallelWork)
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t begin = c * kChunk, len = std::min(kChunk, n - begin);
    ApplyChunk(in + begin, out + begin, len, o.seed, o.index_offset + begin,
               threshold, scale);
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
  // Differentiates `out[i] = Keep(i) ? in[i] * scale : 0`: the same mask
  // and scale, applied to the gradient.
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

#endif  // HWY_ONCE

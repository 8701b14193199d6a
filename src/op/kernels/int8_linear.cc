// The int8 linear layer (src/op/kernels/int8_linear.h). Per Highway target
// (this file re-includes itself once per target): blocks of four weight
// rows against up to kRowTile activation rows, int8 weights widened to
// int16 as they are loaded and multiplied with the int16 activations in
// pairs into int32 lanes (ReorderWidenMulAccumulate: vpmaddwd on x86), one
// horizontal sum per dot product after the row. On AVX-512 VNNI CPUs, where
// QuantizeRows packs the weights, the driver runs Int8RowsPacked16
// (vpdpwssd) or, with 8-bit activations, Int8RowsPacked8 (vpdpbusd on the
// activations plus 128, its sums started at -128 times the weights' row
// sums) instead: blocks of 16 weight rows whose accumulators' lanes are the
// 16 outputs, no horizontal sums, the same integers; with AMX too, products
// of 8 or more activation rows run Int8RowsAmx on the tile unit, the
// packed blocks as its weight tiles. The driver quantizes
// the activations once per call and gives threads whole blocks of four
// weight rows (sixteen for the packed kernels), so every sum is the same
// integer whatever the thread count.
#include "kernels/int8_linear.h"

#undef HWY_TARGET_INCLUDE
#define HWY_TARGET_INCLUDE "kernels/int8_linear.cc"
#include "hwy/foreach_target.h"  // IWYU pragma: keep
#include "hwy/highway.h"

#include <algorithm>
#include <cmath>
#include <limits>

// Once, outside the per-target code: the last step every kernel shares.
#ifndef RELPOS_SRC_OP_KERNELS_INT8_LINEAR_LOOP_
#define RELPOS_SRC_OP_KERNELS_INT8_LINEAR_LOOP_
namespace relpos::int8_linear {

// out[i] = sums[i] * (sx * sw[i]) (+ bias[i]) for i < n: the last step of
// every kernel, rounding the same everywhere (-ffp-contract=off).
inline void ScaleRow(const int32_t* sums, int64_t n, float sx, const float* sw,
                     const float* bias, float* out) {
  for (int64_t i = 0; i < n; ++i) {
    float v = static_cast<float>(sums[i]) * (sx * sw[i]);
    if (bias != nullptr) v += bias[i];
    out[i] = v;
  }
}

}  // namespace relpos::int8_linear
#endif  // RELPOS_SRC_OP_KERNELS_INT8_LINEAR_LOOP_

HWY_BEFORE_NAMESPACE();
namespace relpos {
namespace HWY_NAMESPACE {
namespace hn = hwy::HWY_NAMESPACE;

// Activation rows per pass over a block of weight rows: 4 x 4 int32
// accumulators fit AVX-512's 32 registers, 2 x 4 AVX2's 16.
constexpr int kRowTile = HWY_MAX_BYTES >= 64 ? 4 : 2;

// out[i] = the sum of v_i's lanes, i < 4: two rounds of interleaves within
// the 128-bit blocks (four vectors' lanes become each block's four lanes),
// then the blocks added, about two instructions per sum instead of a
// horizontal sum each.
template <class D32, class V>
HWY_INLINE void SumLanes4(D32 d, V v0, V v1, V v2, V v3,
                          int32_t* HWY_RESTRICT out) {
#if HWY_TARGET == HWY_SCALAR || HWY_TARGET == HWY_EMU128 || HWY_HAVE_SCALABLE
  out[0] = hn::GetLane(hn::SumOfLanes(d, v0));
  out[1] = hn::GetLane(hn::SumOfLanes(d, v1));
  out[2] = hn::GetLane(hn::SumOfLanes(d, v2));
  out[3] = hn::GetLane(hn::SumOfLanes(d, v3));
#else
  const hn::Repartition<int64_t, D32> d64;
  const auto a = hn::Add(hn::InterleaveLower(d, v0, v1),
                         hn::InterleaveUpper(d, v0, v1));
  const auto b = hn::Add(hn::InterleaveLower(d, v2, v3),
                         hn::InterleaveUpper(d, v2, v3));
  const auto a64 = hn::BitCast(d64, a), b64 = hn::BitCast(d64, b);
  const auto c = hn::Add(hn::BitCast(d, hn::InterleaveLower(d64, a64, b64)),
                         hn::BitCast(d, hn::InterleaveUpper(d64, a64, b64)));
  const hn::Full128<int32_t> d4;
#if HWY_MAX_BYTES == 64
  const hn::Half<D32> dh;
  const auto h = hn::Add(hn::LowerHalf(dh, c), hn::UpperHalf(dh, c));
  hn::StoreU(hn::Add(hn::LowerHalf(d4, h), hn::UpperHalf(d4, h)), d4, out);
#elif HWY_MAX_BYTES == 32
  hn::StoreU(hn::Add(hn::LowerHalf(d4, c), hn::UpperHalf(d4, c)), d4, out);
#else
  hn::StoreU(c, d4, out);
#endif
#endif
}

// sums[r * 4 + i] = qx_r . qw_i for r < MR over `stride` columns (a
// multiple of the int16 lane count).
template <int MR>
HWY_INLINE void DotBlock(const int16_t* const* HWY_RESTRICT xr,
                         const int8_t* const* HWY_RESTRICT wr, int64_t stride,
                         int32_t* HWY_RESTRICT sums) {
  const hn::ScalableTag<int16_t> d16;
  const hn::Repartition<int32_t, decltype(d16)> d32;
  const hn::Rebind<int8_t, decltype(d16)> d8;
  using V32 = hn::Vec<decltype(d32)>;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d16));
  V32 acc[MR][4], odd[MR][4];
  for (int r = 0; r < MR; ++r) {
    for (int i = 0; i < 4; ++i) acc[r][i] = odd[r][i] = hn::Zero(d32);
  }
  for (int64_t c = 0; c < stride; c += lanes) {
    const auto w0 = hn::PromoteTo(d16, hn::LoadU(d8, wr[0] + c));
    const auto w1 = hn::PromoteTo(d16, hn::LoadU(d8, wr[1] + c));
    const auto w2 = hn::PromoteTo(d16, hn::LoadU(d8, wr[2] + c));
    const auto w3 = hn::PromoteTo(d16, hn::LoadU(d8, wr[3] + c));
    for (int r = 0; r < MR; ++r) {
      const auto x = hn::LoadU(d16, xr[r] + c);
      acc[r][0] = hn::ReorderWidenMulAccumulate(d32, x, w0, acc[r][0], odd[r][0]);
      acc[r][1] = hn::ReorderWidenMulAccumulate(d32, x, w1, acc[r][1], odd[r][1]);
      acc[r][2] = hn::ReorderWidenMulAccumulate(d32, x, w2, acc[r][2], odd[r][2]);
      acc[r][3] = hn::ReorderWidenMulAccumulate(d32, x, w3, acc[r][3], odd[r][3]);
    }
  }
  for (int r = 0; r < MR; ++r) {
    SumLanes4(d32, hn::RearrangeToOddPlusEven(acc[r][0], odd[r][0]),
              hn::RearrangeToOddPlusEven(acc[r][1], odd[r][1]),
              hn::RearrangeToOddPlusEven(acc[r][2], odd[r][2]),
              hn::RearrangeToOddPlusEven(acc[r][3], odd[r][3]), sums + r * 4);
  }
}

// Weight rows [begin, end) in blocks of four against all m activation rows
// (sx[r] NaN marks a row that was not finite) in tiles of kRowTile, then
// y = sums * scales + bias; with zero points (zx, the 8-bit activations;
// nullptr for the 16-bit ones) each sum less zx[r] * row_sums[j] first.
void Int8Rows(int64_t m, const int16_t* qx, const float* sx,
              const int32_t* zx, const int8_t* qw, const float* sw,
              const int32_t* row_sums, int64_t stride, int64_t begin,
              int64_t end, const float* bias, float* y, int64_t ldy) {
  int32_t sums[kRowTile * 4];
  for (int64_t j0 = begin; j0 < end; j0 += 4) {
    const int64_t nb = end - j0 < 4 ? end - j0 : 4;
    const int8_t* wr[4];
    for (int64_t i = 0; i < 4; ++i) {
      wr[i] = qw + (j0 + (i < nb ? i : 0)) * stride;
    }
    for (int64_t r0 = 0; r0 < m; r0 += kRowTile) {
      const int64_t mb = m - r0 < kRowTile ? m - r0 : kRowTile;
      const int16_t* xr[kRowTile];
      for (int64_t r = 0; r < mb; ++r) xr[r] = qx + (r0 + r) * stride;
      switch (mb) {
        case 1:
          DotBlock<1>(xr, wr, stride, sums);
          break;
        case 2:
          DotBlock<2>(xr, wr, stride, sums);
          break;
#if HWY_MAX_BYTES >= 64
        case 3:
          DotBlock<3>(xr, wr, stride, sums);
          break;
        default:
          DotBlock<4>(xr, wr, stride, sums);
          break;
#endif
      }
      for (int64_t r = 0; r < mb; ++r) {
        if (zx != nullptr) {
          for (int64_t i = 0; i < nb; ++i) {
            sums[r * 4 + i] -= zx[r0 + r] * row_sums[j0 + i];
          }
        }
        int8_linear::ScaleRow(sums + r * 4, nb, sx[r0 + r], sw + j0,
                              bias == nullptr ? nullptr : bias + j0,
                              y + (r0 + r) * ldy + j0);
      }
    }
  }
}

// Quantizes x[0, k) to out[0, k) symmetrically onto [-range, range]
// (round to nearest, ties to even): returns max |x| (NaN if some x is not
// finite, and then nothing is written).
template <typename TOut>
HWY_INLINE float QuantizeRowT(const float* HWY_RESTRICT x, int64_t k,
                              float range, TOut* HWY_RESTRICT out) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<TOut, decltype(d)> dout;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t body = k - k % lanes;
  // Four independent chains of each (a max and an add per vector would
  // otherwise wait on the previous one's latency: a quarter of a product's
  // time at 64 rows on AMX's kernels). The max does not depend on the
  // order; the probe sums x * 0 (+-0, or NaN where x is not finite).
  const auto zero_v = hn::Zero(d);
  auto m0 = zero_v, m1 = zero_v, m2 = zero_v, m3 = zero_v;
  auto p0 = zero_v, p1 = zero_v, p2 = zero_v, p3 = zero_v;
  int64_t c = 0;
  for (; c + 4 * lanes <= body; c += 4 * lanes) {
    const auto v0 = hn::LoadU(d, x + c), v1 = hn::LoadU(d, x + c + lanes);
    const auto v2 = hn::LoadU(d, x + c + 2 * lanes);
    const auto v3 = hn::LoadU(d, x + c + 3 * lanes);
    m0 = hn::Max(m0, hn::Abs(v0));
    m1 = hn::Max(m1, hn::Abs(v1));
    m2 = hn::Max(m2, hn::Abs(v2));
    m3 = hn::Max(m3, hn::Abs(v3));
    p0 = hn::Add(p0, hn::Mul(v0, zero_v));
    p1 = hn::Add(p1, hn::Mul(v1, zero_v));
    p2 = hn::Add(p2, hn::Mul(v2, zero_v));
    p3 = hn::Add(p3, hn::Mul(v3, zero_v));
  }
  for (; c < body; c += lanes) {
    const auto v = hn::LoadU(d, x + c);
    m0 = hn::Max(m0, hn::Abs(v));
    p0 = hn::Add(p0, hn::Mul(v, zero_v));
  }
  const auto vmax = hn::Max(hn::Max(m0, m1), hn::Max(m2, m3));
  const auto probe = hn::Add(hn::Add(p0, p1), hn::Add(p2, p3));
  float amax = hn::GetLane(hn::MaxOfLanes(d, vmax));
  float zero = hn::GetLane(hn::SumOfLanes(d, probe));
  for (c = body; c < k; ++c) {
    amax = amax > std::abs(x[c]) ? amax : std::abs(x[c]);
    zero += x[c] * 0.0f;
  }
  if (zero != 0.0f) return std::numeric_limits<float>::quiet_NaN();
  if (amax == 0.0f) return 0.0f;
  const float inv = range / amax;
  const auto vinv = hn::Set(d, inv);
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
  // AVX-512: vcvtps2dq (round to nearest even) and a saturating narrowing
  // store (vpmovsdb / vpmovsdw), where Highway's NearestInt and DemoteTo
  // add an overflow fix-up, packs and a permute (twice the instructions,
  // a quarter of a 64-row AMX product's time). |x * inv| <= range (up to
  // rounding), so both give the same integers.
  for (int64_t c = 0; c < body; c += lanes) {
    const __m512i q =
        _mm512_cvtps_epi32(hn::Mul(hn::LoadU(d, x + c), vinv).raw);
    if constexpr (sizeof(TOut) == 1) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c),
                       _mm512_cvtsepi32_epi8(q));
    } else {
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + c),
                          _mm512_cvtsepi32_epi16(q));
    }
  }
#else
  for (int64_t c = 0; c < body; c += lanes) {
    const auto q = hn::NearestInt(hn::Mul(hn::LoadU(d, x + c), vinv));
    hn::StoreU(hn::DemoteTo(dout, q), dout, out + c);
  }
#endif
  for (int64_t c = body; c < k; ++c) {
    out[c] = static_cast<TOut>(std::nearbyint(x[c] * inv));
  }
  return amax;
}

// Rows r < m of x (row stride ldx, k columns) into out (row stride ldo):
// amax[r] as QuantizeRowT returns it.
void QuantizeRows16(int64_t m, const float* x, int64_t ldx, int64_t k,
                    float range, int16_t* out, int64_t ldo, float* amax) {
  for (int64_t r = 0; r < m; ++r) {
    amax[r] = QuantizeRowT(x + r * ldx, k, range, out + r * ldo);
  }
}
void QuantizeRows8(int64_t m, const float* x, int64_t ldx, int64_t k,
                   int8_t* out, int64_t ldo, float* amax) {
  for (int64_t r = 0; r < m; ++r) {
    amax[r] = QuantizeRowT(x + r * ldx, k, 127.0f, out + r * ldo);
  }
}

// The 8-bit activations' quantization, with a zero point: lo = min(0,
// min_c x), hi = max(0, max_c x), span = hi - lo, inv = 254 / span, z =
// nearbyint(-127 - lo * inv) (in [-127, 127]) and out[c] = nearbyint(x[c] *
// inv) + z, clamped to [-127, 127], so x[c] ~= (out[c] - z) * span / 254:
// [lo, hi] spread over the 255 values where the symmetric quantization
// spreads [-max |x|, max |x|], twice as fine for a row of one sign (GELU's
// outputs). Returns span (NaN if some x is not finite, 0 if every x is 0;
// then nothing is written and *zero is 0).
template <typename TOut>
HWY_INLINE float QuantizeRowZeroPointT(const float* HWY_RESTRICT x, int64_t k,
                                       TOut* HWY_RESTRICT out, int32_t* zero) {
  const hn::ScalableTag<float> d;
  const hn::Rebind<int32_t, decltype(d)> di;
  const hn::Rebind<TOut, decltype(d)> dout;
  const int64_t lanes = static_cast<int64_t>(hn::Lanes(d));
  const int64_t body = k - k % lanes;
  *zero = 0;
  // Two independent chains of each (QuantizeRowT's reason); the probe
  // sums x * 0 (+-0, or NaN where x is not finite).
  const auto zero_v = hn::Zero(d);
  auto lo0 = zero_v, lo1 = zero_v, hi0 = zero_v, hi1 = zero_v;
  auto p0 = zero_v, p1 = zero_v;
  int64_t c = 0;
  for (; c + 2 * lanes <= body; c += 2 * lanes) {
    const auto v0 = hn::LoadU(d, x + c), v1 = hn::LoadU(d, x + c + lanes);
    lo0 = hn::Min(lo0, v0);
    lo1 = hn::Min(lo1, v1);
    hi0 = hn::Max(hi0, v0);
    hi1 = hn::Max(hi1, v1);
    p0 = hn::Add(p0, hn::Mul(v0, zero_v));
    p1 = hn::Add(p1, hn::Mul(v1, zero_v));
  }
  for (; c < body; c += lanes) {
    const auto v = hn::LoadU(d, x + c);
    lo0 = hn::Min(lo0, v);
    hi0 = hn::Max(hi0, v);
    p0 = hn::Add(p0, hn::Mul(v, zero_v));
  }
  float lo = hn::GetLane(hn::MinOfLanes(d, hn::Min(lo0, lo1)));
  float hi = hn::GetLane(hn::MaxOfLanes(d, hn::Max(hi0, hi1)));
  float probe = hn::GetLane(hn::SumOfLanes(d, hn::Add(p0, p1)));
  for (c = body; c < k; ++c) {
    lo = lo < x[c] ? lo : x[c];
    hi = hi > x[c] ? hi : x[c];
    probe += x[c] * 0.0f;
  }
  if (probe != 0.0f) return std::numeric_limits<float>::quiet_NaN();
  const float span = hi - lo;
  if (span == 0.0f) return 0.0f;
  const float inv = 254.0f / span;
  const int32_t z = static_cast<int32_t>(
      std::clamp(std::nearbyint(-127.0f - lo * inv), -127.0f, 127.0f));
  *zero = z;
  const auto vinv = hn::Set(d, inv);
  const auto vz = hn::Set(di, z);
  const auto qmin = hn::Set(di, -127), qmax = hn::Set(di, 127);
  for (c = 0; c < body; c += lanes) {
#if HWY_ARCH_X86 && HWY_TARGET <= HWY_AVX3
    // As QuantizeRowT: vcvtps2dq (round to nearest even; |x * inv| <= 254,
    // so NearestInt's overflow fix-up is not needed) and a saturating
    // narrowing store, which also clamps 128 to 127.
    const __m512i q = _mm512_max_epi32(
        _mm512_add_epi32(
            _mm512_cvtps_epi32(hn::Mul(hn::LoadU(d, x + c), vinv).raw),
            vz.raw),
        qmin.raw);
    if constexpr (sizeof(TOut) == 1) {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(out + c),
                       _mm512_cvtsepi32_epi8(q));
    } else {
      _mm256_storeu_si256(
          reinterpret_cast<__m256i*>(out + c),
          _mm512_cvtsepi32_epi16(_mm512_min_epi32(q, qmax.raw)));
    }
#else
    const auto n = hn::NearestInt(hn::Mul(hn::LoadU(d, x + c), vinv));
    const auto q = hn::Min(hn::Max(hn::Add(n, vz), qmin), qmax);
    hn::StoreU(hn::DemoteTo(dout, q), dout, out + c);
#endif
  }
  for (c = body; c < k; ++c) {
    const int32_t n = static_cast<int32_t>(std::nearbyint(x[c] * inv)) + z;
    out[c] = static_cast<TOut>(n < -127 ? -127 : n > 127 ? 127 : n);
  }
  return span;
}

// Rows r < m of x (row stride ldx, k columns) into out (row stride ldo)
// with their zero points: span[r] and zero[r] as QuantizeRowZeroPointT
// gives them. 8-bit for the packed kernels, 16-bit for Highway's.
void QuantizeRowsZeroPoint8(int64_t m, const float* x, int64_t ldx, int64_t k,
                            int8_t* out, int64_t ldo, float* span,
                            int32_t* zero) {
  for (int64_t r = 0; r < m; ++r) {
    span[r] = QuantizeRowZeroPointT(x + r * ldx, k, out + r * ldo, zero + r);
  }
}
void QuantizeRowsZeroPoint16(int64_t m, const float* x, int64_t ldx,
                             int64_t k, int16_t* out, int64_t ldo,
                             float* span, int32_t* zero) {
  for (int64_t r = 0; r < m; ++r) {
    span[r] = QuantizeRowZeroPointT(x + r * ldx, k, out + r * ldo, zero + r);
  }
}

const char* Int8Target() { return hwy::TargetName(HWY_TARGET); }

}  // namespace HWY_NAMESPACE
}  // namespace relpos
HWY_AFTER_NAMESPACE();

#if HWY_ONCE

#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/check.h"

#if HWY_ARCH_X86
#include <cpuid.h>
#include <immintrin.h>
#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif
#endif

namespace relpos {

namespace {

#if HWY_ARCH_X86
// AVX-512 VNNI (Ice Lake, Zen 4): vpdpwssd multiplies the int16 pairs and
// adds them into the int32 lanes in one instruction, where AVX3's path
// takes vpmaddwd and vpaddd; the same integers. Highway 1.0's target with
// VNNI (AVX3_DL) also requires AVX-VNNI, which Zen 4 lacks, so the packed
// kernels below are written with intrinsics and chosen at run time
// (Int8Linear below) when Highway dispatches AVX3 and the CPU has the
// instruction.
#define RELPOS_VNNI_TARGET \
  __attribute__((target("avx2,avx512f,avx512bw,avx512vnni")))

// acc + x . w by pairs of int16 per lane (vpdpwssd), in inline assembly
// for the reason Dpbusd below gives: through _mm512_dpwssd_epi32 GCC 12
// copied each of the 16 accumulators to another register and back around
// its instruction (32 register moves per 16 vpdpwssd in a kernel loop).
RELPOS_VNNI_TARGET inline __m512i Dpwssd(__m512i acc, __m512i x, __m512i w) {
  asm("vpdpwssd %[w], %[x], %[acc]" : [acc] "+v"(acc) : [x] "v"(x), [w] "v"(w));
  return acc;
}

// The 8-bit activations: vpdpbusd multiplies 64 pairs of u8 (the
// activations plus 128) and s8 (the weights) and adds each four adjacent
// products into an int32 lane, twice vpdpwssd's multiply-adds per
// instruction, and the weights need no widening. ux_r . qw_j is
// 128 sum_c qw_j[c] above qx_r . qw_j, so each sum starts at
// -128 sum_c qw_j[c] (Int8Matrix::row_sums) and ends at qx_r . qw_j.
// `stride` is a multiple of 64 (kInt8RowAlign). |start| <= 128 * 127 *
// stride and the products add at most 255 * 127 * stride, so every partial
// sum stays within (128 + 255) * 127 * stride, below 2^31 for stride <=
// kInt8A8MaxStride (Int8Linear checks it).
static_assert(kInt8RowAlign % 64 == 0,
              "the 8-bit kernel steps 64 columns with no tail");
// acc + u . w by four bytes per lane (vpdpbusd, u unsigned, w signed). In
// inline assembly: through _mm512_dpbusd_epi32 GCC (12, 13) copied every
// accumulator to another register and back around each instruction of
// the loop below and reloaded activation rows, about 60 instructions per
// 16 vpdpbusd.
RELPOS_VNNI_TARGET inline __m512i Dpbusd(__m512i acc, __m512i u, __m512i w) {
  asm("vpdpbusd %[w], %[u], %[acc]" : [acc] "+v"(acc) : [u] "v"(u), [w] "v"(w));
  return acc;
}
// The 8-bit activations' kernel on the packed weights (Int8Matrix::packed):
// no horizontal sums. A weight block (16 rows x 4 columns, 64 bytes) holds
// in lane i the four columns 4g..4g+3 of row i, so one vpdpbusd against the
// four activation bytes ux_r[4g..4g+3] broadcast to every lane adds those
// columns' products to all 16 rows' sums at once: lane i of acc[r][b] is
// ux_r . qw_(j0 + 16 b + i), started at -128 sum_c qw (as above,
// the same integer qx_r . qw in the end; every partial sum a partial sum
// of that kernel's lane 0, so within its bounds). The 16 lanes are then 16
// outputs, scaled 16 at a time with ScaleRow's float operations in its
// order: float(sum) * (sx * sw), then + bias (no contraction:
// -ffp-contract=off and separate multiply and add instructions), each sum
// first less zx[r] * row_sums[j] (the activations' zero points).
// MR activation rows (ux, row stride `stride`) against NB blocks starting
// at output row j0 (a multiple of 16); outputs from `end` on are neither
// computed nor stored.
template <int MR, int NB>
RELPOS_VNNI_TARGET void PackedTile8(const uint8_t* ux, const float* sx,
                                    const int32_t* zx, const int8_t* packed,
                                    const int32_t* row_sums, const float* sw,
                                    const float* bias, int64_t stride,
                                    int64_t j0, int64_t end, float* y,
                                    int64_t ldy) {
  __mmask16 mask[NB];
  __m512i acc[MR][NB];
  const int8_t* wb[NB];
  for (int b = 0; b < NB; ++b) {
    const int64_t first = j0 + 16 * b;
    const int64_t valid = end - first;  // >= 1: the caller's NB
    mask[b] = valid >= 16 ? static_cast<__mmask16>(0xFFFF)
                          : static_cast<__mmask16>((1u << valid) - 1);
    const __m512i start = _mm512_mullo_epi32(
        _mm512_maskz_loadu_epi32(mask[b], row_sums + first),
        _mm512_set1_epi32(-128));
    for (int r = 0; r < MR; ++r) acc[r][b] = start;
    wb[b] = packed + first * stride;  // block first / 16: 16 stride bytes each
  }
  for (int64_t c = 0; c < stride; c += 4) {
    __m512i w[NB];
    for (int b = 0; b < NB; ++b) w[b] = _mm512_load_si512(wb[b] + c * 16);
    for (int r = 0; r < MR; ++r) {
      int32_t four;
      std::memcpy(&four, ux + r * stride + c, sizeof(four));
      const __m512i u = _mm512_set1_epi32(four);
      for (int b = 0; b < NB; ++b) acc[r][b] = Dpbusd(acc[r][b], u, w[b]);
    }
  }
  for (int b = 0; b < NB; ++b) {
    const int64_t first = j0 + 16 * b;
    const __m512 swv = _mm512_maskz_loadu_ps(mask[b], sw + first);
    const __m512 bv = bias == nullptr
                          ? _mm512_setzero_ps()
                          : _mm512_maskz_loadu_ps(mask[b], bias + first);
    const __m512i sums = _mm512_maskz_loadu_epi32(mask[b], row_sums + first);
    for (int r = 0; r < MR; ++r) {
      const __m512i sum = _mm512_sub_epi32(
          acc[r][b], _mm512_mullo_epi32(sums, _mm512_set1_epi32(zx[r])));
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(sx[r]), swv);
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), scale);
      if (bias != nullptr) v = _mm512_add_ps(v, bv);
      _mm512_mask_storeu_ps(y + r * ldy + first, mask[b], v);
    }
  }
}

// The 8-bit kernel's rows: output rows [begin, end) (begin a
// multiple of 16) in groups of up to kPackedBlocks blocks of 16, against
// all m activation rows in tiles of up to kPackedRows.
constexpr int kPackedRows = 4, kPackedBlocks = 4;

template <int MR>
RELPOS_VNNI_TARGET inline void PackedTileRows8(
    int nb, const uint8_t* ux, const float* sx, const int32_t* zx,
    const int8_t* packed,
    const int32_t* row_sums, const float* sw, const float* bias,
    int64_t stride, int64_t j0, int64_t end, float* y, int64_t ldy) {
  switch (nb) {
    case 1:
      PackedTile8<MR, 1>(ux, sx, zx, packed, row_sums, sw, bias, stride, j0, end,
                         y, ldy);
      break;
    case 2:
      PackedTile8<MR, 2>(ux, sx, zx, packed, row_sums, sw, bias, stride, j0, end,
                         y, ldy);
      break;
    case 3:
      PackedTile8<MR, 3>(ux, sx, zx, packed, row_sums, sw, bias, stride, j0, end,
                         y, ldy);
      break;
    default:
      PackedTile8<MR, 4>(ux, sx, zx, packed, row_sums, sw, bias, stride, j0, end,
                         y, ldy);
      break;
  }
}

RELPOS_VNNI_TARGET void Int8RowsPacked8(int64_t m, const uint8_t* ux,
                                        const float* sx, const int32_t* zx,
                                        const Int8Matrix& w,
                                        int64_t begin, int64_t end,
                                        const float* bias, float* y,
                                        int64_t ldy) {
  const int64_t stride = w.stride;
  for (int64_t j0 = begin; j0 < end; j0 += 16 * kPackedBlocks) {
    const int64_t left = (end - j0 + 15) / 16;
    const int nb = static_cast<int>(left < kPackedBlocks ? left : kPackedBlocks);
    for (int64_t r0 = 0; r0 < m; r0 += kPackedRows) {
      const int64_t mb = m - r0 < kPackedRows ? m - r0 : kPackedRows;
      const uint8_t* xr = ux + r0 * stride;
      float* yr = y + r0 * ldy;
      switch (mb) {
        case 1:
          PackedTileRows8<1>(nb, xr, sx + r0, zx + r0, w.packed.data(),
                             w.row_sums.data(), w.scales.data(), bias, stride,
                             j0, end, yr, ldy);
          break;
        case 2:
          PackedTileRows8<2>(nb, xr, sx + r0, zx + r0, w.packed.data(),
                             w.row_sums.data(), w.scales.data(), bias, stride,
                             j0, end, yr, ldy);
          break;
        case 3:
          PackedTileRows8<3>(nb, xr, sx + r0, zx + r0, w.packed.data(),
                             w.row_sums.data(), w.scales.data(), bias, stride,
                             j0, end, yr, ldy);
          break;
        default:
          PackedTileRows8<4>(nb, xr, sx + r0, zx + r0, w.packed.data(),
                             w.row_sums.data(), w.scales.data(), bias, stride,
                             j0, end, yr, ldy);
          break;
      }
    }
  }
}

// The 16-bit activations' kernel on the same packed weights: vpdpwssd
// takes pairs of int16, so each 64-byte block is widened in two halves
// (vpmovsxbw): rows 0-7 and rows 8-15, each row's four columns as two
// int32 lanes (lane 2i: columns 0 and 1 of the half's row i, lane 2i + 1:
// columns 2 and 3). The activations' four int16 columns are broadcast as
// one int64, so each half's accumulator holds two partial sums per row;
// at the end the two halves' even and odd lanes are gathered (vpermt2d)
// and added: 16 outputs in 16 lanes, rows in order. Exact integer sums
// (the activation range keeps every partial sum of |products| within
// int32), so the same integers as the Highway kernels'; the epilogue is
// PackedTile8's.
template <int MR, int NB>
RELPOS_VNNI_TARGET void PackedTile16(const int16_t* qx, const float* sx,
                                     const int8_t* packed, const float* sw,
                                     const float* bias, int64_t stride,
                                     int64_t j0, int64_t end, float* y,
                                     int64_t ldy) {
  __mmask16 mask[NB];
  __m512i acc[MR][2 * NB];
  const int8_t* wb[NB];
  for (int b = 0; b < NB; ++b) {
    const int64_t first = j0 + 16 * b;
    const int64_t valid = end - first;  // >= 1: the caller's NB
    mask[b] = valid >= 16 ? static_cast<__mmask16>(0xFFFF)
                          : static_cast<__mmask16>((1u << valid) - 1);
    for (int r = 0; r < MR; ++r) {
      acc[r][2 * b] = acc[r][2 * b + 1] = _mm512_setzero_si512();
    }
    wb[b] = packed + first * stride;
  }
  for (int64_t c = 0; c < stride; c += 4) {
    __m512i w[2 * NB];
    for (int b = 0; b < NB; ++b) {
      const int8_t* p = wb[b] + c * 16;
      w[2 * b] = _mm512_cvtepi8_epi16(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(p)));
      w[2 * b + 1] = _mm512_cvtepi8_epi16(
          _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32)));
    }
    for (int r = 0; r < MR; ++r) {
      int64_t four;
      std::memcpy(&four, qx + r * stride + c, sizeof(four));
      const __m512i x = _mm512_set1_epi64(four);
      for (int h = 0; h < 2 * NB; ++h) acc[r][h] = Dpwssd(acc[r][h], x, w[h]);
    }
  }
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 16, 18,
                                         20, 22, 24, 26, 28, 30);
  const __m512i odd = _mm512_setr_epi32(1, 3, 5, 7, 9, 11, 13, 15, 17, 19,
                                        21, 23, 25, 27, 29, 31);
  for (int b = 0; b < NB; ++b) {
    const int64_t first = j0 + 16 * b;
    const __m512 swv = _mm512_maskz_loadu_ps(mask[b], sw + first);
    const __m512 bv = bias == nullptr
                          ? _mm512_setzero_ps()
                          : _mm512_maskz_loadu_ps(mask[b], bias + first);
    for (int r = 0; r < MR; ++r) {
      const __m512i lo = acc[r][2 * b], hi = acc[r][2 * b + 1];
      const __m512i sum =
          _mm512_add_epi32(_mm512_permutex2var_epi32(lo, even, hi),
                           _mm512_permutex2var_epi32(lo, odd, hi));
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(sx[r]), swv);
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), scale);
      if (bias != nullptr) v = _mm512_add_ps(v, bv);
      _mm512_mask_storeu_ps(y + r * ldy + first, mask[b], v);
    }
  }
}

// The 16-bit kernel's rows: as Int8RowsPacked8, in groups of up
// to 2 blocks (4 accumulators per activation row).
constexpr int kPacked16Blocks = 2;

template <int MR>
RELPOS_VNNI_TARGET inline void PackedTileRows16(
    int nb, const int16_t* qx, const float* sx, const int8_t* packed,
    const float* sw, const float* bias, int64_t stride, int64_t j0,
    int64_t end, float* y, int64_t ldy) {
  if (nb == 1) {
    PackedTile16<MR, 1>(qx, sx, packed, sw, bias, stride, j0, end, y, ldy);
  } else {
    PackedTile16<MR, 2>(qx, sx, packed, sw, bias, stride, j0, end, y, ldy);
  }
}

RELPOS_VNNI_TARGET void Int8RowsPacked16(int64_t m, const int16_t* qx,
                                         const float* sx, const Int8Matrix& w,
                                         int64_t begin, int64_t end,
                                         const float* bias, float* y,
                                         int64_t ldy) {
  const int64_t stride = w.stride;
  for (int64_t j0 = begin; j0 < end; j0 += 16 * kPacked16Blocks) {
    const int64_t left = (end - j0 + 15) / 16;
    const int nb =
        static_cast<int>(left < kPacked16Blocks ? left : kPacked16Blocks);
    for (int64_t r0 = 0; r0 < m; r0 += kPackedRows) {
      const int64_t mb = m - r0 < kPackedRows ? m - r0 : kPackedRows;
      const int16_t* xr = qx + r0 * stride;
      float* yr = y + r0 * ldy;
      const int8_t* p = w.packed.data();
      const float* sw = w.scales.data();
      switch (mb) {
        case 1:
          PackedTileRows16<1>(nb, xr, sx + r0, p, sw, bias, stride, j0, end,
                              yr, ldy);
          break;
        case 2:
          PackedTileRows16<2>(nb, xr, sx + r0, p, sw, bias, stride, j0, end,
                              yr, ldy);
          break;
        case 3:
          PackedTileRows16<3>(nb, xr, sx + r0, p, sw, bias, stride, j0, end,
                              yr, ldy);
          break;
        default:
          PackedTileRows16<4>(nb, xr, sx + r0, p, sw, bias, stride, j0, end,
                              yr, ldy);
          break;
      }
    }
  }
}

// Int8Matrix::packed from values (see int8_linear.h).
void PackForVnni8(Int8Matrix* q) {
  const int64_t blocks = (q->rows + 15) / 16;
  q->packed.assign(static_cast<size_t>(blocks * 16 * q->stride), 0);
  const int64_t groups = q->stride / 4;
  for (int64_t j = 0; j < q->rows; ++j) {  // four bytes at a time
    const int8_t* row = q->values.data() + j * q->stride;
    int8_t* block = q->packed.data() + (j / 16) * 16 * q->stride + (j % 16) * 4;
    for (int64_t g = 0; g < groups; ++g) {
      std::memcpy(block + g * 64, row + g * 4, 4);
    }
  }
}
#undef RELPOS_VNNI_TARGET

// AVX2 (Haswell and later, Zen 1-3: no VNNI) on the same packed blocks of
// 16 rows x 4 columns, whose lanes are outputs, so no horizontal sum per
// dot product and 8 outputs scaled at once. Written with intrinsics
// because Highway's AVX2 target has no broadcast of a four-byte group nor
// vpsignb; chosen at run time where Highway dispatches AVX2.
#define RELPOS_AVX2_TARGET __attribute__((target("avx2")))

// acc + v (vpaddd) in inline assembly, the accumulators' one instruction,
// for the reason Dpbusd gives: with _mm256_add_epi32 GCC 12 copied every
// accumulator to another register and back each iteration and kept some
// of them on the stack.
RELPOS_AVX2_TARGET inline __m256i AddTo(__m256i acc, __m256i v) {
  asm("vpaddd %[v], %[acc], %[acc]" : [acc] "+x"(acc) : [v] "x"(v));
  return acc;
}

// The lanes below `valid` (1..8) all ones, the rest zero: the mask of the
// masked loads and stores that must not touch floats past the outputs.
RELPOS_AVX2_TARGET inline __m256i TailMask(int64_t valid) {
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  return _mm256_cmpgt_epi32(
      _mm256_set1_epi32(static_cast<int32_t>(valid < 8 ? valid : 8)), lanes);
}

// y[j0 + i] = sums[i] * (sx * sw[j0 + i]) (+ bias) for the 8 outputs of
// `sums` (fewer where valid < 8): ScaleRow's operations in its order
// (float(sum) * (sx * sw), then + bias; no fused multiply-add under this
// target).
RELPOS_AVX2_TARGET inline void ScaleStore8(__m256i sums, float sx,
                                           const float* sw, const float* bias,
                                           int64_t valid, float* out) {
  if (valid >= 8) {
    const __m256 scale = _mm256_mul_ps(_mm256_set1_ps(sx), _mm256_loadu_ps(sw));
    __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), scale);
    if (bias != nullptr) v = _mm256_add_ps(v, _mm256_loadu_ps(bias));
    _mm256_storeu_ps(out, v);
    return;
  }
  const __m256i mask = TailMask(valid);
  const __m256 scale =
      _mm256_mul_ps(_mm256_set1_ps(sx), _mm256_maskload_ps(sw, mask));
  __m256 v = _mm256_mul_ps(_mm256_cvtepi32_ps(sums), scale);
  if (bias != nullptr) v = _mm256_add_ps(v, _mm256_maskload_ps(bias, mask));
  _mm256_maskstore_ps(out, mask, v);
}

// The 16-bit activations on AVX2: each quarter of a 64-byte block (16
// bytes: 4 rows x 4 columns) widened to int16 (vpmovsxbw), multiplied by
// the activations' four int16 columns broadcast as one int64 (vpmaddwd):
// lane 2i holds columns 0-1 of the quarter's row i, lane 2i + 1 columns
// 2-3. At the end vphaddd adds each lane pair and vpermq puts rows 0-7
// (then 8-15) in order. MR activation rows against the block of output
// rows j0..j0 + 15 (outputs from `end` on neither computed nor stored).
// Exact integer sums, the same integers as every other kernel's.
template <int MR>
RELPOS_AVX2_TARGET void PackedTile16Avx2(const int16_t* qx, const float* sx,
                                         const int8_t* packed,
                                         const float* sw, const float* bias,
                                         int64_t stride, int64_t j0,
                                         int64_t end, float* y, int64_t ldy) {
  __m256i acc[MR][4];
  for (int r = 0; r < MR; ++r) {
    for (int q = 0; q < 4; ++q) acc[r][q] = _mm256_setzero_si256();
  }
  const int8_t* wb = packed + j0 * stride;  // block j0 / 16
  for (int64_t c = 0; c < stride; c += 4) {
    __m256i x[MR];
    for (int r = 0; r < MR; ++r) {
      int64_t four;
      std::memcpy(&four, qx + r * stride + c, sizeof(four));
      x[r] = _mm256_set1_epi64x(four);
    }
    const int8_t* p = wb + c * 16;
    for (int q = 0; q < 4; ++q) {
      const __m256i w = _mm256_cvtepi8_epi16(
          _mm_load_si128(reinterpret_cast<const __m128i*>(p + 16 * q)));
      for (int r = 0; r < MR; ++r) {
        acc[r][q] = AddTo(acc[r][q], _mm256_madd_epi16(x[r], w));
      }
    }
  }
  for (int r = 0; r < MR; ++r) {
    for (int h = 0; h < 2; ++h) {
      const int64_t first = j0 + 8 * h;
      if (first >= end) break;
      const __m256i sums = _mm256_permute4x64_epi64(
          _mm256_hadd_epi32(acc[r][2 * h], acc[r][2 * h + 1]), 0xD8);
      ScaleStore8(sums, sx[r], sw + first,
                  bias == nullptr ? nullptr : bias + first, end - first,
                  y + r * ldy + first);
    }
  }
}

// The 8-bit activations on AVX2 (vpmaddubsw, u8 x s8 pairs into int16):
// each half of a block (32 bytes: 8 rows x 4 columns) against the four
// activation bytes broadcast, as |w| (unsigned) times x with w's sign
// (vpsignb), so each int16 pair sum is at most 2 x 127 x 127 = 32258 and
// never saturates (activations and weights both in [-127, 127]); vpmaddwd
// by ones then adds the pairs into the int32 lanes, which are the 8 rows'
// outputs. Exact: the same integers as every other kernel's, each less
// zx[r] * row_sums[j] (the activations' zero points) before the scaling.
template <int MR>
RELPOS_AVX2_TARGET void PackedTile8Avx2(const int8_t* qx, const float* sx,
                                        const int32_t* zx,
                                        const int8_t* packed, const float* sw,
                                        const int32_t* row_sums,
                                        const float* bias, int64_t stride,
                                        int64_t j0, int64_t end, float* y,
                                        int64_t ldy) {
  __m256i acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_si256();
  const __m256i ones = _mm256_set1_epi16(1);
  const int8_t* wb = packed + j0 * stride;
  for (int64_t c = 0; c < stride; c += 4) {
    const int8_t* p = wb + c * 16;
    const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(p));
    const __m256i w1 =
        _mm256_load_si256(reinterpret_cast<const __m256i*>(p + 32));
    const __m256i a0 = _mm256_abs_epi8(w0), a1 = _mm256_abs_epi8(w1);
    for (int r = 0; r < MR; ++r) {
      int32_t four;
      std::memcpy(&four, qx + r * stride + c, sizeof(four));
      const __m256i x = _mm256_set1_epi32(four);
      const __m256i p0 = _mm256_maddubs_epi16(a0, _mm256_sign_epi8(x, w0));
      const __m256i p1 = _mm256_maddubs_epi16(a1, _mm256_sign_epi8(x, w1));
      acc[r][0] = AddTo(acc[r][0], _mm256_madd_epi16(p0, ones));
      acc[r][1] = AddTo(acc[r][1], _mm256_madd_epi16(p1, ones));
    }
  }
  for (int h = 0; h < 2; ++h) {
    const int64_t first = j0 + 8 * h;
    if (first >= end) break;
    const __m256i sums =
        _mm256_maskload_epi32(row_sums + first, TailMask(end - first));
    for (int r = 0; r < MR; ++r) {
      const __m256i sum = _mm256_sub_epi32(
          acc[r][h], _mm256_mullo_epi32(sums, _mm256_set1_epi32(zx[r])));
      ScaleStore8(sum, sx[r], sw + first,
                  bias == nullptr ? nullptr : bias + first, end - first,
                  y + r * ldy + first);
    }
  }
}

// Output rows [begin, end) (begin a multiple of 16) block by block against
// all m activation rows (T int16 or int8, row stride `stride`) in tiles of
// up to MR rows (the registers: 2 rows x 4 int32 accumulators for int16,
// 4 x 2 for int8).
template <typename T, int MR>
RELPOS_AVX2_TARGET void Int8RowsPackedAvx2(int64_t m, const T* qx,
                                           const float* sx, const int32_t* zx,
                                           const Int8Matrix& w, int64_t begin,
                                           int64_t end, const float* bias,
                                           float* y, int64_t ldy) {
  const int64_t stride = w.stride;
  const int8_t* p = w.packed.data();
  const float* sw = w.scales.data();
  const auto tile = [&](auto rows, int64_t j0, int64_t r0) {
    constexpr int kRows = decltype(rows)::value;
    if constexpr (sizeof(T) == 2) {
      PackedTile16Avx2<kRows>(qx + r0 * stride, sx + r0, p, sw, bias, stride,
                              j0, end, y + r0 * ldy, ldy);
    } else {
      PackedTile8Avx2<kRows>(qx + r0 * stride, sx + r0, zx + r0, p, sw,
                             w.row_sums.data(), bias, stride, j0, end,
                             y + r0 * ldy, ldy);
    }
  };
  for (int64_t j0 = begin; j0 < end; j0 += 16) {
    int64_t r0 = 0;
    for (; r0 + MR <= m; r0 += MR) {
      tile(std::integral_constant<int, MR>(), j0, r0);
    }
    const int64_t left = m - r0;  // < MR <= 4
    if (MR > 3 && left == 3) {
      tile(std::integral_constant<int, MR < 3 ? MR : 3>(), j0, r0);
    } else if (MR > 2 && left == 2) {
      tile(std::integral_constant<int, MR < 2 ? MR : 2>(), j0, r0);
    } else if (left == 1) {
      tile(std::integral_constant<int, 1>(), j0, r0);
    }
  }
}
#undef RELPOS_AVX2_TARGET

// AMX (Sapphire Rapids and later): the tile unit multiplies a tile of up
// to 16 activation rows x 64 int8 columns by a tile of 64 columns x 16
// outputs and adds the products, by fours, into 16 x 16 int32 sums
// (tdpbssd: 16384 multiply-adds per instruction against vpdpbusd's 64).
// Its right-hand tile is 16 rows of 64 bytes, row q holding columns
// 4q..4q+3 of each of 16 outputs: 16 consecutive groups of a packed block
// of Int8Matrix::packed, so the packed weights are read as they are, one
// tile (1 KB, stride 64) per 64 columns of 16 outputs. The activations
// tile is 16 rows of the quantized activations as they are (row stride
// `stride`). The 8-bit activations multiply as signed bytes (qx, not
// qx + 128). The 16-bit ones are split into their high byte (signed,
// qx >> 8) and low byte (unsigned, qx & 255): qx . qw = 256 (hi . qw) +
// (lo . qw), tdpbssd and tdpbusd into two sums joined as 32-bit integers
// that wrap (256 (hi . qw) may pass 2^31 on the way; the result, within
// the activation range's bound, does not). The same integers as every
// other kernel, then PackedTile8's scaling: the same bits.
#define RELPOS_AMX_TARGET                               \
  __attribute__((                                       \
      target("avx2,avx512f,avx512bw,avx512vl,amx-tile," \
             "amx-int8")))

// The tile unit's state is requested from Linux once per process
// (arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA); false where the CPU has
// no AMX-INT8 or the kernel refuses.
bool AmxUsable() {
#if defined(__linux__)
  static const bool usable = [] {
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (__get_cpuid_count(7, 0, &a, &b, &c, &d) == 0) return false;
    const bool tile = (d >> 24) & 1, int8 = (d >> 25) & 1;
    if (!tile || !int8) return false;
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return usable;
#else
  return false;
#endif
}

// LDTILECFG's 64 bytes: palette 1, then per tile its bytes per row and
// rows.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

// Every tile 16 rows of 64 bytes: 0-3 the sums (16 x 16 int32), 4-5
// activations (16 rows x 64 columns), 6-7 weights (64 columns x 16
// outputs, by fours).
RELPOS_AMX_TARGET inline void ConfigureTiles() {
  TileConfig config;
  for (int t = 0; t < 8; ++t) {
    config.colsb[t] = 64;
    config.rows[t] = 16;
  }
  _tile_loadconfig(&config);
}

// Output rows [j0, j0 + 16 nb) (outputs from `end` on neither stored nor
// read) for the first mr of the tiles' 16 rows of sums, sums[b][r][16]:
// the 8-bit kernel's scaling (each sum less zx[r] * row_sums[j], the
// activations' zero points), or for the split 16-bit sums (hi in sums[b],
// lo in sums[b + 2]) first 256 hi + lo.
template <bool kSplit>
RELPOS_AMX_TARGET inline void ScaleTiles(const int32_t (*sums)[16][16], int nb,
                                         int mr, const float* sx,
                                         const int32_t* zx,
                                         const int32_t* row_sums,
                                         const float* sw, const float* bias,
                                         int64_t j0, int64_t end, float* y,
                                         int64_t ldy) {
  for (int b = 0; b < nb; ++b) {
    const int64_t first = j0 + 16 * b;
    const int64_t valid = end - first;  // >= 1
    const __mmask16 mask = valid >= 16
                               ? static_cast<__mmask16>(0xFFFF)
                               : static_cast<__mmask16>((1u << valid) - 1);
    const __m512 swv = _mm512_maskz_loadu_ps(mask, sw + first);
    const __m512 bv = bias == nullptr
                          ? _mm512_setzero_ps()
                          : _mm512_maskz_loadu_ps(mask, bias + first);
    for (int r = 0; r < mr; ++r) {
      __m512i sum = _mm512_load_si512(sums[b][r]);
      if constexpr (kSplit) {
        sum = _mm512_add_epi32(_mm512_slli_epi32(sum, 8),
                               _mm512_load_si512(sums[b + 2][r]));
      } else {
        sum = _mm512_sub_epi32(
            sum, _mm512_mullo_epi32(
                     _mm512_maskz_loadu_epi32(mask, row_sums + first),
                     _mm512_set1_epi32(zx[r])));
      }
      const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(sx[r]), swv);
      __m512 v = _mm512_mul_ps(_mm512_cvtepi32_ps(sum), scale);
      if (bias != nullptr) v = _mm512_add_ps(v, bv);
      _mm512_mask_storeu_ps(y + r * ldy + first, mask, v);
    }
  }
}

// The 8-bit activations (qx, signed, row stride `stride`, 16 rows)
// against NB blocks of 16 outputs from j0: sums in tiles 0..NB-1, the
// activations' 64 columns in tile 4, the blocks' weight tiles in 6 and 7
// by turns.
template <int NB>
RELPOS_AMX_TARGET inline void AmxTile8(const int8_t* qx, const int8_t* wb,
                                       int64_t stride,
                                       int32_t (*sums)[16][16]) {
  _tile_zero(0);
  if constexpr (NB > 1) _tile_zero(1);
  if constexpr (NB > 2) _tile_zero(2);
  if constexpr (NB > 3) _tile_zero(3);
  const int64_t block = 16 * stride;  // bytes of a packed block of 16 rows
  for (int64_t c = 0; c < stride; c += 64) {
    const int8_t* w = wb + c * 16;
    _tile_loadd(4, qx + c, stride);
    _tile_loadd(6, w, 64);
    _tile_dpbssd(0, 4, 6);
    if constexpr (NB > 1) {
      _tile_loadd(7, w + block, 64);
      _tile_dpbssd(1, 4, 7);
    }
    if constexpr (NB > 2) {
      _tile_loadd(6, w + 2 * block, 64);
      _tile_dpbssd(2, 4, 6);
    }
    if constexpr (NB > 3) {
      _tile_loadd(7, w + 3 * block, 64);
      _tile_dpbssd(3, 4, 7);
    }
  }
  _tile_stored(0, sums[0], 64);
  if constexpr (NB > 1) _tile_stored(1, sums[1], 64);
  if constexpr (NB > 2) _tile_stored(2, sums[2], 64);
  if constexpr (NB > 3) _tile_stored(3, sums[3], 64);
}

// The 16-bit activations split (hi: signed high bytes, lo: unsigned low
// bytes, both row stride `stride`) against NB <= 2 blocks: hi . w in tiles
// 0-1, lo . w in tiles 2-3, hi in tile 4, lo in 5, weights in 6 and 7.
template <int NB>
RELPOS_AMX_TARGET inline void AmxTile16(const int8_t* hi, const uint8_t* lo,
                                        const int8_t* wb, int64_t stride,
                                        int32_t (*sums)[16][16]) {
  _tile_zero(0);
  _tile_zero(2);
  if constexpr (NB > 1) {
    _tile_zero(1);
    _tile_zero(3);
  }
  const int64_t block = 16 * stride;
  for (int64_t c = 0; c < stride; c += 64) {
    const int8_t* w = wb + c * 16;
    _tile_loadd(4, hi + c, stride);
    _tile_loadd(5, lo + c, stride);
    _tile_loadd(6, w, 64);
    _tile_dpbssd(0, 4, 6);
    _tile_dpbusd(2, 5, 6);
    if constexpr (NB > 1) {
      _tile_loadd(7, w + block, 64);
      _tile_dpbssd(1, 4, 7);
      _tile_dpbusd(3, 5, 7);
    }
  }
  _tile_stored(0, sums[0], 64);
  _tile_stored(2, sums[2], 64);
  if constexpr (NB > 1) {
    _tile_stored(1, sums[1], 64);
    _tile_stored(3, sums[3], 64);
  }
}

// Output rows [begin, end) (begin a multiple of 16) against all m
// activation rows, in groups of 4 blocks of 16 outputs (8-bit) or 2
// (16-bit), each against the activation rows 16 at a time (the group's
// weights, 64 x stride bytes at most, stay in L1 meanwhile). The
// activations hold rows up to m rounded up to 16 (zeros past m), so every
// tile has 16 rows; only rows below m are stored. For the 16-bit
// activations `hi` and `lo` are the split planes (kSplit); otherwise `hi`
// holds the 8-bit activations and zx their zero points.
template <bool kSplit>
RELPOS_AMX_TARGET void Int8RowsAmx(int64_t m, const int8_t* hi,
                                   const uint8_t* lo, const float* sx,
                                   const int32_t* zx, const Int8Matrix& w,
                                   int64_t begin,
                                   int64_t end, const float* bias, float* y,
                                   int64_t ldy) {
  const int64_t stride = w.stride;
  constexpr int kBlocks = kSplit ? 2 : 4;
  alignas(64) int32_t sums[4][16][16];
  ConfigureTiles();
  for (int64_t j0 = begin; j0 < end; j0 += 16 * kBlocks) {
    const int64_t left = (end - j0 + 15) / 16;
    const int nb = static_cast<int>(std::min<int64_t>(left, kBlocks));
    const int8_t* wb = w.packed.data() + j0 * stride;  // block j0 / 16
    for (int64_t r0 = 0; r0 < m; r0 += 16) {
      const int mr = static_cast<int>(std::min<int64_t>(16, m - r0));
      const int64_t at = r0 * stride;
      if constexpr (kSplit) {
        if (nb == 1) {
          AmxTile16<1>(hi + at, lo + at, wb, stride, sums);
        } else {
          AmxTile16<2>(hi + at, lo + at, wb, stride, sums);
        }
      } else {
        switch (nb) {
          case 1:
            AmxTile8<1>(hi + at, wb, stride, sums);
            break;
          case 2:
            AmxTile8<2>(hi + at, wb, stride, sums);
            break;
          case 3:
            AmxTile8<3>(hi + at, wb, stride, sums);
            break;
          default:
            AmxTile8<4>(hi + at, wb, stride, sums);
            break;
        }
      }
      ScaleTiles<kSplit>(sums, nb, mr, sx + r0, kSplit ? nullptr : zx + r0,
                         w.row_sums.data(), w.scales.data(), bias, j0, end,
                         y + r0 * ldy, ldy);
    }
  }
  _tile_release();
}

// The 16-bit activations' high bytes (arithmetic shift) and low bytes
// (truncation), n values (a multiple of 32).
RELPOS_AMX_TARGET void SplitBytes(const int16_t* qx, int64_t n, int8_t* hi,
                                  uint8_t* lo) {
  for (int64_t i = 0; i < n; i += 32) {
    const __m512i v = _mm512_load_si512(qx + i);
    _mm256_store_si256(reinterpret_cast<__m256i*>(hi + i),
                       _mm512_cvtepi16_epi8(_mm512_srai_epi16(v, 8)));
    _mm256_store_si256(reinterpret_cast<__m256i*>(lo + i),
                       _mm512_cvtepi16_epi8(v));
  }
}
#undef RELPOS_AMX_TARGET
#endif  // HWY_ARCH_X86

bool packed_allowed = true;  // Int8LinearAllowPackedForTest
bool amx_allowed = true;     // Int8LinearAllowAmx

// Which kernels read the packed weights (Int8Matrix::packed) for Highway's
// target here: the AMX ones where Highway dispatches AVX3 and the CPU has
// AMX-INT8 (and Linux grants the tile state), the VNNI ones where it
// dispatches AVX3 and the CPU has AVX-512 VNNI, the AVX2 ones where it
// dispatches AVX2; none elsewhere (Highway's row-major kernels).
enum class Packed { kNone, kVnni, kAmx, kAvx2 };

Packed PackedKernels(const char* target) {
#if HWY_ARCH_X86
  static const bool vnni = __builtin_cpu_supports("avx512vnni");
  if (!packed_allowed) return Packed::kNone;
  if (vnni && std::strcmp(target, "AVX3") == 0) {
    return amx_allowed && AmxUsable() ? Packed::kAmx : Packed::kVnni;
  }
  if (std::strcmp(target, "AVX2") == 0) return Packed::kAvx2;
#else
  (void)target;
#endif
  return Packed::kNone;
}

}  // namespace

HWY_EXPORT(Int8Rows);
HWY_EXPORT(QuantizeRows16);
HWY_EXPORT(QuantizeRows8);
HWY_EXPORT(QuantizeRowsZeroPoint8);
HWY_EXPORT(QuantizeRowsZeroPoint16);
HWY_EXPORT(Int8Target);

namespace {

// Products below this many multiply-adds run on the calling thread.
constexpr int64_t kInt8SerialMacs = int64_t{1} << 18;

// Activation rows quantized and multiplied per pass: the quantized copy
// stays at most 64 x stride (128 KB of int16 at 1024 columns, an L2's
// share; an encoder's 16 sentences of 100 tokens held 3.2 MB) and every
// weight block is used 64 times while it is in L1.
constexpr int64_t kInt8RowChunk = 64;

// Fewer activation rows than this take the VNNI kernels where AMX is there
// too: a tile multiply costs about the same whatever its rows, and at 4
// rows the VNNI kernels were as fast or faster (bench/gemv_bench, one
// thread, Xeon with AMX: 0.95-1.12x the AMX kernels' time), at 8 the AMX
// ones 1.16-1.64x faster.
constexpr int64_t kAmxMinRows = 8;

int64_t PaddedStride(int64_t cols) {
  return (cols + kInt8RowAlign - 1) / kInt8RowAlign * kInt8RowAlign;
}

}  // namespace

int32_t Int8ActivationRange(int64_t stride) {
  const int64_t limit = std::numeric_limits<int32_t>::max() /
                        (int64_t{127} * std::max<int64_t>(stride, 1));
  return static_cast<int32_t>(std::clamp<int64_t>(limit, 1, 32767));
}

Int8Matrix QuantizeRows(const float* w, int64_t rows, int64_t cols,
                        int64_t ldw) {
  RELPOS_CHECK_ARG(rows >= 0 && cols >= 0,
                   "QuantizeRows: sizes must be >= 0 (got " << rows << " x "
                                                            << cols << ")");
  RELPOS_CHECK_ARG(ldw >= cols, "QuantizeRows: ldw " << ldw
                                                     << " is below cols "
                                                     << cols);
  RELPOS_CHECK_ARG(Int8ActivationRange(PaddedStride(cols)) >= 127,
                   "QuantizeRows: " << cols
                                    << " columns are too many for int32 sums");
  Int8Matrix q;
  q.rows = rows;
  q.cols = cols;
  q.stride = PaddedStride(cols);
  q.values.assign(static_cast<size_t>(rows * q.stride), 0);
  q.scales.assign(static_cast<size_t>(rows), 0.0f);
  q.row_sums.assign(static_cast<size_t>(rows), 0);
  std::vector<float> amax(static_cast<size_t>(rows));
  HWY_DYNAMIC_DISPATCH(QuantizeRows8)
  (rows, w, ldw, cols, q.values.data(), q.stride, amax.data());
  for (int64_t j = 0; j < rows; ++j) {
    if (std::isnan(amax[j])) {
      int64_t c = 0;
      while (c + 1 < cols && std::isfinite(w[j * ldw + c])) ++c;
      RELPOS_THROW(InvalidArgument, "QuantizeRows: weight ("
                                        << j << ", " << c
                                        << ") is not finite");
    }
    q.scales[j] = amax[j] / 127.0f;
    int32_t sum = 0;  // |sum| <= 127 stride, far inside int32
    for (int64_t c = 0; c < cols; ++c) sum += q.values[j * q.stride + c];
    q.row_sums[j] = sum;
  }
#if HWY_ARCH_X86
  // Where the products run the packed kernels (VNNI or AVX2, for the
  // target Highway dispatches, under any instruction set cap: relpos/cpu.h).
  if (PackedKernels(HWY_DYNAMIC_DISPATCH(Int8Target)()) != Packed::kNone) {
    PackForVnni8(&q);
    // The packed copy is the one the packed kernels read; the others (a
    // test that turns them off) unpack it per call (RowMajorOf).
    decltype(q.values)().swap(q.values);
  }
#endif
  return q;
}

namespace {

// w's row-major values [rows, stride]: `values` itself, or where only the
// packed copy is held, that copy unpacked into a buffer of the calling
// thread (the non-VNNI kernels on a VNNI CPU: tests only).
const int8_t* RowMajorOf(const Int8Matrix& w) {
  if (!w.values.empty() || w.rows == 0) return w.values.data();
  thread_local std::vector<int8_t, Int8Allocator<int8_t>> unpacked;
  unpacked.assign(static_cast<size_t>(w.rows * w.stride), 0);
  for (int64_t j = 0; j < w.rows; ++j) {
    for (int64_t c = 0; c < w.stride; ++c) {
      unpacked[static_cast<size_t>(j * w.stride + c)] = w.Value(j, c);
    }
  }
  return unpacked.data();
}

}  // namespace

void Int8Linear(int64_t m, const float* x, int64_t ldx, const Int8Matrix& w,
                const float* bias, float* y, int64_t ldy, int num_threads,
                Int8Activations activations) {
  RELPOS_CHECK_ARG(m >= 0 && ldx >= w.cols && ldy >= w.rows,
                   "Int8Linear: bad sizes (m " << m << ", ldx " << ldx
                                               << ", ldy " << ldy << " for "
                                               << w.rows << " x " << w.cols
                                               << ")");
  const bool a8 = activations == Int8Activations::k8;
  RELPOS_CHECK_ARG(!a8 || w.stride <= kInt8A8MaxStride,
                   "Int8Linear: " << w.cols
                                  << " columns are too many for 8-bit "
                                     "activations' int32 sums (at most "
                                  << kInt8A8MaxStride << ")");
  if (m == 0 || w.rows == 0) return;
  if (m > kInt8RowChunk) {
    // Chunk by chunk: each output row depends on its own activation row
    // only, so the results are the same bits.
    for (int64_t r0 = 0; r0 < m; r0 += kInt8RowChunk) {
      Int8Linear(std::min(kInt8RowChunk, m - r0), x + r0 * ldx, ldx, w, bias,
                 y + r0 * ldy, ldy, num_threads, activations);
    }
    return;
  }
  // The packed kernels read the packed weights; a matrix without them (not
  // made by QuantizeRows for this target) takes the Highway kernels.
  Packed kind = w.packed.empty()
                    ? Packed::kNone
                    : PackedKernels(HWY_DYNAMIC_DISPATCH(Int8Target)());
  if (kind == Packed::kAmx && m < kAmxMinRows) kind = Packed::kVnni;
  const bool packed = kind != Packed::kNone;
  // The activations, quantized per row (zeros in the padding columns):
  // int16 for the Highway kernels, vpdpwssd and AVX2's vpmaddwd, whatever
  // their range; with 8-bit activations int8 for AVX2's vpmaddubsw and
  // AMX, u8 (qx + 128) for vpdpbusd, and their zero points (zx).
  const bool bytes = a8 && packed;
  thread_local std::vector<int16_t, Int8Allocator<int16_t>> qx;
  thread_local std::vector<uint8_t, Int8Allocator<uint8_t>> ux;
  thread_local std::vector<float> sx;
  thread_local std::vector<int32_t> zx;
  sx.assign(static_cast<size_t>(m), 0.0f);
  zx.assign(static_cast<size_t>(a8 ? m : 0), 0);
  // sx[r] is max |x| (16-bit) or the span (8-bit) until divided by this.
  const float range =
      a8 ? 254.0f : static_cast<float>(Int8ActivationRange(w.stride));
  // The quantizers write columns [0, cols) of each row whose max |x| is
  // finite and not 0; the rest of every row is zeroed here, not the whole
  // buffer first (a decoding step's memset cost as much as its
  // quantization).
  const auto zero_rest = [&](auto* q) {
    for (int64_t r = 0; r < m; ++r) {
      const int64_t from = sx[r] > 0.0f ? w.cols : 0;  // NaN, 0: whole row
      std::fill(q + r * w.stride + from, q + (r + 1) * w.stride, 0);
    }
  };
  // AMX's tiles take 16 activation rows: its buffers hold m rounded up to
  // 16 rows, zeros past m.
  const int64_t tile_rows = kind == Packed::kAmx ? (m + 15) / 16 * 16 : m;
  const int64_t pad = (tile_rows - m) * w.stride;
  if (bytes) {
    ux.resize(static_cast<size_t>(tile_rows * w.stride));
    std::fill(ux.begin() + m * w.stride, ux.end(), 0);
    int8_t* q8 = reinterpret_cast<int8_t*>(ux.data());
    HWY_DYNAMIC_DISPATCH(QuantizeRowsZeroPoint8)
    (m, x, ldx, w.cols, q8, w.stride, sx.data(), zx.data());
    zero_rest(q8);
    if (kind == Packed::kVnni) {
      for (uint8_t& u : ux) u ^= 0x80;  // two's complement q + 128
    }
  } else {
    qx.resize(static_cast<size_t>(m * w.stride));
    if (a8) {
      HWY_DYNAMIC_DISPATCH(QuantizeRowsZeroPoint16)
      (m, x, ldx, w.cols, qx.data(), w.stride, sx.data(), zx.data());
    } else {
      HWY_DYNAMIC_DISPATCH(QuantizeRows16)
      (m, x, ldx, w.cols, range, qx.data(), w.stride, sx.data());
    }
    zero_rest(qx.data());
#if HWY_ARCH_X86
    if (kind == Packed::kAmx) {  // high bytes, then low bytes
      const int64_t plane = tile_rows * w.stride;
      ux.resize(static_cast<size_t>(2 * plane));
      SplitBytes(qx.data(), m * w.stride, reinterpret_cast<int8_t*>(ux.data()),
                 ux.data() + plane);
      std::fill_n(ux.begin() + (plane - pad), pad, 0);
      std::fill_n(ux.begin() + (2 * plane - pad), pad, 0);
    }
#endif
  }
  for (float& scale : sx) scale /= range;  // NaN stays NaN, 0 stays 0
  // The packed kernels take output rows in blocks of 16, the others in
  // blocks of 4.
  const int64_t unit = packed ? 16 : 4;
  const int64_t blocks = (w.rows + unit - 1) / unit;
  const int threads =
      m * w.rows * w.cols < kInt8SerialMacs
          ? 1
          : static_cast<int>(std::clamp<int64_t>(num_threads, 1, blocks));
  const int16_t* qxp = qx.data();
  [[maybe_unused]] const uint8_t* uxp = ux.data();  // x86 only
  const float* sxp = sx.data();
  const int32_t* zxp = a8 ? zx.data() : nullptr;
  // The row-major weights for the kernels other than the packed ones,
  // found on this thread before any team starts.
  const int8_t* rowmajor = packed ? nullptr : RowMajorOf(w);
  // Weight rows [begin, end) against every activation row.
  const auto rows = [&](int64_t begin, int64_t end) {
#if HWY_ARCH_X86
    if (kind == Packed::kAmx) {
      const int8_t* hi = reinterpret_cast<const int8_t*>(uxp);
      if (bytes) {
        Int8RowsAmx<false>(m, hi, nullptr, sxp, zxp, w, begin, end, bias, y,
                           ldy);
      } else {
        Int8RowsAmx<true>(m, hi, uxp + tile_rows * w.stride, sxp, nullptr, w,
                          begin, end, bias, y, ldy);
      }
      return;
    }
    if (kind == Packed::kVnni) {
      if (bytes) {
        Int8RowsPacked8(m, uxp, sxp, zxp, w, begin, end, bias, y, ldy);
      } else {
        Int8RowsPacked16(m, qxp, sxp, w, begin, end, bias, y, ldy);
      }
      return;
    }
    if (kind == Packed::kAvx2) {
      if (bytes) {
        Int8RowsPackedAvx2<int8_t, 4>(m, reinterpret_cast<const int8_t*>(uxp),
                                      sxp, zxp, w, begin, end, bias, y, ldy);
      } else {
        Int8RowsPackedAvx2<int16_t, 2>(m, qxp, sxp, nullptr, w, begin, end,
                                       bias, y, ldy);
      }
      return;
    }
#endif
    HWY_DYNAMIC_DISPATCH(Int8Rows)
    (m, qxp, sxp, zxp, rowmajor, w.scales.data(), w.row_sums.data(), w.stride,
     begin, end, bias, y, ldy);
  };
  if (threads == 1) {
    rows(0, w.rows);
    return;
  }
  const int64_t per = (blocks + threads - 1) / threads * unit;
#pragma omp parallel num_threads(threads)
  {
    const int64_t begin = omp_get_thread_num() * per;
    const int64_t end = std::min(w.rows, begin + per);
    if (begin < end) rows(begin, end);
  }
}

const char* Int8LinearTargetName() {
  const char* target = HWY_DYNAMIC_DISPATCH(Int8Target)();
  switch (PackedKernels(target)) {
    case Packed::kVnni:
      return "AVX3+VNNI";
    case Packed::kAmx:
      return "AVX3+AMX";
    default:
      return target;
  }
}

void Int8LinearAllowPackedForTest(bool allow) { packed_allowed = allow; }

void Int8LinearAllowAmx(bool allow) { amx_allowed = allow; }

}  // namespace relpos

#endif  // HWY_ONCE

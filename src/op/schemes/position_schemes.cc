// Bucket maps and ALiBi slopes (docs/math.md section 8); the formulas and
// their float32 rounding are stated in include/relpos/position_schemes.h.
#include "relpos/position_schemes.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include "base/check.h"

namespace relpos {

void ValidateClipBuckets(const ClipBuckets& buckets) {
  RELPOS_CHECK_ARG(buckets.left >= 0, "clip buckets: left must be >= 0 (got "
                                          << buckets.left << ")");
  RELPOS_CHECK_ARG(buckets.right >= 0, "clip buckets: right must be >= 0 (got "
                                           << buckets.right << ")");
  constexpr int64_t kMaxReach = int64_t{1} << 61;
  RELPOS_CHECK_ARG(buckets.left <= kMaxReach && buckets.right <= kMaxReach,
                   "clip buckets: left and right must be <= 2^61 (got left "
                       << buckets.left << ", right " << buckets.right << ")");
}

int64_t ClipBucketCount(const ClipBuckets& buckets) {
  return buckets.left + buckets.right + 1;
}

int64_t ClipBucket(int64_t r, const ClipBuckets& buckets) {
  return std::clamp(r, -buckets.left, buckets.right) + buckets.left;
}

void ValidateT5Buckets(const T5Buckets& buckets) {
  const int64_t nb = buckets.num_buckets;
  const int64_t min_buckets = buckets.bidirectional ? 4 : 2;
  RELPOS_CHECK_ARG(
      nb >= min_buckets,
      "T5 buckets: num_buckets must be >= "
          << min_buckets
          << (buckets.bidirectional ? " when bidirectional" : " when causal")
          << " (got " << nb << ")");
  RELPOS_CHECK_ARG(
      nb <= (int64_t{1} << 30),
      "T5 buckets: num_buckets must be <= 2^30 (got " << nb << ")");
  const int64_t half = buckets.bidirectional ? nb / 2 : nb;
  const int64_t exact = half / 2;
  RELPOS_CHECK_ARG(buckets.max_distance > exact,
                   "T5 buckets: max_distance must be > "
                       << exact << " (num_buckets " << nb
                       << " gives that many exact buckets per side; got "
                       << buckets.max_distance << ")");
}

namespace {

// The bucket within one side for a = |r| (bidirectional) or max(-r, 0)
// (causal), with half buckets on that side. a is unsigned so that
// |INT64_MIN| is representable; float(a) is what `relative_position.float()`
// gives for the same integer.
int64_t T5SideBucket(uint64_t a, int64_t half, float log_ratio) {
  const int64_t exact = half / 2;
  if (a < static_cast<uint64_t>(exact)) return static_cast<int64_t>(a);
  // float32 throughout, as Mesh TensorFlow and Hugging Face: quotient, log
  // (correctly rounded: the double log of a float is far more accurate than
  // a float ulp, so its rounding to float is the nearest float), division,
  // product.
  const float x = static_cast<float>(a) / static_cast<float>(exact);
  const float log_x = static_cast<float>(std::log(static_cast<double>(x)));
  const float z = log_x / log_ratio * static_cast<float>(half - exact);
  // trunc(z) + exact, capped at half - 1. Compare before converting: for
  // huge a, z exceeds the int64 range.
  const float cap = static_cast<float>(half - exact);
  const int64_t t = z < cap ? static_cast<int64_t>(z) : half - exact;
  return std::min(half - 1, exact + t);
}

// float32(log(md / exact)): Python's math.log of a true (double) division,
// rounded to float32 when it meets the float32 tensor.
float T5LogRatio(const T5Buckets& buckets, int64_t half) {
  const int64_t exact = half / 2;
  return static_cast<float>(std::log(static_cast<double>(buckets.max_distance) /
                                     static_cast<double>(exact)));
}

uint64_t Magnitude(int64_t r) {
  return r < 0 ? uint64_t{0} - static_cast<uint64_t>(r)
               : static_cast<uint64_t>(r);
}

int64_t T5BucketWith(int64_t r, const T5Buckets& buckets, float log_ratio) {
  if (buckets.bidirectional) {
    const int64_t half = buckets.num_buckets / 2;
    const int64_t base = r > 0 ? half : 0;
    return base + T5SideBucket(Magnitude(r), half, log_ratio);
  }
  const int64_t half = buckets.num_buckets;
  const uint64_t a = r < 0 ? Magnitude(r) : 0;
  return T5SideBucket(a, half, log_ratio);
}

}  // namespace

int64_t T5Bucket(int64_t r, const T5Buckets& buckets) {
  const int64_t half =
      buckets.bidirectional ? buckets.num_buckets / 2 : buckets.num_buckets;
  return T5BucketWith(r, buckets, T5LogRatio(buckets, half));
}

void T5BucketRange(int64_t r_first, int64_t count, const T5Buckets& buckets,
                   int64_t* out) {
  ValidateT5Buckets(buckets);
  RELPOS_CHECK_ARG(count >= 0,
                   "T5 buckets: count must be >= 0 (got " << count << ")");
  RELPOS_CHECK_ARG(count == 0 || out != nullptr,
                   "T5 buckets: out must not be null for count " << count);
  RELPOS_CHECK_ARG(
      count == 0 ||
          r_first <= std::numeric_limits<int64_t>::max() - (count - 1),
      "T5 buckets: r_first + count - 1 overflows int64 (r_first "
          << r_first << ", count " << count << ")");
  const int64_t half =
      buckets.bidirectional ? buckets.num_buckets / 2 : buckets.num_buckets;
  const float log_ratio = T5LogRatio(buckets, half);
  for (int64_t i = 0; i < count; ++i)
    out[i] = T5BucketWith(r_first + i, buckets, log_ratio);
}

int64_t T5BucketReach(const T5Buckets& buckets) {
  ValidateT5Buckets(buckets);
  const int64_t half =
      buckets.bidirectional ? buckets.num_buckets / 2 : buckets.num_buckets;
  const float log_ratio = T5LogRatio(buckets, half);
  // Every step of T5SideBucket is non-decreasing in a (float conversion,
  // division by a positive constant, log, product, trunc, min), so the side
  // bucket reaches its last value half - 1 at some a0 and keeps it: binary
  // search for a0 in [exact, 2^63). At a = 2^63 the bucket is half - 1
  // (z overflows the cap), so the search is well defined.
  uint64_t lo = static_cast<uint64_t>(half / 2);  // bucket(lo) may be last
  uint64_t hi = uint64_t{1} << 63;                // bucket(hi) is last
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (T5SideBucket(mid, half, log_ratio) == half - 1) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  // Causal: every r >= 0 is bucket 0 already, so the left side decides.
  // a0 >= exact >= 1; a0 <= 2^63 - 1 for any valid md that fits int64.
  return static_cast<int64_t>(std::max<uint64_t>(lo, 1));
}

std::vector<double> AlibiSlopes(int64_t num_heads) {
  RELPOS_CHECK_ARG(
      num_heads >= 1 && num_heads <= (int64_t{1} << 20),
      "ALiBi: num_heads must be in [1, 2^20] (got " << num_heads << ")");
  // P: the largest power of two <= H.
  int64_t p = 1;
  while (p * 2 <= num_heads) p *= 2;
  std::vector<double> slopes;
  slopes.reserve(static_cast<size_t>(num_heads));
  // The geometric sequence of P heads: 2^(-8/P), 2^(-16/P), ..., 2^-8.
  for (int64_t h = 0; h < p; ++h)
    slopes.push_back(
        std::exp2(-8.0 * static_cast<double>(h + 1) / static_cast<double>(p)));
  // The remaining H - P heads interleave between those: slopes 0, 2, 4, ...
  // of the 2P sequence, i.e. 2^(-8 (2h + 1) / (2P)).
  for (int64_t h = 0; h < num_heads - p; ++h)
    slopes.push_back(std::exp2(-8.0 * static_cast<double>(2 * h + 1) /
                               static_cast<double>(2 * p)));
  return slopes;
}

}  // namespace relpos

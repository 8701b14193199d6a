// RoPE reference (include/relpos/rope.h; docs/math.md section 8), written
// straight from the rotation formula and templated on the number type so the
// same code runs in double for gradient checks. The angle p * theta_t and its
// cosine and sine are always computed in double; the rotation itself in T.
#ifndef RELPOS_SRC_OP_REFERENCE_ROPE_REFERENCE_H_
#define RELPOS_SRC_OP_REFERENCE_ROPE_REFERENCE_H_

#include <cmath>
#include <cstdint>

#include "relpos/rope.h"

namespace relpos {

// A validated RoPE call, flattened: `rows` = outer * n rows of d values,
// row r at position first_position + r % n.
struct RopeProblem {
  int64_t outer = 1;  // product of the extents before N
  int64_t n = 1;      // positions (the N axis)
  int64_t d = 2;      // even
  int64_t first_position = 0;
  double base = 10000.0;
  RopeLayout layout = RopeLayout::kSplitHalves;
};

// theta_t = base^(-2t/d), t = 0 .. d/2 - 1 (Su et al. 2021).
inline double RopeTheta(double base, int64_t t, int64_t d) {
  return std::pow(base, -2.0 * static_cast<double>(t) / static_cast<double>(d));
}

// Dimension indices (a, b) of pair t.
inline void RopePair(RopeLayout layout, int64_t t, int64_t d, int64_t* a,
                     int64_t* b) {
  if (layout == RopeLayout::kSplitHalves) {
    *a = t;
    *b = t + d / 2;
  } else {
    *a = 2 * t;
    *b = 2 * t + 1;
  }
}

// x, y: [outer, n, d]; y may equal x. sign = +1 rotates by +p theta_t
// (forward), -1 by -p theta_t (backward):
//   y_a = x_a cos - x_b sin,   y_b = x_b cos + x_a sin   (angle sign * p
//   theta_t)
template <typename T>
void RopeReference(const RopeProblem& p, const T* x, T* y, int sign) {
  for (int64_t o = 0; o < p.outer; ++o) {
    for (int64_t i = 0; i < p.n; ++i) {
      const double pos = static_cast<double>(p.first_position + i);
      const T* xr = x + (o * p.n + i) * p.d;
      T* yr = y + (o * p.n + i) * p.d;
      for (int64_t t = 0; t < p.d / 2; ++t) {
        const double angle = sign * pos * RopeTheta(p.base, t, p.d);
        const T c = static_cast<T>(std::cos(angle));
        const T s = static_cast<T>(std::sin(angle));
        int64_t a, b;
        RopePair(p.layout, t, p.d, &a, &b);
        const T xa = xr[a], xb = xr[b];
        yr[a] = xa * c - xb * s;
        yr[b] = xb * c + xa * s;
      }
    }
  }
}

}  // namespace relpos

#endif  // RELPOS_SRC_OP_REFERENCE_ROPE_REFERENCE_H_

// Fast RoPE (include/relpos/rope.h): Highway SIMD over rows, OpenMP over
// rows, float only. The cosines and sines of every (position, pair) are
// computed once per call in double and rounded to float, so the fast path
// differs from the reference only by the float rotation's rounding.
#ifndef RELPOS_SRC_OP_KERNELS_ROPE_H_
#define RELPOS_SRC_OP_KERNELS_ROPE_H_

#include "reference/rope_reference.h"

namespace relpos {

// x, y: [p.outer, p.n, p.d]; y may equal x (no other overlap). sign = +1
// forward, -1 backward (rotation by the opposite angle).
void RopeFast(const RopeProblem& p, const float* x, float* y, int sign,
              int num_threads);

// Highway target RopeFast dispatches to on this CPU ("AVX2", "EMU128", ...).
const char* RopeTargetName();

}  // namespace relpos

#endif  // RELPOS_SRC_OP_KERNELS_ROPE_H_

// Rotary position embedding (RoPE; Su et al. 2021) as its own op, forward
// and backward (docs/math.md section 8, docs/schemes.md).
//
// Each row x_p (position p) of a [..., N, d] tensor is split into d/2 pairs
// of dimensions, and pair t is rotated by the angle p * theta_t with
//   theta_t = base^(-2t / d),   t = 0 .. d/2 - 1:
//   y_a = x_a cos(p theta_t) - x_b sin(p theta_t)
//   y_b = x_b cos(p theta_t) + x_a sin(p theta_t)
// where the pair (a, b) is (t, t + d/2) in the split-halves layout and
// (2t, 2t + 1) in the interleaved layout. Rotations compose, so after
// rotating queries at positions i + off and keys at positions j,
// q_i . k_j depends on the positions only through j - (i + off): RoPE is a
// relative scheme that plain attention then runs unchanged.
//
// For attention, rotate q with position_offset = off (the attention's
// query offset, Nk - Nq by default) and k with position_offset = 0, then call
// AttentionForward with both relative terms off.
//
// The rotation is orthogonal, so the backward pass rotates the gradient by
// the opposite angle: dx = R(-p theta) dy.
#ifndef RELPOS_ROPE_H_
#define RELPOS_ROPE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "relpos/tensor_view.h"

namespace relpos {

enum class RopeLayout {
  // Pairs (t, t + d/2): GPT-NeoX and Llama as Hugging Face ships it
  // (`rotate_half`). The default, because that is how the weights most users
  // load are laid out (docs/schemes.md).
  kSplitHalves,
  // Pairs (2t, 2t + 1): the paper, GPT-J, Meta's original Llama code.
  kInterleaved,
};

// "split_halves" / "interleaved": the names of the model config's
// rope_layout and of Python's layout= (docs/schemes.md).
const char* RopeLayoutName(RopeLayout layout);
// The layout of that name; InvalidArgument naming `what` ("layout",
// "rope_layout") and the value otherwise.
RopeLayout ParseRopeLayout(const std::string& name,
                           const char* what = "layout");

enum class RopePath {
  kAuto,       // fast for float, reference for double
  kFast,       // Highway SIMD (float only)
  kReference,  // straight from the equations, float or double
};

struct RopeOptions {
  // theta_t = base^(-2t/d); finite and > 0 (10000 in the paper and Llama 2,
  // 500000 in Llama 3).
  double base = 10000.0;
  RopeLayout layout = RopeLayout::kSplitHalves;
  // Absolute position of row 0 along the N axis: row n is at position
  // position_offset + n. Every position must lie in [-2^40, 2^40].
  int64_t position_offset = 0;
  // Per-row positions (batched decoding of prompts of different lengths,
  // Hugging Face's position_ids = offset_b + n): empty (every row uses
  // position_offset), or, for x of rank 4 [B, H, N, d], B entries: row n of
  // batch item b is at position position_offsets[b] + n. Exclusive with a
  // non-zero position_offset; every position must lie in [-2^40, 2^40].
  std::vector<int64_t> position_offsets;
  RopePath path = RopePath::kAuto;
  // Threads for the fast path; 0 uses OpenMP's default.
  int num_threads = 0;
};

// x, y: [N, d], [H, N, d] or [B, H, N, d] (a rank-1 [d] is one row at
// position_offset), same shape, d even and >= 2. y may be x itself (in
// place) but must not overlap it otherwise. Angles are computed in double
// for every T. Throws InvalidArgument naming the argument and its value.
template <typename T>
void RopeForward(ConstView<T> x, TensorView<T> y, const RopeOptions& options);

// dy, dx: shaped like x of the forward. Differentiates
//   y = R(p theta) x   ->   dx = R(p theta)^T dy = R(-p theta) dy.
// dx may be dy itself.
template <typename T>
void RopeBackward(ConstView<T> dy, TensorView<T> dx,
                  const RopeOptions& options);

extern template void RopeForward<float>(ConstView<float>, TensorView<float>,
                                        const RopeOptions&);
extern template void RopeForward<double>(ConstView<double>, TensorView<double>,
                                         const RopeOptions&);
extern template void RopeBackward<float>(ConstView<float>, TensorView<float>,
                                         const RopeOptions&);
extern template void RopeBackward<double>(ConstView<double>, TensorView<double>,
                                          const RopeOptions&);

}  // namespace relpos

#endif  // RELPOS_ROPE_H_

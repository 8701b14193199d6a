// Self-attention with relative position representations (Shaw et al., 2018):
// forward and backward passes. SPEC.md sections 1-3 fix the mathematics:
//
//   r(i, j) = clip(j - (i + off), -k, k)                  off = Nk - Nq by default
//   s_ij    = (q_i . k_j + q_i . AK[r(i,j) + k]) / sqrt(dk)     (masked -> -inf)
//   p_ij    = softmax_j(s_ij)
//   o_i     = sum_j p_ij v_j + sum_j p_ij AV[r(i,j) + k]
//
// Two implementations sit behind these functions: the fused, tiled CPU kernel
// (float only; never stores anything of size Nq x Nk) and the reference, which
// follows the equations literally and runs in float or double. The reference
// is the oracle every fast path is tested against.
#ifndef RELPOS_ATTENTION_H_
#define RELPOS_ATTENTION_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "relpos/tensor_view.h"

namespace relpos {

enum class AttentionPath {
  kAuto,       // fused for float, reference for double
  kFused,      // the tiled kernel (float only)
  kReference,  // straight from the equations; builds the Nq x Nk matrix
};

struct AttentionOptions {
  // Clipping distance k >= 0. Tables have 2k+1 rows, row r+k for distance r.
  int64_t max_distance = 16;
  // false: one table pair shared by all heads, AK[2k+1, dk] (Shaw et al.);
  // true: one pair per head, AK[H, 2k+1, dk].
  bool per_head_tables = false;
  // Shaw's ablation switches: the key-side term (inside the score) and the
  // value-side term (inside the output). With both off this is plain
  // softmax attention; an unused table may be passed empty.
  bool key_term = true;
  bool value_term = true;
  // Key j is visible to query i iff j <= i + off.
  bool causal = false;
  // Absolute position of query row 0; default Nk - Nq (queries are the last Nq
  // positions, as with a key/value cache). |offset| <= 2^40.
  std::optional<int64_t> query_offset;
  // Empty (every key valid) or one entry per batch item in [0, Nk]: keys
  // j >= key_lengths[b] are invisible.
  std::vector<int64_t> key_lengths;
  AttentionPath path = AttentionPath::kAuto;
  // Threads for the fused path; 0 uses OpenMP's default.
  int num_threads = 0;
};

// Inputs, all row-major and contiguous.
template <typename T>
struct AttentionInputs {
  ConstView<T> q;   // [B, H, Nq, dk]
  ConstView<T> k;   // [B, H, Nk, dk]
  ConstView<T> v;   // [B, H, Nk, dv]
  ConstView<T> ak;  // [2k+1, dk] or [H, 2k+1, dk]; may be empty if !key_term
  ConstView<T> av;  // [2k+1, dv] or [H, 2k+1, dv]; may be empty if !value_term
};

// Gradients, same shapes as the inputs; every non-empty view is overwritten
// (not accumulated into). dak / dav may be empty when their term is off (or
// when the caller does not want them); a provided one whose term is off is
// filled with zeros.
template <typename T>
struct AttentionGrads {
  TensorView<T> dq, dk, dv, dak, dav;
};

// out: [B, H, Nq, dv]. lse: [B, H, Nq], the natural log of the softmax
// denominator of each row (of the scaled scores), -infinity for a row that
// sees no key (its output is zero). lse may be empty when no backward pass
// will follow. Throws InvalidArgument on any inconsistent argument.
template <typename T>
void AttentionForward(const AttentionInputs<T>& in, TensorView<T> out,
                      TensorView<T> lse, const AttentionOptions& options);

// dout: [B, H, Nq, dv]. `out` and `lse` must be what AttentionForward
// produced for the same inputs and options (the fused path recomputes the
// probabilities from lse instead of storing them).
template <typename T>
void AttentionBackward(const AttentionInputs<T>& in, ConstView<T> out,
                       ConstView<T> lse, ConstView<T> dout,
                       const AttentionGrads<T>& grads,
                       const AttentionOptions& options);

extern template void AttentionForward<float>(const AttentionInputs<float>&,
                                             TensorView<float>,
                                             TensorView<float>,
                                             const AttentionOptions&);
extern template void AttentionForward<double>(const AttentionInputs<double>&,
                                              TensorView<double>,
                                              TensorView<double>,
                                              const AttentionOptions&);
extern template void AttentionBackward<float>(const AttentionInputs<float>&,
                                              ConstView<float>,
                                              ConstView<float>,
                                              ConstView<float>,
                                              const AttentionGrads<float>&,
                                              const AttentionOptions&);
extern template void AttentionBackward<double>(const AttentionInputs<double>&,
                                               ConstView<double>,
                                               ConstView<double>,
                                               ConstView<double>,
                                               const AttentionGrads<double>&,
                                               const AttentionOptions&);

}  // namespace relpos

#endif  // RELPOS_ATTENTION_H_

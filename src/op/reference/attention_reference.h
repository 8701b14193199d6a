// Reference relative attention, written straight from docs/math.md sections 2-3,
// one (query, key) pair at a time. It is the oracle for every fast path, so
// it favours being obviously right over being fast: O(Nq Nk d) work per
// (batch, head) and a full Nq x Nk probability row per query.
//
// Templated on the scalar type: float for checking the fused kernel, double
// for finite-difference gradient checks.
#ifndef RELPOS_SRC_OP_REFERENCE_ATTENTION_REFERENCE_H_
#define RELPOS_SRC_OP_REFERENCE_ATTENTION_REFERENCE_H_

#include "core/attention_problem.h"
#include "relpos/attention.h"

namespace relpos {

// out: [B, H, Nq, dv] (required); lse: [B, H, Nq] or nullptr.
template <typename T>
void ReferenceForward(const AttentionProblem& p, const AttentionInputs<T>& in,
                      T* out, T* lse);

// Recomputes the probabilities from the inputs (it trusts no saved state),
// then writes every non-empty gradient in `grads`.
template <typename T>
void ReferenceBackward(const AttentionProblem& p, const AttentionInputs<T>& in,
                       const T* dout, const AttentionGrads<T>& grads);

}  // namespace relpos

#endif  // RELPOS_SRC_OP_REFERENCE_ATTENTION_REFERENCE_H_

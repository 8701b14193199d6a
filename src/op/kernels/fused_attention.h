// The fused, tiled CPU kernel of docs/math.md section 4 (float only).
//
// Nothing of size Nq x Nk is ever stored: per (batch, head) and query tile it
// keeps the online-softmax state, the Nq_tile x (2k+1) key-side scores
// G = Q AK^T / sqrt(dk) and value-side bucket weights W.
#ifndef RELPOS_SRC_OP_KERNELS_FUSED_ATTENTION_H_
#define RELPOS_SRC_OP_KERNELS_FUSED_ATTENTION_H_

#include <cstdint>

#include "core/attention_problem.h"
#include "relpos/attention.h"

namespace relpos {

// out: [B, H, Nq, dv]; lse: [B, H, Nq] or nullptr.
void FusedForward(const AttentionProblem& p, const AttentionInputs<float>& in,
                  float* out, float* lse, int num_threads);

// The few-query forward path (docs/kernel.md): for p.FewQuery() problems
// (Nq <= kFewQueryRows), vectorised along the keys instead of the query
// rows; the same outputs as FusedForward up to rounding. Allocates nothing
// per call once its per-thread scratch has grown to the problem's size, and
// opens no parallel region when it runs on one thread.
void FewQueryForward(const AttentionProblem& p,
                     const AttentionInputs<float>& in, float* out, float* lse,
                     int num_threads);

// Recomputes probabilities from `lse` (which must come from FusedForward or
// ReferenceForward on the same inputs); writes every non-empty gradient.
void FusedBackward(const AttentionProblem& p, const AttentionInputs<float>& in,
                   const float* out, const float* lse, const float* dout,
                   const AttentionGrads<float>& grads, int num_threads);

// Peak bytes the fused path allocates beyond its inputs and outputs for this
// problem (forward + backward working set), for benchmarks and docs.
int64_t FusedExtraBytes(const AttentionProblem& p, int num_threads);

// Name of the Highway target the kernel dispatches to on this CPU ("AVX2",
// "EMU128", ...), for benchmark headers and test logs.
const char* FusedTargetName();

}  // namespace relpos

#endif  // RELPOS_SRC_OP_KERNELS_FUSED_ATTENTION_H_

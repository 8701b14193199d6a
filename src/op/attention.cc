// Public entry points: validate once, then run exactly one implementation.
// This file is the single place where the path is chosen.
#include "relpos/attention.h"

#include <algorithm>
#include <type_traits>

#include "core/attention_problem.h"
#include "base/check.h"
#include "kernels/fused_attention.h"
#include "reference/attention_reference.h"

namespace relpos {
namespace {

// kAuto: the tiled kernel of docs/math.md section 4 for float problems it
// supports (AttentionProblem::FusedSupported), the reference otherwise.
// kFused: the kernel, or InvalidArgument when it cannot run the problem.
template <typename T>
bool UseFused(const AttentionProblem& p, AttentionPath path) {
  if constexpr (!std::is_same_v<T, float>) {
    RELPOS_CHECK_ARG(path != AttentionPath::kFused,
                     "path: the fused kernel supports float only (use "
                     "kAuto or kReference for double)");
    return false;
  } else {
    if (path == AttentionPath::kReference) return false;
    RELPOS_CHECK_ARG(path != AttentionPath::kFused || p.FusedSupported(),
                     "path: the fused kernel does not run buckets.kind = "
                         << BucketKindName(p.buckets.kind)
                         << " with score_term = "
                         << ScoreTermName(p.score_term)
                         << "; use kAuto or kReference");
    return p.FusedSupported();
  }
}

// A gradient of an optional input: absent, or shaped like a present input.
template <typename T>
void CheckOptionalGrad(const char* name, ConstView<T> grad,
                       const char* input_name, ConstView<T> input) {
  if (grad.empty()) return;
  RELPOS_CHECK_ARG(!input.empty(),
                   name << " given but " << input_name << " is empty");
  CheckSameShape<T>(name, grad, input);
}

// Zero-fills a gradient whose input the fused kernel never reads.
template <typename T>
void ZeroFill(TensorView<T> g) {
  if (!g.empty()) std::fill(g.data(), g.data() + g.numel(), T(0));
}

}  // namespace

template <typename T>
void AttentionForward(const AttentionInputs<T>& in, TensorView<T> out,
                      TensorView<T> lse, const AttentionOptions& options) {
  RELPOS_CHECK_ARG(!out.empty(), "out must not be empty");
  const AttentionProblem p = MakeAttentionProblem<T>(in, out, lse, options);
  if constexpr (std::is_same_v<T, float>) {
    if (UseFused<T>(p, options.path)) {
      float* lse_data = lse.empty() ? nullptr : lse.data();
      if (p.FewQuery()) {
        FewQueryForward(p, in, out.data(), lse_data, options.num_threads);
      } else {
        FusedForward(p, in, out.data(), lse_data, options.num_threads);
      }
      return;
    }
  }
  UseFused<T>(p, options.path);  // rejects kFused for double
  ReferenceForward(p, in, out.data(), lse.empty() ? nullptr : lse.data());
}

template <typename T>
void AttentionBackward(const AttentionInputs<T>& in, ConstView<T> out,
                       ConstView<T> lse, ConstView<T> dout,
                       const AttentionGrads<T>& grads,
                       const AttentionOptions& options) {
  RELPOS_CHECK_ARG(!out.empty(), "out must not be empty");
  RELPOS_CHECK_ARG(!lse.empty(), "lse must not be empty in the backward pass");
  RELPOS_CHECK_ARG(!dout.empty(), "dout must not be empty");
  const AttentionProblem p = MakeAttentionProblem<T>(in, out, lse, options);
  CheckSameShape<T>("dout", dout, out);
  CheckSameShape<T>("dq", grads.dq, in.q);
  CheckSameShape<T>("dk", grads.dk, in.k);
  CheckSameShape<T>("dv", grads.dv, in.v);
  CheckOptionalGrad<T>("dak", grads.dak, "ak", in.ak);
  CheckOptionalGrad<T>("dav", grads.dav, "av", in.av);
  CheckOptionalGrad<T>("dbias", grads.dbias, "bias", in.bias);
  CheckOptionalGrad<T>("dpb", grads.dpb, "pb", in.pb);
  if constexpr (std::is_same_v<T, float>) {
    if (UseFused<T>(p, options.path)) {
      // A dbias / dpb whose term is off stays zero (the kernel writes them
      // otherwise).
      ZeroFill(grads.dbias);
      ZeroFill(grads.dpb);
      FusedBackward(p, in, out.data(), lse.data(), dout.data(), grads,
                    options.num_threads);
      return;
    }
  }
  UseFused<T>(p, options.path);  // rejects kFused for double
  ReferenceBackward(p, in, dout.data(), grads);
}

template <typename T>
ResolvedAttention CheckAttention(const AttentionInputs<T>& in,
                                 const AttentionOptions& options) {
  const AttentionProblem p =
      MakeAttentionProblem<T>(in, ConstView<T>(), ConstView<T>(), options);
  return {.heads = p.heads,
          .kv_heads = p.kv_heads,
          .table_rows = p.TableRows(),
          .t5_reach = p.t5_reach,
          .alibi_slopes = p.alibi_slopes,
          .query_offsets = p.query_offsets,
          .key_lengths = p.key_lengths,
          .key_starts = p.key_starts,
          .min_offset = p.min_offset,
          .max_offset = p.max_offset};
}

template ResolvedAttention CheckAttention<float>(const AttentionInputs<float>&,
                                                 const AttentionOptions&);
template ResolvedAttention CheckAttention<double>(
    const AttentionInputs<double>&, const AttentionOptions&);
template void AttentionForward<float>(const AttentionInputs<float>&,
                                      TensorView<float>, TensorView<float>,
                                      const AttentionOptions&);
template void AttentionForward<double>(const AttentionInputs<double>&,
                                       TensorView<double>, TensorView<double>,
                                       const AttentionOptions&);
template void AttentionBackward<float>(const AttentionInputs<float>&,
                                       ConstView<float>, ConstView<float>,
                                       ConstView<float>,
                                       const AttentionGrads<float>&,
                                       const AttentionOptions&);
template void AttentionBackward<double>(const AttentionInputs<double>&,
                                        ConstView<double>, ConstView<double>,
                                        ConstView<double>,
                                        const AttentionGrads<double>&,
                                        const AttentionOptions&);

}  // namespace relpos

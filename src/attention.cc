// Public entry points: validate once, then run exactly one implementation.
// This file is the single place where the path is chosen.
#include "relpos/attention.h"

#include <type_traits>

#include "core/attention_problem.h"
#include "core/check.h"
#include "kernels/fused_attention.h"
#include "reference/attention_reference.h"

namespace relpos {
namespace {

template <typename T>
bool UseFused(AttentionPath path) {
  if constexpr (!std::is_same_v<T, float>) {
    RELPOS_CHECK_ARG(path != AttentionPath::kFused,
                     "path: the fused kernel supports float only (use "
                     "kAuto or kReference for double)");
    return false;
  } else {
    // kAuto and kFused: the tiled kernel of SPEC.md section 4.
    return path != AttentionPath::kReference;
  }
}

}  // namespace

template <typename T>
void AttentionForward(const AttentionInputs<T>& in, TensorView<T> out,
                      TensorView<T> lse, const AttentionOptions& options) {
  RELPOS_CHECK_ARG(!out.empty(), "out must not be empty");
  const AttentionProblem p = MakeAttentionProblem<T>(in, out, lse, options);
  if constexpr (std::is_same_v<T, float>) {
    if (UseFused<T>(options.path)) {
      FusedForward(p, in, out.data(), lse.empty() ? nullptr : lse.data(),
                   options.num_threads);
      return;
    }
  }
  UseFused<T>(options.path);  // rejects kFused for double
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
  if (!grads.dak.empty()) {
    RELPOS_CHECK_ARG(!in.ak.empty(), "dak given but ak is empty");
    CheckSameShape<T>("dak", grads.dak, in.ak);
  }
  if (!grads.dav.empty()) {
    RELPOS_CHECK_ARG(!in.av.empty(), "dav given but av is empty");
    CheckSameShape<T>("dav", grads.dav, in.av);
  }
  if constexpr (std::is_same_v<T, float>) {
    if (UseFused<T>(options.path)) {
      FusedBackward(p, in, out.data(), lse.data(), dout.data(), grads,
                    options.num_threads);
      return;
    }
  }
  UseFused<T>(options.path);  // rejects kFused for double
  ReferenceBackward(p, in, dout.data(), grads);
}

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

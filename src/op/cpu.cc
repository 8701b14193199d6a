// relpos/cpu.h: the cap on the kernels' instruction sets.
#include "relpos/cpu.h"

#include <hwy/targets.h>
#include <oneapi/dnnl/dnnl.h>

#include "base/check.h"
#include "kernels/int8_linear.h"

namespace relpos {

namespace {
std::string capped;  // the cap LimitCpuIsa set ("avx512", "avx2"), if any
}  // namespace

void LimitCpuIsa(const std::string& isa) {
  if (isa == "native" || (!capped.empty() && isa == capped)) return;
  RELPOS_CHECK_ARG(isa == "avx512" || isa == "avx2",
                   "the instruction set cap must be native, avx512 or avx2 "
                   "(got \""
                       << isa << "\")");
#if HWY_ARCH_X86
  if (!capped.empty()) {
    RELPOS_THROW(Error, "the instruction set cap "
                            << isa << ": already capped at " << capped);
  }
  const bool avx2 = isa == "avx2";
  if (avx2) {
    RELPOS_CHECK_ARG(
        __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"),
        "the instruction set cap avx2: this CPU has no AVX2 and "
        "FMA");
  } else {
    RELPOS_CHECK_ARG(__builtin_cpu_supports("avx512f") &&
                         __builtin_cpu_supports("avx512bw") &&
                         __builtin_cpu_supports("avx512vl") &&
                         __builtin_cpu_supports("avx512dq"),
                     "the instruction set cap avx512: this CPU has no "
                     "AVX-512 (F, BW, VL, DQ)");
  }
  // oneDNN's AMX code is its ISA above avx512_core_bf16.
  if (dnnl_set_max_cpu_isa(avx2 ? dnnl_cpu_isa_avx2
                                : dnnl_cpu_isa_avx512_core_bf16) !=
      dnnl_success) {
    RELPOS_THROW(Error, "the instruction set cap "
                            << isa
                            << " came too late: a product already ran with "
                               "oneDNN's own choice");
  }
  if (avx2) {
    // Highway's targets are ordered by preference, a lower bit a better
    // one: every bit below AVX2's is an AVX-512 variant on x86.
    hwy::DisableTargets(HWY_AVX2 - 1);
    // Highway 1.0's SupportedTargets() points the dispatch at every target
    // the CPU has before it applies the mask: hand it the masked set again.
    hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  }
  // avx512 leaves Highway's AVX-512 targets; it keeps the int8 products
  // off AMX's tile unit (the VNNI kernels instead: the same results).
  Int8LinearAllowAmx(false);
  capped = isa;
#else
  RELPOS_THROW(InvalidArgument,
               "the instruction set cap " << isa << " needs an x86 CPU");
#endif
}

std::string CpuIsa() { return Int8LinearTargetName(); }

}  // namespace relpos

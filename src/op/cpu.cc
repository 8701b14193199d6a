// relpos/cpu.h: the cap on the kernels' instruction sets.
#include "relpos/cpu.h"

#include <hwy/targets.h>
#include <oneapi/dnnl/dnnl.h>

#include "base/check.h"
#include "kernels/int8_linear.h"

namespace relpos {

namespace {
bool capped = false;  // LimitCpuIsa("avx2") ran
}  // namespace

void LimitCpuIsa(const std::string& isa) {
  if (isa == "native" || (isa == "avx2" && capped)) return;
  RELPOS_CHECK_ARG(isa == "avx2", "the instruction set cap must be native or "
                                  "avx2 (got \""
                                      << isa << "\")");
#if HWY_ARCH_X86
  RELPOS_CHECK_ARG(__builtin_cpu_supports("avx2") &&
                       __builtin_cpu_supports("fma"),
                   "the instruction set cap avx2: this CPU has no AVX2 and "
                   "FMA");
  // Highway's targets are ordered by preference, a lower bit a better one:
  // every bit below AVX2's is an AVX-512 variant on x86.
  if (dnnl_set_max_cpu_isa(dnnl_cpu_isa_avx2) != dnnl_success) {
    RELPOS_THROW(Error, "the instruction set cap avx2 came too late: a "
                        "product already ran with oneDNN's own choice");
  }
  hwy::DisableTargets(HWY_AVX2 - 1);
  // Highway 1.0's SupportedTargets() points the dispatch at every target
  // the CPU has before it applies the mask: hand it the masked set again.
  hwy::GetChosenTarget().Update(hwy::SupportedTargets());
  capped = true;
#else
  RELPOS_THROW(InvalidArgument,
               "the instruction set cap avx2 needs an x86 CPU");
#endif
}

std::string CpuIsa() { return Int8LinearTargetName(); }

}  // namespace relpos

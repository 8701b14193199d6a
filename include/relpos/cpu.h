// The instruction sets relpos's CPU kernels use.
//
// By default every kernel runs the widest vector code its CPU has:
// Highway's dynamic dispatch picks AVX-512 (with AVX-512 VNNI, or AMX's
// tile unit, for the int8 products), AVX2, SSE4, ... per call, and oneDNN's
// GEMM does the same. LimitCpuIsa("avx2") caps them all at AVX2 (and FMA),
// so that the AVX2 code paths can be run and measured on an AVX-512 CPU, as
// CTranslate2's CT2_FORCE_CPU_ISA=AVX2 does for CTranslate2;
// LimitCpuIsa("avx512") keeps AVX-512 and leaves out AMX (relpos's int8
// products and oneDNN's). Results do not depend on it beyond float rounding
// (the int8 products give the same integers on every instruction set). The `relpos` command and the Python package apply the
// environment variable RELPOS_CPU_ISA (one of the names below) when they
// start (docs/generate.md, "Instruction sets").
#ifndef RELPOS_CPU_H_
#define RELPOS_CPU_H_

#include <string>

namespace relpos {

// "native" (no cap, the default), "avx512" or "avx2"; one cap per process
// (a second, different one is an Error). Call it before the first kernel
// runs: oneDNN fixes its choice at its first product, so a later call is
// an Error saying so (and changes nothing). InvalidArgument for another
// name, for "avx2" on a CPU without AVX2 and FMA, and for "avx512" on one
// without AVX-512 (F, BW, VL, DQ).
void LimitCpuIsa(const std::string& isa);

// The instruction set the int8 products dispatch to now ("AVX3+AMX",
// "AVX3+VNNI", "AVX3", "AVX2", ...; Highway's target names, plus the
// packed kernels' instructions): what the cap left.
std::string CpuIsa();

}  // namespace relpos

#endif  // RELPOS_CPU_H_

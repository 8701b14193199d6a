"""What the CPU running the tests has, for checks whose bounds depend on it.

CTranslate2 runs its int8 products through oneDNN's u8/s8 GEMM. With
AVX-512 VNNI or AVX-VNNI (vpdpbusd) that GEMM adds each group of four
byte products straight into int32; without them it pairs the products with
vpmaddubsw into saturating int16 sums first, which oneDNN's "Nuances of
int8 Computations" documents can saturate. On the AVX2 VM of
docs/benchmarks.md (AMD Zen 3, no VNNI) CTranslate2's int8 outputs were
several times less accurate than on the AVX-512 VNNI VM (a decoder's
logits 19% of their scale off relpos's float ones against 1.1-1.7%, 7-12
of 24 beam-4 translations kept against 20-24), so the tests bound
CTranslate2's int8 accuracy tightly only where the CPU has VNNI. relpos's
own int8 products are exact integer sums on every CPU.
"""


def int8_dot_product_without_saturation() -> bool:
    """True where the CPU has AVX-512 VNNI or AVX-VNNI (Linux's flags)."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    return bool(flags & {"avx512_vnni", "avx_vnni"})
    except OSError:
        pass
    return False

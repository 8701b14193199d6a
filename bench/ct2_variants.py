"""What bench/generate_ctranslate2.py and bench/translate_ctranslate2.py share:
the variants --compute-types names (relpos and CTranslate2, each in its
compute types), the same-round speed ratios between them, and the peak
resident memory of a child process.

Imported by those scripts (run as `python bench/NAME.py`, so this folder is
on sys.path); not a script itself.
"""

import os
import statistics

# (side, compute type), in the order a round runs them. relpos-avx512 is
# relpos under RELPOS_CPU_ISA=avx512: the int8 products kept off AMX's
# tile unit (VNNI's kernels), to measure what the tile unit gives.
VARIANTS = [("relpos", "float32"), ("relpos", "int8"), ("relpos", "int8_a8"),
            ("relpos-avx512", "int8"), ("relpos-avx512", "int8_a8"),
            ("ct2", "float32"), ("ct2", "int8_float32"), ("ct2", "int8")]
# The sides a bare compute type names.
BARE_SIDES = ("relpos", "ct2")
# Same-round speed ratios reported when both variants run: (a, b) is the
# speed of a over the speed of b.
RATIOS = [(("relpos", "float32"), ("ct2", "float32")),
          (("relpos", "int8"), ("ct2", "int8_float32")),
          (("relpos", "int8"), ("ct2", "int8")),
          (("relpos", "int8_a8"), ("ct2", "int8_float32")),
          (("relpos", "int8_a8"), ("ct2", "int8")),
          (("relpos", "int8"), ("relpos", "float32")),
          (("relpos", "int8"), ("relpos-avx512", "int8")),
          (("relpos", "int8_a8"), ("relpos-avx512", "int8_a8")),
          (("relpos-avx512", "int8"), ("ct2", "int8_float32")),
          (("relpos-avx512", "int8"), ("ct2", "int8")),
          (("relpos-avx512", "int8_a8"), ("ct2", "int8_float32")),
          (("relpos-avx512", "int8_a8"), ("ct2", "int8"))]
SIDE_NAMES = {"relpos": "relpos", "relpos-avx512": "relpos-avx512",
              "ct2": "CTranslate2"}
HELP = ("variants, comma-separated: relpos:float32, relpos:int8, "
        "relpos:int8_a8, relpos-avx512:int8, relpos-avx512:int8_a8 (relpos "
        "under RELPOS_CPU_ISA=avx512: no AMX), ct2:float32, "
        "ct2:int8_float32, ct2:int8, or a bare type for relpos and "
        "CTranslate2 where they have it (float32: both, int8: both, "
        "int8_float32: CTranslate2); default float32")


def env(side):
    """The environment of a side's child process: relpos-avx512's sets
    RELPOS_CPU_ISA=avx512."""
    out = dict(os.environ)
    if side == "relpos-avx512":
        out["RELPOS_CPU_ISA"] = "avx512"
    return out


def parse(text):
    """--compute-types -> the variants in VARIANTS order; ValueError naming
    an unknown item."""
    chosen = set()
    for item in text.split(","):
        side, _, kind = item.strip().rpartition(":")
        match = [v for v in VARIANTS
                 if v[1] == kind and (v[0] == side or
                                      (not side and v[0] in BARE_SIDES))]
        if not match:
            raise ValueError(
                f"--compute-types: unknown variant '{item}' (one of "
                f"{', '.join(key(v) for v in VARIANTS)}, or a bare float32, "
                "int8, int8_a8, int8_float32)")
        chosen.update(match)
    return [v for v in VARIANTS if v in chosen]


def key(variant):
    """"relpos:int8": the variant's name in the JSON report."""
    return f"{variant[0]}:{variant[1]}"


def name(variant):
    """"relpos int8": the variant's name in the printed tables."""
    return f"{SIDE_NAMES[variant[0]]} {variant[1]}"


def label(variant, compute_type):
    """The variant's name, with the compute type CTranslate2 resolved when
    it is another (CTranslate2's int8 runs as int8_float32 on a CPU)."""
    out = name(variant)
    if variant[0] == "ct2" and compute_type != variant[1]:
        out += f" (runs {compute_type})"
    return out


def share_text(variant, ref, share, digits=0):
    """A share of outputs equal to the float model's, as printed."""
    if variant == ref:
        return "reference"
    return "-" if share is None else f"{100 * share:.{digits}f}%"


def reference(variants):
    """The float model whose outputs the others are compared with: relpos
    float32, else CTranslate2 float32, else None."""
    return next((v for v in (("relpos", "float32"), ("ct2", "float32"))
                 if v in variants), None)


def ratios(rounds, variants):
    """{"a/b": {median, min, max}} of the same-round speed ratios, rounds
    being [{variant: {"seconds": ...}}]: speed of a / speed of b is b's
    seconds over a's."""
    out = {}
    for a, b in RATIOS:
        if a in variants and b in variants:
            r = sorted(x[b]["seconds"] / x[a]["seconds"] for x in rounds)
            out[f"{key(a)}/{key(b)}"] = {"median": statistics.median(r),
                                         "min": r[0], "max": r[-1]}
    return out


def print_ratios(row_ratios, indent="  "):
    for k, r in row_ratios.items():
        a, b = (tuple(x.split(":")) for x in k.split("/"))
        print(f"{indent}{name(a)} / {name(b)}: {r['median']:.2f}x "
              f"({r['min']:.2f}-{r['max']:.2f})")


# A small Python parent whose only child is the command in its arguments:
# its RUSAGE_CHILDREN peak is that child's (a child's peak starts from its
# parent's resident size at fork, so not from the benchmark's process).
PEAK_OF_CHILD = r"""
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:]).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"maxrss_kib={peak}", file=sys.stderr)
sys.exit(rc)
"""


def peak_mib(stderr):
    """The child's peak (PEAK_OF_CHILD's last line on stderr), in MiB."""
    rss = [line for line in stderr.splitlines()
           if line.startswith("maxrss_kib=")]
    return int(rss[-1].split("=")[1]) / 1024

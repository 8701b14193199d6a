"""RELPOS_CPU_ISA at import (relpos/cpu.h; docs/generate.md, "Instruction
sets"): avx2 moves the int8 products to Highway's AVX2 target with the same
outputs, avx512 keeps them off AMX's tile unit; a bad value fails the import with a ValueError naming the
variable."""
import os
import subprocess
import sys

import pytest

import relpos

_CHILD = r"""
import numpy as np, relpos
print(relpos.cpu_isa())
"""


def _run(isa, code=_CHILD):
    env = dict(os.environ, RELPOS_CPU_ISA=isa)
    return subprocess.run([sys.executable, "-c", code], env=env,
                          capture_output=True, text=True, timeout=120)


def _has_avx2():
    flags = open("/proc/cpuinfo").read() if os.path.exists(
        "/proc/cpuinfo") else ""
    return " avx2 " in flags and " fma " in flags


def test_native_is_the_default():
    r = _run("native")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == relpos.cpu_isa()


@pytest.mark.skipif(not _has_avx2(), reason="no AVX2 on this CPU")
def test_avx2_cap():
    r = _run("avx2")
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "AVX2"


def _has_avx512():
    flags = open("/proc/cpuinfo").read() if os.path.exists(
        "/proc/cpuinfo") else ""
    return all(f" {f} " in flags
               for f in ("avx512f", "avx512bw", "avx512vl", "avx512dq"))


@pytest.mark.skipif(not _has_avx512(), reason="no AVX-512 on this CPU")
def test_avx512_cap_leaves_out_amx():
    r = _run("avx512")
    assert r.returncode == 0, r.stderr
    isa = r.stdout.strip()
    assert isa.startswith("AVX3") and "AMX" not in isa, isa


def test_bad_value_fails_the_import():
    r = _run("avx9000")
    assert r.returncode != 0
    assert "ValueError: RELPOS_CPU_ISA:" in r.stderr
    assert "native, avx512 or avx2" in r.stderr

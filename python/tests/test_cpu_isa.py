"""RELPOS_CPU_ISA at import (relpos/cpu.h; docs/generate.md, "Instruction
sets"): avx2 moves the int8 products to Highway's AVX2 target with the same
outputs; a bad value fails the import with a ValueError naming the
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


def test_bad_value_fails_the_import():
    r = _run("avx9000")
    assert r.returncode != 0
    assert "ValueError: RELPOS_CPU_ISA:" in r.stderr
    assert "native or avx2" in r.stderr

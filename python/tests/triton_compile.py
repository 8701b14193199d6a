"""Compiles relpos.triton's kernels for a real GPU target without a GPU.

Triton's compiler runs on the CPU all the way to a cubin (its bundled
ptxas); only launching needs a device. This script stands in a driver that
names the target (GPUTarget("cuda", arch, 32)), runs relpos.triton's
forward and backward on CPU tensors with every launch turned into a
compile-only warm-up, then asks ptxas for each kernel's registers and
spills. It checks what the interpreter cannot: that the kernels are valid
compiled Triton for sm_80 / sm_90, fit the shared memory, and (for the
float16 / bfloat16 tile sizes) do not spill.

    python triton_compile.py [--arch 90] [--dtype bfloat16] [--scheme shaw]
                             [--json]

Run without TRITON_INTERPRET (test_triton_compile.py runs it in a
subprocess). Schemes: vanilla, shaw (key and value tables, k = 16; head
dim 64, shaw128 the same with 128), shaw64,
keyonly, valueonly, t5 (scalar bias, 32 buckets), alibi, alibi_values, xl,
xl_values (xl with av), and shaw_layouts (shaw with multi-query k / v,
key_starts and per-row query offsets). A scheme with the suffix _decode
(shaw_decode, shaw128_decode, ...) is the same with 4 query rows against
2048 keys: the forward's split-key path (_decode.py).
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
from triton.backends.compiler import GPUTarget
from triton.runtime import driver
from triton.runtime.jit import JITFunction

# Shared memory per block (bytes) the targets allow.
SMEM_LIMIT = {80: 163 * 1024, 90: 227 * 1024}


class _Driver:
    """Just enough of a Triton driver to compile for a named target."""

    def __init__(self, arch):
        self.target = GPUTarget("cuda", arch, 32)

    def get_current_device(self):
        return 0

    def get_current_stream(self, device=None):
        return 0

    def get_current_target(self):
        return self.target

    def get_active_torch_device(self):
        return torch.device("cpu")


def _inputs(scheme, dtype):
    import relpos
    decode = scheme.endswith("_decode")
    scheme = scheme[:-len("_decode")] if decode else scheme
    b, h, n, d = 2, 2, 100, 128 if scheme == "shaw128" else 64
    nk = 2048 if decode else n
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, nk, d, generator=g).to(dtype)
    k = {"shaw64": 64, "xl": 200, "xl_values": 200}.get(scheme, 16)
    ak = torch.randn(2 * k + 1, d, generator=g).to(dtype)
    av = ak.clone()
    kw = dict(max_distance=k, causal=True, key_lengths=[nk, 3 * nk // 5])
    bias = pb = None
    if scheme in ("vanilla", "valueonly", "t5", "alibi", "alibi_values"):
        ak = None
    if scheme in ("vanilla", "keyonly", "t5", "alibi", "xl"):
        av = None
    if scheme == "t5":
        kw.pop("max_distance")
        kw["buckets"] = relpos.T5Buckets(32, 128, True)
        bias = torch.randn(h, 32, generator=g).to(dtype)
    if scheme in ("alibi", "alibi_values"):
        kw["alibi"] = True
    if scheme in ("xl", "xl_values"):
        pb = torch.randn(h, d, generator=g).to(dtype)
    k = v = q
    if scheme == "shaw_layouts":
        k = v = q[:, :1].contiguous()  # multi-query: one k / v head
        kw.update(key_starts=[0, nk // 14],
                  query_offset=[0, 40] if not decode else [nk - 4, nk // 2])
    if decode:
        q = q[:, :, -4:].contiguous()
    return q, k, v, ak, av, bias, pb, kw


def compile_kernels(arch, dtype, scheme):
    """[(kernel name, compiled kernel)] of one forward + backward."""
    driver.set_active(_Driver(arch))
    compiled = []
    run = JITFunction.run

    def warmup_only(self, *args, grid, warmup, **kwargs):
        kernel = run(self, *args, grid=grid, warmup=True, **kwargs)
        compiled.append((self.fn.__name__, kernel))
        return kernel

    JITFunction.run = warmup_only
    try:
        from relpos.triton import _attention as A, _problem
        _problem.interpreting = lambda: True  # accept CPU tensors
        q, k, v, ak, av, bias, pb, kw = _inputs(scheme, dtype)
        c = _problem.prepare("triton.attention", q, k, v, ak, av, bias, pb,
                             **kw)
        out, lse = A.forward(c, q, k, v, ak, av, bias, pb)
        A.backward(c, q, q, k, v, ak, av, bias, pb, out, lse)
    finally:
        JITFunction.run = run
    return compiled


def ptxas_report(kernel, arch):
    """(registers, spill store bytes) from ptxas -v on the kernel's PTX."""
    from triton.backends.nvidia.compiler import get_ptxas
    with tempfile.NamedTemporaryFile("w", suffix=".ptx", delete=False) as f:
        f.write(kernel.asm["ptx"])
    try:
        res = subprocess.run(
            [get_ptxas(arch).path, "-v", f"--gpu-name=sm_{arch}"
             + ("a" if arch == 90 else ""), f.name, "-o", os.devnull],
            capture_output=True, text=True, check=True)
    finally:
        os.unlink(f.name)
    text = res.stdout + res.stderr
    regs = int(re.search(r"Used (\d+) registers", text).group(1))
    spills = int(re.search(r"(\d+) bytes spill stores", text).group(1))
    return regs, spills


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--arch", type=int, default=90, choices=sorted(SMEM_LIMIT))
    p.add_argument("--dtype", default="bfloat16",
                   choices=["float16", "bfloat16", "float32", "float64"])
    p.add_argument("--scheme", default="shaw")
    p.add_argument("--json", action="store_true")
    a = p.parse_args(argv)
    rows = []
    for name, kernel in compile_kernels(a.arch, getattr(torch, a.dtype),
                                        a.scheme):
        regs, spills = ptxas_report(kernel, a.arch)
        rows.append(dict(kernel=name, arch=a.arch, dtype=a.dtype,
                         scheme=a.scheme, warps=kernel.metadata.num_warps,
                         shared=kernel.metadata.shared, registers=regs,
                         spill_bytes=spills,
                         shared_ok=kernel.metadata.shared
                         <= SMEM_LIMIT[a.arch]))
    if a.json:
        print(json.dumps(rows))
    else:
        for r in rows:
            print(f"{r['kernel']:16s} sm_{r['arch']} {r['dtype']:8s} "
                  f"{r['scheme']:12s} warps {r['warps']} shared "
                  f"{r['shared']:6d} registers {r['registers']:3d} spills "
                  f"{r['spill_bytes']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

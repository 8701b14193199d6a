#!/usr/bin/env python3
"""Host-side profile of relpos's GPU path (relpos.triton), without a GPU.

    TRITON_INTERPRET=1 python3 bench/gpu_host_profile.py [--n 128]
        [--schemes vanilla,alibi,...] [--repeats 5] [--markdown] [--json FILE]

Runs relpos.triton.attention's forward and backward (torch.autograd.grad)
on CPU tensors under Triton's interpreter and counts, per call, what a GPU
would see from the host:

  triton     Triton kernel launches (the kernels of relpos/triton/_kernels.py
             wrapped for the duration of the call)
  torch      torch operators that run a kernel on a GPU (every aten operator
             seen by a TorchDispatchMode except views, bare allocations and
             the host-data markers below)
  alloc      operators that return a freshly allocated tensor (empty, zeros,
             sums, copies, ...): a caching-allocator call each on CUDA
  fill       of those, the ones that write constants (zeros, new_zeros,
             fill_, zero_): a fill kernel each on CUDA
  upload     tensors made from host data (torch.as_tensor / torch.tensor of
             numpy or Python values: aten.lift_fresh); moved to a CUDA
             device from pageable memory, PyTorch copies them with a
             stream synchronisation
  sync       device-to-host reads: .item() / tensor -> Python number or
             bool (aten._local_scalar_dense), nonzero, .tolist(), .cpu(),
             .numpy() called on the call's tensors (not counted: the
             interpreter's own torch calls inside a launch, and x[i] += y's
             write-back of a view onto itself, which ATen's copy_ skips)

and the CPU host time of the Python path (median of --repeats): each
call's wall time less the time spent inside its Triton launches (where
the interpreter runs the kernels), with one torch thread. That is CPU
time in relpos's Python code and in the torch operators it calls (run
here on small CPU tensors), not a GPU time and without Triton's own
launcher overhead. Nothing here runs on or is timed on a GPU.

Each scheme is run once before it is counted (caches filled: the
steady state of a training loop); the counts of that first call are in
the JSON as "first".

The benchmark's schemes (bench/gpu_bench.py): vanilla (no positions),
alibi, shaw (k = 16, key and value tables), shaw_key (key table only), t5
(32 buckets, max distance 128, scalar bias), xl (Shaw key table with
Transformer-XL's pb), each causal and not. The counts depend on the
scheme, not on B, H, n or d (as long as n is larger than a tile, so that
band and far tiles both exist); the default shape is small so that the
interpreter is quick.
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import gc
import json
import os
import statistics
import sys
import time

SCHEMES = ("vanilla", "alibi", "shaw", "shaw_key", "t5", "xl")


def parse_args(argv):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=128, help="Nq = Nk")
    p.add_argument("--b", type=int, default=1)
    p.add_argument("--h", type=int, default=2)
    p.add_argument("--d", type=int, default=64)
    p.add_argument("--schemes", default=",".join(SCHEMES))
    p.add_argument("--repeats", type=int, default=3,
                   help="timed host-path repetitions (median)")
    p.add_argument("--markdown", action="store_true",
                   help="print the table as Markdown")
    p.add_argument("--json", metavar="FILE")
    a = p.parse_args(argv)
    a.schemes = [s for s in a.schemes.split(",") if s]
    bad = set(a.schemes) - set(SCHEMES)
    if bad:
        p.error(f"unknown schemes {sorted(bad)}; known: {SCHEMES}")
    return a


# --- counting -------------------------------------------------------------------


class Counts:
    """What one call did (see the module docstring)."""

    FIELDS = ("triton", "torch", "alloc", "fill", "upload", "sync")

    def __init__(self):
        self.n = collections.Counter()
        self.kernels = collections.Counter()   # Triton kernel -> launches
        self.ops = collections.Counter()       # aten op -> count
        self.syncs = collections.Counter()     # what synchronised
        self.launch_s = 0.0

    def row(self):
        return {f: self.n[f] for f in self.FIELDS}

    def detail(self):
        return dict(counts=self.row(), kernels=dict(self.kernels),
                    ops=dict(self.ops), syncs=dict(self.syncs))


_FILLS = {"zeros", "new_zeros", "zeros_like", "fill_", "zero_", "full",
          "new_full", "full_like", "ones", "ones_like", "new_ones"}
_EMPTY = {"empty", "empty_strided", "new_empty", "new_empty_strided",
          "empty_like"}
_METADATA = {"_unsafe_view", "alias", "detach"}
_SYNC_OPS = {"_local_scalar_dense", "nonzero", "is_nonzero", "equal",
             "masked_select", "unique", "_unique2"}


def _same_view(dst, src):
    return (dst.data_ptr() == src.data_ptr() and dst.dtype == src.dtype
            and dst.shape == src.shape and dst.stride() == src.stride())


def _dispatch_mode(counts):
    from torch.utils._python_dispatch import TorchDispatchMode

    class Mode(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, args=(), kwargs=None):
            out = func(*args, **(kwargs or {}))
            name = func.overloadpacket.__name__
            rets = func._schema.returns
            fresh = any(r.alias_info is None and "Tensor" in str(r.type)
                        for r in rets)
            view = rets and all(r.alias_info is not None
                                and not r.alias_info.is_write for r in rets)
            if name in _SYNC_OPS:
                counts.n["sync"] += 1
                counts.syncs[f"aten.{name}"] += 1
            if name == "copy_" and _same_view(*args[:2]):
                pass  # x[i] += y writes x[i] back onto itself: ATen's
                # copy_ returns at once, no kernel
            elif name == "lift_fresh":
                counts.n["upload"] += 1
            elif view or name in _METADATA:
                pass  # metadata only: no kernel
            elif name in _EMPTY:
                counts.n["alloc"] += 1
            elif name != "_local_scalar_dense":
                counts.n["torch"] += 1
                counts.ops[f"aten.{name}"] += 1
                if fresh:
                    counts.n["alloc"] += 1
                if name in _FILLS:
                    counts.n["fill"] += 1
            return out

    return Mode()


def _launched():
    """{name: kernel} of the kernels the host launches: those that
    relpos/triton/_attention.py names as K.<name> (the other @triton.jit
    functions of _kernels.py are helpers called from inside kernels)."""
    import inspect
    import re
    from relpos.triton import _attention, _kernels as K
    names = set(re.findall(r"\bK\.(_\w+)", inspect.getsource(_attention)))
    return {name: getattr(K, name) for name in sorted(names)}


@contextlib.contextmanager
def counting(counts, ops=True):
    """Counts the Triton launches (and, with ops, the torch operators and
    host reads) inside the block; counts.launch_s: seconds spent inside
    the launches (the interpreter running the kernels)."""
    import torch
    from relpos.triton import _kernels as K

    from torch.utils._python_dispatch import _disable_current_modes
    saved = _launched()
    paused = [0]

    class Counted:
        def __init__(self, name, kernel):
            self.name, self.kernel = name, kernel

        def __getitem__(self, grid):
            launch = self.kernel[grid]

            def run(*args, **kwargs):
                counts.n["triton"] += 1
                counts.kernels[self.name] += 1
                # The interpreter's own torch calls (argument copies) are
                # not the host path's: not counted.
                paused[0] += 1
                t = time.perf_counter()
                try:
                    with _disable_current_modes():
                        return launch(*args, **kwargs)
                finally:
                    counts.launch_s += time.perf_counter() - t
                    paused[0] -= 1
            return run

    def flag(method):
        original = getattr(torch.Tensor, method)

        def wrapped(self, *args, **kwargs):
            if not paused[0]:
                counts.n["sync"] += 1
                counts.syncs[f"Tensor.{method}"] += 1
            return original(self, *args, **kwargs)
        return original, wrapped

    methods = {m: flag(m) for m in ("tolist", "cpu", "numpy")}
    try:
        for name, obj in saved.items():
            setattr(K, name, Counted(name, obj))
        if not ops:
            yield counts
            return
        for m, (_, wrapped) in methods.items():
            setattr(torch.Tensor, m, wrapped)
        with _dispatch_mode(counts):
            yield counts
    finally:
        for name, obj in saved.items():
            setattr(K, name, obj)
        for m, (original, _) in methods.items():
            setattr(torch.Tensor, m, original)


# --- the calls ------------------------------------------------------------------


def make_call(torch, relpos, scheme, causal, shape, dtype):
    """(inputs, fn): fn(*inputs) -> out, as bench/gpu_bench.py's rows."""
    import relpos.triton as rtt
    b, h, n, d = shape
    k = 16
    g = torch.Generator().manual_seed(0)

    def rand(*s, scale=1.0):
        return (scale * torch.randn(*s, generator=g)).to(dtype) \
            .requires_grad_(True)

    q, kk, v = rand(b, h, n, d), rand(b, h, n, d), rand(b, h, n, d)
    ak, av = rand(2 * k + 1, d, scale=0.5), rand(2 * k + 1, d, scale=0.5)
    if scheme == "vanilla":
        return (q, kk, v), lambda q, kk, v: rtt.attention(
            q, kk, v, max_distance=0, causal=causal)
    if scheme == "alibi":
        return (q, kk, v), lambda q, kk, v: rtt.attention(
            q, kk, v, max_distance=0, alibi=True, causal=causal)
    if scheme == "shaw":
        return (q, kk, v, ak, av), lambda q, kk, v, ak, av: rtt.attention(
            q, kk, v, ak, av, max_distance=k, causal=causal)
    if scheme == "shaw_key":
        return (q, kk, v, ak), lambda q, kk, v, ak: rtt.attention(
            q, kk, v, ak, max_distance=k, causal=causal)
    if scheme == "t5":
        t5 = relpos.T5Buckets(32, 128, not causal)
        bias = rand(h, 32, scale=0.5)
        return (q, kk, v, bias), lambda q, kk, v, bias: rtt.attention(
            q, kk, v, buckets=t5, bias=bias, causal=causal)
    if scheme == "xl":
        pb = rand(h, d, scale=0.5)
        return (q, kk, v, ak, pb), lambda q, kk, v, ak, pb: rtt.attention(
            q, kk, v, ak, max_distance=k, pb=pb, causal=causal)
    raise ValueError(scheme)


def profile(torch, fn, inputs):
    """(forward Counts, backward Counts) of one call."""
    fwd, bwd = Counts(), Counts()
    with counting(fwd):
        out = fn(*inputs)
    dout = torch.ones_like(out)
    with counting(bwd):
        torch.autograd.grad(out, inputs, dout)
    return fwd, bwd


def host_times(torch, fn, inputs, repeats):
    """(forward, backward) median CPU seconds of the host path: each
    call's wall time less the time inside its Triton launches (where the
    interpreter runs the kernels)."""
    tf, tb = [], []
    for _ in range(repeats):
        # The interpreter leaves garbage whose collection would land in
        # the host path's time: collected before, not during.
        gc.collect()
        gc.disable()
        try:
            fwd, bwd = _timed_call(torch, fn, inputs)
        finally:
            gc.enable()
        tf.append(fwd)
        tb.append(bwd)
    return statistics.median(tf), statistics.median(tb)


def _timed_call(torch, fn, inputs):
    """(forward, backward) host seconds of one call."""
    fwd, bwd = Counts(), Counts()
    with counting(fwd, ops=False):
        t0 = time.perf_counter()
        out = fn(*inputs)
        t1 = time.perf_counter()
    dout = torch.ones_like(out)
    with counting(bwd, ops=False):
        t2 = time.perf_counter()
        torch.autograd.grad(out, inputs, dout)
        t3 = time.perf_counter()
    return t1 - t0 - fwd.launch_s, t3 - t2 - bwd.launch_s


def run(a):
    import torch
    import relpos
    # One torch thread: on a busy machine OpenMP's thread wake-ups would
    # put milliseconds into a small CPU reduction's time.
    torch.set_num_threads(1)
    shape = (a.b, a.h, a.n, a.d)
    results = []
    for scheme in a.schemes:
        for causal in (False, True):
            inputs, fn = make_call(torch, relpos, scheme, causal, shape,
                                   torch.bfloat16)
            first = profile(torch, fn, inputs)
            fwd, bwd = profile(torch, fn, inputs)
            tf, tb = host_times(torch, fn, inputs, a.repeats)
            results.append(dict(
                scheme=scheme, causal=causal, shape=shape,
                fwd=fwd.detail(), bwd=bwd.detail(),
                first=dict(fwd=first[0].row(), bwd=first[1].row()),
                host_fwd_ms=1e3 * tf, host_bwd_ms=1e3 * tb))
            print(_line(results[-1], a.markdown), flush=True)
    return results


def _cells(c):
    return "{triton} / {torch} / {alloc} / {fill} / {upload} / {sync}" \
        .format(**c)


def header(markdown):
    cols = ("scheme", "causal", "fwd: triton / torch / alloc / fill / "
            "upload / sync", "bwd: same", "host ms fwd / bwd")
    if markdown:
        return ("| " + " | ".join(cols) + " |\n| "
                + " | ".join("---" for _ in cols) + " |")
    return "  ".join(cols)


def _line(r, markdown):
    cells = (r["scheme"], "yes" if r["causal"] else "no",
             _cells(r["fwd"]["counts"]), _cells(r["bwd"]["counts"]),
             f"{r['host_fwd_ms']:.2f} / {r['host_bwd_ms']:.2f}")
    if markdown:
        return "| " + " | ".join(f"`{c}`" if i == 0 else c
                                 for i, c in enumerate(cells)) + " |"
    return (f"{cells[0]:9s} {cells[1]:3s}  fwd {cells[2]:24s} "
            f"bwd {cells[3]:24s} host {cells[4]} ms")


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        print("gpu_host_profile: set TRITON_INTERPRET=1 (the kernels run "
              "on CPU tensors under Triton's interpreter)", file=sys.stderr)
        return 2
    print(header(a.markdown), flush=True)
    results = run(a)
    if a.json:
        with open(a.json, "w") as f:
            json.dump(dict(results=results), f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""GPU benchmark of relpos's Triton kernels (relpos.triton), with a
correctness check first.

    python3 bench/gpu_bench.py [--n 1024,2048,4096,8192,16384] [--causal]
                               [--repeats 10] [--json FILE] [--no-check]
    TRITON_INTERPRET=1 python3 bench/gpu_bench.py --interpret --small

On a CUDA machine it first checks the GPU path on small sizes against
relpos's float64 CPU reference (forward and every gradient, every scheme,
Shaw with multi-query k / v, key_starts and per-row offsets, bfloat16 and
float32, through relpos.triton.attention, relpos.torch.attention
(the custom op's CUDA kernel), RelativeMultiheadAttention and
torch.compile(fullgraph=True)), and that two backward passes agree bit for
bit. Then, at B x H x d = 4 x 16 x 64 in bfloat16, for each n it times the
forward and forward + backward (CUDA events, median of --repeats after a
warm-up) and records the peak memory above the inputs of:

  sdpa_flash      torch's scaled_dot_product_attention, FlashAttention
                  backend, no positions (the floor to compare against)
  relpos_vanilla  relpos.triton without position terms
  relpos_shaw     Shaw k = 16, key and value tables
  relpos_shaw_key Shaw k = 16, key table only
  relpos_t5       T5 bias, 32 buckets, max distance 128
  relpos_alibi    ALiBi
  flex_t5         FlexAttention, T5's bias as a score_mod (bucket table and
                  bias captured)
  flex_alibi      FlexAttention, ALiBi as a score_mod
  flex_shaw_key   FlexAttention, Shaw's key term as a score_mod reading a
                  captured G = Q AK^T / sqrt(d) ([B, H, n, 2k+1], computed
                  outside). FlexAttention has no value-side term: Shaw's
                  value table (and so relpos_shaw) cannot be expressed.
  gather_shaw     the n x n x d gather form (Hugging Face / OpenNMT-py
                  style): both tables gathered per pair, n x n scores
                  materialised (OOM is reported as such)

Targets (docs/benchmarks.md): relpos_shaw within 1.3x of sdpa_flash for
forward + backward at n >= 2048; relpos_t5 and relpos_alibi no slower than
flex_t5 / flex_alibi; relpos memory linear in n.

Without a CUDA device it exits with status 2 and says so, unless
--interpret: then Triton's interpreter runs everything on CPU tensors
(TRITON_INTERPRET=1 must be set before Triton is imported, so set it in the
environment; --interpret checks) and --small shrinks the sizes so that the
code paths run in about a minute. Those timings are meaningless.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import sys

import numpy as np


def parse_args(argv):
    p = argparse.ArgumentParser(
        description="Benchmark relpos's Triton kernels on a CUDA GPU.")
    p.add_argument("--n", default="1024,2048,4096,8192,16384",
                   help="sequence lengths (comma-separated)")
    p.add_argument("--causal", action="store_true", help="causal masks")
    p.add_argument("--repeats", type=int, default=10,
                   help="timed repetitions per measurement (median)")
    p.add_argument("--rows", default="",
                   help="only these rows (comma-separated names)")
    p.add_argument("--json", metavar="FILE", help="also write the results")
    p.add_argument("--no-check", action="store_true",
                   help="skip the correctness check")
    p.add_argument("--interpret", action="store_true",
                   help="run on the CPU under Triton's interpreter "
                        "(needs TRITON_INTERPRET=1 in the environment)")
    p.add_argument("--small", action="store_true",
                   help="tiny sizes (B x H x d = 1 x 2 x 16, n = 24)")
    a = p.parse_args(argv)
    try:
        a.n = [int(x) for x in a.n.split(",") if x]
    except ValueError:
        p.error(f"--n must be comma-separated integers (got {a.n!r})")
    if not a.n or min(a.n) < 1 or a.repeats < 1:
        p.error("--n needs positive lengths and --repeats must be >= 1")
    if a.small:
        a.n = [24]
    return a


# --- the implementations compared ---------------------------------------------


def _shaw_idx(torch, n, k, device):
    i = torch.arange(n, device=device)
    return (i[None, :] - i[:, None]).clamp(-k, k) + k   # [n, n] rows


def _t5_rows(torch, relpos, n, buckets, device):
    """T5 bucket of every distance -(n-1) .. n-1 (index r + n - 1)."""
    r = np.arange(-(n - 1), n)
    return torch.as_tensor(relpos.t5_bucket(
        r, num_buckets=buckets.num_buckets, max_distance=buckets.max_distance,
        bidirectional=buckets.bidirectional), device=device)


def make_rows(torch, relpos, shape, causal, device, dtype, small):
    """{name: (inputs, fn)}: fn(*inputs) -> out; inputs requiring grad are
    the learned ones."""
    import relpos.triton as rtt
    b, h, n, d = shape
    k = 16
    g = torch.Generator(device="cpu").manual_seed(0)

    def rand(*s, grad=True, scale=1.0):
        x = (scale * torch.randn(*s, generator=g)).to(device=device,
                                                       dtype=dtype)
        return x.requires_grad_(grad)

    q, kk, v = rand(b, h, n, d), rand(b, h, n, d), rand(b, h, n, d)
    ak, av = rand(2 * k + 1, d, scale=0.5), rand(2 * k + 1, d, scale=0.5)
    t5 = relpos.T5Buckets(32, 128, not causal)
    bias = rand(h, 32, scale=0.5)
    slopes = torch.as_tensor(relpos.alibi_slopes(h), device=device,
                             dtype=torch.float32)
    rows = {}
    rows["relpos_vanilla"] = ((q, kk, v), lambda q, kk, v: rtt.attention(
        q, kk, v, max_distance=0, causal=causal))
    rows["relpos_shaw"] = ((q, kk, v, ak, av), lambda q, kk, v, ak, av:
                           rtt.attention(q, kk, v, ak, av, max_distance=k,
                                         causal=causal))
    rows["relpos_shaw_key"] = ((q, kk, v, ak), lambda q, kk, v, ak:
                               rtt.attention(q, kk, v, ak, max_distance=k,
                                             causal=causal))
    rows["relpos_t5"] = ((q, kk, v, bias), lambda q, kk, v, bias:
                         rtt.attention(q, kk, v, buckets=t5, bias=bias,
                                       causal=causal))
    rows["relpos_alibi"] = ((q, kk, v), lambda q, kk, v: rtt.attention(
        q, kk, v, max_distance=0, alibi=True, causal=causal))
    F = torch.nn.functional
    if device.type == "cuda":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def sdpa(q, kk, v):
            with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
                return F.scaled_dot_product_attention(q, kk, v,
                                                      is_causal=causal)
    else:  # the interpreter run: CPU SDPA (math backend)
        def sdpa(q, kk, v):
            return F.scaled_dot_product_attention(q, kk, v, is_causal=causal)
    rows["sdpa_flash"] = ((q, kk, v), sdpa)
    rows.update(_flex_rows(torch, relpos, q, kk, v, ak, bias, slopes, t5, k,
                           causal, device))
    idx = _shaw_idx(torch, n, k, device)
    mask = torch.ones(n, n, dtype=torch.bool, device=device).tril() \
        if causal else None

    def gather(q, kk, v, ak, av):
        s = (q @ kk.transpose(-1, -2)
             + torch.einsum("bhid,ijd->bhij", q, ak[idx])) / math.sqrt(d)
        if mask is not None:
            s = s.masked_fill(~mask, float("-inf"))
        p = s.softmax(-1)
        return p @ v + torch.einsum("bhij,ijd->bhid", p, av[idx])
    rows["gather_shaw"] = ((q, kk, v, ak, av), gather)
    return rows


def _flex_rows(torch, relpos, q, kk, v, ak, bias, slopes, t5, k, causal,
               device):
    try:
        from torch.nn.attention.flex_attention import flex_attention
    except ImportError:
        return {}
    n, d = q.shape[2], q.shape[3]
    flex = torch.compile(flex_attention) if device.type == "cuda" \
        else flex_attention
    t5_rows = _t5_rows(torch, relpos, n, t5, device)

    def mod(extra):
        def score_mod(score, b, h, qi, ki):
            if causal:
                score = torch.where(ki <= qi, score, float("-inf"))
            return extra(score, b, h, qi, ki)
        return score_mod

    def t5_flex(q, kk, v, bias):
        return flex(q, kk, v, score_mod=mod(
            lambda s, b, h, qi, ki: s + bias[h, t5_rows[ki - qi + n - 1]]))

    def alibi_flex(q, kk, v):
        return flex(q, kk, v, score_mod=mod(
            lambda s, b, h, qi, ki: s - slopes[h] * (ki - qi).abs()))

    def shaw_key_flex(q, kk, v, ak):
        gmat = (q @ ak.t()) / math.sqrt(d)   # [B, H, n, 2k+1]
        return flex(q, kk, v, score_mod=mod(
            lambda s, b, h, qi, ki:
            s + gmat[b, h, qi, (ki - qi).clamp(-k, k) + k]))

    return {"flex_t5": ((q, kk, v, bias), t5_flex),
            "flex_alibi": ((q, kk, v), alibi_flex),
            "flex_shaw_key": ((q, kk, v, ak), shaw_key_flex)}


# --- floors ----------------------------------------------------------------------

# Spec-sheet peaks of an NVIDIA H200 (SXM): dense bfloat16 tensor-core
# throughput and HBM3e bandwidth. Not measured.
H200_FLOPS = 989e12
H200_BYTES_PER_S = 4.8e12


def floors(b, h, n, d, causal, elem_bytes=2, flops_per_s=H200_FLOPS,
           bytes_per_s=H200_BYTES_PER_S):
    """The work any attention of this shape must do and the time it
    implies at the given peaks: {fwd_gflop, fwd_bwd_gflop, fwd_mb,
    fwd_bwd_mb, and the four *_ms}. FLOPs as FlashAttention counts them:
    4 B H n^2 d for the forward (Q K^T and P V), halved with a causal
    mask, the backward 2.5 times the forward. Bytes: the forward reads q,
    k, v and writes out once; the backward reads q, k, v, dO, out and
    writes dq, dk, dv once (lse and every position table left out)."""
    fwd = 4.0 * b * h * n * n * d * (0.5 if causal else 1.0)
    tensor = b * h * n * d * elem_bytes
    out = dict(fwd_gflop=fwd / 1e9, fwd_bwd_gflop=3.5 * fwd / 1e9,
               fwd_mb=4 * tensor / 1e6, fwd_bwd_mb=12 * tensor / 1e6)
    out["fwd_flop_ms"] = 1e3 * fwd / flops_per_s
    out["fwd_bwd_flop_ms"] = 1e3 * 3.5 * fwd / flops_per_s
    out["fwd_byte_ms"] = 1e3 * 4 * tensor / bytes_per_s
    out["fwd_bwd_byte_ms"] = 1e3 * 12 * tensor / bytes_per_s
    return out


# --- timing --------------------------------------------------------------------


def _timed(torch, step, repeats, cuda):
    import time
    step()  # warm-up (and compilation)
    times = []
    for _ in range(repeats):
        if cuda:
            start = torch.cuda.Event(enable_timing=True)
            end = torch.cuda.Event(enable_timing=True)
            start.record()
            step()
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end))
        else:
            t = time.perf_counter()
            step()
            times.append(1e3 * (time.perf_counter() - t))
    return statistics.median(times)


def measure(torch, fn, inputs, repeats, device):
    """{fwd_ms, fwd_bwd_ms, peak_mib (above the inputs, CUDA only)}; a
    measurement that fails (out of memory, a backend that refuses) gives
    the error's name instead, e.g. "OutOfMemoryError"."""
    cuda = device.type == "cuda"
    res = {}
    frozen = [x.detach() for x in inputs]

    def fwd():
        with torch.no_grad():
            fn(*frozen)

    def fwd_bwd():
        for x in inputs:
            x.grad = None
        out = fn(*inputs)
        out.backward(torch.ones_like(out))

    for key, step in (("fwd_ms", fwd), ("fwd_bwd_ms", fwd_bwd)):
        try:
            if key == "fwd_bwd_ms" and cuda:
                torch.cuda.synchronize()
                base = torch.cuda.memory_allocated()
                torch.cuda.reset_peak_memory_stats()
                step()
                torch.cuda.synchronize()
                res["peak_mib"] = (torch.cuda.max_memory_allocated()
                                   - base) / 2 ** 20
            res[key] = _timed(torch, step, repeats, cuda)
        except Exception as e:  # noqa: BLE001 (reported, not hidden)
            res[key] = type(e).__name__
            if cuda:
                torch.cuda.empty_cache()
        finally:
            for x in inputs:
                x.grad = None
    return res


def run_sweep(torch, relpos, a, device, dtype):
    b, h, d = (1, 2, 16) if a.small else (4, 16, 64)
    only = {x for x in a.rows.split(",") if x}
    results = []
    for n in a.n:
        fl = floors(b, h, n, d, a.causal)
        print(f"n={n:6d} floors at an H200's spec-sheet peaks (989 TFLOP/s "
              f"bf16, 4.8 TB/s): fwd {fl['fwd_flop_ms']:.4f} ms (FLOPs) / "
              f"{fl['fwd_byte_ms']:.4f} ms (bytes), fwd+bwd "
              f"{fl['fwd_bwd_flop_ms']:.4f} / {fl['fwd_bwd_byte_ms']:.4f} ms",
              flush=True)
        rows = make_rows(torch, relpos, (b, h, n, d), a.causal, device, dtype,
                         a.small)
        for name, (inputs, fn) in rows.items():
            if only and name not in only:
                continue
            entry = dict(n=n, row=name, batch=b, heads=h, d=d,
                         causal=a.causal, dtype=str(dtype))
            entry.update(measure(torch, fn, inputs, a.repeats, device))
            entry["floors"] = fl

            def show(x, unit):
                return x if isinstance(x, str) else f"{x:9.3f} {unit}"
            def over(x, key):  # time / the larger of the two floors
                floor = max(fl[f"{key}_flop_ms"], fl[f"{key}_byte_ms"])
                if isinstance(x, str):
                    return ""
                return f" ({x / floor:.1f}x floor)"
            print(f"n={n:6d} {name:16s} fwd {show(entry['fwd_ms'], 'ms')}"
                  f"{over(entry['fwd_ms'], 'fwd')}  fwd+bwd "
                  f"{show(entry['fwd_bwd_ms'], 'ms')}"
                  f"{over(entry['fwd_bwd_ms'], 'fwd_bwd')}  peak "
                  f"{show(entry.get('peak_mib', '-'), 'MiB')}", flush=True)
            results.append(entry)
        del rows
    return results


def ratios(results):
    """The targets' ratios per n: shaw / sdpa (fwd+bwd), t5 and alibi /
    flex, and peak memory per n for relpos_shaw."""
    by = {(r["n"], r["row"]): r for r in results}
    out = []
    for n in sorted({r["n"] for r in results}):
        def ratio(x, y, key="fwd_bwd_ms"):
            vals = [by.get((n, z), {}).get(key) for z in (x, y)]
            if all(isinstance(z, float) for z in vals):
                return vals[0] / vals[1]
            return None
        out.append(dict(n=n, shaw_over_sdpa=ratio("relpos_shaw",
                                                  "sdpa_flash"),
                        t5_over_flex=ratio("relpos_t5", "flex_t5"),
                        alibi_over_flex=ratio("relpos_alibi", "flex_alibi")))
    return out


# --- the correctness check -----------------------------------------------------


def check(torch, relpos, device, small):
    """relpos's GPU path against the float64 CPU reference on small sizes,
    through every entry point; raises AssertionError on a mismatch."""
    import relpos.torch as rt
    import relpos.triton as rtt
    n = 24 if small else 70
    t5 = relpos.T5Buckets(8, 20, True)
    schemes = {
        "shaw": dict(ak=True, av=True, max_distance=3),
        "shaw_perhead_causal_padding": dict(ak=True, av=True, per_head=True,
                                            max_distance=20, causal=True,
                                            key_lengths=[n // 2] * (
                                                1 if small else 2)),
        "asym": dict(ak=True, av=True, buckets=relpos.ClipBuckets(5, 2)),
        "shawlog": dict(ak=True, av=True, buckets=t5),
        "t5": dict(bias=True, buckets=t5),
        "alibi_decode": dict(alibi=True, max_distance=0, causal=True,
                             nq=1),
        "xl": dict(ak=True, pb=True, max_distance=90, causal=True),
        # multi-query k / v, left padding and per-row offsets together
        "shaw_mqa_leftpad_rows": dict(ak=True, av=True, max_distance=3,
                                      causal=True, b=2, hkv=1,
                                      key_starts=[3, 0],
                                      key_lengths=[n, n - 5],
                                      query_offset=[0, 7]),
    }
    worst = {}
    for name, spec in schemes.items():
        spec = dict(spec)
        per_head = spec.pop("per_head", False)
        nq = spec.pop("nq", n)
        b, h, d = (1, 2, 16) if small else (2, 2, 16)
        b = spec.pop("b", b)
        hkv = spec.pop("hkv", h)
        g = torch.Generator().manual_seed(1)
        k = spec.get("max_distance")
        bk = spec.get("buckets")
        nb = (2 * k + 1 if bk is None else
              bk.left + bk.right + 1 if hasattr(bk, "left")
              else bk.num_buckets)
        shapes = dict(q=(b, h, nq, d), k=(b, hkv, n, d), v=(b, hkv, n, d),
                      ak=(h, nb, d) if per_head else (nb, d),
                      av=(h, nb, d) if per_head else (nb, d), bias=(h, nb),
                      pb=(h, d))
        names = [x for x in ("q", "k", "v", "ak", "av", "bias", "pb")
                 if x in ("q", "k", "v") or spec.pop(x, False)]
        base = {x: torch.randn(shapes[x], generator=g, dtype=torch.float64)
                for x in names}
        dout = torch.randn((b, h, nq, d), generator=g, dtype=torch.float64)
        # --small (the CPU run of the code paths): bfloat16 only.
        for dtype in (torch.bfloat16,) if small else (torch.bfloat16,
                                                      torch.float32):
            # python/tests/test_triton.py's bounds: 16 (u_in + u sqrt(L)).
            tol = 0.07 if dtype == torch.bfloat16 else 2e-5
            ins = {x: t.to(dtype) for x, t in base.items()}
            want = _grads(rt.attention, {x: t.double() for x, t in
                                         ins.items()}, dout, spec)
            entries = [("relpos.triton", rtt.attention)]
            if device.type == "cuda":  # (on the CPU: its C++ kernels)
                entries.append(("relpos.torch", rt.attention))
            for entry, fn in entries:
                got = _grads(fn, {x: t.to(device) for x, t in ins.items()},
                             dout.to(device, dtype), spec)
                for key, w in want.items():
                    err = _rel(got[key].double().cpu(), w)
                    worst[(name, str(dtype), entry, key)] = err
                    assert err <= tol, (name, dtype, entry, key, err)
            if dtype == torch.bfloat16:
                again = _grads(rtt.attention, {x: t.to(device) for x, t in
                                               ins.items()},
                               dout.to(device, dtype), spec)
                assert all(torch.equal(again[x].cpu(), got[x].cpu())
                           for x in got), (name, "not bitwise repeatable")
    if device.type == "cuda":  # on the CPU relpos.torch runs C++ kernels
        _check_module(torch, rt, device)
    print(f"check: {len(worst)} comparisons passed; largest relative error "
          f"{max(worst.values()):.2e} (bounds: bfloat16 0.07, float32 2e-5)",
          flush=True)


def _grads(fn, ins, dout, spec):
    xs = {x: t.clone().requires_grad_() for x, t in ins.items()}
    kw = dict(spec)
    out = fn(xs["q"], xs["k"], xs["v"], xs.get("ak"), xs.get("av"),
             bias=xs.get("bias"), pb=xs.get("pb"), **kw)
    out.backward(dout)
    res = {"out": out.detach()}
    res.update({"d" + x: t.grad for x, t in xs.items()})
    return res


def _rel(got, want):
    scale = max(want.norm().item(), 1e-12)
    return (got - want).norm().item() / scale


def _check_module(torch, rt, device):
    """RelativeMultiheadAttention on the device against the same module on
    the CPU, eager and under torch.compile(fullgraph=True)."""
    torch.manual_seed(0)
    for scheme in ("shaw", "t5", "rope", "xl"):
        cpu = rt.RelativeMultiheadAttention(64, 4, scheme=scheme,
                                            causal=True).double()
        dev = rt.RelativeMultiheadAttention(64, 4, scheme=scheme,
                                            causal=True).to(device)
        dev.load_state_dict({x: t.float() for x, t in
                             cpu.state_dict().items()})
        x = torch.randn(2, 50, 64, dtype=torch.float64)
        want = cpu(x)
        for model in (dev, torch.compile(dev, fullgraph=True)):
            got = model(x.float().to(device)).double().cpu()
            err = _rel(got, want.detach())
            assert err <= 2e-5, (scheme, err)


# --- main ------------------------------------------------------------------------


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    if a.interpret and os.environ.get("TRITON_INTERPRET", "0") in ("", "0"):
        print("gpu_bench: --interpret needs TRITON_INTERPRET=1 in the "
              "environment (Triton reads it when kernels are defined)",
              file=sys.stderr)
        return 2
    import torch
    import relpos
    if a.interpret:
        import warnings
        # Eager FlexAttention warns that it is unfused: expected here.
        warnings.filterwarnings("ignore", message="flex_attention called")
        device = torch.device("cpu")
    elif not torch.cuda.is_available():
        print("gpu_bench: no CUDA device (torch.cuda.is_available() is "
              "False): this benchmark needs a GPU; "
              "TRITON_INTERPRET=1 ... --interpret --small runs its code "
              "paths on the CPU", file=sys.stderr)
        return 2
    else:
        device = torch.device("cuda")
        print(f"gpu_bench: {torch.cuda.get_device_name()}, PyTorch "
              f"{torch.__version__}", flush=True)
    if a.small:
        from relpos.triton import _attention
        _attention.OVERRIDE = _attention.Blocks(
            far_m=16, far_n=16, band_m=16, band_n=16, diag=16)
    if not a.no_check:
        check(torch, relpos, device, a.small)
    results = run_sweep(torch, relpos, a, device, torch.bfloat16)
    summary = ratios(results)
    for s in summary:
        print("n={n:6d} shaw/sdpa {shaw} t5/flex {t5} alibi/flex "
              "{alibi}".format(
                  n=s["n"], **{k: "-" if s[f"{k}_over_{o}"] is None
                               else f"{s[f'{k}_over_{o}']:.2f}"
                               for k, o in (("shaw", "sdpa"), ("t5", "flex"),
                                            ("alibi", "flex"))}))
    if a.json:
        tmp = a.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(dict(results=results, ratios=summary,
                           device=str(device)), f, indent=1)
        os.replace(tmp, a.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())

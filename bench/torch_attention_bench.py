#!/usr/bin/env python3
"""Times relative self-attention written the usual PyTorch way, for comparison
with relpos's fused kernel.

The "gathered" form used by tensor2tensor (`_relative_attention_inner`) and
Hugging Face BERT (`position_embedding_type="relative_key"`): build the [n, n]
relative index matrix, gather the tables into [n, n, d] tensors, einsum.

    idx[i, j] = clip(j - i, -k, k) + k                 (docs/math.md section 1)
    AKg = AK[idx], AVg = AV[idx]                       [n, n, d] each
    s   = (q k^T + einsum(q, AKg)) / sqrt(d)           [B, H, n, n]
    p   = softmax(s)
    o   = p v + einsum(p, AVg)

Forward runs with autograd recording (as in training); backward is
out.backward(dout). FLOPs follow relpos's convention (docs/math.md section 7):
vanilla attention's 4 B H n^2 d forward and 2.5x that backward for every
variant, so GFLOP/s ratios are speed ratios.

Give --relpos PATH_TO_relpos_BINARY (or --relpos-json FILE saved from
`relpos bench --json`) to print relpos's speedup over PyTorch; the issue's
target is relpos fwd+bwd >= 10x faster at n = 2048. With --relpos the two
sides run interleaved, --rounds times over (each round, per n: PyTorch's
rows, then `relpos bench` at that n), so load that comes and goes on a
shared machine slows both sides of a round alike; each speedup is the
median of the per-round ratios, with the smallest and largest, and each
time the median over rounds. A saved --relpos-json is one run of relpos
against every round of PyTorch (not interleaved).

Exit status: 0 on success, and also 0 (with a message on stderr, nothing on
stdout) when PyTorch is not installed; 2 on bad usage; 1 if the gathered
implementation disagrees with the per-pair definition or relpos fails.
Debian: `apt-get install python3-torch`, then run with /usr/bin/python3.
"""

import argparse
import json
import math
import os
import resource
import statistics
import subprocess
import sys
import time


def parse_int_list(text, name, minimum):
    try:
        values = [int(t) for t in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"{name} must be comma-separated integers (got {text!r})")
    for v in values:
        if v < minimum:
            raise argparse.ArgumentTypeError(
                f"{name} values must be >= {minimum} (got {v})")
    return values


def parse_args(argv):
    ap = argparse.ArgumentParser(
        description="Time PyTorch relative attention (gathered n x n x d "
        "form) forward and backward; optionally compare with relpos.")
    ap.add_argument("--n", default="256,512,1024,2048",
                    type=lambda s: parse_int_list(s, "--n", 1),
                    help="sequence lengths (default 256,512,1024,2048)")
    ap.add_argument("--k", default="16,64",
                    type=lambda s: parse_int_list(s, "--k", 0),
                    help="clipping distances (default 16,64)")
    ap.add_argument("--heads", type=int, default=8)
    ap.add_argument("--dim", type=int, default=64)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--threads", type=int, default=2,
                    help="torch.set_num_threads (default 2)")
    ap.add_argument("--repeats", type=int, default=3,
                    help="timed runs; the median is reported (default 3)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="interleaved rounds of both sides (default 1)")
    ap.add_argument("--max-gib", type=float, default=8.0,
                    help="skip sizes whose estimated peak memory exceeds "
                    "this (default 8 GiB)")
    ap.add_argument("--relpos", metavar="PATH",
                    help="relpos binary: run `relpos bench --json` with the "
                    "same sizes and print the speedups")
    ap.add_argument("--relpos-json", metavar="FILE",
                    help="output of `relpos bench --json` to compare with")
    ap.add_argument("--json", action="store_true",
                    help="print one JSON object instead of the table")
    args = ap.parse_args(argv)
    for name in ("heads", "dim", "batch", "threads", "repeats", "rounds"):
        value = getattr(args, name)
        if not 1 <= value <= 4096:
            ap.error(f"--{name} must be in [1, 4096] (got {value})")
    if max(args.n) > 65536 or max(args.k) > 65536:
        ap.error("--n and --k values must be <= 65536")
    if args.max_gib <= 0:
        ap.error(f"--max-gib must be > 0 (got {args.max_gib})")
    if args.relpos and args.relpos_json:
        ap.error("give at most one of --relpos and --relpos-json")
    # Checked now, not after minutes of PyTorch timings.
    if args.relpos and not os.access(args.relpos, os.X_OK):
        ap.error(f"--relpos: {args.relpos!r} is not an executable file")
    if args.relpos_json and not os.path.isfile(args.relpos_json):
        ap.error(f"--relpos-json: {args.relpos_json!r} is not a file")
    return args


def forward_flops(b, h, n, d):
    return 4.0 * b * h * n * n * d


def relative_index(torch, n, k):
    """[n, n] long: clip(j - i, -k, k) + k (key index minus query index)."""
    pos = torch.arange(n)
    return (pos[None, :] - pos[:, None]).clamp(-k, k) + k


def attention(torch, q, key, v, ak, av, max_distance):
    """The gathered form. q, key, v: [B, H, n, d]; ak, av: [2k+1, d] or None
    (vanilla)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = torch.matmul(q, key.transpose(-1, -2))
    if ak is not None or av is not None:
        idx = relative_index(torch, q.shape[-2], max_distance)
    if ak is not None:
        akg = torch.nn.functional.embedding(idx, ak)  # [n, n, d]
        scores = scores + torch.einsum("bhid,ijd->bhij", q, akg)
    p = torch.softmax(scores * scale, dim=-1)
    out = torch.matmul(p, v)
    if av is not None:
        avg = torch.nn.functional.embedding(idx, av)  # [n, n, d]
        out = out + torch.einsum("bhij,ijd->bhid", p, avg)
    return out


def self_check(torch):
    """The gathered form must match docs/math.md section 2 pair by pair (float64,
    n = 7 > 2k + 1 so both far buckets and the band occur). Returns the max
    abs error; float64 round-off on O(1) values is ~1e-15, 1e-10 is safe."""
    g = torch.Generator().manual_seed(0)
    b, h, n, d, k = 1, 2, 7, 3, 2
    q, key, v = (torch.randn(b, h, n, d, generator=g, dtype=torch.float64)
                 for _ in range(3))
    ak, av = (torch.randn(2 * k + 1, d, generator=g, dtype=torch.float64)
              for _ in range(2))
    got = attention(torch, q, key, v, ak, av, k)
    worst = 0.0
    for hh in range(h):
        for i in range(n):
            s = []
            for j in range(n):
                r = min(max(j - i, -k), k) + k
                s.append(float(q[0, hh, i] @ (key[0, hh, j] + ak[r]))
                         / math.sqrt(d))
            m = max(s)
            e = [math.exp(x - m) for x in s]
            z = sum(e)
            o = torch.zeros(d, dtype=torch.float64)
            for j in range(n):
                r = min(max(j - i, -k), k) + k
                o += (e[j] / z) * (v[0, hh, j] + av[r])
            worst = max(worst, float((o - got[0, hh, i]).abs().max()))
    return worst


def estimated_peak_bytes(b, h, n, d, relative):
    """Rough peak of forward + backward: about six [B, H, n, n] float
    tensors (scores, p, their grads, softmax and einsum temporaries) and,
    when relative, six [n, n, d] ones (AKg, AVg, their grads, einsum
    copies)."""
    nn = 6 * b * h * n * n
    nnd = 6 * n * n * d if relative else 0
    return 4 * (nn + nnd)


def measure(torch, variant, b, h, n, d, k, repeats):
    g = torch.Generator().manual_seed(1)
    q, key, v, dout = (torch.randn(b, h, n, d, generator=g) for _ in range(4))
    for t in (q, key, v):
        t.requires_grad_(True)
    ak = av = None
    if variant == "relative":
        ak, av = (0.5 * torch.randn(2 * k + 1, d, generator=g)
                  for _ in range(2))
        ak.requires_grad_(True)
        av.requires_grad_(True)
    params = [t for t in (q, key, v, ak, av) if t is not None]
    fwd, bwd = [], []
    for rep in range(repeats + 1):  # the first run is the warm-up
        for t in params:
            t.grad = None
        t0 = time.perf_counter()
        out = attention(torch, q, key, v, ak, av, k)
        t1 = time.perf_counter()
        out.backward(dout)
        t2 = time.perf_counter()
        del out
        if rep > 0:
            fwd.append(t1 - t0)
            bwd.append(t2 - t1)
    return statistics.median(fwd), statistics.median(bwd)


def run_relpos(args, ns):
    """relpos's rows keyed by (variant, n, k), from a file or by running
    `relpos bench --json` at the sizes ns (reference path skipped)."""
    if args.relpos_json:
        with open(args.relpos_json) as f:
            data = json.load(f)
    else:
        cmd = [args.relpos, "bench", "--json",
               "--n", ",".join(map(str, ns)),
               "--k", ",".join(map(str, args.k)),
               "--batch", str(args.batch), "--heads", str(args.heads),
               "--dim", str(args.dim), "--threads", str(args.threads),
               "--repeats", str(args.repeats),
               "--variants", "vanilla,relative"]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise RuntimeError(f"{' '.join(cmd)} exited {proc.returncode}: "
                               f"{proc.stderr.strip()}")
        data = json.loads(proc.stdout)
    return data, {(r["variant"], r["n"], r["k"]): r for r in data["rows"]}


def measure_torch_n(torch, args, n, rnd, runs, skipped):
    """One round of PyTorch's rows at n: appends (fwd_s, bwd_s) to
    runs[(variant, n, k)] and prints the row."""
    b, h, d = args.batch, args.heads, args.dim
    for variant, k in [("vanilla", 0)] + [("relative", k) for k in args.k]:
        need = estimated_peak_bytes(b, h, n, d, variant == "relative")
        if need > args.max_gib * 2**30:
            skipped.append({"variant": variant, "n": n, "k": k,
                            "estimated_bytes": need})
            continue
        fwd_s, bwd_s = measure(torch, variant, b, h, n, d, k, args.repeats)
        runs.setdefault((variant, n, k), []).append((fwd_s, bwd_s))
        if not args.json:
            flops = forward_flops(b, h, n, d)
            prefix = f"round {rnd + 1}/{args.rounds} " if args.rounds > 1 else ""
            print(f"{prefix}torch {variant:9s} n={n:6d} k={k:4d}  "
                  f"fwd {fwd_s * 1e3:10.2f} ms  bwd {bwd_s * 1e3:10.2f} ms"
                  f"  fwd {flops / fwd_s * 1e-9:7.2f} GF/s"
                  f"  bwd {2.5 * flops / bwd_s * 1e-9:7.2f} GF/s"
                  f"  ~{need / 2**20:8.0f} MiB", flush=True)


def torch_row(key, runs, b, h, d):
    """PyTorch's row of (variant, n, k): medians over rounds."""
    variant, n, k = key
    fwd_s = statistics.median(f for f, _ in runs)
    bwd_s = statistics.median(w for _, w in runs)
    flops = forward_flops(b, h, n, d)
    return {
        "variant": variant, "n": n, "k": k, "batch": b, "heads": h,
        "dim": d, "fwd_ms": fwd_s * 1e3, "bwd_ms": bwd_s * 1e3,
        "fwd_gflops": flops / fwd_s * 1e-9,
        "bwd_gflops": 2.5 * flops / bwd_s * 1e-9,
        "estimated_peak_bytes": estimated_peak_bytes(
            b, h, n, d, variant == "relative"),
    }


def speedups(torch_runs, relpos_runs):
    """Per row both sides ran: PyTorch fwd+bwd over relpos's, the median
    of the per-round ratios and their smallest and largest."""
    out = []
    for key, runs in torch_runs.items():
        other = relpos_runs.get(key)
        if not other:
            continue
        t_ms = [1e3 * (f + w) for f, w in runs]
        r_ms = [r["fwd_ms"] + r["bwd_ms"] for r in other]
        ratios = [t / r for t, r in zip(t_ms, r_ms)]
        out.append({"variant": key[0], "n": key[1], "k": key[2],
                    "torch_ms": statistics.median(t_ms),
                    "relpos_ms": statistics.median(r_ms),
                    "speedup": statistics.median(ratios),
                    "speedup_min": min(ratios), "speedup_max": max(ratios)})
    return out


def main(argv=None):
    args = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import torch
    except ImportError:
        print("torch_attention_bench: PyTorch is not installed, nothing "
              "measured (Debian: apt-get install python3-torch, then run "
              "with /usr/bin/python3)", file=sys.stderr)
        return 0
    torch.set_num_threads(args.threads)

    err = self_check(torch)
    if not err < 1e-10:
        print(f"torch_attention_bench: gathered form disagrees with the "
              f"definition (max abs error {err:.3g})", file=sys.stderr)
        return 1

    b, h, d = args.batch, args.heads, args.dim
    torch_runs, relpos_runs, skipped = {}, {}, []
    relpos_data = None
    try:
        if args.relpos_json:
            relpos_data, saved = run_relpos(args, args.n)
        for rnd in range(args.rounds):
            for n in args.n:
                measure_torch_n(torch, args, n, rnd, torch_runs,
                                skipped if rnd == 0 else [])
                if args.relpos_json:
                    rows_n = {key: r for key, r in saved.items()
                              if key[1] == n}
                elif args.relpos:
                    relpos_data, rows_n = run_relpos(args, [n])
                else:
                    continue
                for key, r in rows_n.items():
                    relpos_runs.setdefault(key, []).append(r)
    except (OSError, RuntimeError, ValueError, KeyError) as e:
        print(f"torch_attention_bench: relpos comparison failed: {e}",
              file=sys.stderr)
        return 1
    rows = [torch_row(key, runs, b, h, d) for key, runs in torch_runs.items()]

    result = {
        "torch_version": torch.__version__,
        "threads": torch.get_num_threads(),
        "repeats": args.repeats,
        "rounds": args.rounds,
        "flop_convention":
            "vanilla for every variant: fwd 4*B*H*n*n*d, bwd 2.5x fwd",
        "peak_rss_bytes":
            resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024,
        "rows": rows,
        "skipped": skipped,
    }

    if args.relpos or args.relpos_json:
        result["relpos_sgemm_gflops"] = relpos_data.get("sgemm_gflops")
        result["speedups"] = speedups(torch_runs, relpos_runs)

    if args.json:
        print(json.dumps(result))
        return 0
    for s in skipped:
        print(f"torch {s['variant']:9s} n={s['n']:6d} k={s['k']:4d}  skipped:"
              f" needs ~{s['estimated_bytes'] / 2**30:.1f} GiB > --max-gib "
              f"{args.max_gib:g}")
    print(f"threads {result['threads']}, medians of {args.repeats} x "
          f"{args.rounds} round(s), torch "
          f"{result['torch_version']}, peak RSS "
          f"{result['peak_rss_bytes'] / 2**30:.2f} GiB")
    if "speedups" in result:
        print("\nrelpos fused vs PyTorch gathered, fwd+bwd:")
        for s in result["speedups"]:
            line = (f"  {s['variant']:9s} n={s['n']:6d} k={s['k']:4d}  torch "
                    f"{s['torch_ms']:10.2f} ms  relpos {s['relpos_ms']:9.2f} "
                    f"ms  speedup {s['speedup']:7.1f}x "
                    f"[{s['speedup_min']:.1f}, {s['speedup_max']:.1f}]")
            if s["n"] == 2048 and s["variant"] == "relative":
                line += ("  (target >= 10x: "
                         f"{'met' if s['speedup'] >= 10 else 'NOT met'})")
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())

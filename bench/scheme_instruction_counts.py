#!/usr/bin/env python3
"""Instruction counts of the fused kernel per relative scheme, via callgrind.

Wall-clock on the shared development machine is noisy; the number of
instructions executed is not. For each scheme this runs the Google Benchmark
binary's `bwd/scheme:NAME/h:1/n:2048` (bench/attention_bench.cc: one
untimed forward, then one timed backward with --benchmark_min_time tiny)
under `valgrind --tool=callgrind`, collecting only inside the public
AttentionForward<float> / AttentionBackward<float> calls, reads their
inclusive instruction counts with callgrind_annotate, and prints each
scheme's overhead over vanilla (the same mask), forward, backward and both.

valgrind does not emulate AVX-512, so Highway dispatches to AVX2 under it.

Usage:
  bench/scheme_instruction_counts.py --bench build/release/bench/attention_bench \
      [--schemes alibi,t5,shaw16,shaw64,shaw_asym,shaw_log,xl] [--jobs 2] [--json out.json]
"""

import argparse
import concurrent.futures
import json
import os
import re
import subprocess
import tempfile

FWD = re.compile(r"relpos::AttentionForward<float>\(")
BWD = re.compile(r"relpos::AttentionBackward<float>\(")


def count(bench, scheme, n, heads, workdir):
    out = os.path.join(workdir, f"cg.{scheme}.out")
    cmd = ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
           "--toggle-collect=*relpos::AttentionForward<float>*",
           "--toggle-collect=*relpos::AttentionBackward<float>*",
           bench, f"--benchmark_filter=^bwd/scheme:{scheme}/h:{heads}/n:{n}/",
           "--benchmark_min_time=0.000001"]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL, env=env)
    text = subprocess.run(["callgrind_annotate", "--inclusive=yes", out],
                          check=True, capture_output=True, text=True).stdout
    os.remove(out)
    fwd = bwd = None
    for line in text.splitlines():
        m = re.match(r"\s*([\d,]+)\s", line)
        if not m:
            continue
        ir = int(m.group(1).replace(",", ""))
        if fwd is None and FWD.search(line):
            fwd = ir
        elif bwd is None and BWD.search(line):
            bwd = ir
    if fwd is None or bwd is None:
        raise SystemExit(f"no AttentionForward/Backward costs for {scheme}")
    # One forward (warm-up) and one backward (1 iteration) per run.
    return fwd, bwd


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="build/release/bench/attention_bench")
    ap.add_argument("--schemes", default="alibi,t5")
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--heads", type=int, default=1)
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--json")
    args = ap.parse_args()
    names = []
    for s in args.schemes.split(","):
        # alibi and t5 come with a causal variant; shaw16 / shaw64 / shaw_log /
        # shaw_asym / xl are bidirectional only.
        names += [s, s + "_causal"] if s in ("alibi", "t5") else [s]
    names += ["vanilla"]
    if any(s.endswith("_causal") for s in names):
        names += ["vanilla_causal"]
    with tempfile.TemporaryDirectory() as workdir:
        with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
            futures = {s: pool.submit(count, args.bench, s, args.n, args.heads,
                                      workdir) for s in names}
            ir = {s: f.result() for s, f in futures.items()}
    print(f"instructions per call, B=1 H={args.heads} n={args.n} d=64, "
          "1 thread, callgrind (AVX2 target)")
    print(f"{'scheme':>14} {'fwd Ir':>14} {'bwd Ir':>14} {'fwd ovh':>8} "
          f"{'bwd ovh':>8} {'f+b ovh':>8}")
    rows = []
    for s in names:
        base = ir["vanilla_causal" if s.endswith("causal") else "vanilla"]
        f, b = ir[s]
        row = {"scheme": s, "n": args.n, "heads": args.heads, "fwd_ir": f,
               "bwd_ir": b, "fwd_overhead_pct": 100 * (f / base[0] - 1),
               "bwd_overhead_pct": 100 * (b / base[1] - 1),
               "overhead_pct": 100 * ((f + b) / (base[0] + base[1]) - 1)}
        rows.append(row)
        print(f"{s:>14} {f:>14,} {b:>14,} {row['fwd_overhead_pct']:>7.2f}% "
              f"{row['bwd_overhead_pct']:>7.2f}% {row['overhead_pct']:>7.2f}%")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as fh:
            json.dump(rows, fh, indent=1)


if __name__ == "__main__":
    main()

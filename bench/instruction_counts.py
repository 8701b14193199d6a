#!/usr/bin/env python3
"""Instruction counts of the fused kernel, vanilla vs relative, via callgrind.

Wall-clock on a shared machine moves by tens of percent between identical
runs; the number of instructions executed does not (single thread, same
inputs, same code path). This runs `relpos bench` under
`valgrind --tool=callgrind` once per (variant, n, k), collects only inside
AttentionWorkload::Forward() / Backward() (the timed calls: the fused driver,
its OpenMP region and the tile bodies), divides by the number of calls, and
prints the relative variant's instruction overhead over vanilla next to the
FLOP bound (2k+1)/n (docs/benchmarks.md).

Caveat: valgrind does not emulate AVX-512, so Highway dispatches to its AVX2
target under valgrind even on CPUs where the native run uses AVX3 (16 lanes).

Usage:
  bench/instruction_counts.py --relpos build/release/bin/relpos \
      --n 512,1024,2048 --k 16,64 [--heads 2] [--marginal R] [--json out.json]
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

FORWARD = "relpos::bench::AttentionWorkload::Forward()"
BACKWARD = "relpos::bench::AttentionWorkload::Backward()"


def parse_callgrind(path):
    """Returns {name: [calls, inclusive Ir, self Ir of libc's memset /
    memmove / memcpy under it]} for the two timed functions. Needs
    --separate-callers (names carry their caller chain, "f'caller'...")."""
    names = {}  # compressed id -> name
    totals = {FORWARD: [0, 0, 0], BACKWARD: [0, 0, 0]}
    fn = None  # function (with its caller chain) whose costs follow
    current = None  # callee of the pending calls= line
    expect_cost = False
    line_calls = "0"
    with open(path, encoding="utf-8", errors="replace") as f:
        for line in f:
            line = line.rstrip("\n")
            if line.startswith(("fn=", "cfn=")):
                # Compressed names: "(id) name" defines an id, "(id)" reuses
                # it; fn= and cfn= lines share the id space.
                m = re.match(r"c?fn=\((\d+)\)(?: (.*))?$", line)
                if m:
                    fid, name = m.group(1), m.group(2)
                    if name is not None:
                        names[fid] = name
                    name = names.get(fid)
                else:
                    name = line.split("=", 1)[1]
                if line.startswith("cfn="):
                    current = name
                else:
                    fn = name
                continue
            if line.startswith("calls="):
                line_calls = line.split()[0][len("calls="):]
                expect_cost = True
                continue
            if not line or not (line[0].isdigit() or line[0] in "+-*"):
                continue
            cost = int(line.split()[-1])
            if expect_cost:  # inclusive cost of the call just announced
                callee = current.split("'")[0] if current else None
                if callee in totals:
                    totals[callee][0] += int(line_calls)
                    totals[callee][1] += cost
                expect_cost = False
            elif fn and re.search(r"mem(set|move|cpy)", fn.split("'")[0]):
                chain = fn.split("'")[1:]
                for name in totals:
                    if name in chain:
                        totals[name][2] += cost
                        break
    return totals


def run_once(relpos, variant, n, k, heads, repeats, workdir):
    out = os.path.join(workdir, f"cg.{variant}.{n}.{k}.{repeats}.out")
    cmd = [
        "valgrind", "--tool=callgrind", "--callgrind-out-file=" + out,
        "--separate-callers=12",
        "--toggle-collect=" + FORWARD, "--toggle-collect=" + BACKWARD,
        relpos, "bench", "--variants", variant, "--n", str(n), "--k", str(k),
        "--heads", str(heads), "--threads", "1", "--repeats", str(repeats),
        "--reference-max-n", "0", "--sgemm-size", "16",
    ]
    subprocess.run(cmd, check=True, stdout=subprocess.DEVNULL,
                   stderr=subprocess.DEVNULL)
    t = parse_callgrind(out)
    os.remove(out)
    return t


def count(relpos, variant, n, k, heads, marginal, workdir):
    """Instructions per call of forward and backward (and of mem* per
    forward + backward). marginal = 0: total / calls of one run (includes
    first-call costs, negligible for large n). marginal = R > 0: the
    difference between runs with 1 and 1 + R timed repeats, divided by the
    difference in calls: steady-state calls only (for small n, where the
    first call's one-time costs are not negligible)."""
    t = run_once(relpos, variant, n, k, heads, 1, workdir)
    if marginal > 0:
        t2 = run_once(relpos, variant, n, k, heads, 1 + marginal, workdir)
        t = {name: [b - a for a, b in zip(t[name], t2[name])] for name in t}
    result = {}
    # Callgrind counts every iteration of `rep stos` / `rep movs` (libc's
    # memset / memmove for large sizes) as one instruction, i.e. one per
    # BYTE; the "no mem*" figure leaves those out.
    result["mem"] = 0.0
    for key, name in (("fwd", FORWARD), ("bwd", BACKWARD)):
        calls, ir, mem = t[name]
        if calls <= 0:
            sys.exit(f"no calls of {name} recorded for {variant} n={n} k={k}")
        result[key] = ir / calls
        result["mem"] += mem / calls
    return result


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--relpos", default="build/release/bin/relpos")
    ap.add_argument("--n", default="512,1024,2048")
    ap.add_argument("--k", default="16,64")
    ap.add_argument("--heads", type=int, default=2)
    ap.add_argument("--marginal", type=int, default=0,
                    help="count steady-state calls only: difference of runs "
                         "with 1 and 1 + MARGINAL repeats (for small n)")
    ap.add_argument("--json", help="also write the rows to this file")
    args = ap.parse_args()
    ns = [int(x) for x in args.n.split(",")]
    ks = [int(x) for x in args.k.split(",")]
    rows = []
    print(f"instructions per call, B=1 H={args.heads} d=64, 1 thread, "
          "callgrind (AVX2 target)")
    print(f"{'n':>6} {'k':>4} {'vanilla fwd':>13} {'vanilla bwd':>13} "
          f"{'fwd ovh':>8} {'bwd ovh':>8} {'f+b ovh':>8} {'no mem*':>8} "
          f"{'bound':>7}")
    with tempfile.TemporaryDirectory() as workdir:
        for n in ns:
            van = count(args.relpos, "vanilla", n, 0, args.heads, args.marginal,
                        workdir)
            for k in ks:
                rel = count(args.relpos, "relative", n, k, args.heads,
                            args.marginal, workdir)
                fwd = rel["fwd"] / van["fwd"] - 1
                bwd = rel["bwd"] / van["bwd"] - 1
                both = (rel["fwd"] + rel["bwd"]) / (van["fwd"] + van["bwd"]) - 1
                plain = ((rel["fwd"] + rel["bwd"] - rel["mem"]) /
                         (van["fwd"] + van["bwd"] - van["mem"]) - 1)
                bound = (2 * k + 1) / n
                print(f"{n:>6} {k:>4} {van['fwd']:>13.0f} {van['bwd']:>13.0f} "
                      f"{100 * fwd:>7.2f}% {100 * bwd:>7.2f}% "
                      f"{100 * both:>7.2f}% {100 * plain:>7.2f}% "
                      f"{100 * bound:>6.2f}%", flush=True)
                rows.append({"n": n, "k": k, "heads": args.heads,
                             "vanilla_fwd_ir": van["fwd"],
                             "vanilla_bwd_ir": van["bwd"],
                             "relative_fwd_ir": rel["fwd"],
                             "relative_bwd_ir": rel["bwd"],
                             "fwd_overhead_pct": 100 * fwd,
                             "bwd_overhead_pct": 100 * bwd,
                             "vanilla_mem_ir": van["mem"],
                             "relative_mem_ir": rel["mem"],
                             "overhead_pct": 100 * both,
                             "overhead_no_mem_pct": 100 * plain,
                             "flop_bound_pct": 100 * bound})
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()

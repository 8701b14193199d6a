#!/usr/bin/env python3
"""Where a decode step's time goes: attention vs the matrix-vector products.

Runs decode_bench's cached step (BM_DecodeCached/relative/N: one new token
with N cached, Shaw et al. k = 16 with both terms) under
`perf record --call-graph dwarf` at one thread, keeps the samples of the
last --window seconds (the benchmark's final timed loop, after its model
construction and prefill), and sorts them:

- attention: `relpos::FewQueryForward` is on the sample's stack;
- GEMV: `relpos::Gemv` (the one-row product kernel) is on the stack, or the
  top frame is oneDNN's JIT code (it has no symbols and the DWARF unwinder
  cannot leave it): the projections, the FFN, the head;
- everything else, by the top frame's function.

It prints each share next to attention's share of the step's FLOPs: per
layer 4 n d for q k^T and p v, 4 (2k+1) d for Shaw's two terms, 8 d^2 for
the four projections and 4 d d_ff for the FFN, plus 2 d V for the head.

  python3 bench/decode_profile.py --decode-bench build/release/bench/decode_bench \
      --d-model 256 --heads 4 --d-ff 1024 --layers 4 --cached 2048
"""
import argparse
import collections
import json
import os
import re
import subprocess
import sys
import tempfile


def flop_share(d, d_ff, layers, n, k=16, vocab=256):
    attention = 4 * n * d + 4 * (2 * k + 1) * d
    other = 8 * d * d + 4 * d * d_ff
    total = layers * (attention + other) + 2 * d * vocab
    return layers * attention / total


def samples(data):
    """(time, [frames, innermost first]) per sample of `perf script`."""
    out = subprocess.run(["perf", "script", "-i", data, "-F", "time,ip,sym"],
                         capture_output=True, text=True, check=True).stdout
    result, current = [], None
    head = re.compile(r"^\s*(\d+\.\d+):\s*(.*)$")
    for line in out.splitlines():
        match = head.match(line)
        if match:
            if current:
                result.append(current)
            current = (float(match.group(1)), [])
            if match.group(2).strip():
                current[1].append(match.group(2).strip())
        elif line.strip() and current is not None:
            current[1].append(line.strip())
    if current:
        result.append(current)
    return result


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--decode-bench", default="build/release/bench/decode_bench")
    parser.add_argument("--d-model", type=int, default=256)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--d-ff", type=int, default=1024)
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--cached", type=int, default=2048,
                        choices=[128, 256, 512, 1024, 2048])
    parser.add_argument("--seconds", type=float, default=6.0,
                        help="decode_bench's --benchmark_min_time")
    parser.add_argument("--window", type=float, default=0.0,
                        help="seconds of samples kept (default: 0.9 x the "
                             "timed loop's length as the benchmark reports it)")
    args = parser.parse_args()
    env = dict(os.environ, OMP_NUM_THREADS="1",
               RELPOS_BENCH_D_MODEL=str(args.d_model),
               RELPOS_BENCH_HEADS=str(args.heads),
               RELPOS_BENCH_D_FF=str(args.d_ff),
               RELPOS_BENCH_LAYERS=str(args.layers))
    with tempfile.TemporaryDirectory() as tmp:
        data = os.path.join(tmp, "perf.data")
        run = subprocess.run(
            ["perf", "record", "-q", "-F", "499", "--call-graph", "dwarf,32768",
             "-o", data, args.decode_bench,
             f"--benchmark_filter=BM_DecodeCached/relative/{args.cached}/",
             f"--benchmark_min_time={args.seconds}", "--benchmark_format=json"],
            env=env, capture_output=True, text=True)
        if run.returncode != 0:
            sys.exit(f"decode_profile: perf record failed: {run.stderr.strip()}")
        bench = [b for b in json.loads(run.stdout)["benchmarks"]
                 if b.get("run_type") == "iteration"][0]
        step_ms = bench["real_time"]
        loop = bench["iterations"] * step_ms / 1e3
        window = args.window or 0.9 * loop
        every = samples(data)
    if not every:
        sys.exit("decode_profile: perf recorded no samples")
    end = every[-1][0]
    kept = [frames for t, frames in every if t >= end - window]
    shares = collections.Counter()
    for frames in kept:
        top = frames[0] if frames else "?"
        if any("FewQueryForward" in f for f in frames):
            shares["attention (FewQueryForward)"] += 1
        elif any("Gemv" in f for f in frames):
            shares["GEMV (relpos::Gemv)"] += 1
        elif "unknown" in top:
            shares["GEMV (oneDNN JIT)"] += 1
        else:
            name = top.split(None, 1)[1] if " " in top else top
            shares["other: " + name.split("+")[0][:70]] += 1
    print(f"d_model {args.d_model} x {args.layers} layers, {args.heads} heads, "
          f"FFN {args.d_ff}, {args.cached} cached: step {step_ms:.2f} ms; "
          f"{len(kept)} samples of the last {window:.1f} s")
    for name, count in shares.most_common(8):
        print(f"  {100 * count / len(kept):5.1f}%  {name}")
    print(f"  attention's FLOP share: "
          f"{100 * flop_share(args.d_model, args.d_ff, args.layers, args.cached):.1f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())

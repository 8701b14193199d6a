#!/usr/bin/env python3
"""Generation throughput: `relpos generate` vs CTranslate2's Generator on the
same exported byte-level decoder, the same prompts, the same threads.

For each model size (--sizes D_MODELxLAYERS, 4 heads at d_model 256 and 8
at 512, FFN 4 x d_model, Shaw et al. k = 16 with both terms) the script
trains a byte LM briefly with `relpos train --task lm` (--train-steps
updates on relpos's generated text: the weights only need to be a real
checkpoint, and a little training makes greedy decoding print text rather
than noise), exports it with relpos.ctranslate2.export (float32) and times
greedy decoding of --new bytes after --batch prompts of 16 bytes each:

- relpos: `relpos generate CHECKPOINT --batch FILE --batch-size B
  --max-new N --temperature 0 --threads T --json`; the time is the JSON's
  `seconds` (prompt and decoding, the checkpoint's loading left out);
- CTranslate2: ctranslate2.Generator(EXPORT, device="cpu",
  compute_type="float32", inter_threads=1, intra_threads=T)
  .generate_batch(prompts, max_length=N, min_length=N, sampling_topk=1,
  include_prompt_in_result=False), timed around the call. min_length = N
  keeps it from stopping at the export's end token (relpos's byte model has
  none and always decodes N bytes).

Timing: --rounds rounds; in each, for every (size, threads, batch, new),
relpos then CTranslate2 decode, so load that comes and goes slows both
sides of a round alike. The ratio relpos / CTranslate2 is the median of the
per-round ratios of tokens per second, with their smallest and largest;
peak memory is each side's resident high-water mark, each run in a process
of its own started by a small Python parent that reports its child's
ru_maxrss (relpos: the `relpos generate` process; CTranslate2: a Python
process that imports only ctranslate2, json, sys and time). The
continuations are compared as text (bytes decoded as UTF-8, invalid ones
replaced).

    /var/cache/relpos/pypi-venv/bin/python bench/generate_ctranslate2.py \\
        [--relpos build/release/bin/relpos] [--sizes 256x4,512x6] \\
        [--threads 1,2] [--batch 1,16] [--new 256,2048] [--rounds 3] \\
        [--work DIR] [--json]

Needs ctranslate2 and relpos's Python package (scripts/test-pypi.sh's
environment has both). Exit status 0; 2 on bad usage or a missing
dependency; 1 if a run failed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

# 16 prompts of 16 bytes (ASCII: one byte, one token).
PROMPTS = [
    "The quick brown ", "Once upon a time", "In the beginning",
    "It was the best ", "Call me Ishmael.", "All happy famil",
    "Hello, world! Th", "def main(argv): ", "#include <stdio.",
    "Attention is all", "Relative positio", "Shaw et al. 2018",
    "Translate this: ", "The year was 202", "Error: file not ",
    "Usage: relpos ge",
]


def _parse_sizes(text):
    sizes = []
    for item in text.split(","):
        d, _, layers = item.partition("x")
        sizes.append((int(d), int(layers)))
    return sizes


def _train(relpos, work, d, layers, steps):
    out = os.path.join(work, f"lm-d{d}-l{layers}")
    if not os.path.exists(os.path.join(out, "config.json")):
        heads = 4 if d <= 256 else 8
        subprocess.run(
            [relpos, "train", "--task", "lm", "--d-model", str(d), "--heads",
             str(heads), "--layers", str(layers), "--d-ff", str(4 * d),
             "--position", "shaw", "-k", "16", "--steps", str(steps),
             "--batch-size", "8", "--train-lengths", "64-128", "--threads",
             "2", "--progress", "none", "--out", out],
            check=True, stdout=subprocess.DEVNULL)
    return out


def _relpos(relpos, checkpoint, prompts_file, batch, new, threads):
    # A small Python parent of its own whose only child is relpos: its
    # RUSAGE_CHILDREN peak is relpos's (a child's peak starts from its
    # parent's resident size at fork, so not from this process).
    r = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CHILD, relpos, "generate",
         checkpoint, "--batch", prompts_file, "--batch-size", str(batch),
         "--max-new", str(new), "--temperature", "0", "--threads",
         str(threads), "--json"],
        capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"relpos generate failed: {r.stderr.strip()}")
    rows = [json.loads(line) for line in r.stdout.splitlines() if line]
    return rows[0]["seconds"], [x["text"] for x in rows], _peak_mib(r.stderr)


def _peak_mib(stderr):
    rss = [line for line in stderr.splitlines()
           if line.startswith("maxrss_kib=")]
    return int(rss[-1].split("=")[1]) / 1024


_PEAK_OF_CHILD = r"""
import resource, subprocess, sys
rc = subprocess.run(sys.argv[1:]).returncode
peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
print(f"maxrss_kib={peak}", file=sys.stderr)
sys.exit(rc)
"""


# CTranslate2's side of one (threads, batch, new), in a Python process of its
# own under _PEAK_OF_CHILD (so that its peak is its own, not this process's
# at fork): prints the seconds of the generate_batch call and the
# continuations.
_CT2_CHILD = r"""
import json, sys, time
import ctranslate2
export, threads, batch, new = sys.argv[1], *map(int, sys.argv[2:5])
prompts = json.loads(sys.stdin.read())[:batch]
gen = ctranslate2.Generator(export, device="cpu", compute_type="float32",
                            inter_threads=1, intra_threads=threads)
starts = [[f"<{b}>" for b in p.encode()] for p in prompts]
t = time.perf_counter()
res = gen.generate_batch(starts, max_length=new, min_length=new,
                         sampling_topk=1, include_prompt_in_result=False)
seconds = time.perf_counter() - t
texts = [bytes(int(tok[1:-1]) for tok in r.sequences[0]).decode(
    "utf-8", "replace") for r in res]
print(json.dumps({"seconds": seconds, "texts": texts}))
"""


def _ct2(export, threads, batch, new):
    r = subprocess.run(
        [sys.executable, "-c", _PEAK_OF_CHILD, sys.executable, "-c",
         _CT2_CHILD, export, str(threads), str(batch), str(new)],
        input=json.dumps(PROMPTS), capture_output=True, text=True)
    if r.returncode != 0:
        raise RuntimeError(f"CTranslate2 failed: {r.stderr.strip()}")
    out = json.loads(r.stdout)
    out["peak_mib"] = _peak_mib(r.stderr)
    return out


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    here = os.path.dirname(os.path.abspath(__file__))
    p.add_argument("--relpos", default=os.path.join(
        here, "..", "build", "release", "bin", "relpos"))
    p.add_argument("--sizes", default="256x4,512x6")
    p.add_argument("--threads", default="1,2")
    p.add_argument("--batch", default="1,16")
    p.add_argument("--new", default="256,2048")
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--train-steps", type=int, default=40)
    p.add_argument("--work", help="folder for the checkpoints and exports "
                   "(default: a new temporary folder)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    try:
        sizes = _parse_sizes(args.sizes)
        threads = [int(x) for x in args.threads.split(",")]
        batches = [int(x) for x in args.batch.split(",")]
        news = [int(x) for x in args.new.split(",")]
    except ValueError:
        p.error("--sizes takes DxL,...; --threads, --batch and --new "
                "comma-separated integers")
    if (min(threads + news + [args.rounds, args.train_steps]) < 1
            or min(batches) < 1 or max(batches) > len(PROMPTS)
            or any(d < 8 or l < 1 for d, l in sizes)):
        p.error(f"every count must be >= 1 (batch at most {len(PROMPTS)})")
    if not os.access(args.relpos, os.X_OK):
        p.error(f"no relpos binary at {args.relpos}")
    try:
        import ctranslate2
        from relpos import ctranslate2 as rc
    except ImportError as e:
        print(f"generate_ctranslate2: {e} (pip install ctranslate2)",
              file=sys.stderr)
        return 2

    work = args.work or tempfile.mkdtemp(prefix="relpos-ct2-generate-")
    os.makedirs(work, exist_ok=True)
    prompt_files = {}  # batch size -> a file of that many prompts
    for b in batches:
        prompt_files[b] = os.path.join(work, f"prompts-{b}.txt")
        with open(prompt_files[b], "w") as f:
            f.write("".join(x + "\n" for x in PROMPTS[:b]))
    print(f"CTranslate2 {ctranslate2.__version__}; prompts of "
          f"{len(PROMPTS[0])} bytes; greedy", flush=True)
    models = []
    for d, layers in sizes:
        ck = _train(args.relpos, work, d, layers, args.train_steps)
        export = os.path.join(work, f"lm-d{d}-l{layers}-ct2")
        if not os.path.exists(os.path.join(export, "model.bin")):
            rc.export(ck, export)
        models.append((d, layers, ck, export))
    cases = [(m, t, b, n) for m in models for t in threads for b in batches
             for n in news]
    samples = {i: [] for i in range(len(cases))}
    for r in range(args.rounds):
        for i, ((d, layers, ck, export), t, b, n) in enumerate(cases):
            try:
                s, texts, peak = _relpos(args.relpos, ck, prompt_files[b], b,
                                         n, t)
                theirs = _ct2(export, t, b, n)
            except RuntimeError as e:
                print(f"generate_ctranslate2: {e}", file=sys.stderr)
                return 1
            same = sum(x == y for x, y in zip(texts, theirs["texts"]))
            samples[i].append({"relpos_s": s, "ct2_s": theirs["seconds"],
                               "relpos_mib": peak,
                               "ct2_mib": theirs["peak_mib"], "same": same})
            print(f"round {r + 1}: d_model {d} x {layers}, threads {t}, "
                  f"batch {b}, {n} new: relpos {s:.3f} s, CTranslate2 "
                  f"{theirs['seconds']:.3f} s, {same}/{b} equal", flush=True)

    report = []
    print("\nd_model layers threads batch new  relpos tok/s  CT2 tok/s  "
          "relpos/CT2 (median, min-max)  peak MiB relpos/CT2  equal")
    for i, ((d, layers, _, _), t, b, n) in enumerate(cases):
        runs = samples[i]
        ratios = sorted(x["ct2_s"] / x["relpos_s"] for x in runs)
        tok = b * n
        row = {"d_model": d, "layers": layers, "threads": t, "batch": b,
               "new": n,
               "relpos_tokens_per_s":
                   tok / statistics.median(x["relpos_s"] for x in runs),
               "ct2_tokens_per_s":
                   tok / statistics.median(x["ct2_s"] for x in runs),
               "speed_ratio_median": statistics.median(ratios),
               "speed_ratio_min": ratios[0], "speed_ratio_max": ratios[-1],
               "relpos_peak_mib": max(x["relpos_mib"] for x in runs),
               "ct2_peak_mib": max(x["ct2_mib"] for x in runs),
               "equal": min(x["same"] for x in runs), "sequences": b}
        report.append(row)
        print(f"{d:7d} {layers:6d} {t:7d} {b:5d} {n:4d}  "
              f"{row['relpos_tokens_per_s']:12.0f}  "
              f"{row['ct2_tokens_per_s']:9.0f}  "
              f"{row['speed_ratio_median']:.2f}x ({ratios[0]:.2f}-"
              f"{ratios[-1]:.2f})  {row['relpos_peak_mib']:6.0f} / "
              f"{row['ct2_peak_mib']:.0f}  {row['equal']}/{b}")
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""One pre-LayerNorm encoder layer, inference forward: CTranslate2 vs relpos.

The layer of the issue: d_model 512, 8 heads, FFN 2048, GELU, batch 1,
without positions ("vanilla") and with Shaw relative positions, k = 16, key
and value tables shared by the heads ("shaw"), at n = 512 .. 4096.

- CTranslate2: a one-layer TransformerEncoderModelSpec (ctranslate2.specs,
  random float32 weights, relative_position=True for shaw), saved once per
  variant, then timed with ctranslate2.Encoder.forward_batch on one
  sequence of n ids (intra_threads = --threads, float32, CPU). The encoder
  adds an embedding lookup and the final LayerNorm to the layer: O(n d),
  negligible next to the layer.
- relpos: `relpos bench --layer --n N --positions P --k 16 --threads T
  --json` (the model's block, src/lab/workloads/layer_workload.cc).

Every (engine, variant, n) runs in its own child process under GNU time
(/usr/bin/time -f %M), so the peak resident set is that measurement's own; each child times --repeats forward calls after one warm-up and
reports the median. The children run interleaved, --rounds times over:
each round runs, per n and variant, relpos then CTranslate2, so load that
comes and goes on a shared machine slows both sides of a round alike. Each
ratio (speed-up, overhead of shaw over vanilla) is the median of the
per-round ratios, with their smallest and largest; each time the median
over rounds; each peak RSS the largest. relpos also reports its computed
peak_bytes (weights, activations and kernel workspace).

    python3 bench/ctranslate2_layer.py --relpos build/release/bin/relpos \\
        [--n 512,1024,2048,4096] [--threads 2] [--repeats 3] [--rounds 3] \\
        [--json]

Needs ctranslate2 (pip install ctranslate2; scripts/test-pypi.sh makes
/var/cache/relpos/pypi-venv with it): run with that environment's python.
Exit status 0; 2 on bad usage or when ctranslate2 is missing; 1 if a child
fails.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

D_MODEL, HEADS, D_FF, K = 512, 8, 2048, 16


def build_ct2_model(out_dir, relative, seed=0):
    """A one-layer CTranslate2 encoder with random weights."""
    import numpy as np
    from ctranslate2 import specs

    rng = np.random.default_rng(seed)

    def normal(shape, std):
        return (std * rng.standard_normal(shape)).astype(np.float32)

    enc = specs.TransformerEncoderSpec(1, HEADS, pre_norm=True,
                                       activation=specs.Activation.GELU,
                                       relative_position=relative)
    vocab = 16
    enc.embeddings[0].weight = normal((vocab, D_MODEL), 1.0)
    enc.scale_embeddings = False
    if not relative:
        enc.position_encodings.encodings = normal((8192, D_MODEL), 0.1)
    enc.layer_norm.gamma = np.ones(D_MODEL, np.float32)
    enc.layer_norm.beta = np.zeros(D_MODEL, np.float32)
    layer = enc.layer[0]
    att = layer.self_attention
    for ln in (att.layer_norm, layer.ffn.layer_norm):
        ln.gamma = np.ones(D_MODEL, np.float32)
        ln.beta = np.zeros(D_MODEL, np.float32)
    s = D_MODEL ** -0.5
    att.linear[0].weight = normal((3 * D_MODEL, D_MODEL), s)
    att.linear[0].bias = normal((3 * D_MODEL,), 0.1)
    att.linear[1].weight = normal((D_MODEL, D_MODEL), s)
    att.linear[1].bias = normal((D_MODEL,), 0.1)
    if relative:
        att.relative_position_keys = normal((2 * K + 1, D_MODEL // HEADS), 0.5)
        att.relative_position_values = normal((2 * K + 1, D_MODEL // HEADS),
                                              0.5)
    layer.ffn.linear_0.weight = normal((D_FF, D_MODEL), s)
    layer.ffn.linear_0.bias = normal((D_FF,), 0.1)
    layer.ffn.linear_1.weight = normal((D_MODEL, D_FF), D_FF ** -0.5)
    layer.ffn.linear_1.bias = normal((D_MODEL,), 0.1)
    spec = specs.TransformerEncoderModelSpec(enc)
    spec.config.layer_norm_epsilon = 1e-5
    tokens = [f"<{i}>" for i in range(vocab)]
    spec.config.unk_token = spec.config.bos_token = tokens[0]
    spec.config.eos_token = tokens[0]
    spec.register_vocabulary(tokens)
    spec.validate()
    os.makedirs(out_dir, exist_ok=True)
    spec.save(out_dir)


def ct2_child(model_dir, n, threads, repeats):
    """Runs in the child: prints {"fwd_ms": median}."""
    import ctranslate2

    enc = ctranslate2.Encoder(model_dir, device="cpu", compute_type="float32",
                              intra_threads=threads)
    ids = [[i % 16 for i in range(n)]]
    enc.forward_batch(ids)  # warm-up
    times = []
    for _ in range(repeats):
        t = time.perf_counter()
        out = enc.forward_batch(ids)
        _ = out.last_hidden_state  # the result is complete here
        times.append(time.perf_counter() - t)
    print(json.dumps({"fwd_ms": 1e3 * statistics.median(times)}))


TIME = "/usr/bin/time"


def run_child(argv, env=None):
    """Runs argv under GNU time; returns (stdout, peak RSS bytes of argv).

    Not os.wait4's ru_maxrss: Linux carries the parent's resident set into
    a forked-and-exec'd child's maxrss, so every child would report at least
    this Python process's size. GNU time's own child is forked from the small
    time process, and %M is that child's peak."""
    proc = subprocess.run([TIME, "-f", "%M"] + argv, capture_output=True,
                          env=env, check=False)
    err = proc.stderr.decode(errors="replace")
    if proc.returncode != 0:
        sys.stderr.write(err)
        raise RuntimeError(f"{argv[0]} failed with status {proc.returncode}")
    return proc.stdout.decode(), int(err.strip().splitlines()[-1]) * 1024


def measure_pair(args, env, ct2_dir, variant, n):
    """One round's relpos and CTranslate2 measurements of (variant, n)."""
    out, rss = run_child(
        [args.relpos, "bench", "--layer", "--n", str(n), "--positions",
         variant, "--k", str(K), "--threads", str(args.threads), "--repeats",
         str(args.repeats), "--json"], env)
    r = json.loads(out)["rows"][0]
    rel = {"fwd_ms": r["fwd_ms"], "peak_rss_bytes": rss,
           "peak_bytes": r["peak_bytes"]}
    out, rss = run_child(
        [sys.executable, __file__, "--relpos", args.relpos, "--repeats",
         str(args.repeats), "--ct2-child", ct2_dir, str(n),
         str(args.threads)], env)
    return rel, {"fwd_ms": json.loads(out)["fwd_ms"], "peak_rss_bytes": rss}


def ratios(num, den):
    """Per-round num / den: {"median", "min", "max", "rounds"}."""
    r = [a / b for a, b in zip(num, den)]
    return {"median": statistics.median(r), "min": min(r), "max": max(r),
            "rounds": r}


def spread(stat, fmt):
    return (f"{fmt.format(stat['median'])} [{fmt.format(stat['min'])}, "
            f"{fmt.format(stat['max'])}]")


def summarise_engine(key, runs):
    engine, variant, n = key
    row = {"engine": engine, "variant": variant, "n": n,
           "fwd_ms": statistics.median(x["fwd_ms"] for x in runs),
           "fwd_ms_rounds": [x["fwd_ms"] for x in runs],
           "peak_rss_bytes": max(x["peak_rss_bytes"] for x in runs)}
    if engine == "relpos":
        row["peak_bytes"] = runs[0]["peak_bytes"]
    return row


def summarise_n(samples, n):
    """Same-round ratios at n: each engine's overhead of shaw over vanilla
    (percent), relpos's speed-up over CTranslate2 and its memory ratio."""
    def ms(engine, variant):
        return [x["fwd_ms"] for x in samples[(engine, variant, n)]]

    s = {"n": n}
    for eng in ("relpos", "ctranslate2"):
        o = ratios(ms(eng, "shaw"), ms(eng, "vanilla"))
        s[f"{eng}_shaw_overhead_pct"] = {
            key: ([100 * (x - 1) for x in v] if key == "rounds"
                  else 100 * (v - 1)) for key, v in o.items()}
    s["speedup_shaw"] = ratios(ms("ctranslate2", "shaw"), ms("relpos", "shaw"))
    rss = {eng: max(x["peak_rss_bytes"] for x in samples[(eng, "shaw", n)])
           for eng in ("relpos", "ctranslate2")}
    s["memory_ratio_shaw"] = rss["relpos"] / rss["ctranslate2"]
    return s


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--relpos", required=True, help="the relpos binary")
    p.add_argument("--n", default="512,1024,2048,4096")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--rounds", type=int, default=3,
                   help="interleaved rounds of every measurement (default 3)")
    p.add_argument("--json", action="store_true")
    p.add_argument("--ct2-child", nargs=3, metavar=("DIR", "N", "THREADS"),
                   help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.ct2_child:
        ct2_child(args.ct2_child[0], int(args.ct2_child[1]),
                  int(args.ct2_child[2]), args.repeats)
        return 0
    try:
        import ctranslate2
    except ImportError:
        print("ctranslate2 is not installed (pip install ctranslate2)",
              file=sys.stderr)
        return 2
    if not os.access(TIME, os.X_OK):
        print(f"{TIME} (GNU time, Debian package 'time') is needed for the "
              "peak memory of each run", file=sys.stderr)
        return 2
    try:
        ns = [int(x) for x in args.n.split(",")]
    except ValueError:
        print(f"--n must be a comma-separated list of integers (got "
              f"{args.n!r})", file=sys.stderr)
        return 2
    if args.threads < 1 or args.repeats < 1 or args.rounds < 1 or min(ns) < 1:
        print("--threads, --repeats, --rounds and every --n must be >= 1",
              file=sys.stderr)
        return 2
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    # (engine, variant, n) -> one sample per round
    samples = {}
    with tempfile.TemporaryDirectory() as tmp:
        dirs = {}
        for variant in ("vanilla", "shaw"):
            dirs[variant] = os.path.join(tmp, variant)
            build_ct2_model(dirs[variant], variant == "shaw")
        for rnd in range(args.rounds):
            for n in ns:
                for variant in ("vanilla", "shaw"):
                    rel, ct = measure_pair(args, env, dirs[variant], variant,
                                           n)
                    samples.setdefault(("relpos", variant, n), []).append(rel)
                    samples.setdefault(("ctranslate2", variant, n),
                                       []).append(ct)
                    if not args.json:
                        print(f"round {rnd + 1}/{args.rounds} {variant:8s} "
                              f"n={n:5d}  relpos {rel['fwd_ms']:9.1f} ms | "
                              f"ctranslate2 {ct['fwd_ms']:9.1f} ms | relpos "
                              f"{ct['fwd_ms'] / rel['fwd_ms']:5.2f}x faster",
                              flush=True)
    rows = [summarise_engine(key, runs) for key, runs in samples.items()]
    summary = [summarise_n(samples, n) for n in ns]
    if args.json:
        print(json.dumps({"threads": args.threads, "repeats": args.repeats,
                          "rounds": args.rounds,
                          "ctranslate2_version": ctranslate2.__version__,
                          "d_model": D_MODEL, "heads": HEADS, "d_ff": D_FF,
                          "k": K, "rows": rows, "summary": summary}))
        return 0
    print(f"\nmedians over {args.rounds} interleaved round(s) [smallest, "
          "largest round]:")
    by = {(r["engine"], r["variant"], r["n"]): r for r in rows}
    for s in summary:
        n = s["n"]
        rel, ct = by[("relpos", "shaw", n)], by[("ctranslate2", "shaw", n)]
        print(f"n={n:5d}: shaw relpos {rel['fwd_ms']:9.1f} ms "
              f"{rel['peak_rss_bytes'] / 2**20:8.1f} MiB RSS "
              f"({rel['peak_bytes'] / 2**20:.1f} MiB computed), ctranslate2 "
              f"{ct['fwd_ms']:9.1f} ms {ct['peak_rss_bytes'] / 2**20:8.1f} "
              f"MiB RSS; relpos {spread(s['speedup_shaw'], '{:.2f}x')} "
              f"faster, {s['memory_ratio_shaw']:.3f} of the peak RSS; shaw "
              f"overhead relpos {spread(s['relpos_shaw_overhead_pct'], '{:+.1f}%')}"
              f", ctranslate2 "
              f"{spread(s['ctranslate2_shaw_overhead_pct'], '{:+.1f}%')}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

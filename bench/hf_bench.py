#!/usr/bin/env python3
"""Hugging Face models with and without relpos.hf.patch on the CPU: time and
peak memory of the forward (--backward: forward + backward) pass.

Variants: eager and sdpa (transformers' attn_implementation), each
unpatched and patched. Every variant of every round runs in a fresh
subprocess (--worker), in the order eager, eager+relpos, sdpa, sdpa+relpos
within a round, so that slow drift of a shared machine hits all of them
alike; the report gives per-variant median times and the median (min, max)
over rounds of each variant's time divided by the same round's unpatched
eager time.

Peak memory: the worker's ru_maxrss (resource.getrusage, the kernel's
high-water mark of the process's resident set) after the measured call,
minus its ru_maxrss just before it (after the model was built and a small
warm-up call ran). PyTorch's CPU allocator returns freed blocks to the C
allocator, and tracemalloc sees none of torch's allocations, so neither
samples of RSS nor tracemalloc measure a torch peak; a fresh process per
variant makes the high-water mark that variant's own. The figure is the
extra memory of the call (activations, attention scores or relpos's
scratch, masks), not the model's weights.

Random weights (nothing is downloaded):
  w2v-bert  Wav2Vec2-BERT encoder: 24 layers, d 1024, 16 heads, FFN 4096,
            relative_key 64 / 8; input features [1, n, 160]; n = frames
  t5        T5-base-sized encoder: 12 layers, d 768, 12 heads, d_kv 64,
            FFN 3072, 32 buckets up to 128
  llama     Llama-style decoder: 4 layers, d 2048, 16 heads, 4 kv heads
            (GQA), FFN 5632, vocabulary 1024 (irrelevant here)

Example (minutes per variant on 2 cores at these sizes):
  python bench/hf_bench.py --model w2v-bert --n 1500,3000 --rounds 3
  python bench/hf_bench.py --model llama --layers 1 --n 64 --rounds 1   # smoke
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import time

DEFAULT_N = {"w2v-bert": "1500,3000", "t5": "512,2048", "llama": "2048,8192"}
VARIANTS = (("eager", False), ("eager", True), ("sdpa", False),
            ("sdpa", True))


def variant_name(impl, patched):
    return impl + ("+relpos" if patched else "")


def build(model, impl, layers):
    import torch
    import transformers as T

    torch.manual_seed(0)
    if model == "w2v-bert":
        cfg = T.Wav2Vec2BertConfig(
            hidden_size=1024, num_hidden_layers=layers or 24,
            num_attention_heads=16, intermediate_size=4096,
            position_embeddings_type="relative_key",
            left_max_position_embeddings=64, right_max_position_embeddings=8,
            layerdrop=0.0, apply_spec_augment=False, attention_dropout=0.0,
            hidden_dropout=0.0, activation_dropout=0.0,
            feat_proj_dropout=0.0, conformer_conv_dropout=0.0,
            attn_implementation=impl)
        net = T.Wav2Vec2BertModel(cfg)

        def inputs(n):
            g = torch.Generator().manual_seed(1)
            return dict(input_features=torch.randn(1, n, 160, generator=g))
    elif model == "t5":
        cfg = T.T5Config(d_model=768, d_kv=64, d_ff=3072,
                         num_layers=layers or 12, num_heads=12,
                         relative_attention_num_buckets=32,
                         relative_attention_max_distance=128,
                         dropout_rate=0.0, vocab_size=1024,
                         attn_implementation=impl)
        net = T.T5EncoderModel(cfg)

        def inputs(n):
            g = torch.Generator().manual_seed(1)
            return dict(input_ids=torch.randint(2, 1024, (1, n),
                                                generator=g))
    elif model == "llama":
        cfg = T.LlamaConfig(hidden_size=2048, intermediate_size=5632,
                            num_hidden_layers=layers or 4,
                            num_attention_heads=16, num_key_value_heads=4,
                            vocab_size=1024, max_position_embeddings=16384,
                            attention_dropout=0.0, attn_implementation=impl)
        net = T.LlamaModel(cfg)

        def inputs(n):
            g = torch.Generator().manual_seed(1)
            return dict(input_ids=torch.randint(2, 1024, (1, n),
                                                generator=g), use_cache=False)
    else:
        raise SystemExit(f"hf_bench.py: unknown --model {model!r}")
    return net.float(), inputs


def worker(args):
    import resource

    import torch

    torch.set_num_threads(args.threads)
    net, inputs = build(args.model, args.impl, args.layers)
    if args.patched:
        import relpos.hf
        relpos.hf.patch(net)
    backward = args.backward
    net.train(backward)  # every dropout is 0: train only enables autograd

    def call(n):
        x = inputs(n)
        if backward:
            out = net(**x).last_hidden_state
            out.float().square().mean().backward()
            net.zero_grad(set_to_none=True)
        else:
            with torch.no_grad():
                net(**x)

    call(16)  # warm-up: libraries, thread pools, relpos's first call
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    t0 = time.perf_counter()
    call(args.n)
    seconds = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    print(json.dumps(dict(seconds=seconds,
                          peak_extra_bytes=max(after - before, 0) * 1024)))


def run_variant(args, n, impl, patched):
    cmd = [sys.executable, os.path.abspath(__file__), "--worker",
           "--model", args.model, "--n", str(n), "--impl", impl,
           "--threads", str(args.threads)]
    if args.layers:
        cmd += ["--layers", str(args.layers)]
    if patched:
        cmd.append("--patched")
    if args.backward:
        cmd.append("--backward")
    env = dict(os.environ, OMP_NUM_THREADS=str(args.threads))
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode:
        sys.stderr.write(p.stderr)
        raise SystemExit(f"hf_bench.py: {variant_name(impl, patched)} at n="
                         f"{n} failed (exit {p.returncode})")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--model", choices=sorted(DEFAULT_N), default="w2v-bert")
    ap.add_argument("--n", help="comma-separated sequence lengths (default: "
                    "the model's two sizes)")
    ap.add_argument("--layers", type=int, default=0,
                    help="layers (default: the model's full depth)")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--backward", action="store_true",
                    help="forward + backward instead of inference forward")
    ap.add_argument("--variants", default=",".join(
        variant_name(*v) for v in VARIANTS),
        help="which of eager, eager+relpos, sdpa, sdpa+relpos")
    ap.add_argument("--json", metavar="FILE", help="also write the results")
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", default="eager", help=argparse.SUPPRESS)
    ap.add_argument("--patched", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.n = int(args.n)
        return worker(args)

    sizes = [int(s) for s in (args.n or DEFAULT_N[args.model]).split(",")]
    wanted = args.variants.split(",")
    variants = [v for v in VARIANTS if variant_name(*v) in wanted]
    if not variants or len(variants) != len(wanted):
        raise SystemExit(f"hf_bench.py: --variants must name some of "
                         f"{', '.join(variant_name(*v) for v in VARIANTS)}")
    runs = {}  # (n, name) -> [result per round]
    for r in range(args.rounds):
        for n in sizes:
            for impl, patched in variants:
                res = run_variant(args, n, impl, patched)
                runs.setdefault((n, variant_name(impl, patched)), []) \
                    .append(res)
                print(f"round {r + 1}/{args.rounds} n={n} "
                      f"{variant_name(impl, patched)}: "
                      f"{res['seconds']:.3f} s, peak +"
                      f"{res['peak_extra_bytes'] / 2**20:.0f} MiB",
                      file=sys.stderr, flush=True)

    what = "forward+backward" if args.backward else "forward"
    print(f"{args.model}, layers {args.layers or 'full'}, {what}, "
          f"{args.threads} threads, {args.rounds} rounds (medians; ratio = "
          f"time / eager's in the same round, median [min, max])")
    print(f"{'n':>6} {'variant':<13} {'seconds':>9} {'ratio':>22} "
          f"{'peak MiB':>9}")
    rows = []
    for n in sizes:
        base = runs.get((n, "eager"))
        for impl, patched in variants:
            name = variant_name(impl, patched)
            res = runs[(n, name)]
            secs = [x["seconds"] for x in res]
            mem = statistics.median(x["peak_extra_bytes"] for x in res)
            row = dict(n=n, variant=name, seconds_median=statistics.median(
                secs), seconds=secs, peak_extra_bytes_median=mem)
            text = "-"
            if base is not None:
                ratios = [x["seconds"] / b["seconds"]
                          for x, b in zip(res, base)]
                row.update(ratio_median=statistics.median(ratios),
                           ratio_min=min(ratios), ratio_max=max(ratios))
                text = (f"{row['ratio_median']:.3f} [{row['ratio_min']:.3f}, "
                        f"{row['ratio_max']:.3f}]")
            rows.append(row)
            print(f"{n:>6} {name:<13} {row['seconds_median']:>9.3f} "
                  f"{text:>22} {mem / 2**20:>9.0f}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(dict(model=args.model, layers=args.layers or None,
                           backward=args.backward, threads=args.threads,
                           rounds=args.rounds, results=rows), f, indent=1)


if __name__ == "__main__":
    main()

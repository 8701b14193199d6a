#!/usr/bin/env python3
"""Times one training step (forward + backward) of relpos's transformer next
to the same model written the usual way in PyTorch eager.

Both sides run the architecture of docs/model.md on the same batch:
token embedding, pre-LayerNorm blocks (multi-head self-attention with Shaw et
al. relative positions on keys and values, exact-erf GELU feed-forward,
residuals), final LayerNorm, untied output head, mean cross-entropy over the
valid positions. The PyTorch attention is the gathered form
(tensor2tensor's `_relative_attention_inner`, Hugging Face's
"relative_key"): build idx[i, j] = clip(j - i, -k, k) + k, gather the tables
into [n, n, dh] tensors, einsum; padded keys are masked, decoders add the
causal mask.

relpos's side is `train_step_bench` (src/train/train_step_bench.cc) with the
model and the exact per-sequence lengths passed through RELPOS_BENCH_*
environment variables, so both time Transformer::ForwardBackward-equivalent
work on the same tokens. Neither side includes an optimizer step.

The PyTorch side takes the batch in two forms (--torch-batching):
  same-length  one forward per group of sequences of one length, no padding
               and no padding mask, each group's mean loss weighted by its
               share of the batch's tokens and summed, one backward (the
               whole batch's mean-loss gradient);
  padded       the whole batch padded to its longest sequence, padded keys
               masked, one forward and backward.
Which is faster depends on the machine and the PyTorch build (many small
calls against wasted padded work), so by default (`both`) every round times
both and the ratio is taken against the faster: the strongest eager form a
PyTorch user would pick there. relpos packs each sequence's valid positions
either way.

Models (--model):
  small  the issue's sequence-task model: 3 layers, d_model 64, 4 heads,
         FFN 256, vocabulary 6, k = 16, encoder, batch 64 with bucket_sort's
         lengths (input length uniform in 1..20, sequence = 2 x input),
         padded to the longest
  lm     a byte LM: 4 layers, d_model 256, 8 heads, FFN 1024, vocabulary 256,
         k = 16, decoder, batch --lm-batch of full 256-token windows

For every thread count the two sides alternate for --rounds rounds (each a
median of --repeats timed steps after warm-up); the report gives each side's
median over rounds and the median of the per-round ratios torch / relpos, the
figure to read on a shared machine.

--max-isa avx2 runs both sides as an AVX2 machine would, on a machine with
AVX-512: relpos's Highway kernels and oneDNN are capped at AVX2
(RELPOS_BENCH_MAX_ISA=avx2, ONEDNN_MAX_CPU_ISA=AVX2), and so are PyTorch's
own kernels, its oneDNN and its MKL (ATEN_CPU_CAPABILITY=avx2,
ONEDNN_MAX_CPU_ISA=AVX2, MKL_ENABLE_INSTRUCTIONS=AVX2). It is the same
instruction set as an AVX2 machine, not the same microarchitecture.

Exit status: 0 on success, and also 0 (message on stderr) when PyTorch is
not installed; 1 if relpos's benchmark fails. Debian: python3-torch, run with
/usr/bin/python3.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time


def model_config(name, lm_batch):
    if name == "small":
        rng = random.Random(1)
        lengths = [2 * rng.randint(1, 20) for _ in range(64)]
        return dict(vocab=6, d=64, heads=4, ff=256, layers=3, k=16,
                    decoder=False, lengths=lengths)
    if name == "lm":
        return dict(vocab=256, d=256, heads=8, ff=1024, layers=4, k=16,
                    decoder=True, lengths=[256] * lm_batch)
    raise SystemExit(f"--model must be small or lm (got {name!r})")


def build_torch(torch, cfg):
    nn = torch.nn
    F = torch.nn.functional
    d, H, k = cfg["d"], cfg["heads"], cfg["k"]
    dh = d // H

    class Block(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln1 = nn.LayerNorm(d)
            self.q = nn.Linear(d, d)
            self.k = nn.Linear(d, d)
            self.v = nn.Linear(d, d)
            self.o = nn.Linear(d, d)
            self.rel_k = nn.Parameter(torch.randn(2 * k + 1, dh) * 0.1)
            self.rel_v = nn.Parameter(torch.randn(2 * k + 1, dh) * 0.1)
            self.ln2 = nn.LayerNorm(d)
            self.ff_in = nn.Linear(d, cfg["ff"])
            self.ff_out = nn.Linear(cfg["ff"], d)

        def attention(self, x, mask, idx):
            B, N, _ = x.shape
            split = lambda t: t.view(B, N, H, dh).transpose(1, 2)
            q, kk, v = split(self.q(x)), split(self.k(x)), split(self.v(x))
            ak = self.rel_k[idx]  # [N, N, dh]
            av = self.rel_v[idx]
            s = (q @ kk.transpose(-1, -2) +
                 torch.einsum("bhid,ijd->bhij", q, ak)) * dh ** -0.5
            s = s.masked_fill(mask, float("-inf"))
            p = torch.softmax(s, dim=-1)
            o = p @ v + torch.einsum("bhij,ijd->bhid", p, av)
            return self.o(o.transpose(1, 2).reshape(B, N, d))

        def forward(self, x, mask, idx):
            h = x + self.attention(self.ln1(x), mask, idx)
            return h + self.ff_out(F.gelu(self.ff_in(self.ln2(h))))

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(cfg["vocab"], d)
            self.blocks = nn.ModuleList(Block() for _ in range(cfg["layers"]))
            self.lnf = nn.LayerNorm(d)
            self.head = nn.Linear(d, cfg["vocab"])

        def forward(self, tokens, targets, mask, idx):
            x = self.embed(tokens)
            for b in self.blocks:
                x = b(x, mask, idx)
            logits = self.head(self.lnf(x))
            return F.cross_entropy(logits.view(-1, cfg["vocab"]),
                                   targets.view(-1), ignore_index=-1)

    return Model()


def torch_batch(torch, cfg):
    lengths = cfg["lengths"]
    B, N, k = len(lengths), max(lengths), cfg["k"]
    g = torch.Generator().manual_seed(7)
    tokens = torch.randint(0, cfg["vocab"], (B, N), generator=g)
    targets = torch.randint(0, cfg["vocab"], (B, N), generator=g)
    pos = torch.arange(N)
    valid = pos[None, :] < torch.tensor(lengths)[:, None]  # [B, N]
    tokens = tokens.masked_fill(~valid, 0)
    targets = targets.masked_fill(~valid, -1)
    # mask[b, 0, i, j]: key j invisible to query i.
    mask = ~valid[:, None, None, :]
    if cfg["decoder"]:
        mask = mask | (pos[None, :] > pos[:, None])[None, None]
    idx = (pos[None, :] - pos[:, None]).clamp(-k, k) + k
    return tokens, targets, mask, idx


def torch_same_length_batches(torch, cfg):
    """[(batch, weight)]: one unpadded batch per distinct length, weighted by
    its share of the valid tokens."""
    k, total = cfg["k"], sum(cfg["lengths"])
    g = torch.Generator().manual_seed(7)
    out = []
    for n in sorted(set(cfg["lengths"])):
        count = cfg["lengths"].count(n)
        tokens = torch.randint(0, cfg["vocab"], (count, n), generator=g)
        targets = torch.randint(0, cfg["vocab"], (count, n), generator=g)
        pos = torch.arange(n)
        mask = torch.zeros(1, 1, n, n, dtype=torch.bool)
        if cfg["decoder"]:
            mask = (pos[None, :] > pos[:, None])[None, None]
        idx = (pos[None, :] - pos[:, None]).clamp(-k, k) + k
        out.append(((tokens, targets, mask, idx), count * n / total))
    return out


def time_torch(torch, model, batches, repeats, warmup):
    def step():
        model.zero_grad(set_to_none=True)
        sum(model(*batch) * weight for batch, weight in batches).backward()

    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        step()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def time_relpos(binary, cfg, threads, repeats):
    env = dict(os.environ)
    env.update({
        "OMP_NUM_THREADS": str(threads),
        "RELPOS_BENCH_VOCAB": str(cfg["vocab"]),
        "RELPOS_BENCH_D_MODEL": str(cfg["d"]),
        "RELPOS_BENCH_HEADS": str(cfg["heads"]),
        "RELPOS_BENCH_D_FF": str(cfg["ff"]),
        "RELPOS_BENCH_LAYERS": str(cfg["layers"]),
        "RELPOS_BENCH_K": str(cfg["k"]),
        "RELPOS_BENCH_DECODER": "1" if cfg["decoder"] else "0",
        "RELPOS_BENCH_LENGTHS": ",".join(map(str, cfg["lengths"])),
    })
    cmd = [binary, "--benchmark_filter=BM_TrainStep/relative",
           f"--benchmark_repetitions={repeats}",
           "--benchmark_format=json"]
    run = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if run.returncode != 0:
        sys.stderr.write(run.stderr)
        raise SystemExit(1)
    report = json.loads(run.stdout)
    runs = [b for b in report["benchmarks"]
            if b.get("run_type") == "iteration"]
    unit = {"ms": 1.0, "us": 1e-3, "ns": 1e-6}
    isa = (f"Highway {report['context'].get('hwy_target', '?')}, oneDNN "
           f"{report['context'].get('onednn_max_isa', '?')}")
    return statistics.median(b["real_time"] * unit[b["time_unit"]]
                             for b in runs), isa


def main(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--relpos-bench", required=True,
                    help="path to relpos's train_step_bench binary")
    ap.add_argument("--model", default="small", help="small or lm")
    ap.add_argument("--lm-batch", type=int, default=8)
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--torch-batching", default="both",
                    choices=["both", "same-length", "padded"])
    ap.add_argument("--max-isa", default="native", choices=["native", "avx2"],
                    help="cap both sides' instruction set (see above)")
    args = ap.parse_args(argv)
    if args.max_isa == "avx2":
        # Read once, when the libraries load: set before importing torch.
        os.environ.update({"RELPOS_BENCH_MAX_ISA": "avx2",
                           "ONEDNN_MAX_CPU_ISA": "AVX2",
                           "ATEN_CPU_CAPABILITY": "avx2",
                           "MKL_ENABLE_INSTRUCTIONS": "AVX2"})
    try:
        import torch
    except ImportError:
        sys.stderr.write("PyTorch is not installed; nothing to compare\n")
        return 0
    cfg = model_config(args.model, args.lm_batch)
    torch.manual_seed(0)
    model = build_torch(torch, cfg)
    forms = {}
    if args.torch_batching in ("both", "padded"):
        forms["padded"] = [(torch_batch(torch, cfg), 1.0)]
    if args.torch_batching in ("both", "same-length"):
        forms["same-length"] = torch_same_length_batches(torch, cfg)
    lengths = cfg["lengths"]
    print(f"model {args.model}: layers {cfg['layers']} d_model {cfg['d']} "
          f"heads {cfg['heads']} d_ff {cfg['ff']} vocab {cfg['vocab']} "
          f"k {cfg['k']} {'decoder' if cfg['decoder'] else 'encoder'}; "
          f"batch {len(lengths)} sequences, {sum(lengths)} valid tokens "
          f"(longest {max(lengths)}); torch {torch.__version__} "
          f"(CPU capability {torch.backends.cpu.get_cpu_capability()}); "
          f"--max-isa {args.max_isa}; PyTorch "
          + ", ".join(f"{name} ({len(b)} forward call(s) per step)"
                      for name, b in forms.items()))
    for threads in [int(t) for t in args.threads.split(",")]:
        torch.set_num_threads(threads)
        t_ms = {name: [] for name in forms}
        r_ms, ratios, best = [], [], []
        for _ in range(args.rounds):
            times = {name: time_torch(torch, model, b, args.repeats,
                                      args.warmup)
                     for name, b in forms.items()}
            r, isa = time_relpos(args.relpos_bench, cfg, threads,
                                 args.repeats)
            for name, t in times.items():
                t_ms[name].append(t)
            fastest = min(times, key=times.get)
            best.append(fastest)
            r_ms.append(r)
            ratios.append(times[fastest] / r)
        torch_part = "  ".join(f"torch {name} {statistics.median(v):8.2f} ms"
                               for name, v in t_ms.items())
        print(f"threads {threads}: {torch_part}  "
              f"relpos {statistics.median(r_ms):8.2f} ms  "
              f"torch (faster form) / relpos {statistics.median(ratios):5.2f}x  "
              f"(rounds: {', '.join(f'{x:.2f} {n}' for x, n in zip(ratios, best))}; "
              f"relpos: {isa})",
              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

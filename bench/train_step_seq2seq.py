#!/usr/bin/env python3
"""Training-step throughput of relpos's seq2seq model next to OpenNMT-py and
eole on the same translation model and the same batch.

The model is relpos's `train_step_bench` BM_Seq2seqTrainStep configuration:
pre-LayerNorm encoder-decoder, d_model 256, 4 heads, d_ff 1024 (GELU),
3 + 3 blocks, one shared vocabulary of 8000 with tied embeddings (encoder
input, decoder input, generator), Shaw et al. relative positions with
k = max_relative_positions = 16 in both self-attentions (none in
cross-attention, no absolute positions), dropout --dropout on embeddings and
sublayer outputs, no attention dropout, label smoothing 0.1, Adam (no weight
decay) with gradient-norm clipping at 5.

A training step is each toolkit's own: relpos's Transformer::ForwardBackward
+ GradNorm/ClipScale + AdamW::Step (RELPOS_BENCH_S2S_OPTIMIZER=1);
OpenNMT-py 3.5's model from `build_model` on parsed `onmt.opts`, its
`LossCompute.from_opts` criterion, token normalisation and
`Optimizer.from_opt` (zero_grad, forward, loss, backward, clip + Adam step)
as `Trainer._gradient_accumulation` does it; eole's model from
`get_model_class(...).build` on a `TransformerModelConfig`, its
`LossCompute.from_config` and `Optimizer.from_config`, the same sequence.

The batch: --pairs pairs, source lengths uniform in [4, 28] (seeded), target
lengths round(1.2 x source) as in train_step_bench; every toolkit gets the
same per-pair source and target lengths, padded to each side's longest.
Throughput counts source + target tokens (the valid ones) per second of wall
time.

Each (toolkit, threads) is timed --repeats times; within a repeat the
toolkits run one after the other (relpos, OpenNMT-py, eole, then the next
repeat: ABC ABC ...), so slow minutes of a shared machine hit all of them.
The PyTorch toolkits run in persistent worker processes (their own
virtual environments), warmed up with --warmup steps per repeat and timed
over --steps steps; relpos runs `train_step_bench` once per repeat with
--steps repetitions of one step after a warm-up step. A repeat's figure is
the median step time; the report gives each side's median over repeats and
the median (min-max) of the per-repeat ratios of throughput relpos / peer
(wall time), and of CPU time per step peer / relpos (process CPU time,
all threads: on a loaded machine the steadier figure at one thread).

Before timing, each worker prints what it built: the count of attention
modules with relative position tables (self-attention, encoder and decoder)
and without (cross-attention), the clipping distance, whether an absolute
position encoding is present, and the gradient norm of the relative tables
after one step (non-zero: the tables are in the computation).

Usage (the lead's timing run, on a quiet machine):
  python3 bench/train_step_seq2seq.py \\
      --relpos-bench build/release/src/train/train_step_bench
Exit status 0 on success, 1 when a side fails.
"""

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time

ONMT_PY = "/var/cache/relpos/venv-onmt/bin/python"
EOLE_PY = "/var/cache/relpos/venv-eole/bin/python"

MODEL = dict(d_model=256, heads=4, d_ff=1024, layers=3, vocab=8000, k=16,
             label_smoothing=0.1, clip=5.0)


def make_lengths(pairs, seed):
    rng = random.Random(seed)
    src = [4 + rng.randrange(25) for _ in range(pairs)]
    tgt = [(12 * s + 5) // 10 for s in src]
    return src, tgt


# ---------------------------------------------------------------- workers


def torch_batch(torch, src_len, tgt_len, vocab, pad, bos, eos, first_id):
    """Source [B, S, 1], target [B, T + 1, 1] (BOS y_1 .. y_t EOS-terminated,
    so the decoder input and the loss target both have t valid positions)."""
    g = torch.Generator().manual_seed(7)
    B, S, T = len(src_len), max(src_len), max(tgt_len)
    src = torch.full((B, S, 1), pad, dtype=torch.long)
    tgt = torch.full((B, T + 1, 1), pad, dtype=torch.long)
    for b, (s, t) in enumerate(zip(src_len, tgt_len)):
        src[b, :s, 0] = torch.randint(first_id, vocab, (s,), generator=g)
        tgt[b, 0, 0] = bos
        tgt[b, 1:t, 0] = torch.randint(first_id, vocab, (t - 1,), generator=g)
        tgt[b, t, 0] = eos
    return src, tgt, torch.tensor(src_len, dtype=torch.long)


def describe_attention(model, rel_attr, k_attr):
    """Counts the attention modules (those with a query projection) with and
    without relative position tables."""
    with_rel, without, ks = [], [], set()
    for name, m in model.named_modules():
        if hasattr(m, "linear_query"):
            if getattr(m, rel_attr, None) is not None:
                with_rel.append(name)
                ks.add(int(getattr(m, k_attr)))
            else:
                without.append(name)
    return dict(relative=len(with_rel), relative_names=with_rel[:2] +
                with_rel[-1:], plain=len(without), plain_names=without[:1],
                max_relative_positions=sorted(ks))


def rel_grad_norm(model, rel_attr):
    total = 0.0
    for m in model.modules():
        table = getattr(m, rel_attr, None)
        if table is not None and hasattr(table, "weight") and \
                table.weight.grad is not None:
            total += float(table.weight.grad.norm()) ** 2
    return total ** 0.5


def onmt_side(torch, args):
    import pyonmttok
    from collections import Counter
    import onmt.opts
    from onmt.constants import DefaultTokens
    from onmt.model_builder import build_model
    from onmt.utils.loss import LossCompute
    from onmt.utils.optimizers import Optimizer
    from onmt.utils.parse import ArgumentParser

    parser = ArgumentParser()
    onmt.opts.model_opts(parser)
    onmt.opts.distributed_opts(parser)
    onmt.opts._add_train_general_opts(parser)
    m = MODEL
    opt = parser.parse_known_args([
        "-data", "dummy", "-model_task", "seq2seq",
        "-encoder_type", "transformer", "-decoder_type", "transformer",
        "-enc_layers", str(m["layers"]), "-dec_layers", str(m["layers"]),
        "-hidden_size", str(m["d_model"]), "-word_vec_size", str(m["d_model"]),
        "-heads", str(m["heads"]), "-transformer_ff", str(m["d_ff"]),
        "-pos_ffn_activation_fn", "gelu", "-layer_norm", "standard",
        "-max_relative_positions", str(m["k"]),
        "-share_embeddings", "-share_decoder_embeddings",
        "-add_qkvbias", "-add_ffnbias",
        "-dropout", str(args.dropout), "-attention_dropout", "0",
        "-label_smoothing", str(m["label_smoothing"]),
        "-optim", "adam", "-adam_beta1", "0.9", "-adam_beta2", "0.98",
        "-max_grad_norm", str(m["clip"]), "-learning_rate", "1e-4",
        "-decay_method", "none", "-param_init", "0", "-param_init_glorot",
        "-normalization", "tokens",
    ])[0]
    ArgumentParser.update_model_opts(opt)
    ArgumentParser.validate_model_opts(opt)
    specials = [DefaultTokens.UNK, DefaultTokens.PAD, DefaultTokens.BOS,
                DefaultTokens.EOS]
    words = Counter({f"w{i}": 1 for i in range(m["vocab"] - len(specials))})
    vocab = pyonmttok.build_vocab_from_tokens(
        words, maximum_size=0, minimum_frequency=1, special_tokens=specials)
    assert len(vocab) == m["vocab"], len(vocab)
    vocabs = {"src": vocab, "tgt": vocab, "data_task": "seq2seq"}
    model = build_model(opt, opt, vocabs, None, 0)
    model.train()
    loss_fn = LossCompute.from_opts(opt, model, vocab)
    optim = Optimizer.from_opt(model, opt)
    src, tgt, src_len = torch_batch(
        torch, args.src, args.tgt, m["vocab"], vocab[DefaultTokens.PAD],
        vocab[DefaultTokens.BOS], vocab[DefaultTokens.EOS], len(specials))
    batch = {"src": src, "tgt": tgt, "srclen": src_len,
             "indices": torch.arange(len(args.src))}
    n_tokens = sum(args.tgt)

    def step():
        optim.zero_grad(set_to_none=True)
        out, attns = model(src, tgt, src_len, bptt=False, with_align=False)
        loss, _ = loss_fn(batch, out, attns, trunc_start=0,
                          trunc_size=tgt.size(1))
        optim.backward(loss / n_tokens)
        optim.step()

    info = describe_attention(model, "relative_positions_embeddings",
                              "max_relative_positions")
    info["absolute_positions"] = bool(
        model.encoder.embeddings.position_encoding or
        model.decoder.embeddings.position_encoding)
    info["tied_embeddings"] = (
        model.encoder.embeddings.word_lut.weight is
        model.decoder.embeddings.word_lut.weight is model.generator.weight)
    info["parameters"] = sum(p.numel() for p in model.parameters())
    optim.zero_grad(set_to_none=True)
    out, attns = model(src, tgt, src_len)
    loss, _ = loss_fn(batch, out, attns, trunc_start=0, trunc_size=tgt.size(1))
    (loss / n_tokens).backward()
    info["relative_grad_norm"] = rel_grad_norm(
        model, "relative_positions_embeddings")
    info["version"] = f"OpenNMT-py {onmt.__version__}, torch {torch.__version__}"
    return step, info


def eole_side(torch, args):
    import tempfile
    import eole
    from eole.config.models import TransformerModelConfig
    from eole.config.run import TrainConfig
    from eole.inputters.inputter import build_vocab
    from eole.models.model import get_model_class
    from eole.utils.loss import LossCompute
    from eole.utils.optimizers import Optimizer

    m = MODEL
    tmp = tempfile.TemporaryDirectory()
    vocab_file = os.path.join(tmp.name, "vocab.txt")
    data_file = os.path.join(tmp.name, "data.txt")
    with open(data_file, "w") as f:
        f.write("w0 w1\n")
    with open(vocab_file, "w") as f:  # eole adds its 4 specials in front
        f.writelines(f"w{i}\t1\n" for i in range(m["vocab"] - 4))
    config = TrainConfig(
        data={"bench": {"path_src": data_file, "path_tgt": data_file}},
        src_vocab=vocab_file, share_vocab=True, vocab_size_multiple=1,
        src_vocab_size=m["vocab"], tgt_vocab_size=m["vocab"],
        model=TransformerModelConfig(
            layers=m["layers"], hidden_size=m["d_model"], heads=m["heads"],
            transformer_ff=m["d_ff"], mlp_activation_fn="gelu",
            layer_norm="standard", norm_eps=1e-5,
            embeddings={"word_vec_size": m["d_model"],
                        "position_encoding_type": "Relative",
                        "n_positions": m["k"]},
            add_qkvbias=True, add_ffnbias=True, add_final_linear_bias=True,
            share_embeddings=True, share_decoder_embeddings=True,
            generator_bias=True),
        training={
            "dropout": [args.dropout], "attention_dropout": [0.0],
            "label_smoothing": m["label_smoothing"], "optim": "adam",
            "adam_beta1": 0.9, "adam_beta2": 0.98,
            "max_grad_norm": m["clip"], "learning_rate": 1e-4,
            "decay_method": "none", "param_init": 0.0,
            "param_init_method": "xavier_uniform", "normalization": "tokens",
            "self_attn_backend": "pytorch", "compute_dtype": "fp32",
            "world_size": 1, "gpu_ranks": []})
    vocabs = build_vocab(config, {"src": [], "tgt": []})
    assert len(vocabs["src"]) == m["vocab"], len(vocabs["src"])
    model = get_model_class(config.model).for_training(
        config.model, vocabs, config.training, device_id=0)
    model.train()
    loss_fn = LossCompute.from_config(config, model, vocabs)
    optim = Optimizer.from_config(model, config)
    spec = vocabs["specials"]
    voc = vocabs["src"]
    src, tgt, src_len = torch_batch(
        torch, args.src, args.tgt, m["vocab"], voc[spec["pad_token"]],
        voc[spec["bos_token"]], voc[spec["eos_token"]], 4)
    src, tgt = src[:, :, 0], tgt[:, :, 0]
    batch = {"src": src, "tgt": tgt, "srclen": src_len,
             "indices": torch.arange(len(args.src)), "images": None,
             "prefix_len": None, "cid": ["bench"] * len(args.src),
             "cid_line_number": list(range(len(args.src)))}
    n_tokens = sum(args.tgt)

    def forward_loss():
        out = model(src, tgt, src_len, with_align=False, images=None,
                    prefix_len=None)
        model_out, attns, estim = out
        loss, _, _ = loss_fn(batch, model_out, attns, estim=estim,
                             mtp_outputs=getattr(out, "mtp_outputs", None))
        return loss / n_tokens

    def step():
        optim.zero_grad(set_to_none=True)
        optim.backward(forward_loss())
        optim.step()

    info = describe_attention(model, "relative_positions_embeddings",
                              "n_positions")
    info["absolute_positions"] = any(
        getattr(e, "position_encoding_type", None) not in
        (None, "Relative") for e in (model.src_emb, model.tgt_emb))
    info["tied_embeddings"] = (
        model.src_emb.embeddings.weight is model.tgt_emb.embeddings.weight
        is model.generator.weight)
    info["parameters"] = sum(p.numel() for p in model.parameters())
    optim.zero_grad(set_to_none=True)
    forward_loss().backward()
    info["relative_grad_norm"] = rel_grad_norm(
        model, "relative_positions_embeddings")
    info["version"] = f"eole {eole.__version__}, torch {torch.__version__}"
    step.keep = tmp
    return step, info


def worker(args):
    import torch
    torch.manual_seed(1)
    step, info = (onmt_side if args.worker == "onmt" else eole_side)(torch, args)
    print(json.dumps({"ready": info}), flush=True)
    for line in sys.stdin:
        threads, warmup, steps = (int(x) for x in line.split())
        torch.set_num_threads(threads)
        for _ in range(warmup):
            step()
        times, cpu = [], []
        for _ in range(steps):
            t0, c0 = time.perf_counter(), time.process_time()
            step()
            times.append(time.perf_counter() - t0)
            cpu.append(time.process_time() - c0)
        print(json.dumps({"times": times, "cpu": cpu}), flush=True)


# ---------------------------------------------------------------- driver


class Peer:
    def __init__(self, name, python, args):
        cmd = [python, os.path.abspath(__file__), "--worker", name,
               "--src", ",".join(map(str, args.src)),
               "--tgt", ",".join(map(str, args.tgt)),
               "--dropout", str(args.dropout)]
        env = dict(os.environ, PYTHONWARNINGS="ignore")
        self.name = name
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True,
                                     env=env)
        self.info = self._read()["ready"]

    def _read(self):
        for line in self.proc.stdout:
            if line.startswith("{"):
                return json.loads(line)
        raise SystemExit(f"{self.name} worker exited "
                         f"(status {self.proc.wait()})")

    def run(self, threads, warmup, steps):
        self.proc.stdin.write(f"{threads} {warmup} {steps}\n")
        self.proc.stdin.flush()
        out = self._read()
        return out["times"], out["cpu"]

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def run_relpos(binary, args, threads, steps):
    env = dict(os.environ, OMP_NUM_THREADS=str(threads),
               RELPOS_BENCH_S2S_OPTIMIZER="1",
               RELPOS_BENCH_DROPOUT=str(args.dropout),
               RELPOS_BENCH_S2S_SOURCE_LENGTHS=",".join(map(str, args.src)),
               RELPOS_BENCH_S2S_TARGET_LENGTHS=",".join(map(str, args.tgt)))
    out = subprocess.run(
        [binary, "--benchmark_filter=BM_Seq2seqTrainStep/seq2seq_shaw/",
         "--benchmark_min_time=0.000001",
         f"--benchmark_repetitions={steps}", "--benchmark_format=json"],
        env=env, capture_output=True, text=True)
    if out.returncode != 0:
        raise SystemExit(f"train_step_bench failed: {out.stderr.strip()}")
    runs = [b for b in json.loads(out.stdout)["benchmarks"]
            if b.get("run_type") == "iteration"]
    if len(runs) != steps:
        raise SystemExit("train_step_bench: no BM_Seq2seqTrainStep runs")
    if runs[0]["tokens"] != sum(args.src) + sum(args.tgt) or \
            runs[0]["threads"] != threads:
        raise SystemExit(f"train_step_bench ran {runs[0]['tokens']:.0f} "
                         f"tokens on {runs[0]['threads']:.0f} threads")
    args.relpos_parameters = int(runs[0]["parameters"])
    return ([b["real_time"] / 1e3 for b in runs],  # ms -> s
            [b["cpu_time"] / 1e3 for b in runs])


def spread(values):
    return (f"{statistics.median(values):.2f} "
            f"({min(values):.2f}-{max(values):.2f})")


def driver(args):
    args.src, args.tgt = make_lengths(args.pairs, args.seed)
    tokens = sum(args.src) + sum(args.tgt)
    print(f"batch: {args.pairs} pairs, source {sum(args.src)} + target "
          f"{sum(args.tgt)} = {tokens} tokens (padded {max(args.src)} / "
          f"{max(args.tgt)}), dropout {args.dropout}", flush=True)
    peers = []
    for name, python in (("onmt", args.onmt_python),
                         ("eole", args.eole_python)):
        if name in args.sides:
            peers.append(Peer(name, python, args))
            print(f"{name}: {json.dumps(peers[-1].info)}", flush=True)
    ok = True
    for threads in args.threads:
        rows = {n: [] for n in ["relpos"] + [p.name for p in peers]}
        cpu = {n: [] for n in rows}

        def add(name, times):
            rows[name].append(statistics.median(times[0]))
            cpu[name].append(statistics.median(times[1]))

        for r in range(args.repeats):
            add("relpos",
                run_relpos(args.relpos_bench, args, threads, args.steps))
            for p in peers:
                add(p.name, p.run(threads, args.warmup, args.steps))
            print(f"threads {threads} repeat {r + 1}: " + ", ".join(
                f"{n} {v[-1] * 1e3:.0f} ms (CPU {cpu[n][-1] * 1e3:.0f} ms)"
                for n, v in rows.items()), flush=True)
        print(f"threads {threads}: tokens/s (median over {args.repeats} "
              f"repeats; relpos {args.relpos_parameters} parameters)")
        for n, v in rows.items():
            print(f"  {n:7s} {tokens / statistics.median(v):9.0f}")
        for p in peers:
            ratios = [a / b for a, b in zip(rows[p.name], rows["relpos"])]
            print(f"  relpos / {p.name} throughput: {spread(ratios)}")
            cpu_ratios = [a / b for a, b in zip(cpu[p.name], cpu["relpos"])]
            print(f"  {p.name} / relpos CPU time per step: "
                  f"{spread(cpu_ratios)}")
            ok = ok and min(ratios) > 0
    for p in peers:
        p.close()
    return 0 if ok else 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--relpos-bench",
                    default="build/release/src/train/train_step_bench")
    ap.add_argument("--onmt-python", default=ONMT_PY)
    ap.add_argument("--eole-python", default=EOLE_PY)
    ap.add_argument("--sides", default="onmt,eole",
                    help="peers to run next to relpos (comma-separated)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--warmup", type=int, default=1)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--pairs", type=int, default=112)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--dropout", type=float, default=0.1)
    ap.add_argument("--worker", choices=["onmt", "eole"], help=argparse.SUPPRESS)
    ap.add_argument("--src", help=argparse.SUPPRESS)
    ap.add_argument("--tgt", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.worker:
        args.src = [int(x) for x in args.src.split(",")]
        args.tgt = [int(x) for x in args.tgt.split(",")]
        return worker(args)
    args.sides = [s for s in args.sides.split(",") if s]
    args.threads = [int(t) for t in args.threads.split(",")]
    return driver(args)


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Translation throughput: relpos's Translator vs CTranslate2's Translator on
the same exported model, the same sentences, the same threads, in float32
and in the quantized compute types (--compute-types).

The checkpoint (task translate, a seq2seq model with its SentencePiece
vocabulary) is exported with relpos.ctranslate2.export (float32, and once
per quantized CTranslate2 variant); the sentences are the first
--sentences sources of the held-out split of the checkpoint's own corpus
(relpos.translate.load_parallel_text with the checkpoint's corpus_path and
languages), their targets the references.

- relpos: relpos.translate.Translator(CHECKPOINT, compute_type=C), then
  one .translate(lines, beam_size=B, length_penalty="none",
  max_length_ratio=R, max_length=M, threads=T, max_batch_size=S) call,
  text in and text out (its SentencePiece encoding and decoding are inside
  the timing): it sorts by source length and cuts batches of S as
  CTranslate2 does, and its T threads take the batches in turn. C "int8" is
  `relpos translate --compute-type int8`'s decoding (the decoder's linear
  layers with int8 weights, quantized at load, their float32 weights
  freed: the model a deployment holds, as CTranslate2 loads its int8
  export).
- CTranslate2: one ctranslate2.Translator(EXPORT, device="cpu",
  compute_type=C, inter_threads=T, intra_threads=1)
  .translate_batch(pieces, beam_size=B, length_penalty=0,
  min_decoding_length=0, max_decoding_length=M, max_batch_size=S) call on
  all the pieces relpos's vocabulary gives (encoding outside the timing):
  the strongest form found here. translate_batch sorts by length and splits
  into batches of S itself, which beat calling it batch by batch (1.0 s
  against 1.4 s for 64 sentences, greedy, one thread), and with T threads
  it runs T batches at once (inter_threads), which beat intra_threads = T
  by 20x on this 2-core machine (0.43-0.52 s against 8.6-10.7 s for the
  same 64 sentences at T = 2: intra-op threads make it 7x slower than one
  thread here).

--compute-types picks the variants, in the same run: `relpos:float32`,
`relpos:int8`, `ct2:float32`, `ct2:int8_float32`, `ct2:int8`; a bare type
means every side that has it (`float32` both, `int8` both, `int8_float32`
CTranslate2 only); default `float32` (relpos and CTranslate2 in float32, as
before). A quantized CTranslate2 variant runs as a CTranslate2 user deploys
it: exported with relpos.ctranslate2.export(quantization=Q) (what
`ct2-*-converter --quantization Q` writes: int8 weights with per-row
scales) and loaded with compute_type=Q; loading the float32 export with
compute_type=Q would quantize on load after reading the float32 weights.
On a CPU CTranslate2 resolves `int8` to its `int8_float32` (the two exports
are the same file); the table shows the type CTranslate2 reports.

Both rank hypotheses by plain log-probability and take up to M pieces; relpos
also stops at ceil(R x source pieces) (R = --max-len-ratio, large by default
so that it rarely binds). Both sides decode batches of --batch-size
sentences of similar source length. Outputs are compared piece by piece:
`equal` counts relpos float32 translations equal to CTranslate2 float32's
(they agree exactly unless two candidates tie to float32 precision or
relpos's ratio bound cut a sentence); each variant's share of translations
equal to the float model's (relpos float32's, or CTranslate2 float32's when
relpos float32 is not run), and its BLEU and chrF against the references
(sacrebleu's corpus_bleu / corpus_chrf, defaults; relpos.translate's own,
which compute the same, if sacrebleu is missing), all on detokenised text
(CTranslate2's pieces decoded by the same SentencePiece model).

Timing: --rounds rounds; in each, for every (threads, beam), every variant
translates all sentences in turn (relpos's first, in the order given), so
load that comes and goes slows all variants of a round alike. Each run is
a Python process of its own that loads its model, translates the first
--batch-size sentences once untimed (warm-up), then times the call on all
of them; its peak resident memory (ru_maxrss, reported by a small parent
process) is the variant's peak, model and Python included. Throughput is
sentences and target pieces per second; a ratio (relpos float32 /
CTranslate2 float32, relpos int8 / CTranslate2 int8_float32, relpos int8 /
CTranslate2 int8, relpos int8 / relpos float32, for the variants present)
is the median of the same-round ratios of speed, with their smallest and
largest.

    /var/cache/relpos/pypi-venv/bin/python bench/translate_ctranslate2.py \\
        CHECKPOINT [--sentences 512] [--threads 1,2] [--beams 1,4] \\
        [--batch-size 16] [--rounds 3] \\
        [--compute-types float32,int8,int8_float32] [--json]

Needs ctranslate2 and sentencepiece (scripts/test-pypi.sh's environment has
both, and sacrebleu) and relpos's Python package. Exit status 0; 2 on bad
usage or a missing dependency; 1 if a run failed.
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

import ct2_variants as cv


def _load(checkpoint, sentences):
    from relpos import _relpos_ext as ext
    from relpos import translate as rt

    model = ext.Model.load(checkpoint)
    cfg = json.loads(model.config_json())
    train = cfg["train"]
    if train.get("task") != "translate":
        raise SystemExit(f"{checkpoint}: not a checkpoint of task translate")
    corpus = rt.load_parallel_text(
        train.get("corpus_path") or "/usr/share/locale", train["src_lang"],
        train["tgt_lang"])
    tr = rt.Translator(checkpoint)
    pairs = [(s, t) for s, t, _ in corpus["test"]
             if len(tr.encode(s)) <= tr.max_source_tokens][:sentences]
    return tr, cfg, model.bos_eos(), pairs


# relpos's side of one (threads, beam, compute type), in a Python process of
# its own under cv.PEAK_OF_CHILD: the lines on stdin, the seconds of the
# translate call and the tokens on stdout.
_RELPOS_CHILD = r"""
import json, sys, time
from relpos import translate as rt
checkpoint, compute_type = sys.argv[1], sys.argv[2]
beam, threads, batch, max_length = map(int, sys.argv[3:7])
ratio = float(sys.argv[7])
lines = json.loads(sys.stdin.read())
tr = rt.Translator(checkpoint, compute_type=compute_type)
def run(x):
    return tr.translate(x, beam_size=beam, length_penalty="none",
                        max_length_ratio=ratio, max_length=max_length,
                        threads=threads, max_batch_size=batch)
run(lines[:batch])  # warm-up
t = time.perf_counter()
out = run(lines)
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds, "tokens": [x.tokens for x in out],
                  "compute_type": compute_type}))
"""

# CTranslate2's side, likewise: the pieces on stdin, the hypotheses' pieces
# and the compute type CTranslate2 resolved on stdout.
_CT2_CHILD = r"""
import json, sys, time
import ctranslate2
export, compute_type = sys.argv[1], sys.argv[2]
beam, threads, batch, max_length = map(int, sys.argv[3:7])
pieces = json.loads(sys.stdin.read())
tr = ctranslate2.Translator(export, device="cpu", compute_type=compute_type,
                            inter_threads=threads, intra_threads=1)
def run(x):
    return tr.translate_batch(x, beam_size=beam, length_penalty=0,
                              min_decoding_length=0,
                              max_decoding_length=max_length,
                              max_batch_size=batch)
run(pieces[:batch])  # warm-up
t = time.perf_counter()
res = run(pieces)
seconds = time.perf_counter() - t
print(json.dumps({"seconds": seconds,
                  "pieces": [r.hypotheses[0] for r in res],
                  "compute_type": tr.compute_type}))
"""


def _child(script, argv, stdin_value, what, side):
    r = subprocess.run(
        [sys.executable, "-c", cv.PEAK_OF_CHILD, sys.executable, "-c",
         script] + [str(a) for a in argv],
        input=json.dumps(stdin_value), capture_output=True, text=True,
        env=cv.env(side))
    if r.returncode != 0:
        raise RuntimeError(f"{what} failed: {r.stderr.strip()}")
    out = json.loads(r.stdout)
    out["peak_mib"] = cv.peak_mib(r.stderr)
    return out


def _run_variant(variant, args, inputs, beam, threads):
    side, kind = variant
    common = [beam, threads, args.batch_size, args.max_length]
    if side != "ct2":
        return _child(_RELPOS_CHILD, [args.checkpoint, kind] + common +
                      [args.max_len_ratio], inputs["lines"], cv.name(variant),
                      side)
    out = _child(_CT2_CHILD, [inputs["exports"][kind], kind] + common,
                 inputs["pieces"], cv.name(variant), side)
    out["tokens"] = [[inputs["ids"][p] for p in h] for h in out["pieces"]]
    return out


def _metrics():
    """(bleu, chrf): corpus scores of (hypotheses, references)."""
    try:
        import sacrebleu
        return (lambda h, r: sacrebleu.corpus_bleu(h, [r]).score,
                lambda h, r: sacrebleu.corpus_chrf(h, [r]).score)
    except ImportError:
        from relpos import translate as rt
        return (lambda h, r: rt.bleu(h, r).score, rt.chrf)


def _round(variants, reference, args, inputs, beam, threads):
    """Every variant once -> {variant: run}, plus "equal" (relpos float32
    vs CTranslate2 float32, None unless both run) and each run's "same"
    (translations equal to the reference's, None without one)."""
    runs = {v: _run_variant(v, args, inputs, beam, threads) for v in variants}
    ref = runs[reference]["tokens"] if reference else None
    for x in runs.values():
        x["same"] = (None if ref is None else
                     sum(a == b for a, b in zip(x["tokens"], ref)))
    fr, fc = ("relpos", "float32"), ("ct2", "float32")
    runs["equal"] = (sum(a == b for a, b in zip(runs[fr]["tokens"],
                                                runs[fc]["tokens"]))
                     if fr in runs and fc in runs else None)
    return runs


def _summary(threads, beam, rounds, variants, inputs, scores):
    n = len(inputs["lines"])
    row = {"threads": threads, "beam": beam, "sentences": n, "variants": {},
           "ratios": cv.ratios(rounds, variants)}
    bleu, chrf = scores
    for v in variants:
        seconds = statistics.median(r[v]["seconds"] for r in rounds)
        first = rounds[0][v]
        texts = [inputs["decode"](t) for t in first["tokens"]]
        row["variants"][cv.key(v)] = {
            "seconds": seconds, "sentences_per_s": n / seconds,
            "pieces_per_s": sum(len(t) for t in first["tokens"]) / seconds,
            "peak_mib": max(r[v]["peak_mib"] for r in rounds),
            "compute_type": first["compute_type"],
            "equal_to_float_share": (None if first["same"] is None else
                                     first["same"] / n),
            "bleu": bleu(texts, inputs["references"]),
            "chrf": chrf(texts, inputs["references"])}
    fr, fc = "relpos:float32", "ct2:float32"
    if fr in row["variants"] and fc in row["variants"]:
        # The keys of the float32-only report, kept for its readers.
        mine, theirs = row["variants"][fr], row["variants"][fc]
        ratio = row["ratios"][f"{fr}/{fc}"]
        row.update({
            "relpos_seconds": mine["seconds"],
            "ct2_seconds": theirs["seconds"],
            "relpos_sentences_per_s": mine["sentences_per_s"],
            "ct2_sentences_per_s": theirs["sentences_per_s"],
            "relpos_pieces_per_s": mine["pieces_per_s"],
            "ct2_pieces_per_s": theirs["pieces_per_s"],
            "speed_ratio_median": ratio["median"],
            "speed_ratio_min": ratio["min"], "speed_ratio_max": ratio["max"],
            "equal": rounds[0]["equal"]})
    return row


def _print_row(row, variants, reference):
    n = row["sentences"]
    print(f"\nthreads {row['threads']}, beam {row['beam']}, {n} sentences")
    print(f"  {'variant':<38} {'sent/s':>8} {'pieces/s':>9} {'peak MiB':>9}"
          f" {'BLEU':>6} {'chrF':>6}  = float")
    for v in variants:
        x = row["variants"][cv.key(v)]
        label = cv.label(v, x["compute_type"])
        share = cv.share_text(v, reference, x["equal_to_float_share"], 1)
        print(f"  {label:<38} {x['sentences_per_s']:8.1f} "
              f"{x['pieces_per_s']:9.0f} {x['peak_mib']:9.1f} "
              f"{x['bleu']:6.2f} {x['chrf']:6.2f}  {share}")
    cv.print_ratios(row["ratios"])
    if "equal" in row:
        print(f"  relpos float32 = CTranslate2 float32: {row['equal']}/{n}")


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint", help="a checkpoint folder of task translate")
    p.add_argument("--sentences", type=int, default=512)
    p.add_argument("--threads", default="1,2")
    p.add_argument("--beams", default="1,4")
    p.add_argument("--batch-size", type=int, default=16)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--max-len-ratio", type=float, default=8.0)
    p.add_argument("--max-length", type=int, default=256)
    p.add_argument("--compute-types", default="float32", help=cv.HELP)
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    try:
        threads = [int(x) for x in args.threads.split(",")]
        beams = [int(x) for x in args.beams.split(",")]
    except ValueError:
        p.error("--threads and --beams take comma-separated integers")
    try:
        variants = cv.parse(args.compute_types)
    except ValueError as e:
        p.error(str(e))
    if (min(threads + beams) < 1 or args.sentences < 1 or args.rounds < 1
            or args.batch_size < 1):
        p.error("--threads, --beams, --sentences, --rounds and --batch-size "
                "must be >= 1")
    try:
        import ctranslate2
        from relpos import ctranslate2 as rc
    except ImportError as e:
        print(f"translate_ctranslate2: {e} (pip install ctranslate2 "
              "sentencepiece)", file=sys.stderr)
        return 2
    reference = cv.reference(variants)

    tr, cfg, (bos, eos), pairs = _load(args.checkpoint, args.sentences)
    mc = cfg["model"]
    vocab = rc.seq2seq_vocabulary(args.checkpoint, mc["vocab_size"], bos, eos)
    tokens = vocab["tokens"]
    lines = [s for s, _ in pairs]
    inputs = {"lines": lines, "references": [t for _, t in pairs],
              "ids": {t: i for i, t in enumerate(tokens)},
              "pieces": [[tokens[i] for i in tr.encode(s)] for s in lines],
              "decode": tr.decode, "exports": {}}
    source_pieces = sum(len(x) for x in inputs["pieces"])
    tmp = tempfile.mkdtemp(prefix="relpos-ct2-translate-")
    for side, kind in variants:
        if side == "ct2":
            inputs["exports"][kind] = rc.export(
                args.checkpoint, os.path.join(tmp, f"ct2-{kind}"),
                quantization=None if kind == "float32" else kind)
    dec = mc.get("decoder_layers", -1)
    print(f"model: {mc['position']} (k={mc.get('max_distance')}), d_model "
          f"{mc['d_model']}, {mc['layers']}+{dec if dec >= 0 else mc['layers']} "
          f"layers, vocabulary {mc['vocab_size']}; {len(lines)} held-out "
          f"sentences, {source_pieces} source pieces; batch {args.batch_size}; "
          f"CTranslate2 {ctranslate2.__version__}; "
          f"{', '.join(cv.name(v) for v in variants)}", flush=True)

    samples = {(t, b): [] for t in threads for b in beams}
    for r in range(args.rounds):
        for t in threads:
            for b in beams:
                try:
                    one = _round(variants, reference, args, inputs, b, t)
                except RuntimeError as e:
                    print(f"translate_ctranslate2: {e}", file=sys.stderr)
                    return 1
                samples[(t, b)].append(one)
                times = ", ".join(f"{cv.name(v)} {one[v]['seconds']:.3f} s"
                                  for v in variants)
                print(f"round {r + 1}: threads {t} beam {b}: {times}",
                      flush=True)

    scores = _metrics()
    report = [_summary(t, b, runs, variants, inputs, scores)
              for (t, b), runs in samples.items()]
    for row in report:
        _print_row(row, variants, reference)
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""Translation throughput: relpos's Translator vs CTranslate2's Translator on
the same exported model, the same sentences, the same threads.

The checkpoint (task translate, a seq2seq model with its SentencePiece
vocabulary) is exported with relpos.ctranslate2.export (float32); the
sentences are the first --sentences sources of the held-out split of the
checkpoint's own corpus (relpos.translate.load_parallel_text with the
checkpoint's corpus_path and languages).

- relpos: one relpos.translate.Translator(CHECKPOINT).translate(lines,
  beam_size=B, length_penalty="none", max_length_ratio=R,
  max_length=M, threads=T, max_batch_size=S) call, text in and text out
  (its SentencePiece encoding and decoding are inside the timing): it
  sorts by source length and cuts batches of S as CTranslate2 does, and
  its T threads take the batches in turn.
- CTranslate2: one ctranslate2.Translator(EXPORT, device="cpu",
  compute_type="float32", inter_threads=T, intra_threads=1)
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

Both rank hypotheses by plain log-probability and take up to M pieces; relpos
also stops at ceil(R x source pieces) (R = --max-len-ratio, large by default
so that it rarely binds). Both sides decode batches of --batch-size
sentences of similar source length. The outputs are compared piece by piece and the number of equal
translations is printed: they agree exactly unless two candidates tie to
float32 precision or relpos's ratio bound cut a sentence.

Timing: --rounds rounds; in each, for every (threads, beam), relpos then
CTranslate2 translate all sentences, so load that comes and goes slows both
sides of a round alike. Throughput is sentences and target pieces per
second; the ratio relpos / CTranslate2 is the median of the per-round
ratios of wall time, with their smallest and largest.

    /var/cache/relpos/pypi-venv/bin/python bench/translate_ctranslate2.py \\
        CHECKPOINT [--sentences 512] [--threads 1,2] [--beams 1,4] \\
        [--batch-size 16] [--rounds 3] [--json]

Needs ctranslate2 and sentencepiece (scripts/test-pypi.sh's environment has
both) and relpos's Python package. Exit status 0; 2 on bad usage or a
missing dependency.
"""

import argparse
import json
import os
import statistics
import sys
import tempfile
import time


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
    lines = [s for s, _, _ in corpus["test"]]
    tr = rt.Translator(checkpoint)
    lines = [s for s in lines if len(tr.encode(s)) <= tr.max_source_tokens]
    return tr, cfg, model.bos_eos(), lines[:sentences]


def _relpos(tr, lines, beam, threads, batch, ratio, max_length):
    start = time.perf_counter()
    out = tr.translate(lines, beam_size=beam, length_penalty="none",
                       max_length_ratio=ratio, max_length=max_length,
                       threads=threads, max_batch_size=batch)
    return time.perf_counter() - start, [t.tokens for t in out]


def _ct2(translator, pieces, ids, beam, batch, max_length):
    start = time.perf_counter()
    res = translator.translate_batch(
        pieces, beam_size=beam, length_penalty=0, min_decoding_length=0,
        max_decoding_length=max_length, max_batch_size=batch)
    seconds = time.perf_counter() - start
    return seconds, [[ids[p] for p in r.hypotheses[0]] for r in res]


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
    p.add_argument("--json", action="store_true")
    args = p.parse_args()
    try:
        threads = [int(x) for x in args.threads.split(",")]
        beams = [int(x) for x in args.beams.split(",")]
    except ValueError:
        p.error("--threads and --beams take comma-separated integers")
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

    tr, cfg, (bos, eos), lines = _load(args.checkpoint, args.sentences)
    mc = cfg["model"]
    vocab = rc.seq2seq_vocabulary(args.checkpoint, mc["vocab_size"], bos, eos)
    tokens = vocab["tokens"]
    ids = {t: i for i, t in enumerate(tokens)}
    pieces = [[tokens[i] for i in tr.encode(s)] for s in lines]
    source_pieces = sum(len(x) for x in pieces)
    tmp = tempfile.mkdtemp(prefix="relpos-ct2-translate-")
    export = rc.export(args.checkpoint, os.path.join(tmp, "ct2"))
    dec = mc.get("decoder_layers", -1)
    print(f"model: {mc['position']} (k={mc.get('max_distance')}), d_model "
          f"{mc['d_model']}, {mc['layers']}+{dec if dec >= 0 else mc['layers']} "
          f"layers, vocabulary {mc['vocab_size']}; {len(lines)} held-out "
          f"sentences, {source_pieces} source pieces; batch {args.batch_size}; "
          f"CTranslate2 {ctranslate2.__version__}", flush=True)

    translators = {t: ctranslate2.Translator(
        export, device="cpu", compute_type="float32", inter_threads=t,
        intra_threads=1) for t in threads}
    samples = {(t, b): [] for t in threads for b in beams}
    for r in range(args.rounds):
        for t in threads:
            for b in beams:
                rs, mine = _relpos(tr, lines, b, t, args.batch_size,
                                   args.max_len_ratio, args.max_length)
                cs, theirs = _ct2(translators[t], pieces, ids, b,
                                  args.batch_size, args.max_length)
                same = sum(m == c for m, c in zip(mine, theirs))
                samples[(t, b)].append({
                    "relpos_s": rs, "ct2_s": cs, "same": same,
                    "relpos_pieces": sum(len(m) for m in mine),
                    "ct2_pieces": sum(len(c) for c in theirs)})
                print(f"round {r + 1}: threads {t} beam {b}: relpos "
                      f"{rs:.3f} s, CTranslate2 {cs:.3f} s, {same}/"
                      f"{len(lines)} equal", flush=True)

    report = []
    print("\nthreads beam  relpos sent/s  CT2 sent/s  relpos pieces/s  "
          "CT2 pieces/s  relpos/CT2 speed (median, min-max)  equal")
    for (t, b), runs in samples.items():
        ratios = sorted(x["ct2_s"] / x["relpos_s"] for x in runs)
        rs = statistics.median(x["relpos_s"] for x in runs)
        cs = statistics.median(x["ct2_s"] for x in runs)
        row = {"threads": t, "beam": b, "sentences": len(lines),
               "relpos_seconds": rs, "ct2_seconds": cs,
               "relpos_sentences_per_s": len(lines) / rs,
               "ct2_sentences_per_s": len(lines) / cs,
               "relpos_pieces_per_s": runs[0]["relpos_pieces"] / rs,
               "ct2_pieces_per_s": runs[0]["ct2_pieces"] / cs,
               "speed_ratio_median": statistics.median(ratios),
               "speed_ratio_min": ratios[0], "speed_ratio_max": ratios[-1],
               "equal": runs[0]["same"]}
        report.append(row)
        print(f"{t:7d} {b:4d}  {row['relpos_sentences_per_s']:13.1f}  "
              f"{row['ct2_sentences_per_s']:10.1f}  "
              f"{row['relpos_pieces_per_s']:15.0f}  "
              f"{row['ct2_pieces_per_s']:12.0f}  "
              f"{row['speed_ratio_median']:.2f}x ({ratios[0]:.2f}-"
              f"{ratios[-1]:.2f})  {row['equal']}/{len(lines)}")
    if args.json:
        print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())

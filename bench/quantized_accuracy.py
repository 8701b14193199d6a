#!/usr/bin/env python3
"""What --compute-type int8 changes in a checkpoint's outputs, against the
same checkpoint in float32 (docs/generate.md, "Quantized inference").

- A byte LM (`relpos train --task lm`): --prompts prompts of --prompt-bytes
  bytes each, cut from a text the model never saw (default: the GPL-3 text
  Debian ships, its line breaks as spaces; prompt i starts at the first
  word at or after byte i * len(text) / N), each continued greedily by --new bytes with
  `relpos generate --batch FILE --temperature 0` in float32 and in int8.
  Reported: the share of prompts whose continuations are byte-identical,
  and the mean length of the common prefix. With --ctranslate2 (run with
  a Python that has ctranslate2 and relpos, e.g. scripts/test-pypi.sh's
  environment), the checkpoint is also exported with relpos.ctranslate2
  (float32, and quantization "int8") and CTranslate2's Generator
  continues the same prompts greedily (sampling_topk 1, min_length =
  max_length = --new) with each export: the same shares for CTranslate2
  int8 against relpos float32 and against CTranslate2 float32.
- A translation checkpoint (`--task translate`): `relpos eval --json` in
  float32 and in int8 (beam --beam on the held-out split): BLEU and chrF
  overall and per source-length bucket, and their differences.

    python3 bench/quantized_accuracy.py CHECKPOINT [--relpos PATH]
        [--prompts 200] [--prompt-bytes 16] [--new 64] [--text FILE]
        [--beam 4] [--threads 1] [--ctranslate2] [--json]

Exit status 0; 2 on bad usage; 1 if a relpos run failed.
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile


def _run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.stderr.write("quantized_accuracy: %s failed:\n%s" %
                         (" ".join(cmd), r.stderr))
        sys.exit(1)
    return r.stdout


def _prompts(path, count, size):
    with open(path, "rb") as f:
        text = f.read()
    # ASCII only: one byte, one token, and one line per prompt.
    text = bytes(b if 32 <= b < 127 else 32 for b in text)
    step = max(1, (len(text) - size) // count)
    out = []
    for i in range(count):
        # From the first word that starts at or after i * step.
        pos = i * step
        while pos < len(text) and (text[pos:pos + 1] == b" " or
                                   (pos > 0 and text[pos - 1:pos] != b" ")):
            pos += 1
        if pos + size > len(text):
            break
        out.append(text[pos:pos + size].decode("ascii"))
    return out


def _generate(relpos, ck, prompts_file, new, threads, compute_type):
    out = _run([relpos, "generate", ck, "--batch", prompts_file,
                "--batch-size", "64", "--max-new", str(new),
                "--temperature", "0", "--threads", str(threads),
                "--compute-type", compute_type, "--json"])
    return [json.loads(line)["text"] for line in out.splitlines()]


def _common_prefix(a, b):
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def _ct2_generate(checkpoint, prompts, new, threads, tmp):
    import ctranslate2
    from relpos import ctranslate2 as rc

    out = {}
    for quantization in (None, "int8"):
        export = os.path.join(tmp, "ct2-%s" % (quantization or "float32"))
        rc.export(checkpoint, export, quantization=quantization)
        gen = ctranslate2.Generator(export, device="cpu",
                                    compute_type=quantization or "float32",
                                    inter_threads=1, intra_threads=threads)
        starts = [["<%d>" % b for b in p.encode()] for p in prompts]
        res = gen.generate_batch(starts, max_length=new, min_length=new,
                                 sampling_topk=1,
                                 include_prompt_in_result=False)
        out[quantization or "float32"] = [
            bytes(int(t[1:-1]) for t in r.sequences[0]).decode(
                "utf-8", "replace") for r in res]
    return out


def _agreement(ref, other):
    same = sum(a == b for a, b in zip(ref, other))
    prefix = [_common_prefix(a, b) for a, b in zip(ref, other)]
    return {"identical": same, "identical_share": same / len(ref),
            "mean_common_prefix": sum(prefix) / len(prefix)}


def lm_accuracy(args):
    prompts = _prompts(args.text, args.prompts, args.prompt_bytes)
    with tempfile.TemporaryDirectory() as tmp:
        path = os.path.join(tmp, "prompts.txt")
        with open(path, "w") as f:
            f.write("\n".join(prompts) + "\n")
        ref = _generate(args.relpos, args.checkpoint, path, args.new,
                        args.threads, "float32")
        q = _generate(args.relpos, args.checkpoint, path, args.new,
                      args.threads, args.compute_type)
        ct2 = (_ct2_generate(args.checkpoint, prompts, args.new,
                             args.threads, tmp) if args.ctranslate2 else None)
    result = {"task": "lm", "compute_type": args.compute_type,
              "prompts": len(prompts),
              "prompt_bytes": args.prompt_bytes, "new_bytes": args.new}
    result.update(_agreement(ref, q))
    if ct2 is not None:
        # The text decoding of both sides replaces invalid UTF-8 alike.
        result["ctranslate2_float32_vs_relpos_float32"] = _agreement(
            ref, ct2["float32"])
        result["ctranslate2_int8_vs_relpos_float32"] = _agreement(
            ref, ct2["int8"])
        result["ctranslate2_int8_vs_ctranslate2_float32"] = _agreement(
            ct2["float32"], ct2["int8"])
    return result


def translate_accuracy(args):
    scores = {}
    for ct in ("float32", args.compute_type):
        out = _run([args.relpos, "eval", args.checkpoint, "--json",
                    "--beam", str(args.beam), "--threads", str(args.threads),
                    "--progress", "none", "--compute-type", ct])
        scores[ct] = json.loads(out)
    rows = []
    # "int8" in the keys is the quantized side, of args.compute_type.
    for f, q in zip(scores["float32"]["scores"],
                    scores[args.compute_type]["scores"]):
        rows.append({"bucket": f["bucket"], "sentences": f["sentences"],
                     "bleu_float32": f["bleu"], "bleu_int8": q["bleu"],
                     "chrf_float32": f["chrf"], "chrf_int8": q["chrf"]})
    return {"task": "translate", "compute_type": args.compute_type,
            "beam": args.beam,
            "sentences": scores["float32"]["sentences"], "buckets": rows}


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("checkpoint")
    p.add_argument("--relpos", default=os.path.join(
        os.path.dirname(__file__), "..", "build", "release", "bin", "relpos"))
    p.add_argument("--prompts", type=int, default=200)
    p.add_argument("--prompt-bytes", type=int, default=16)
    p.add_argument("--new", type=int, default=64)
    p.add_argument("--text", default="/usr/share/common-licenses/GPL-3")
    p.add_argument("--beam", type=int, default=4)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--ctranslate2", action="store_true",
                   help="lm: CTranslate2 float32 and int8 beside relpos")
    p.add_argument("--compute-type", default="int8",
                   choices=["int8", "int8_a8"],
                   help="relpos's quantized type against its float32 "
                   "(int8: 16-bit activations; int8_a8: 8-bit ones)")
    p.add_argument("--json", action="store_true")
    args = p.parse_args(argv)
    if min(args.prompts, args.prompt_bytes, args.new, args.beam,
           args.threads) < 1:
        p.error("--prompts, --prompt-bytes, --new, --beam and --threads "
                "must be >= 1")
    config_path = os.path.join(args.checkpoint, "config.json")
    if not os.path.isfile(config_path):
        p.error("%s holds no checkpoint (no config.json)" % args.checkpoint)
    with open(config_path) as f:
        task = json.load(f)["train"]["task"]
    if task == "lm":
        result = lm_accuracy(args)
    elif task == "translate":
        result = translate_accuracy(args)
    else:
        p.error("task %s: int8 applies to lm and translate checkpoints" % task)
    if args.json:
        print(json.dumps(result))
    elif task == "lm":
        print("%d prompts of %d bytes, %d greedy bytes each: %s = float32 "
              "on %d (%.1f%%), mean common prefix %.1f bytes" %
              (result["prompts"], result["prompt_bytes"], result["new_bytes"],
               args.compute_type,
               result["identical"], 100 * result["identical_share"],
               result["mean_common_prefix"]))
        for key in ("ctranslate2_float32_vs_relpos_float32",
                    "ctranslate2_int8_vs_relpos_float32",
                    "ctranslate2_int8_vs_ctranslate2_float32"):
            if key in result:
                r = result[key]
                print("  %s: %d identical (%.1f%%), mean common prefix "
                      "%.1f bytes" % (key.replace("_", " "), r["identical"],
                                      100 * r["identical_share"],
                                      r["mean_common_prefix"]))
    else:
        print("%d held-out sentences, beam %d" % (result["sentences"],
                                                 result["beam"]))
        print("%-20s %9s  %7s %7s %6s  %7s %7s %6s" %
              ("bucket", "sentences", "BLEU32", "BLEU8", "delta", "chrF32",
               "chrF8", "delta"))
        for r in result["buckets"]:
            print("%-20s %9d  %7.2f %7.2f %+6.2f  %7.2f %7.2f %+6.2f" %
                  (r["bucket"], r["sentences"], r["bleu_float32"],
                   r["bleu_int8"], r["bleu_int8"] - r["bleu_float32"],
                   r["chrf_float32"], r["chrf_int8"],
                   r["chrf_int8"] - r["chrf_float32"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())

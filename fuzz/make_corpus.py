#!/usr/bin/env python3
"""Writes the fuzzers' seed corpora (fuzz/corpus/<target>/).

Independent of the C++ code: the safetensors files are assembled here from
the format description (8-byte little-endian header length, JSON header,
data), the gettext .mo files from the GNU gettext manual's layout (28-byte
header, tables of (length, offset) pairs, NUL-terminated strings). Valid files and near-valid ones (one rule broken each) give libFuzzer
good starting points. Rerun after changing it: python3 fuzz/make_corpus.py
"""
import json
import os
import struct

HERE = os.path.dirname(os.path.abspath(__file__))


def safetensors(header, data, pad=True):
    text = json.dumps(header, separators=(",", ":")).encode()
    if pad:
        text += b" " * (-len(text) % 8)
    return struct.pack("<Q", len(text)) + text + data


def f32(*values):
    return struct.pack("<%df" % len(values), *values)


def entry(shape, begin, end, dtype="F32"):
    return {"dtype": dtype, "shape": shape, "data_offsets": [begin, end]}


def mo(entries, big_endian=False, revision=0):
    """A .mo file of (original, translation) byte strings, laid out as msgfmt
    does: header, sorted originals table, translations table, strings."""
    entries = sorted(entries)
    n, e = len(entries), ">" if big_endian else "<"
    originals, translations = 28, 28 + 8 * n
    offset = translations + 8 * n
    strings, tables = b"", ([], [])
    for side in (0, 1):
        for entry_ in entries:
            text = entry_[side]
            tables[side].append(struct.pack(e + "2I", len(text),
                                            offset + len(strings)))
            strings += text + b"\0"
    header = struct.pack(e + "7I", 0x950412DE, revision, n, originals,
                         translations, 0, offset)
    return header + b"".join(tables[0]) + b"".join(tables[1]) + strings


def mo_header(charset):
    return (b"", b"Language: de\nContent-Type: text/plain; charset=" + charset +
            b"\nPlural-Forms: nplurals=2; plural=(n != 1);\n")


PO = b"""# comment
msgid ""
msgstr ""
"Language: de\\n"
"Content-Type: text/plain; charset=UTF-8\\n"

#, fuzzy, c-format
msgid "Open %s\\n"
msgstr "%s \\303\\266ffnen\\n"

msgctxt "menu"
msgid "Quit"
msgstr "Beenden \\x41 \\"q\\""

msgid "%d file"
msgid_plural "%d files"
msgstr[0] "%d Datei"
msgstr[1] "%d Dateien"

#~ msgid "old"
#~ msgstr "alt"
"""


def catalogs():
    cat = "catalog"
    base = [mo_header(b"UTF-8"), (b"File", b"Datei"),
            (b"Open %s", "%s öffnen".encode()), (b"menu\x04Quit", b"Beenden"),
            (b"%d file\x00%d files", b"%d Datei\x00%d Dateien")]
    good = mo(base)
    write(cat, "valid_le.mo", good)
    write(cat, "valid_be.mo", mo(base, big_endian=True))
    write(cat, "valid_rev1.mo", mo(base, revision=1))
    write(cat, "valid_latin1.mo", mo([mo_header(b"ISO-8859-1"),
                                      (b"Open file", "Datei öffnen".encode("latin-1"))]))
    write(cat, "valid_empty.mo", mo([]))
    write(cat, "valid.po", PO)
    write(cat, "bad_utf8.mo", mo([mo_header(b"UTF-8"), (b"x", b"\xff\xfe")]))
    write(cat, "bad_count.mo", good[:8] + struct.pack("<I", 0xFFFFFFFF) + good[12:])
    write(cat, "bad_truncated.mo", good[:60])
    write(cat, "bad_unterminated.po", b'msgid "a\nmsgstr "b"\n')


def signals():
    # The layout fuzz/signal_fuzzer.cc fixes: rel_k of 5 rows, one head;
    # t5_bias of 3 rows, 2 heads; the checkpoint's step 7.
    def doc(**over):
        d = {"format": "relpos-signal", "version": 1, "step": 7,
             "first_step": 2, "steps": 5,
             "tables": [
                 {"parameter": "blocks.0.attn.rel_k", "heads": 1, "rows": 5,
                  "pair_count": [0, 3, 9, 3, 0],
                  "signal": [0.0, 0.25, 1.5, 0.125, 0.0],
                  "signal_per_head": []},
                 {"parameter": "blocks.1.attn.t5_bias", "heads": 2,
                  "rows": 3, "pair_count": [4, 8, 4],
                  "signal": [1.0, 2.0, 3.0],
                  "signal_per_head": [[0.5, 1.0, 1.5], [0.5, 1.0, 1.5]]}]}
        d.update(over)
        return json.dumps(d)
    sig = "signal"
    write(sig, "valid.json", doc())
    write(sig, "bad_step.json", doc(step=8))
    write(sig, "bad_steps.json", doc(steps=4))
    bad = json.loads(doc())
    bad["tables"][0]["signal"][2] = -1.0
    write(sig, "bad_negative.json", json.dumps(bad))
    bad = json.loads(doc())
    bad["tables"][1]["signal_per_head"].pop()
    write(sig, "bad_heads.json", json.dumps(bad))
    write(sig, "bad_nesting.json", "[" * 100)


def compares():
    # compare.json as relpos compare writes it (format version 1), one cell
    # whose bits_per_token is loss / ln 2, and cells that each break a rule.
    def cell(**over):
        c = {"task": "reverse", "position": "shaw", "seed": 3,
             "parameters": 2883, "train_seconds": 1.5, "eval_seconds": 0.25,
             "final_train_loss": 0.5,
             "by_length": [
                 {"length": 2, "sequence_length": 5, "token_accuracy": 0.75,
                  "sequence_accuracy": 0.5, "loss": 0.6931471805599453,
                  "bits_per_token": 1.0, "tokens": 8, "sequences": 4},
                 {"length": 4, "sequence_length": 9, "token_accuracy": 0.5,
                  "sequence_accuracy": 0.0, "loss": 1.3862943611198906,
                  "bits_per_token": 2.0, "tokens": 16, "sequences": 4}],
             "sequences_per_length": 4,
             "config": {"train": {"task": "reverse", "seed": 3},
                        "model": {"position": "shaw"}}}
        c.update(over)
        return c

    def doc(*cells):
        return json.dumps({"format_version": 1, "cells": list(cells)})
    cmp = "compare"
    write(cmp, "valid.json", doc(cell(), cell(seed=4, config={
        "train": {"task": "reverse", "seed": 4},
        "model": {"position": "shaw"}})))
    write(cmp, "bad_accuracy.json", doc(cell(by_length=[
        {"length": 2, "sequence_length": 5, "token_accuracy": -5,
         "sequence_accuracy": 0.5, "loss": 0.6931471805599453,
         "bits_per_token": 1.0, "tokens": 8, "sequences": 4}])))
    write(cmp, "bad_bits.json", doc(cell(by_length=[
        {"length": 2, "sequence_length": 5, "token_accuracy": 0.5,
         "sequence_accuracy": 0.5, "loss": 0.5, "bits_per_token": 1.0,
         "tokens": 8, "sequences": 4}])))
    write(cmp, "bad_label.json", doc(cell(position="t5")))
    write(cmp, "bad_version.json", json.dumps({"format_version": 2,
                                               "cells": []}))
    write(cmp, "bad_nesting.json", "[" * 100)


def write(target, name, content):
    path = os.path.join(HERE, "corpus", target, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(path, mode) as f:
        f.write(content)


def main():
    st = "safetensors"
    write(st, "valid_two_tensors", safetensors(
        {"w": entry([2, 2], 0, 16), "b": entry([2], 16, 24),
         "__metadata__": {"format": "pt", "step": "10"}},
        f32(1, 2, 3, 4, 0.5, -0.5)))
    write(st, "valid_empty", safetensors({}, b""))
    write(st, "valid_scalar_and_empty", safetensors(
        {"s": entry([], 0, 4), "e": entry([0, 3], 4, 4)}, f32(7)))
    write(st, "valid_unpadded", safetensors(
        {"x": entry([1], 0, 4)}, f32(1), pad=False))
    write(st, "bad_overlap", safetensors(
        {"a": entry([2], 0, 8), "b": entry([2], 4, 12)}, f32(1, 2, 3)))
    write(st, "bad_dtype", safetensors({"a": entry([2], 0, 4, "F16")}, f32(1)))
    write(st, "bad_shape_mismatch", safetensors({"a": entry([3], 0, 8)}, f32(1, 2)))
    write(st, "bad_truncated", safetensors({"a": entry([4], 0, 16)}, f32(1, 2))[:-3])
    write(st, "bad_header_length", struct.pack("<Q", 1 << 40) + b"{}")

    cfg = "config"
    full = {"arch": "encoder", "vocab_size": 10, "d_model": 32, "heads": 4,
            "layers": 2, "d_ff": 64, "max_len": 128, "position": "relative",
            "max_distance": 8, "key_term": True, "value_term": True,
            "per_head_tables": False, "rel_init_scale": 1.0, "dropout": 0.1,
            "seed": 3}
    write(cfg, "full.json", json.dumps(full, indent=2))
    write(cfg, "minimal.json", '{"vocab_size": 5}')
    write(cfg, "decoder_learned.json", json.dumps(
        {"arch": "decoder", "vocab_size": 256, "position": "learned",
         "max_len": 64}))
    write(cfg, "per_head_no_values.json", json.dumps(
        {"vocab_size": 6, "per_head_tables": True, "value_term": False,
         "max_distance": 0}))
    write(cfg, "bad_type.json", '{"vocab_size": "ten"}')
    write(cfg, "bad_unknown_field.json", '{"vocab_size": 4, "colour": "red"}')
    write(cfg, "bad_negative.json", '{"vocab_size": 4, "heads": -2}')
    write(cfg, "bad_position.json", '{"vocab_size": 4, "position": "rotary"}')
    write(cfg, "bad_not_object.json", "[1, 2, 3]")

    catalogs()
    signals()
    compares()


if __name__ == "__main__":
    main()

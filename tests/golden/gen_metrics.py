#!/usr/bin/env python3
"""Writes tests/golden/metrics.golden.json: BLEU and chrF from sacrebleu.

The values are sacrebleu's own (its default corpus_bleu, sentence_bleu,
corpus_chrf and sentence_chrf, and its 13a tokeniser), computed on
hand-written tricky segments and on seeded random segment pairs; the C++
test (src/data/translate/metrics_test.cc) recomputes every value with relpos
and compares. python/tests/test_translate_metrics.py imports random_corpus
from here to compare relpos with sacrebleu directly on other seeds. Run it with a Python that has sacrebleu 2.x, from the
repository root:

    python3 tests/golden/gen_metrics.py

(for example /var/cache/relpos/venv-NAME/bin/python, or any venv with
`pip install sacrebleu`). The output is deterministic for a given sacrebleu
version, which the file records.

File format: UTF-8 JSON, an object with
    "magic": "relpos-metrics-golden", "version": 1, "sacrebleu": "<version>",
    "tokenize_13a": [[segment, [token, ...]], ...],
    "corpora": [{"name", "hypotheses", "references",
                 "bleu": {"score", "counts", "totals", "precisions", "bp",
                          "sys_len", "ref_len"},
                 "chrf": score,
                 "sentence_bleu": [score, ...], "sentence_chrf": [score, ...]},
                ...]
"""

import json
import os
import random

import sacrebleu
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a

MAGIC = "relpos-metrics-golden"
VERSION = 1

# Segments that exercise every rule of 13a and every whitespace class that
# Python's str.split() knows (and one it does not: U+200B).
TOKENIZE_CASES = [
    "",
    " ",
    "Hello, world.",
    "1,000.50 and 3.14, but a.b and 1.a and a.1 and x,y.",
    "10-20 items; a-b; -5 and 5-",
    "foo-\nbar",
    "foo-\n",
    "line one\nline two",
    "&quot;quoted&quot; &amp; &lt;tag&gt; &amp;lt; &apos;",
    "<skipped> text <skipped>",
    "{braces} [brackets] (parens) <angles> |pipe| ~tilde` ^caret_under\\slash/",
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~",
    "It's a 'quote' -- dash...",
    "Grüße, Straße. Ökonomie!",
    "日本語のテキスト。句読点、です。",
    "emoji 🙂, flags 🇩🇪.",
    "tab\there\vvertical\fform\rreturn",
    "nbsp\u00a0here, thin\u2009space, ideographic\u3000space",
    "line\u2028separator\u2029para \x1c\x1d\x1e\x1f seps \x85 nel",
    "zero\u200bwidth is not a space",
    "trailing spaces   \t ",
    "...,,,...",
    "3.",
    ".5",
    "a",
    "%s: %d file(s) in %s/%s",
    "--help, -h: print this and exit.",
    "Usage: tar [OPTION...] [FILE]...",
    "https://example.org/a?b=c&d=e#f",
]

HAND_CORPORA = [
    ("identical", ["The cat sat on the mat.", "Hello, world!"],
     ["The cat sat on the mat.", "Hello, world!"]),
    ("disjoint", ["x y z", "q"], ["a b c d", "e f"]),
    ("empty hypotheses", ["", "", "some words here"],
     ["a reference", "another one", "some words there"]),
    ("all empty", ["", ""], ["", ""]),
    ("empty references", ["words", "more words"], ["", ""]),
    ("short", ["a", "b c"], ["a", "c b"]),
    ("no 4-grams", ["one two three", "four"], ["one two three", "four"]),
    ("numbers", ["It costs 1,000.50 euros.", "Version 2.6.0-rc1"],
     ["It costs 1.000,50 euros.", "Version 2.6.0 - rc1"]),
    ("unicode", ["Datei „öffnen“ … Größe", "日本語のテキスト。"],
     ["Datei öffnen … Grösse", "日本語テキスト。"]),
    ("longer hypothesis", ["the the the the the the the"], ["the cat"]),
    ("single segment", ["Die Datei %s wurde nicht gefunden."],
     ["Datei %s nicht gefunden."]),
]

VOCAB = (
    "the a of and to in is was file files directory cannot open read write "
    "error warning %s %d %lu %1$s %2$s Datei Dateien Verzeichnis kann nicht "
    "öffnen lesen schreiben Fehler Warnung Größe Straße naïve café "
    "日本 語 中文 🙂 --help -h -v [OPTION]... <FILE> (default) "
    "1,000 1.000 3.14 2.5 10-20 v1.2.3 50% $5 &amp; &lt; &quot; <skipped> "
    ". , ; : ! ? ' \" ( ) [ ] { } / \\ - -- ... … « » „ “ x,y a.b 5- -5"
).split()

# Word separators: mostly spaces, and the other whitespace kinds (and
# U+200B, which is not whitespace to Python and so joins words).
SPACES = [" "] * 6 + ["  ", "\t", "\u00a0", "\u3000", "\n", "\u2028",
                      "\u200b"]


def random_segment(rng, max_words):
    n = rng.randint(0, max_words)
    words = [rng.choice(VOCAB) for _ in range(n)]
    out = ""
    for i, w in enumerate(words):
        if i:
            out += rng.choice(SPACES)
        out += w
    if rng.random() < 0.1:
        out = " " + out + rng.choice(["", " ", "\t", "\n"])
    return out


def mutate(rng, ref):
    """A hypothesis near `ref`: words dropped, swapped, replaced or added."""
    words = ref.split()
    out = []
    for w in words:
        r = rng.random()
        if r < 0.12:
            continue
        if r < 0.24:
            out.append(rng.choice(VOCAB))
        else:
            out.append(w)
        if rng.random() < 0.08:
            out.append(rng.choice(VOCAB))
    if len(out) > 2 and rng.random() < 0.3:
        i = rng.randrange(len(out) - 1)
        out[i], out[i + 1] = out[i + 1], out[i]
    return " ".join(out)


def random_corpus(seed, size, max_words):
    rng = random.Random(seed)
    refs = [random_segment(rng, max_words) for _ in range(size)]
    hyps = []
    for ref in refs:
        r = rng.random()
        if r < 0.05:
            hyps.append("")
        elif r < 0.1:
            hyps.append(random_segment(rng, max_words))
        elif r < 0.15:
            hyps.append(ref)
        else:
            hyps.append(mutate(rng, ref))
    return hyps, refs


def corpus_entry(name, hyps, refs):
    bleu = sacrebleu.corpus_bleu(hyps, [refs])
    return {
        "name": name,
        "hypotheses": hyps,
        "references": refs,
        "bleu": {
            "score": bleu.score,
            "counts": list(bleu.counts),
            "totals": list(bleu.totals),
            "precisions": list(bleu.precisions),
            "bp": bleu.bp,
            "sys_len": bleu.sys_len,
            "ref_len": bleu.ref_len,
        },
        "chrf": sacrebleu.corpus_chrf(hyps, [refs]).score,
        "sentence_bleu": [
            sacrebleu.sentence_bleu(h, [r]).score for h, r in zip(hyps, refs)
        ],
        "sentence_chrf": [
            sacrebleu.sentence_chrf(h, [r]).score for h, r in zip(hyps, refs)
        ],
    }


def main():
    tok = Tokenizer13a()
    corpora = [corpus_entry(*c) for c in HAND_CORPORA]
    for seed, size, max_words in [(1, 120, 12), (2, 60, 40), (3, 200, 4)]:
        hyps, refs = random_corpus(seed, size, max_words)
        corpora.append(corpus_entry(f"random seed {seed}", hyps, refs))
    golden = {
        "magic": MAGIC,
        "version": VERSION,
        "sacrebleu": sacrebleu.__version__,
        # sacrebleu strips trailing whitespace before it tokenises.
        "tokenize_13a": [[s, tok(s.rstrip()).split()] for s in TOKENIZE_CASES],
        "corpora": corpora,
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)),
                        "metrics.golden.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(golden, f, ensure_ascii=False, indent=1)
        f.write("\n")
    print(f"wrote {path}: {len(corpora)} corpora, "
          f"{sum(len(c['hypotheses']) for c in corpora)} segments "
          f"(sacrebleu {sacrebleu.__version__})")


if __name__ == "__main__":
    main()

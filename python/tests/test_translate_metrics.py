"""relpos.translate's BLEU and chrF against sacrebleu itself.

relpos computes BLEU (13a tokeniser, "exp" smoothing, order 4) and chrF
(character order 6, word order 0, beta 2) in C++ following sacrebleu's
arithmetic step by step, so the scores agree to rounding: the tolerance here
is 1e-9 on the 0..100 scale (0.01 would do for reporting; a wrong rule moves
a score by far more), and n-gram counts must be equal. The segments are a
few hundred seeded random pairs (words, numbers with commas and periods,
punctuation, Unicode, several kinds of whitespace; empty and one-word
segments; hypotheses made from their reference by dropping, replacing,
adding and swapping words; the generator of tests/golden/gen_metrics.py on
other seeds) plus hand-written tricky ones.

Needs sacrebleu (PyPI). Without it the whole module is skipped with that
reason; scripts/test.sh runs it in a PyPI environment that has sacrebleu.
"""

import os
import sys

import pytest

sacrebleu = pytest.importorskip(
    "sacrebleu",
    reason="sacrebleu is not installed (pip install 'sacrebleu>=2,<3'); "
    "these tests compare relpos's BLEU / chrF with it")
from sacrebleu.tokenizers.tokenizer_13a import Tokenizer13a  # noqa: E402

from relpos import translate  # noqa: E402

# The segment generator of the golden-file script (tests/golden/
# gen_metrics.py), run here on other seeds.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "..", "tests", "golden"))
from gen_metrics import random_corpus  # noqa: E402

TOL = 1e-9

HAND = [
    ("", ""), ("", "reference only"), ("hypothesis only", ""),
    ("a", "a"), ("a", "b"), (".", "."), ("1,000.50", "1.000,50"),
    ("foo-\nbar", "foobar"), ("foo-\n", "foo-"), ("  padded  ", "padded"),
    ("&quot;x&quot; &amp;lt;", '"x" &lt;'),
    ("Grüße aus Köln!", "Grüße aus Köln."),
    ("日本語のテキスト。", "日本語テキスト。"),
    ("the the the the the the the", "the cat"),
]

CORPORA = [random_corpus(11, 300, 15), random_corpus(12, 100, 3),
           random_corpus(13, 50, 60),
           ([h for h, _ in HAND], [r for _, r in HAND])]


@pytest.mark.parametrize("corpus", range(len(CORPORA)))
def test_corpus_bleu_matches_sacrebleu(corpus):
    hyps, refs = CORPORA[corpus]
    want = sacrebleu.corpus_bleu(hyps, [refs])
    got = translate.bleu(hyps, refs)
    assert got.score == pytest.approx(want.score, abs=TOL)
    assert got.counts == list(want.counts)
    assert got.totals == list(want.totals)
    assert got.sys_len == want.sys_len and got.ref_len == want.ref_len
    assert got.bp == pytest.approx(want.bp, abs=TOL)
    assert got.precisions == pytest.approx(list(want.precisions), abs=TOL)
    # sacrebleu's own argument shape works too.
    assert translate.bleu(hyps, [refs]).score == got.score


@pytest.mark.parametrize("corpus", range(len(CORPORA)))
def test_corpus_chrf_matches_sacrebleu(corpus):
    hyps, refs = CORPORA[corpus]
    want = sacrebleu.corpus_chrf(hyps, [refs]).score
    assert translate.chrf(hyps, refs) == pytest.approx(want, abs=TOL)


def test_sentence_scores_and_tokens_match_sacrebleu():
    tok = Tokenizer13a()
    n = 0
    for hyps, refs in CORPORA:
        for h, r in zip(hyps, refs):
            assert translate.sentence_bleu(h, r).score == pytest.approx(
                sacrebleu.sentence_bleu(h, [r]).score, abs=TOL), (h, r)
            assert translate.sentence_chrf(h, r) == pytest.approx(
                sacrebleu.sentence_chrf(h, [r]).score, abs=TOL), (h, r)
            for s in (h, r):
                assert translate.tokenize_13a(s) == tok(s.rstrip()).split(), s
            n += 1
    assert n >= 400  # a few hundred segment pairs


def test_bad_arguments_raise_value_error():
    with pytest.raises(ValueError, match="2 hypotheses but 1 references"):
        translate.bleu(["a", "b"], ["a"])
    with pytest.raises(ValueError, match="no segments"):
        translate.chrf([], [])
    with pytest.raises(ValueError, match="list of str"):
        translate.bleu("a string", ["a"])
    with pytest.raises(ValueError, match=r"hypotheses\[1\] must be a str"):
        translate.bleu(["a", 3], ["a", "b"])

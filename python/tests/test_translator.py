"""relpos.translate.Translator: a checkpoint of task translate, text in and
text out, as `relpos translate` does it.

A tiny model is trained on a generated toy language pair (a TSV file: verb,
adjective and noun phrases), so the tests need neither the machine's
catalogs nor long training. The Translator's tokens are compared with the
model's own beam search on the ids its encoder gives (relpos::Model::
Translate through the extension), and its text with the vocabulary's decode
of those tokens.
"""

import random

import pytest

from relpos import _relpos_ext as ext
from relpos import translate as rt

VERBS = {"open": "öffnen", "close": "schließen", "copy": "kopieren",
         "delete": "löschen", "save": "speichern"}
ADJS = {"red": "rote", "big": "große", "new": "neue"}
NOUNS = {"file": "Datei", "page": "Seite", "list": "Liste", "key": "Taste"}


def _toy_tsv(path, pairs=300, seed=1):
    rng = random.Random(seed)
    with open(path, "w", encoding="utf-8") as f:
        for _ in range(pairs):
            en, de = [], []
            for _ in range(rng.randint(1, 2)):
                v, a, n = (rng.choice(sorted(d)) for d in (VERBS, ADJS, NOUNS))
                en.append(f"{v} the {a} {n}")
                de.append(f"die {ADJS[a]} {NOUNS[n]} {VERBS[v]}")
            f.write(" and ".join(en) + "\t" + " und ".join(de) + "\n")
    return path


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    base = tmp_path_factory.mktemp("translator")
    tsv = _toy_tsv(base / "toy.tsv")
    settings = [("train", "task", "translate"),
                ("train", "corpus_path", str(tsv)),
                ("train", "sentencepiece_size", "40"),
                ("train", "train_min_length", "1"),
                ("train", "train_max_length", "4"),
                ("train", "steps", "150"), ("train", "batch_size", "16"),
                ("train", "lr", "0.003"), ("train", "checkpoint_every", "0"),
                ("model", "d_model", "32"), ("model", "heads", "2"),
                ("model", "layers", "1"), ("model", "d_ff", "64")]
    ext.train(settings, str(base / "ck"))
    return base / "ck"


LINES = ["open the red file", "save the  new list ", "copy the big key"]


def test_translate_matches_the_model(checkpoint):
    tr = rt.Translator(checkpoint)
    model = ext.Model.load(str(checkpoint))
    for beam in (1, 4):
        got = tr.translate(LINES, beam_size=beam)
        assert len(got) == len(LINES)
        ids = [tr.encode(line) for line in LINES]
        want = model.translate(ids, beam_size=beam)
        for g, w, i in zip(got, want, ids):
            assert isinstance(g, rt.Translation)
            assert g.tokens == w[0]
            assert g.log_prob == pytest.approx(w[1], abs=1e-9)
            assert g.score == pytest.approx(w[2], abs=1e-9)
            assert g.ended_by_eos == w[3]
            assert g.source_tokens == len(i)
            assert g.text == tr.decode(g.tokens)


def test_translates_the_training_language(checkpoint):
    """The one-clause pairs are learnt (the model's loss after 150 steps is
    low): most words of the expected German appear."""
    got = rt.Translator(checkpoint).translate(["open the red file"])[0]
    words = set(got.text.split())
    assert len(words & {"die", "rote", "Datei", "öffnen"}) >= 3, got.text


def test_normalises_whitespace(checkpoint):
    tr = rt.Translator(checkpoint)
    assert tr.encode("save the  new list ") == tr.encode("save the new list")


def test_threads_and_batches_give_the_same_translations(checkpoint):
    """One batch on one thread, a share per thread, and batches sorted by
    length taken in turn by 1-3 threads: the same tokens, in input order."""
    tr = rt.Translator(checkpoint)
    rng = random.Random(5)
    lines = [" and ".join(
        f"{rng.choice(sorted(VERBS))} the {rng.choice(sorted(ADJS))} "
        f"{rng.choice(sorted(NOUNS))}" for _ in range(rng.randint(1, 3)))
        for _ in range(11)]
    for beam in (1, 4):
        want = tr.translate(lines, beam_size=beam, threads=1)
        for threads, batch in ((2, 0), (3, 0), (1, 3), (2, 3), (3, 4),
                               (2, 100)):
            got = tr.translate(lines, beam_size=beam, threads=threads,
                               max_batch_size=batch)
            assert [t.tokens for t in got] == [t.tokens for t in want], \
                (beam, threads, batch)
            assert [t.source_tokens for t in got] == \
                [t.source_tokens for t in want]
            for g, w in zip(got, want):
                assert g.score == pytest.approx(w.score, rel=1e-5, abs=1e-5)


def test_max_length_bounds_the_output(checkpoint):
    got = rt.Translator(checkpoint).translate(LINES, max_length=1)
    assert all(len(t.tokens) <= 1 for t in got)


def test_bad_arguments(checkpoint):
    tr = rt.Translator(checkpoint)
    with pytest.raises(ValueError, match="line"):
        tr.translate(["open the file", "   "])
    with pytest.raises(ValueError, match="control"):
        tr.translate(["open\x07the file"])
    with pytest.raises(ValueError, match="lines"):
        tr.translate("open the file")
    with pytest.raises(ValueError, match="at least one"):
        tr.translate([])
    with pytest.raises(ValueError, match="beam_size"):
        tr.translate(LINES, beam_size=0)
    with pytest.raises(ValueError, match="length_penalty"):
        tr.translate(LINES, length_penalty="avg")
    with pytest.raises(ValueError, match="threads"):
        tr.translate(LINES, threads=-1)
    with pytest.raises(ValueError, match="max_batch_size"):
        tr.translate(LINES, max_batch_size=-1)
    with pytest.raises(ValueError, match="ids"):
        tr.decode([1, "2"])


def test_refuses_other_checkpoints(tmp_path):
    with pytest.raises(RuntimeError):
        rt.Translator(tmp_path / "missing")
    ck = tmp_path / "copy"
    ext.Model.create([("train", "task", "s2s_copy"),
                      ("model", "arch", "seq2seq"), ("model", "d_model", "16"),
                      ("model", "heads", "2"), ("model", "layers", "1")]
                     ).save(str(ck))
    with pytest.raises(ValueError, match="translate"):
        rt.Translator(ck)


@pytest.mark.parametrize("compute_type", ["int8", "int8_a8"])
def test_int8_compute_type_translates(checkpoint, compute_type):
    """compute_type="int8" (the decoder's linear layers with int8 weights)
    and "int8_a8" (their activations in 8 bits too): one translation per
    line, as the model's own int8 beam search gives it, with finite scores;
    where it picks the float model's tokens their log-probability is close
    to the float one. Equal translations are not required: quantization
    may flip a near tie."""
    tr = rt.Translator(checkpoint)
    model = ext.Model.load(str(checkpoint))
    ids = [tr.encode(line) for line in LINES]
    for beam in (1, 4):
        want = tr.translate(LINES, beam_size=beam)
        got = tr.translate(LINES, beam_size=beam, compute_type=compute_type)
        assert len(got) == len(LINES)
        direct = model.translate(ids, beam_size=beam,
                                 compute_type=compute_type)
        for g, w, d in zip(got, want, direct):
            assert g.tokens == d[0]
            assert g.log_prob == pytest.approx(d[1], abs=1e-9)
            assert g.text == tr.decode(g.tokens)
            assert g.source_tokens == w.source_tokens
            assert g.log_prob <= 0 and g.log_prob > -1e4
            assert abs(g.score) < 1e4
            if g.tokens == w.tokens:
                assert g.log_prob == pytest.approx(
                    w.log_prob, rel=0.05, abs=0.1), (beam, g, w)


@pytest.mark.parametrize("compute_type", ["int8", "int8_a8"])
def test_translator_quantized_at_load(checkpoint, compute_type):
    """Translator(dir, compute_type=...) quantizes once and frees the float32
    weights: the same translations, bit for bit, as a float32 Translator's
    per-call int8 ones; its translate runs that type by default and
    refuses another."""
    per_call = rt.Translator(checkpoint)
    once = rt.Translator(checkpoint, compute_type=compute_type)
    assert per_call.compute_type == "float32"
    assert once.compute_type == compute_type
    for beam in (1, 3):
        want = per_call.translate(LINES, beam_size=beam,
                                  compute_type=compute_type)
        for got in (once.translate(LINES, beam_size=beam),
                    once.translate(LINES, beam_size=beam,
                                   compute_type=compute_type)):
            assert [(t.tokens, t.log_prob) for t in got] == \
                [(t.tokens, t.log_prob) for t in want]
    other = "int8_a8" if compute_type == "int8" else "int8"
    for bad in ("float32", other):
        with pytest.raises(ValueError, match="loaded with"):
            once.translate(LINES, compute_type=bad)


def test_compute_type_default_is_float32(checkpoint):
    tr = rt.Translator(checkpoint)
    want = tr.translate(LINES, beam_size=2)
    got = tr.translate(LINES, beam_size=2, compute_type="float32")
    assert [(t.tokens, t.log_prob) for t in got] == \
        [(t.tokens, t.log_prob) for t in want]


def test_bad_compute_type(checkpoint):
    tr = rt.Translator(checkpoint)
    assert rt._COMPUTE_TYPES == ("float32", "int8", "int8_a8")
    for bad in ("int4", "INT8", "int8a8", "INT8_A8", "float16", "", 8):
        with pytest.raises(ValueError, match="compute_type"):
            tr.translate(LINES, compute_type=bad)
        with pytest.raises(ValueError, match="compute_type"):
            rt.Translator(checkpoint, compute_type=bad)
    with pytest.raises(ValueError, match="compute_type"):
        rt.Translator(checkpoint, compute_type=None)
    model = ext.Model.load(str(checkpoint))
    with pytest.raises(ValueError, match="compute_type"):
        model.translate([tr.encode(LINES[0])], compute_type="int4")

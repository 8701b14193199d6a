"""``relpos.translate``: translation data and scores (docs/translation.md).

- ``bleu``, ``sentence_bleu``, ``chrf``, ``sentence_chrf``: BLEU and chrF
  exactly as sacrebleu 2.x computes them by default (corpus BLEU with the 13a
  tokeniser, "exp" smoothing, max order 4, on detokenised text; chrF with
  character order 6, word order 0, beta 2), implemented in relpos's C++;
  ``tokenize_13a`` is the tokeniser alone.
- ``read_catalog``: the entries of one GNU gettext catalog (.mo or .po),
  read defensively (hostile files raise RuntimeError naming the file).
- ``load_parallel_text``: translation pairs from gettext catalogs (default
  ``/usr/share/locale``), a directory of .mo / .po files or a TSV file,
  filtered, deduplicated and split by catalog.

Text is ``str``; invalid arguments raise ValueError, unreadable or malformed
files RuntimeError.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence

from . import _relpos_ext as _ext

__all__ = [
    "Bleu",
    "bleu",
    "chrf",
    "load_parallel_text",
    "read_catalog",
    "sentence_bleu",
    "sentence_chrf",
    "tokenize_13a",
]


class Bleu(NamedTuple):
    """A BLEU score and its statistics, named as sacrebleu's BLEUScore.

    ``score`` and ``precisions`` are percentages; ``counts`` / ``totals`` are
    the clipped matching and the hypothesis n-grams of order 1..4; ``bp`` the
    brevity penalty; ``sys_len`` / ``ref_len`` the token counts.
    """

    score: float
    counts: List[int]
    totals: List[int]
    precisions: List[float]
    bp: float
    sys_len: int
    ref_len: int


def _segments(value, name: str) -> List[str]:
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ValueError(f"{name} must be a list of str, one per segment")
    out = list(value)
    for i, s in enumerate(out):
        if not isinstance(s, str):
            raise ValueError(f"{name}[{i}] must be a str (got {type(s).__name__})")
    return out


def _references(value) -> List[str]:
    # sacrebleu's shape, [references] (one stream), is accepted too.
    if (isinstance(value, Sequence) and not isinstance(value, str)
            and len(value) == 1 and isinstance(value[0], Sequence)
            and not isinstance(value[0], str)):
        value = value[0]
    return _segments(value, "references")


def _text(value, name: str) -> str:
    if not isinstance(value, str):
        raise ValueError(f"{name} must be a str (got {type(value).__name__})")
    return value


def bleu(hypotheses: Sequence[str], references: Sequence[str]) -> Bleu:
    """Corpus BLEU, as ``sacrebleu.corpus_bleu(hypotheses, [references])``.

    One reference per hypothesis (``references`` may also be given in
    sacrebleu's ``[references]`` form). ValueError for different lengths or
    an empty corpus.
    """
    d = _ext.translate_bleu(_segments(hypotheses, "hypotheses"),
                            _references(references))
    return Bleu(**d)


def sentence_bleu(hypothesis: str, reference: str) -> Bleu:
    """Sentence BLEU, as ``sacrebleu.sentence_bleu(hypothesis, [reference])``
    (with its default effective order)."""
    return Bleu(**_ext.translate_sentence_bleu(_text(hypothesis, "hypothesis"),
                                               _text(reference, "reference")))


def chrf(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Corpus chrF, as ``sacrebleu.corpus_chrf(hypotheses, [references]).score``."""
    return _ext.translate_chrf(_segments(hypotheses, "hypotheses"),
                               _references(references))


def sentence_chrf(hypothesis: str, reference: str) -> float:
    """Sentence chrF, as ``sacrebleu.sentence_chrf(hypothesis, [reference]).score``."""
    return _ext.translate_sentence_chrf(_text(hypothesis, "hypothesis"),
                                        _text(reference, "reference"))


def tokenize_13a(segment: str) -> List[str]:
    """The tokens of sacrebleu's 13a tokeniser (after its right strip)."""
    return _ext.translate_tokenize_13a(_text(segment, "segment"))


def read_catalog(path) -> dict:
    """The entries of a .mo / .gmo (binary) or any other (.po, text) catalog.

    Returns a dict: ``language`` and ``charset`` (from the header, "" when
    absent), ``has_header``, ``bad_encoding`` (entries left out: not valid in
    the charset) and ``messages``: (context or None, msgid, msgstr, plural,
    fuzzy) tuples in file order, converted to str; msgstr is the first
    (singular) form of a plural entry.
    """
    return _ext.translate_read_catalog(str(path))


def load_parallel_text(path="/usr/share/locale", source_language: str = "en",
                       target_language: str = "de") -> dict:
    """Translation pairs, as relpos trains on them (docs/translation.md).

    Returns a dict: ``train`` and ``test`` (lists of (source, target,
    catalog index) tuples), ``catalogs`` (domain names, sorted),
    ``test_catalogs`` (the held-out ones), ``split`` ("by catalog" or "by
    message"), ``stats`` (the counts: read, skipped, dropped by reason, kept)
    and ``description`` (the counts as text).
    """
    return _ext.translate_load_parallel_text(
        str(path), _text(source_language, "source_language"),
        _text(target_language, "target_language"))

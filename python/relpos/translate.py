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
- ``Translator``: a checkpoint of task ``translate`` (its model and the
  SentencePiece vocabulary stored in it) translating text by beam search,
  as ``relpos translate`` does.

Text is ``str``; invalid arguments raise ValueError, unreadable or malformed
files RuntimeError.
"""

from __future__ import annotations

from typing import List, NamedTuple, Optional, Sequence

from . import _checks
from . import _relpos_ext as _ext

__all__ = [
    "Bleu",
    "Translation",
    "Translator",
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


class Translation(NamedTuple):
    """One translated line: ``text`` (detokenised), ``tokens`` (its piece
    ids, without BOS / EOS), ``log_prob`` (log P(tokens, EOS | source)),
    ``score`` (``log_prob`` over the length penalty), ``ended_by_eos``
    (False: stopped at the length limit) and ``source_tokens`` (pieces of
    the normalised source)."""

    text: str
    tokens: List[int]
    log_prob: float
    score: float
    ended_by_eos: bool
    source_tokens: int


_LENGTH_PENALTIES = ("wu", "power", "none")
_COMPUTE_TYPES = tuple(_ext.compute_type_names())  # float32, int8, int8_a8


class Translator:
    """A checkpoint of task ``translate``, translating text
    (docs/translation.md, "Training, evaluating and translating").

    ``Translator(dir)`` loads the model and its SentencePiece vocabulary
    (``sentencepiece.model`` in the checkpoint; the corpus is not read).
    RuntimeError for a damaged checkpoint or one without a vocabulary,
    ValueError for a checkpoint of another task.

    ``translate(lines, beam_size=4, ...)`` normalises each line as the corpus
    is (runs of whitespace become one space), checks every line first (an
    empty line, text with control characters or longer than the model takes
    is a ValueError naming the line), then decodes them and
    returns one ``Translation`` per line. The options are relpos's
    ``DecodeOptions``: ``length_penalty`` "wu" (((5 + |y|) / 6) ** alpha,
    OpenNMT-py's), "power" (|y| ** alpha, CTranslate2's) or "none";
    ``max_length_ratio`` and ``max_length`` bound the output
    (max(1, ceil(ratio * source pieces)) and at most ``max_length``);
    ``threads`` 0 uses the checkpoint's training thread count.
    ``max_batch_size`` > 0 sorts more lines than that by source length and
    decodes them in batches of at most that many, the threads taking the
    batches in turn (as CTranslate2's ``translate_batch(max_batch_size=)``
    with ``inter_threads``); 0 decodes all lines as one batch (split
    between the threads). The translations do not depend on either.
    ``compute_type`` "float32", "int8" or "int8_a8": with
    "int8" the linear layers of the decoder's and the encoder's blocks
    (attention projections, FFN) run with int8 weights, quantized per
    output channel, and activations
    quantized per row to 16 bits (as ``relpos translate --compute-type
    int8``; docs/generate.md, "Quantized inference"), and so does a large
    output head (a translation vocabulary's), whose tied embedding is then
    looked up from its int8 rows; "int8_a8" quantizes those activations to
    8 bits (faster on CPUs with AVX-512 VNNI, less accurate). The relative
    tables and attention stay float32.
    int8 translations are close to the float ones, not always the same.

    ``Translator(dir, compute_type="int8")`` (or "int8_a8") quantizes those
    layers once, as it loads, one matrix at a time, and keeps no float32
    copy of them (as ``relpos translate --compute-type`` does): less
    memory, and every ``translate``
    call then runs that type (its ``compute_type`` defaults to it; another
    is a ValueError). Without it the model stays float32 and
    ``translate(..., compute_type="int8")`` quantizes for that call only.
    """

    def __init__(self, checkpoint_dir, compute_type: str = "float32"):
        compute_type = _checks.choice("translate.Translator", "compute_type",
                                      compute_type, _COMPUTE_TYPES)
        # int8: quantized as it loads (the float32 matrices that get int8
        # copies are never all in memory).
        self._t = _ext.Translator.load(str(checkpoint_dir), compute_type)

    @property
    def compute_type(self) -> str:
        """"float32", or the type ``Translator(..., compute_type=)``
        quantized the model to."""
        return self._t.compute_type()

    def encode(self, text: str) -> List[int]:
        """The piece ids of one line (normalised; without BOS / EOS)."""
        return self._t.encode(_text(text, "text"))

    def decode(self, ids: Sequence[int]) -> str:
        """The text of piece ids (pad / BOS / EOS decode to nothing)."""
        ids = list(ids)
        for i, x in enumerate(ids):
            if isinstance(x, bool) or not isinstance(x, int):
                raise ValueError(f"ids[{i}] must be an int")
        return self._t.decode(ids)

    @property
    def max_source_tokens(self) -> int:
        """The longest source, in pieces, the model takes."""
        return self._t.max_source_tokens()

    def translate(self, lines: Sequence[str], beam_size: int = 4,
                  length_penalty: str = "wu", alpha: float = 0.6,
                  max_length_ratio: float = 2.0, max_length: int = 1024,
                  threads: int = 0, max_batch_size: int = 0,
                  compute_type: Optional[str] = None) -> List[Translation]:
        """One ``Translation`` per line of ``lines`` (a list of str)."""
        if compute_type is None:
            compute_type = self.compute_type
        compute_type = _checks.choice("translate.Translator.translate",
                                      "compute_type", compute_type,
                                      _COMPUTE_TYPES)
        if self.compute_type != "float32" and compute_type != self.compute_type:
            raise ValueError(
                f"translate.Translator.translate: compute_type must be "
                f"{self.compute_type!r}, the type this Translator was loaded "
                f"with (got {compute_type!r})")
        lines = _segments(lines, "lines")
        if not lines:
            raise ValueError("lines must hold at least one line")
        if length_penalty not in _LENGTH_PENALTIES:
            raise ValueError(f"length_penalty must be one of "
                             f"{', '.join(_LENGTH_PENALTIES)} (got {length_penalty!r})")
        def count(name, value, lo, hi):  # ValueError for any bad value
            return _checks.integer("translate.Translator.translate", name,
                                   value, minimum=lo, maximum=hi,
                                   wrong_type=ValueError)

        out = self._t.translate(
            lines, count("beam_size", beam_size, 1, 4096), length_penalty,
            float(alpha), float(max_length_ratio),
            count("max_length", max_length, 1, 1 << 20),
            count("threads", threads, 0, 1024),
            count("max_batch_size", max_batch_size, 0, 1 << 20),
            compute_type)
        return [Translation(*t) for t in out]

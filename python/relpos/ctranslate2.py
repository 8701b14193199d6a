"""Export a relpos checkpoint to a CTranslate2 model directory.

    python -m relpos.ctranslate2 CHECKPOINT_DIR OUTPUT_DIR [--force] \
        [--quantization int8|int8_float32|...]

or from Python ``relpos.ctranslate2.export(checkpoint_dir, output_dir,
quantization=None)``.
Needs the optional dependency ``ctranslate2`` (``pip install ctranslate2``,
or ``pip install relpos[ctranslate2]``). The checkpoint is read by relpos's
own C++ reader (``relpos.Model.load`` through the extension); the model is
described with CTranslate2's Python spec API (``ctranslate2.specs``) and
saved by it, so the directory is what CTranslate2's own converters write.

What maps to what (docs/interop.md has the tensor-by-tensor table):

- ``arch = encoder`` -> ``TransformerEncoderModelSpec``: run it with
  ``ctranslate2.Encoder``; ``last_hidden_state`` is relpos's final hidden
  state ``LayerNormF(x_L)``. The encoder's output head (``head.*``) has no
  place in that spec and is not exported (a task head, applied by the
  caller).
- ``arch = decoder`` -> ``TransformerDecoderModelSpec`` (no cross
  attention): ``ctranslate2.Generator``; its logits are relpos's, head bias
  included.
- ``arch = seq2seq`` -> ``TransformerSpec`` (encoder and decoder with
  cross-attention): ``ctranslate2.Translator``. One embedding for the
  encoder input, the decoder input and the projection (bias
  ``head.bias``), ``scale_embeddings = True`` (relpos's sqrt(d_model)),
  cross-attention as CTranslate2's encoder attention (q; k and v fused;
  out), no position term there. Tokens: the pieces of the checkpoint's
  ``sentencepiece.model`` when it has one (copied beside the export), else
  ``"<N>"``; BOS starts the decoder, no BOS / EOS is added to the source.
- All: pre-norm blocks, exact (erf) GELU (``Activation.GELU``), LayerNorm
  eps 1e-5, biases on every projection, no embedding scaling for arch
  encoder and decoder (``scale_embeddings = False``: relpos adds no
  sqrt(d_model) factor there), the
  final LayerNorm, q/k/v fused into one [3 d, d] projection as CTranslate2
  stores it.
- ``position = shaw`` (or its older name ``relative``; Shaw et al., clip
  k): CTranslate2's
  ``relative_position_keys`` / ``relative_position_values`` [2k+1, dh],
  row ``clip(j - i, -k, k) + k``, shared by the heads, exactly relpos's
  shared tables (docs/math.md section 1). A switched-off term (``key_term``
  or ``value_term`` false) is exported as an all-zero table, which adds
  exactly zero (CTranslate2 reads k from the key table, so both must exist).
- ``position = shaw-asym`` (key table, clip (k_left, k_right)):
  ``relative_asymmetric_position_keys`` with ``relative_left_max_position``
  / ``relative_right_max_position``, the rows of relpos's ClipBuckets; plus a
  zero ``position_encodings`` table of ``max_len`` rows (CTranslate2 would
  otherwise add its sinusoid); no value table (refused).
- ``position = learned``: the table itself as ``position_encodings``.
  ``sinusoidal`` and ``none``: an explicit table of ``max_len`` rows
  (relpos's interleaved sin/cos, or zeros), because CTranslate2's built-in
  sinusoid uses another layout and it would add one where relpos has none;
  such an export accepts at most ``max_len`` positions.

Quantization (``quantization=`` / ``--quantization``, default None: float32
weights as relpos holds them): one of CTranslate2's weight types
(:data:`QUANTIZATIONS`, the names its converters take as
``--quantization``), applied by CTranslate2's own
``ModelSpec.optimize(quantization=...)`` as its converters do, so an
``int8`` export is what ``ct2-*-converter --quantization int8`` writes: the
linear layers' weights (and the embeddings) as int8 with one float scale
per output row, the rest float32. ``int8`` and ``int8_float32`` write the
same file; on a CPU CTranslate2 runs both as its ``int8_float32`` compute
type. A name outside the list is a ValueError before anything is read or
written.

Refused with :class:`UnsupportedModelError` (a ``ValueError``) naming the
setting: per-head relative tables (CTranslate2 has one table per layer),
shaw-asym with a value table, shaw-asym in seq2seq, a model without blocks (CTranslate2's layer
stack needs one), and any other position scheme or model setting (log
buckets, T5 biases, ALiBi, RoPE, Transformer-XL, ...: each needs its own
check against CTranslate2 before it can be exported).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from typing import Dict, List, Optional

import numpy as np

from . import position_schemes as _schemes
from . import _relpos_ext as _ext
from ._convert import UnsupportedModelError

__all__ = ["QUANTIZATIONS", "UnsupportedModelError", "build_spec", "export",
           "main",
           "seq2seq_spec", "seq2seq_vocabulary", "spec_from_parameters"]

LAYER_NORM_EPS = 1e-5  # relpos's LayerNorm (docs/model.md)

# The model settings the exporter understands: the model's own, and the
# settings of every position scheme of the registry (relpos.schemes());
# any other key in a checkpoint's model config is refused so that a setting
# added to relpos later cannot be silently dropped.
_MODEL_KEYS = {"arch", "vocab_size", "d_model", "heads", "layers", "d_ff",
               "position", "dropout", "seed",
               # seq2seq: the decoder's depth (-1: as many as layers).
               "decoder_layers"}
_KNOWN_MODEL_KEYS = _MODEL_KEYS | set(_schemes.SETTING_DEFAULTS)
# The schemes CTranslate2's Transformer specs represent as relpos computes
# them (each checked against CTranslate2 in python/tests/test_ctranslate2.py).
_POSITIONS = ("none", "sinusoidal", "learned", "shaw", "shaw-asym")

# CTranslate2's weight types (ctranslate2.specs.model_spec.
# ACCEPTED_MODEL_TYPES in CTranslate2 4.x): what export(quantization=) and
# --quantization take.
QUANTIZATIONS = ("int8", "int8_float32", "int8_float16", "int8_bfloat16",
                 "int16", "float16", "bfloat16", "float32")


def _require_ctranslate2():
    try:
        import ctranslate2  # noqa: F401  (the optional dependency)
        from ctranslate2 import specs
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError(
            "relpos.ctranslate2 needs the ctranslate2 package: "
            "pip install ctranslate2") from e
    return specs


def _position(mc: Dict) -> str:
    """The registry's name of the config's position scheme ("relative",
    the older name of "shaw", reads as "shaw")."""
    try:
        return _schemes.scheme(mc["position"]).name
    except ValueError as e:
        raise UnsupportedModelError(f"relpos.ctranslate2: {e}") from None


def _check_supported(mc: Dict) -> None:
    unknown = sorted(set(mc) - _KNOWN_MODEL_KEYS)
    if unknown:
        raise UnsupportedModelError(
            "relpos.ctranslate2: model setting(s) " + ", ".join(unknown) +
            " are not known to this exporter; it cannot tell whether "
            "CTranslate2 represents them")
    pos = _position(mc)
    if pos not in _POSITIONS:
        raise UnsupportedModelError(
            f"relpos.ctranslate2: position '{mc['position']}' cannot be "
            f"exported (supported: {', '.join(_POSITIONS)}); CTranslate2's "
            "Transformer specs have Shaw tables with a symmetric clip, "
            "learned or sinusoidal absolute positions, T5 biases, ALiBi "
            "(decoder) and RoPE, each in its own convention")
    if pos in ("shaw", "shaw-asym") and mc["per_head_tables"]:
        raise UnsupportedModelError(
            "relpos.ctranslate2: per_head_tables = true cannot be exported: "
            "CTranslate2's relative position tables are one [rows, dh] table "
            "per layer, shared by the heads")
    if pos == "shaw-asym" and mc["value_term"]:
        raise UnsupportedModelError(
            "relpos.ctranslate2: position 'shaw-asym' with value_term = true "
            "cannot be exported: CTranslate2's asymmetric clip "
            "(relative_asymmetric_position_keys) has a key table only")
    if mc["layers"] < 1:
        raise UnsupportedModelError(
            f"relpos.ctranslate2: layers = {mc['layers']} cannot be "
            "exported: CTranslate2's Transformer needs at least one layer")
    if mc["arch"] not in ("encoder", "decoder", "seq2seq"):
        raise UnsupportedModelError(
            f"relpos.ctranslate2: arch '{mc['arch']}' is not encoder, "
            "decoder or seq2seq")
    if mc["arch"] == "seq2seq" and pos == "shaw-asym":
        raise UnsupportedModelError(
            "relpos.ctranslate2: position 'shaw-asym' is exported for the "
            "encoder and decoder architectures only: CTranslate2's "
            "asymmetric key table is not checked against relpos in its "
            "incremental (Translator) decoding")


def _set_layer_norm(spec, gamma: np.ndarray, beta: np.ndarray) -> None:
    spec.gamma = gamma
    spec.beta = beta


def _set_linear(spec, weight: np.ndarray, bias: np.ndarray) -> None:
    spec.weight = weight  # [out, in], as relpos stores it
    spec.bias = bias


def _fill_layer(layer, P, l: int, mc: Dict, side: str = "") -> None:
    """One pre-LayerNorm block: attention sublayer, (a seq2seq decoder's
    cross-attention sublayer,) then feed-forward. side: "" for the single
    stack, "encoder." or "decoder." for seq2seq's tensors."""
    b = f"{side}blocks.{l}."
    att = layer.self_attention
    _set_layer_norm(att.layer_norm, P(b + "ln1.gamma"), P(b + "ln1.beta"))
    # CTranslate2 fuses q, k and v into linear_0: rows [q; k; v].
    _set_linear(
        att.linear[0],
        np.concatenate([P(b + f"attn.{x}.weight") for x in "qkv"], axis=0),
        np.concatenate([P(b + f"attn.{x}.bias") for x in "qkv"], axis=0))
    _set_linear(att.linear[1], P(b + "attn.out.weight"), P(b + "attn.out.bias"))
    dh = mc["d_model"] // mc["heads"]
    pos = _position(mc)
    if pos == "shaw-asym":
        # A key table under clip(j - i, -k_left, k_right) + k_left, as
        # relpos's ClipBuckets(k_left, k_right) (docs/interop.md).
        att.relative_asymmetric_position_keys = (
            P(b + "attn.rel_k") if mc["key_term"] else np.zeros(
                (mc["k_left"] + mc["k_right"] + 1, dh), dtype=np.float32))
        att.relative_left_max_position = np.int32(mc["k_left"])
        att.relative_right_max_position = np.int32(mc["k_right"])
    if pos == "shaw":
        zeros = np.zeros((2 * mc["max_distance"] + 1, dh), dtype=np.float32)
        att.relative_position_keys = (
            P(b + "attn.rel_k") if mc["key_term"] else zeros)
        att.relative_position_values = (
            P(b + "attn.rel_v") if mc["value_term"] else zeros)
    if side == "decoder.":
        _fill_cross_attention(layer.attention, P, b)
    _set_layer_norm(layer.ffn.layer_norm, P(b + "ln2.gamma"), P(b + "ln2.beta"))
    _set_linear(layer.ffn.linear_0, P(b + "ff.in.weight"), P(b + "ff.in.bias"))
    _set_linear(layer.ffn.linear_1, P(b + "ff.out.weight"), P(b + "ff.out.bias"))


def _fill_cross_attention(att, P, b: str) -> None:
    """relpos's cross-attention (no position term): CTranslate2's
    encoder-attention spec has three linears, q, then k and v fused into
    one [2 d, d] projection, then the output."""
    _set_layer_norm(att.layer_norm, P(b + "cross_ln.gamma"),
                    P(b + "cross_ln.beta"))
    _set_linear(att.linear[0], P(b + "cross.q.weight"), P(b + "cross.q.bias"))
    _set_linear(
        att.linear[1],
        np.concatenate([P(b + f"cross.{x}.weight") for x in "kv"], axis=0),
        np.concatenate([P(b + f"cross.{x}.bias") for x in "kv"], axis=0))
    _set_linear(att.linear[2], P(b + "cross.out.weight"),
                P(b + "cross.out.bias"))


def _absolute_table(mc: Dict, P, side: str = "") -> Optional[np.ndarray]:
    pos, rows, d = _position(mc), mc["max_len"], mc["d_model"]
    if pos == "learned":
        return P(side + "embed.position")
    if pos == "sinusoidal":
        return _schemes.sinusoidal_table(rows, d).astype(np.float32)
    if pos in ("none", "shaw-asym"):
        # shaw-asym: CTranslate2 does not count the asymmetric key table as
        # a position scheme and would add its sinusoid without a table.
        return np.zeros((rows, d), dtype=np.float32)
    return None  # shaw: inside attention only


def vocabulary(vocab_size: int) -> List[str]:
    """The token strings written to the CTranslate2 model: ``"<N>"`` for id N
    (relpos's ids are bytes or task symbols without names; run the model
    with ids)."""
    return [f"<{i}>" for i in range(vocab_size)]


SENTENCEPIECE_MODEL = "sentencepiece.model"  # in a translation checkpoint


def seq2seq_vocabulary(checkpoint_dir: str, vocab_size: int,
                       bos: int, eos: int) -> Dict:
    """The token strings of a seq2seq export and its special tokens: the
    pieces of the checkpoint's ``sentencepiece.model`` (relpos's ids are
    its ids; the sizes must agree), else ``"<N>"`` for id N as
    :func:`vocabulary`. Returns {"tokens", "bos", "eos", "unk", "spm"} with
    spm the SentencePiece model's path or None."""
    spm = os.path.join(os.fspath(checkpoint_dir), SENTENCEPIECE_MODEL)
    if not os.path.isfile(spm):
        tokens = vocabulary(vocab_size)
        return {"tokens": tokens, "bos": tokens[bos], "eos": tokens[eos],
                "unk": tokens[0], "spm": None}
    try:
        import sentencepiece
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError(
            f"relpos.ctranslate2: {spm} needs the sentencepiece package to "
            "name the tokens: pip install sentencepiece") from e
    sp = sentencepiece.SentencePieceProcessor(model_file=spm)
    if sp.get_piece_size() != vocab_size:
        raise UnsupportedModelError(
            f"relpos.ctranslate2: {spm} has {sp.get_piece_size()} pieces but "
            f"the model's vocabulary has {vocab_size} ids")
    tokens = [sp.id_to_piece(i) for i in range(vocab_size)]
    unk = sp.unk_id()
    return {"tokens": tokens, "bos": tokens[bos], "eos": tokens[eos],
            "unk": tokens[unk if 0 <= unk < vocab_size else 0], "spm": spm}


def build_spec(checkpoint_dir: str):
    """The CTranslate2 model spec of a relpos checkpoint folder (validated,
    not saved). Raises UnsupportedModelError for what CTranslate2 cannot
    represent, and relpos's own errors for a missing or damaged checkpoint."""
    return _load(checkpoint_dir)[0]


def _load(checkpoint_dir: str):
    """(spec, SentencePiece model path or None) of a checkpoint folder."""
    model = _ext.Model.load(os.fspath(checkpoint_dir))
    mc = json.loads(model.config_json())["model"]

    def P(name: str) -> np.ndarray:
        return np.ascontiguousarray(model.parameter(name), dtype=np.float32)

    if mc.get("arch") != "seq2seq":
        return spec_from_parameters(mc, P), None
    _check_supported(mc)
    bos, eos = model.bos_eos()
    vocab = seq2seq_vocabulary(checkpoint_dir, mc["vocab_size"], bos, eos)
    return seq2seq_spec(mc, P, vocab), vocab["spm"]


def seq2seq_spec(mc: Dict, P, vocab: Dict):
    """The ``TransformerSpec`` of a seq2seq model (config mc, tensors
    P(name), tokens as :func:`seq2seq_vocabulary` gives them): pre-norm
    encoder and decoder, one embedding for the encoder input, the decoder
    input and the projection (bias ``head.bias``), both scaled by
    sqrt(d_model) as relpos scales them, cross-attention without positions,
    the decoder started with BOS, no BOS / EOS added to the source."""
    specs = _require_ctranslate2()
    _check_supported(mc)
    common = dict(pre_norm=True, activation=specs.Activation.GELU,
                  relative_position=_position(mc) == "shaw")
    dec_layers = mc.get("decoder_layers", -1)
    dec_layers = mc["layers"] if dec_layers < 0 else dec_layers
    encoder = specs.TransformerEncoderSpec(mc["layers"], mc["heads"], **common)
    decoder = specs.TransformerDecoderSpec(
        dec_layers, mc["heads"], with_encoder_attention=True, **common)
    embedding = P("embed.token")
    encoder.embeddings[0].weight = embedding
    decoder.embeddings.weight = embedding
    _set_linear(decoder.projection, embedding, P("head.bias"))
    for side, stack in (("encoder.", encoder), ("decoder.", decoder)):
        stack.scale_embeddings = True  # relpos: sqrt(d_model) E[token]
        table = _absolute_table(mc, P, side)
        if table is not None:
            stack.position_encodings.encodings = table
        _set_layer_norm(stack.layer_norm, P(side + "final_ln.gamma"),
                        P(side + "final_ln.beta"))
        for l, layer in enumerate(stack.layer):
            _fill_layer(layer, P, l, mc, side)
    spec = specs.TransformerSpec(encoder, decoder)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    spec.config.unk_token = vocab["unk"]
    spec.config.bos_token = vocab["bos"]
    spec.config.eos_token = vocab["eos"]
    spec.config.decoder_start_token = vocab["bos"]
    spec.config.add_source_bos = False
    spec.config.add_source_eos = False
    spec.register_source_vocabulary(vocab["tokens"])
    spec.register_target_vocabulary(vocab["tokens"])
    spec.validate()
    return spec


def spec_from_parameters(mc: Dict, P):
    """The spec of a model given its config (the "model" object of a
    checkpoint's config.json) and P(name) -> its float32 tensor named as in
    docs/model.md. build_spec reads both from a checkpoint."""
    specs = _require_ctranslate2()
    from ctranslate2.specs import attention_spec

    _check_supported(mc)
    if mc["arch"] == "seq2seq":
        raise ValueError("relpos.ctranslate2: a seq2seq model's spec needs "
                         "its vocabulary: use seq2seq_spec or build_spec")
    common = dict(pre_norm=True, activation=specs.Activation.GELU,
                  relative_position=_position(mc) == "shaw")
    if mc["arch"] == "encoder":
        stack = specs.TransformerEncoderSpec(mc["layers"], mc["heads"], **common)
        stack.embeddings[0].weight = P("embed.token")
        spec = specs.TransformerEncoderModelSpec(stack)
    else:
        stack = specs.TransformerDecoderSpec(
            mc["layers"], mc["heads"], with_encoder_attention=False, **common)
        stack.embeddings.weight = P("embed.token")
        _set_linear(stack.projection, P("head.weight"), P("head.bias"))
        spec = specs.TransformerDecoderModelSpec(stack)
    stack.scale_embeddings = False  # relpos: x_0 = embedding (+ position)
    table = _absolute_table(mc, P)
    if table is not None:
        stack.position_encodings.encodings = table
    _set_layer_norm(stack.layer_norm, P("final_ln.gamma"), P("final_ln.beta"))
    for l, layer in enumerate(stack.layer):
        if _position(mc) == "shaw-asym":
            # The layer specs have no switch for it: the attention spec does.
            layer.self_attention = attention_spec.MultiHeadAttentionSpec(
                self_attention=True, relative_asymmetric_position=True)
        _fill_layer(layer, P, l, mc)
    spec.config.layer_norm_epsilon = LAYER_NORM_EPS
    tokens = vocabulary(mc["vocab_size"])
    spec.config.unk_token = tokens[0]
    spec.config.bos_token = tokens[0]
    spec.config.eos_token = tokens[0]
    spec.register_vocabulary(tokens)
    spec.validate()
    return spec


def _check_quantization(quantization: Optional[str]) -> Optional[str]:
    if quantization is not None and (not isinstance(quantization, str) or
                                     quantization not in QUANTIZATIONS):
        raise ValueError(
            f"relpos.ctranslate2: quantization must be None or one of "
            f"{', '.join(QUANTIZATIONS)} (got {quantization!r})")
    return quantization


def export(checkpoint_dir: str, output_dir: str, force: bool = False,
           quantization: Optional[str] = None) -> str:
    """Writes the CTranslate2 model of `checkpoint_dir` into `output_dir`
    and returns output_dir. quantization None writes float32 weights; a
    name of :data:`QUANTIZATIONS` ("int8", "int8_float32", ...) quantizes
    them with CTranslate2's ``spec.optimize(quantization=...)`` as its
    converters' ``--quantization`` does. A bad quantization is a ValueError
    and an existing non-empty output_dir an error unless force is true,
    both before anything is written."""
    quantization = _check_quantization(quantization)
    out = os.fspath(output_dir)
    if os.path.isdir(out) and os.listdir(out) and not force:
        raise FileExistsError(
            f"relpos.ctranslate2: output_dir '{out}' exists and is not empty "
            "(pass force=True / --force to overwrite)")
    spec, spm = _load(checkpoint_dir)
    if quantization is not None:
        # Aliases shared tensors, then quantizes, in memory (before the
        # folder is made).
        spec.optimize(quantization=quantization)
    os.makedirs(out, exist_ok=True)
    spec.save(out)
    if spm is not None:  # beside the model, for the caller's tokenisation
        shutil.copyfile(spm, os.path.join(out, SENTENCEPIECE_MODEL))
    return out


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m relpos.ctranslate2",
        description="Export a relpos checkpoint folder to a CTranslate2 "
                    "model directory (docs/interop.md).")
    parser.add_argument("checkpoint_dir")
    parser.add_argument("output_dir")
    parser.add_argument("--force", action="store_true",
                        help="overwrite a non-empty output directory")
    parser.add_argument("--quantization", choices=QUANTIZATIONS,
                        help="weight type, as CTranslate2's converters take "
                             "it (default: float32 weights as relpos holds "
                             "them)")
    args = parser.parse_args(argv)
    try:
        out = export(args.checkpoint_dir, args.output_dir, force=args.force,
                     quantization=args.quantization)
    except (ValueError, OSError, RuntimeError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""What relpos knows about OpenNMT-py and eole: importing a Transformer
translation checkpoint into a relpos seq2seq checkpoint folder, and one
relative-attention layer's weights (:func:`from_opennmt`, numpy, giving a
:class:`LoadedAttention`; docs/interop.md).

    python -m relpos.opennmt MODEL.pt OUTPUT_DIR --task TASK [--tokens LIST]
    python -m relpos.opennmt EOLE_MODEL_DIR OUTPUT_DIR --task TASK [...]

or ``relpos.opennmt.import_checkpoint(state, output_dir, task, tokens)``
with ``state`` from :func:`load_checkpoint` (OpenNMT-py's ``.pt`` file) or
:func:`load_eole` (an eole model folder). Reading the ``.pt`` file needs
PyTorch (``torch.load`` with ``weights_only=True``: only tensors, plain
containers and the options' ``argparse.Namespace`` are unpickled, no other
code); reading an eole folder (``config.json``, ``vocab.json``,
``model.00.safetensors``) needs the ``safetensors`` package and no PyTorch.

eole (OpenNMT-py's successor, 0.6) has the same Transformer under other
tensor names (``transformer_layers.N.input_layernorm``,
``post_attention_layernorm``, ``precontext_layernorm``,
``mlp.gate_up_proj`` / ``down_proj``, ``src_emb`` / ``tgt_emb``) and one
difference in the arithmetic: its relative key term is not scaled, the
score is q.k / sqrt(dh) + q.a(j - i) (``_compute_attention``: the product
with the table is added after the scaled q.k), where OpenNMT-py and Shaw
et al. divide both by sqrt(dh). The import stores the key table times
sqrt(dh) (``rel_k``) and the table itself as the value table (``rel_v``),
so relpos computes eole's scores exactly. :func:`load_eole` maps a folder
onto the OpenNMT-py form below, so everything else is as for OpenNMT-py.

What maps (OpenNMT-py 3.5's ``onmt/encoders/transformer.py``,
``onmt/decoders/transformer.py``, ``onmt/modules/multi_headed_attn.py``,
``position_ffn.py``, ``embeddings.py``; docs/interop.md has the table):

- pre-LayerNorm blocks (OpenNMT-py 3 has no post-norm Transformer), a
  final LayerNorm on each side, self-attention then cross-attention then
  the feed-forward in a decoder block: relpos's seq2seq block exactly.
- ``max_relative_positions = k > 0`` (Shaw et al.): one table
  ``relative_positions_embeddings`` [2k+1, dim_per_head] per layer, shared
  by the heads, row ``clip(j - i, -k, k) + k``, used for the keys and the
  values: relpos ``position = shaw``, ``max_distance = k``,
  ``rel_k = rel_v`` = that table. Cross-attention has none, as in relpos.
- no position encoding, hence no embedding scale (OpenNMT-py multiplies by
  sqrt(d_model) only inside its sinusoidal encoding); relpos always
  multiplies by sqrt(d_model), so it stores ``c E / sqrt(d_model)``.
- LayerNorm epsilon ``norm_eps`` (default 1e-6) against relpos's fixed
  1e-5: LayerNorm(c x; eps c^2) = LayerNorm(x; eps), so with
  c = sqrt(1e-5 / norm_eps) the import carries the whole residual stream
  scaled by c (the embedding, and every sublayer's output projection
  weight and bias that adds to the stream). Every LayerNorm then sees c x
  and normalises exactly as OpenNMT-py does; the decoder's final
  LayerNorm, whose output feeds the tied projection, gets gamma and beta
  multiplied by sqrt(d_model) / c so that the logits are OpenNMT-py's.
- ``pos_ffn_activation_fn = gelu`` (``F.gelu``, the erf form, as relpos).
- missing biases (``add_qkvbias`` / ``add_ffnbias`` false) are zeros.
- ``share_embeddings`` and ``share_decoder_embeddings``: one matrix for
  the encoder input, the decoder input and the generator (relpos ties all
  three); the generator's bias is ``head.bias``.

The vocabulary: relpos's ids are those of the relpos task the checkpoint
is written for (``task``, e.g. ``s2s_reverse``); ``tokens[i]`` is the
OpenNMT-py token of relpos id i (for the s2s tasks: ``"0"`` .. ``"7"``,
``"<s>"``, ``"</s>"``). OpenNMT-py tokens that no relpos id names are
dropped, which is allowed only for ``<unk>``, ``<blank>`` and the
vocabulary's padding entries ``averyunlikelytoken*``: their logits are
removed from the softmax, so the kept tokens' probabilities are
renormalised and a greedy or beam decoding is OpenNMT-py's as long as
OpenNMT-py does not choose a dropped token. Any other token outside
``tokens`` is refused.

Everything else is refused with :class:`UnsupportedModelError` naming the
option: RNN / CNN models, sinusoidal or learned positions, RoPE (-1), ALiBi
(-2), T5 buckets, RMSNorm, parallel residuals, gated or ReLU feed-forwards,
grouped-query attention, average attention, copy attention, mixture of
experts, LoRA, source features, untied embeddings, embeddings narrower than
the model.
"""

from __future__ import annotations

import argparse
import json
import os
import math
import sys
from typing import Dict, List, Mapping, Optional, Sequence

import numpy as np

from . import ClipBuckets
from . import _relpos_ext as _ext
from ._convert import (LoadedAttention, Source, UnsupportedModelError, _clip,
                       _geometry, _projections)

__all__ = ["UnsupportedModelError", "S2S_TOKENS", "LoadedAttention",
           "from_opennmt", "import_checkpoint", "load_checkpoint",
           "load_eole", "main", "parameters_from_opennmt"]

RELPOS_LAYER_NORM_EPS = 1e-5
# relpos's s2s tasks: symbols 0..7, then BOS and EOS, as OpenNMT-py tokens.
S2S_TOKENS = [str(i) for i in range(8)] + ["<s>", "</s>"]
_DROPPABLE = ("<unk>", "<blank>")
_FILLER = "averyunlikelytoken"  # OpenNMT-py's vocabulary padding


def load_checkpoint(path: str) -> Dict:
    """The checkpoint dict of an OpenNMT-py ``.pt`` file (``model``,
    ``generator``, ``vocab``, ``opt``) with numpy arrays for tensors."""
    try:
        import torch
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("relpos.opennmt: reading a .pt file needs torch") \
            from e
    with torch.serialization.safe_globals([argparse.Namespace]):
        ck = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(ck, dict) or not {"model", "vocab", "opt"} <= set(ck):
        raise ValueError(f"relpos.opennmt: {path} is not an OpenNMT-py "
                         "checkpoint (no model / vocab / opt)")

    def arrays(sd):
        return {k: v.detach().float().numpy() for k, v in (sd or {}).items()}

    return {"model": arrays(ck["model"]), "generator": arrays(
        ck.get("generator")), "vocab": ck["vocab"], "opt": vars(ck["opt"])}


# eole 0.6's defaults for the options its config.json leaves out (it writes
# only what differs from them).
_EOLE_DEFAULTS = {
    "architecture": None, "position_encoding_type": "SinusoidalInterleaved",
    "n_positions": None, "relative_positions_buckets": 0,
    "mlp_activation_fn": "relu", "layer_norm": "standard", "norm_eps": 1e-6,
    "parallel_residual": False, "shared_layer_norm": False,
    "ffn_layernorm": False, "num_experts": 0, "heads_kv": None,
    "head_dim": None, "attn_scaling": None, "query_norm": False,
    "key_norm": False, "q_gating": False, "share_embeddings": False,
    "share_decoder_embeddings": False, "encoder_layer_style": "standard",
    "with_cross_attn": True, "sliding_window": 0, "add_estimator": False,
    "generator_function": "softmax"}
# eole tensor name -> OpenNMT-py's, for the blocks (after the layer index).
_EOLE_BLOCK = {
    "encoder": {"input_layernorm": "layer_norm",
                "post_attention_layernorm": "feed_forward.layer_norm"},
    "decoder": {"input_layernorm": "layer_norm_1",
                "precontext_layernorm": "layer_norm_2",
                "post_attention_layernorm": "feed_forward.layer_norm"}}


def load_eole(model_dir: str) -> Dict:
    """The checkpoint of an eole model folder (``config.json``,
    ``vocab.json``, ``model.00.safetensors``, as ``eole train`` writes
    them) in :func:`load_checkpoint`'s form, with eole's options and tensor
    names mapped onto OpenNMT-py's. What relpos cannot represent raises
    :class:`UnsupportedModelError` naming the option."""
    try:
        from safetensors.numpy import load_file
    except ImportError as e:  # pragma: no cover - depends on the machine
        raise ImportError("relpos.opennmt: reading an eole model needs the "
                          "safetensors package: pip install safetensors") \
            from e
    paths, config, vocab = _eole_files(model_dir)
    model = config["model"]
    sides = {side: {**_EOLE_DEFAULTS, **model, **(model.get(side) or {})}
             for side in ("encoder", "decoder")}
    _eole_check(model, sides)
    enc, dec = sides["encoder"], sides["decoder"]
    opt = _eole_options(model, enc, dec)
    sd, generator = _eole_tensors(load_file(paths["model.00.safetensors"]))
    # Tied tensors are stored once (safetensors keeps no aliases): the
    # encoder's embedding stands for the decoder's and the generator's.
    enc_emb = "encoder.embeddings.make_embedding.emb_luts.0.weight"
    dec_emb = "decoder.embeddings.make_embedding.emb_luts.0.weight"
    if opt["share_embeddings"] and dec_emb not in sd and enc_emb in sd:
        sd[dec_emb] = sd[enc_emb]
    if opt["share_decoder_embeddings"] and "weight" not in generator and \
            dec_emb in sd:
        generator["weight"] = sd[dec_emb]
    return {"model": sd, "generator": generator,
            "vocab": {"src": vocab["src"], "tgt": vocab["tgt"],
                      "decoder_start_token": vocab.get(
                          "decoder_start_token", "<s>")},
            "opt": opt,
            # eole adds q.a unscaled (module docstring).
            "relative_key_scale": math.sqrt(enc["hidden_size"] /
                                            enc["heads"])}


def _eole_refuse(what):
    """Raises UnsupportedModelError for an eole option relpos lacks."""
    raise UnsupportedModelError(f"relpos.opennmt: eole {what} cannot be "
                                "imported into relpos's seq2seq model")


def _eole_files(model_dir):
    """The paths of an eole folder's files, its config.json and its
    vocab.json, checked to be there (one weight shard) and well formed."""
    paths = {n: os.path.join(os.fspath(model_dir), n)
             for n in ("config.json", "vocab.json", "model.00.safetensors")}
    for name, path in paths.items():
        if not os.path.isfile(path):
            raise ValueError(f"relpos.opennmt: {model_dir} is not an eole "
                             f"model folder (no {name})")
    if os.path.exists(os.path.join(os.fspath(model_dir),
                                   "model.01.safetensors")):
        raise UnsupportedModelError("relpos.opennmt: eole weights in several "
                                    "shards (tensor parallelism)")
    with open(paths["config.json"], encoding="utf-8") as f:
        config = json.load(f)
    with open(paths["vocab.json"], encoding="utf-8") as f:
        vocab = json.load(f)
    if not isinstance(config, dict) or not isinstance(config.get("model"),
                                                      dict):
        raise ValueError(f"relpos.opennmt: {paths['config.json']} has no "
                         "model section")
    if not isinstance(vocab, dict) or not {"src", "tgt"} <= set(vocab):
        raise ValueError(f"relpos.opennmt: {paths['vocab.json']} has no "
                         "src / tgt vocabulary")
    return paths, config, vocab


def _eole_check(model, sides):
    """Refuses the eole options (each side's, with eole's defaults filled
    in) that have no OpenNMT-py form relpos imports."""
    if model.get("architecture") != "transformer":
        _eole_refuse(f"architecture = {model.get('architecture')!r} (only "
                     "'transformer')")
    for side, m in sides.items():
        if m["position_encoding_type"] != "Relative":
            _eole_refuse(f"{side} position_encoding_type = "
                         f"{m['position_encoding_type']!r} (only 'Relative', "
                         "Shaw's tables)")
        for key, want in (("encoder_layer_style", "standard"),
                          ("shared_layer_norm", False),
                          ("ffn_layernorm", False), ("head_dim", None),
                          ("attn_scaling", None), ("query_norm", False),
                          ("key_norm", False), ("q_gating", False),
                          ("sliding_window", 0), ("with_cross_attn", True),
                          ("add_estimator", False),
                          ("generator_function", "softmax")):
            if m.get(key, want) != want:
                _eole_refuse(f"{side} {key} = {m.get(key)!r} (only "
                             f"{want!r})")
    enc, dec = sides["encoder"], sides["decoder"]
    for key in ("n_positions", "heads", "hidden_size", "norm_eps"):
        if enc.get(key) != dec.get(key):
            _eole_refuse(f"{key} differing between encoder "
                         f"({enc.get(key)!r}) and decoder ({dec.get(key)!r})")


def _eole_options(model, enc, dec):
    """OpenNMT-py's options (the checkpoint's ``opt``) for eole's model
    section and its encoder / decoder settings."""
    emb = model.get("embeddings") or {}
    width = emb.get("word_vec_size", enc["hidden_size"])
    opt = {"encoder_type": enc.get("encoder_type", "transformer"),
           "decoder_type": dec.get("decoder_type", "transformer"),
           "enc_layers": enc["layers"], "dec_layers": dec["layers"],
           "heads": enc["heads"], "hidden_size": enc["hidden_size"],
           "word_vec_size": width, "transformer_ff": enc["transformer_ff"],
           "max_relative_positions": enc["n_positions"],
           "position_encoding": False,
           "relative_positions_buckets": enc["relative_positions_buckets"],
           "pos_ffn_activation_fn": enc["mlp_activation_fn"],
           "layer_norm": enc["layer_norm"], "norm_eps": enc["norm_eps"],
           "parallel_residual": enc["parallel_residual"],
           "num_experts": enc["num_experts"],
           "num_kv": enc["heads_kv"] or 0,
           "share_embeddings": model.get("share_embeddings", False),
           "share_decoder_embeddings": model.get("share_decoder_embeddings",
                                                 False),
           "self_attn_type": "scaled-dot"}
    if dec["transformer_ff"] != enc["transformer_ff"]:
        _eole_refuse("transformer_ff differing between encoder and decoder")
    return opt


def _eole_tensors(tensors):
    """eole's tensors as float32 under OpenNMT-py's names: the model's
    state dict and the generator's (layer scalars, all 1, dropped)."""
    sd, generator = {}, {}
    for name, value in tensors.items():
        value = np.asarray(value, dtype=np.float32)
        parts = name.split(".")
        if name.endswith(".layer_scalar"):
            if not np.all(value == 1):
                _eole_refuse(f"{name} != 1 (a per-layer output scale)")
            continue
        if parts[0] == "generator":
            generator[".".join(parts[1:])] = value
        elif parts[0] in ("src_emb", "tgt_emb") and parts[1:] == [
                "embeddings", "weight"]:
            side = "encoder" if parts[0] == "src_emb" else "decoder"
            sd[f"{side}.embeddings.make_embedding.emb_luts.0.weight"] = value
        elif parts[0] in _EOLE_BLOCK and len(parts) > 3 and parts[1] == \
                "transformer_layers":
            sd[_eole_block_name(parts)] = value
        else:
            sd[name] = value
    return sd, generator


def _eole_block_name(parts):
    """OpenNMT-py's name of an eole block tensor, from its name's parts
    (``encoder`` / ``decoder``, ``transformer_layers``, index, rest)."""
    rest = ".".join(parts[3:])
    for prefix, onmt in _EOLE_BLOCK[parts[0]].items():
        if rest.startswith(prefix + "."):
            rest = onmt + rest[len(prefix):]
    rest = rest.replace("mlp.gate_up_proj", "feed_forward.w_1")
    rest = rest.replace("mlp.down_proj", "feed_forward.w_2")
    block = "transformer" if parts[0] == "encoder" else "transformer_layers"
    return f"{parts[0]}.{block}.{parts[2]}.{rest}"


def _opt(opt: Mapping, key, default=None):
    return opt.get(key, default)


def _check(opt: Mapping) -> None:
    def refuse(what):
        raise UnsupportedModelError(f"relpos.opennmt: {what} cannot be "
                                    "imported into relpos's seq2seq model")

    for side in ("encoder_type", "decoder_type"):
        if _opt(opt, side) != "transformer":
            refuse(f"{side} = {_opt(opt, side)!r} (only 'transformer')")
    k = _opt(opt, "max_relative_positions", 0)
    if not (isinstance(k, int) and k > 0):
        refuse(f"max_relative_positions = {k!r} (only k > 0, Shaw's tables; "
               "-1 is RoPE, -2 ALiBi, 0 absolute positions)")
    if _opt(opt, "position_encoding", False):
        refuse("position_encoding = true together with relative positions")
    checks = [
        ("relative_positions_buckets", 0), ("pos_ffn_activation_fn", "gelu"),
        ("layer_norm", "standard"), ("parallel_residual", False),
        ("copy_attn", False), ("num_experts", 0), ("share_embeddings", True),
        ("share_decoder_embeddings", True)]
    for key, want in checks:
        if _opt(opt, key, want) != want:
            refuse(f"{key} = {_opt(opt, key)!r} (only {want!r})")
    if _opt(opt, "self_attn_type", "scaled-dot") not in (
            "scaled-dot", "scaled-dot-flash"):
        refuse(f"self_attn_type = {_opt(opt, 'self_attn_type')!r}")
    if _opt(opt, "num_kv", 0) not in (0, _opt(opt, "heads")):
        refuse(f"num_kv = {_opt(opt, 'num_kv')} (grouped-query attention)")
    if _opt(opt, "lora_layers") or _opt(opt, "lora_embedding", False):
        refuse("LoRA")
    if _opt(opt, "src_feats"):
        refuse("source features (src_feats)")
    if _opt(opt, "word_vec_size", _opt(opt, "hidden_size")) != _opt(
            opt, "hidden_size"):
        refuse("word_vec_size != hidden_size")
    if not _opt(opt, "norm_eps", 1e-6) > 0:
        refuse(f"norm_eps = {_opt(opt, 'norm_eps')}")


def _vocab_map(vocab: Mapping, tokens: Sequence[str]) -> np.ndarray:
    """OpenNMT-py row of each relpos id."""
    src, tgt = list(vocab["src"]), list(vocab["tgt"])
    if src != tgt:
        raise UnsupportedModelError(
            "relpos.opennmt: the source and target vocabularies differ "
            "(relpos has one vocabulary: share_vocab)")
    index = {t: i for i, t in enumerate(tgt)}
    missing = [t for t in tokens if t not in index]
    if missing or len(set(tokens)) != len(tokens):
        raise UnsupportedModelError(
            "relpos.opennmt: tokens must be distinct OpenNMT-py tokens; not "
            f"in its vocabulary: {missing[:5]}")
    named = set(tokens)
    extra = [t for t in tgt if t not in named and t not in _DROPPABLE
             and not t.startswith(_FILLER)]
    if extra:
        raise UnsupportedModelError(
            f"relpos.opennmt: {len(extra)} OpenNMT-py token(s) have no relpos "
            f"id (e.g. {extra[:5]}); only <unk>, <blank> and the padding "
            "entries may be dropped")
    return np.array([index[t] for t in tokens], dtype=np.int64)


def parameters_from_opennmt(state: Mapping, tokens: Sequence[str]):
    """(relpos model settings, {relpos name: float32 array}) of a checkpoint
    dict as :func:`load_checkpoint` returns it."""
    opt, sd = state["opt"], dict(state["model"])
    _check(opt)
    sd.update({"generator." + k: v for k, v in state["generator"].items()})
    d, k = int(opt["hidden_size"]), int(opt["max_relative_positions"])
    c = math.sqrt(RELPOS_LAYER_NORM_EPS / float(_opt(opt, "norm_eps", 1e-6)))
    rows = _vocab_map(state["vocab"], tokens)
    key_scale = float(state.get("relative_key_scale", 1.0))

    def get(name, shape=None):
        if name not in sd:
            raise UnsupportedModelError(f"relpos.opennmt: no tensor {name}")
        a = np.asarray(sd[name], dtype=np.float32)
        if shape is not None and a.shape != tuple(shape):
            raise UnsupportedModelError(
                f"relpos.opennmt: {name} has shape {a.shape}, expected "
                f"{tuple(shape)}")
        return a

    def bias(name, n):
        return get(name, (n,)) if name in sd else np.zeros(n, np.float32)

    emb = get("encoder.embeddings.make_embedding.emb_luts.0.weight")
    for other in ("decoder.embeddings.make_embedding.emb_luts.0.weight",
                  "generator.weight"):
        if not np.array_equal(get(other, emb.shape), emb):
            raise UnsupportedModelError(
                f"relpos.opennmt: {other} differs from the encoder's "
                "embedding (relpos ties all three)")
    P = {"embed.token": emb[rows] * (c / math.sqrt(d))}

    def ln(dst, src, scale=1.0):
        P[dst + ".gamma"] = get(src + ".weight", (d,)) * scale
        P[dst + ".beta"] = get(src + ".bias", (d,)) * scale

    def linear(dst, src, rows_out, cols, scale=1.0):
        P[dst + ".weight"] = get(src + ".weight", (rows_out, cols)) * scale
        P[dst + ".bias"] = bias(src + ".bias", rows_out) * scale

    def attention(dst, src, relative):
        for x, y in (("q", "query"), ("k", "keys"), ("v", "values")):
            linear(f"{dst}.{x}", f"{src}.linear_{y}", d, d)
        linear(f"{dst}.out", f"{src}.final_linear", d, d, c)
        if relative:
            t = get(src + ".relative_positions_embeddings.weight",
                    (2 * k + 1, d // int(opt["heads"])))
            P[dst + ".rel_k"], P[dst + ".rel_v"] = t * key_scale, t

    def feed_forward(dst, src):
        ln(dst + ".ln2", src + ".layer_norm")
        ff = int(opt["transformer_ff"])
        linear(dst + ".ff.in", src + ".w_1", ff, d)
        linear(dst + ".ff.out", src + ".w_2", d, ff, c)

    for l in range(int(opt["enc_layers"])):
        dst, src = f"encoder.blocks.{l}", f"encoder.transformer.{l}"
        ln(dst + ".ln1", src + ".layer_norm")
        attention(dst + ".attn", src + ".self_attn", True)
        feed_forward(dst, src + ".feed_forward")
    ln("encoder.final_ln", "encoder.layer_norm")
    for l in range(int(opt["dec_layers"])):
        dst, src = f"decoder.blocks.{l}", f"decoder.transformer_layers.{l}"
        ln(dst + ".ln1", src + ".layer_norm_1")
        attention(dst + ".attn", src + ".self_attn", True)
        ln(dst + ".cross_ln", src + ".layer_norm_2")
        attention(dst + ".cross", src + ".context_attn", False)
        feed_forward(dst, src + ".feed_forward")
    ln("decoder.final_ln", "decoder.layer_norm", math.sqrt(d) / c)
    P["head.bias"] = get("generator.bias", (emb.shape[0],))[rows]
    settings = {"arch": "seq2seq", "d_model": d, "heads": int(opt["heads"]),
                "layers": int(opt["enc_layers"]),
                "decoder_layers": int(opt["dec_layers"]),
                "d_ff": int(opt["transformer_ff"]), "position": "shaw",
                "max_distance": k, "dropout": 0}
    return settings, {n: np.ascontiguousarray(a, np.float32)
                      for n, a in P.items()}


def import_checkpoint(state: Mapping, output_dir: str, task: str,
                      tokens: Sequence[str] = S2S_TOKENS,
                      train: Optional[Mapping[str, str]] = None):
    """Writes the relpos seq2seq checkpoint of an OpenNMT-py checkpoint dict
    (:func:`load_checkpoint`) into output_dir, for the relpos task ``task``
    whose id i is the OpenNMT-py token ``tokens[i]``; ``train``: further
    train settings of the checkpoint's config. Returns the relpos Model."""
    settings, params = parameters_from_opennmt(state, tokens)
    cfg = [("train", "task", task)]
    cfg += [("train", key, str(v)) for key, v in (train or {}).items()]
    cfg += [("model", key, str(v)) for key, v in settings.items()]
    model = _ext.Model.create(cfg)
    names = set(model.parameter_names())
    if names != set(params):
        raise UnsupportedModelError(
            "relpos.opennmt: the imported tensors do not cover the relpos "
            f"model (missing {sorted(names - set(params))[:4]}, extra "
            f"{sorted(set(params) - names)[:4]})")
    if model.parameter("embed.token").shape[0] != len(tokens):
        raise UnsupportedModelError(
            f"relpos.opennmt: task {task} has "
            f"{model.parameter('embed.token').shape[0]} ids, tokens "
            f"{len(tokens)}")
    bos, eos = model.bos_eos()
    start = state["vocab"].get("decoder_start_token", "<s>")
    if tokens[bos] != start or tokens[eos] != "</s>":
        raise UnsupportedModelError(
            f"relpos.opennmt: relpos's BOS / EOS ids {bos} / {eos} are "
            f"tokens {tokens[bos]!r} / {tokens[eos]!r}, OpenNMT-py's "
            f"{start!r} / '</s>'")
    for name, value in params.items():
        model.set_parameter(name, value.reshape(-1))
    model.save(str(output_dir))
    return model


def main(argv: Optional[List[str]] = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m relpos.opennmt",
        description="Import an OpenNMT-py Transformer checkpoint (.pt) or an "
                    "eole model folder with relative positions into a "
                    "relpos seq2seq checkpoint folder (docs/interop.md).")
    parser.add_argument("checkpoint",
                        help="OpenNMT-py .pt file or eole model folder")
    parser.add_argument("output_dir")
    parser.add_argument("--task", required=True,
                        help="the relpos task whose ids the tokens name")
    parser.add_argument("--tokens", default=",".join(S2S_TOKENS),
                        help="comma-separated OpenNMT-py token of each "
                             "relpos id (default: the s2s tasks')")
    args = parser.parse_args(argv)
    try:
        load = load_eole if os.path.isdir(args.checkpoint) else \
            load_checkpoint
        import_checkpoint(load(args.checkpoint), args.output_dir,
                          args.task, args.tokens.split(","))
    except (ValueError, OSError, RuntimeError, ImportError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    print(f"wrote {args.output_dir}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


# --- one attention layer's weights (numpy) -----------------------------------


def from_opennmt(state_dict: Mapping, num_heads: int,
                 max_relative_positions: int,
                 prefix: str = "") -> LoadedAttention:
    """An OpenNMT-py ``MultiHeadedAttention`` with ``max_relative_positions
    = k > 0`` from its tensors ``{prefix}linear_query / linear_keys /
    linear_values / final_linear .weight / .bias`` and
    ``{prefix}relative_positions_embeddings.weight``, e.g. prefix
    ``"encoder.transformer.0.self_attn."``."""
    source = Source("OpenNMT-py", "opennmt.from_opennmt")
    k = _clip(source, "max_relative_positions", max_relative_positions)
    if k == 0:
        raise ValueError(f"relpos.{source.where}: max_relative_positions = 0 "
                         "has no relative table (OpenNMT-py's plain "
                         "attention)")
    e, d = _geometry(state_dict, prefix + "linear_query.weight", num_heads,
                     source)

    get, w = _projections(state_dict, prefix, source, e,
                          ("linear_query", "linear_keys", "linear_values",
                           "final_linear"))
    table = get("relative_positions_embeddings.weight", (2 * k + 1, d))
    return LoadedAttention(num_heads=num_heads, ak=table, av=table,
                           buckets=ClipBuckets(k, k), source=str(source), **w)

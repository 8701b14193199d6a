"""What relpos knows about Hugging Face transformers: running a loaded
model's attention on relpos (patch), and importing single attention layers'
weights (the loaders, numpy; no PyTorch needed).

    from_t5(state_dict, config=None, ...)   a T5 / mT5 self-attention layer
    from_wav2vec2_bert(state_dict, ...)     Wav2Vec2-BERT (relative_key)
    from_wav2vec2_conformer(state_dict, ...)  Wav2Vec2-Conformer (relative)
    LoadedAttention  what they return (relpos/_convert.py; docs/interop.md)

    patch(model)     replace the forward of every supported attention module
                     of a transformers model by one that calls relpos (the
                     module's own parameters, projections and cache; nothing
                     is copied); returns the model
    unpatch(model)   restore the original forwards exactly
    is_patched(model)
    SUPPORTED        the attention classes patch knows, and what it calls

What each architecture maps to, what is refused and why: docs/hf.md.

``patch`` checks every module first and changes nothing unless all of them
can be patched (it never leaves a model half-patched). Settings that would
make relpos compute something other than the model (RoPE scaling, a sliding
window that takes effect, attention dropout while training, an attention
mask that is not padding + causal, ``output_attentions=True``, a cache that
is not a dynamic one, ...) are refused by ``patch`` or, when they only
appear with the inputs, by the patched forward, with a ValueError naming
the module and the setting.
"""

from __future__ import annotations

import inspect
import re
import weakref
from typing import Mapping, Optional

import numpy as np

try:
    import torch
except ModuleNotFoundError:  # the loaders need numpy only; patch needs a
    torch = None             # transformers model, hence PyTorch

from . import ClipBuckets, T5Buckets, t5_bucket
from ._convert import (LoadedAttention, Source, _array, _clip, _geometry,
                       _positive, _projections, _rows, _setting)

__all__ = ["patch", "unpatch", "is_patched", "SUPPORTED", "PatchError",
           "LoadedAttention", "from_t5", "from_wav2vec2_bert",
           "from_wav2vec2_conformer"]

_STATE = "_relpos_hf_state"


class PatchError(ValueError):
    """A model, module or call that relpos.hf refuses (nothing was changed
    by patch when it raises this)."""


def _relpos():
    import relpos
    import relpos.torch  # noqa: F401  (the PyTorch interface)
    return relpos


# --------------------------------------------------------------------------
# Checks shared by every architecture


def _qualname(module):
    t = type(module)
    return t.__module__ + "." + t.__qualname__


def _signature(cls):
    return tuple(inspect.signature(cls.forward).parameters)


def _require_attrs(where, module, names):
    missing = [n for n in names if not hasattr(module, n)]
    if missing:
        raise PatchError(
            f"relpos.hf.patch: {where}: the module has no attribute "
            f"{', '.join(missing)}: a module layout of a transformers version "
            f"relpos.hf does not know (tested with 5.24); nothing was patched")


def _collecting_attentions():
    """True when transformers' output capture records attention weights
    (output_attentions=True on the call or in the config)."""
    try:
        from transformers.utils.output_capturing import _active_collector
    except ImportError:  # pragma: no cover - other transformers layouts
        return False
    c = _active_collector.get()
    return bool(c) and any(k in c for k in ("attentions", "cross_attentions"))


# Keyword arguments the layers pass down that change nothing here.
_HARMLESS = {"position_ids", "use_cache", "cache_position",
             "output_attentions", "output_hidden_states", "return_dict"}


def _check_call(where, module, kwargs, dropout):
    if _collecting_attentions() or kwargs.get("output_attentions"):
        raise PatchError(
            f"relpos.hf: {where}: output_attentions=True is not supported "
            f"(relpos never forms the attention weights); unpatch the model "
            f"to get them")
    for key, value in kwargs.items():
        if key in _HARMLESS or value is None or value is False:
            continue
        raise PatchError(
            f"relpos.hf: {where}: the keyword argument {key}= is not "
            f"supported by the patched attention (got {type(value).__name__})")
    if module.training and dropout > 0:
        raise PatchError(
            f"relpos.hf: {where}: attention dropout {dropout} while training "
            f"is not supported (relpos has no dropout on the probabilities); "
            f"set it to 0 or call model.eval()")


def _check_cache_kind(where, cache, layer_idx):
    """Only dynamic cache layers (keys 0 .. past + Nq - 1). A sliding
    window layer is accepted while it has dropped nothing: _check_cache
    compares the keys it returns with past + Nq, and the patched forward
    refuses a window that would take effect."""
    layers = getattr(cache, "layers", None)
    if layers is not None and layer_idx < len(layers) and \
            type(layers[layer_idx]).__name__ not in (
                "DynamicLayer", "DynamicSlidingWindowLayer"):
        raise PatchError(
            f"relpos.hf: {where}: a {type(layers[layer_idx]).__name__} cache "
            f"layer: only dynamic caches (DynamicCache) are supported, not "
            f"static or sliding window caches")


def _check_cache(where, past, nq, nk):
    if nk != past + nq:
        raise PatchError(
            f"relpos.hf: {where}: the cache returned {nk} keys for {past} "
            f"cached + {nq} new positions: only dynamic caches (DynamicCache, "
            f"keys 0 .. past + Nq - 1) are supported, not static or sliding "
            f"window caches")


class _Padding:
    """What an attention mask says, as relpos's arguments: item b sees keys
    [starts[b], lengths[b]) (and, causal, j <= i + off)."""

    def __init__(self, batch, nk):
        self.starts = [0] * batch
        self.lengths = [nk] * batch
        self.nk = nk

    def kwargs(self):
        out = {}
        if any(s != 0 for s in self.starts):
            out["key_starts"] = list(self.starts)
        if any(n != self.nk for n in self.lengths):
            out["key_lengths"] = list(self.lengths)
        return out


def _analyse_mask(where, mask, batch, nq, nk, off, causal):
    """The _Padding of a transformers 4-D attention mask, or PatchError.

    The mask (bool: True = visible, or additive float: 0 = visible, the
    dtype's minimum or -inf = masked) must be exactly that of padding at
    either end plus, for causal attention, the causal mask at query offset
    off. The keys an item sees are read from its last query row (which, at
    offset Nk - Nq, sees every non-padding key); every row is then compared
    with the mask those bounds give. Rows that see no key in that mask
    (queries at left-padding positions) may be anything: their outputs are
    padding, and relpos gives them zeros."""
    pad = _Padding(batch, nk)
    if mask is None:
        return pad
    if not isinstance(mask, torch.Tensor) or mask.dim() != 4 or \
            mask.shape[0] not in (1, batch) or mask.shape[1] != 1 or \
            mask.shape[2] not in (1, nq) or mask.shape[3] != nk:
        shape = tuple(mask.shape) if isinstance(mask, torch.Tensor) else \
            type(mask).__name__
        raise PatchError(
            f"relpos.hf: {where}: the attention mask must be a 4-D tensor "
            f"[B, 1, Nq, Nk] = [{batch}, 1, {nq}, {nk}] (eager or sdpa); got "
            f"{shape}")
    if mask.dtype == torch.bool:
        vis = mask
    elif mask.is_floating_point():
        vis = mask == 0
        blocked = (mask == float("-inf")) | \
            (mask <= torch.finfo(mask.dtype).min / 2)
        if not bool((vis | blocked).all()):
            raise PatchError(
                f"relpos.hf: {where}: the attention mask holds values other "
                f"than 0 and -inf / the dtype's minimum (an additive bias, "
                f"not a padding mask): not supported")
    else:
        raise PatchError(f"relpos.hf: {where}: attention mask of dtype "
                         f"{mask.dtype} is not supported")
    vis = vis[:, 0].expand(batch, nq, nk)
    j = torch.arange(nk, device=vis.device)
    last = vis[:, -1, :]
    starts = torch.where(last, j, nk).amin(-1)
    ends = torch.where(last, j + 1, 0).amax(-1)
    none = ~last.any(-1)
    starts = torch.where(none, 0, starts)
    ends = torch.where(none, 0, ends)
    # Compare row blocks, so that the check's scratch stays at most
    # B x 1024 x Nk booleans however long the sequence.
    for r0 in range(0, nq, 1024):
        i = torch.arange(r0, min(nq, r0 + 1024), device=vis.device)
        expect = (j[None, None, :] >= starts[:, None, None]) & \
            (j[None, None, :] < ends[:, None, None])
        if causal:
            expect = expect & (j[None, None, :] <= (i + off)[None, :, None])
        empty = ~expect.any(-1, keepdim=True)
        ok = (vis[:, i[0]:i[-1] + 1] == expect) | empty
        if not bool(ok.all()):
            b, row = [int(x) for x in (~ok).nonzero()[0][:2]]
            raise PatchError(
                f"relpos.hf: {where}: the attention mask is not a padding"
                f"{' + causal' if causal else ''} mask (item {b}, query row "
                f"{r0 + row} sees other keys than the contiguous range its "
                f"padding allows): masks with holes, packed sequences, "
                f"sliding windows or custom patterns are not supported")
    pad.starts = [int(x) for x in starts.tolist()]
    pad.lengths = [int(x) for x in ends.tolist()]
    return pad


def _eager(fn):
    """fn runs outside torch.compile's graphs (torch.compiler.disable):
    for the checks that read tensor values into Python (the mask's bounds,
    the positions), which a graph cannot hold. A compiled patched model
    breaks its graph at each call, once, instead of at every value read."""
    disable = getattr(getattr(torch, "compiler", None), "disable", None)
    return fn if disable is None else disable(fn)


def _padding(state, where, mask, batch, nq, nk, off, causal):
    """_analyse_mask, computed once per mask tensor and shape (every layer
    of one forward receives the same mask)."""
    if mask is None:
        return _Padding(batch, nk)
    return _cached_padding(state, where, mask, batch, nq, nk, off, causal)


@_eager
def _cached_padding(state, where, mask, batch, nq, nk, off, causal):
    key = (batch, nq, nk, off, causal)
    if state is not None:
        hit = state.mask_cache
        if hit is not None and hit[0]() is mask and \
                hit[1] == mask._version and hit[2] == key:
            return hit[3]
    pad = _analyse_mask(where, mask, batch, nq, nk, off, causal)
    if state is not None:
        state.mask_cache = (weakref.ref(mask), mask._version, key, pad)
    return pad


@_eager
def _rope_offsets(where, position_ids, pad, batch, nq, off):
    """Per-item offsets o_b with position_ids[b, i] = i + o_b on every query
    row that is not padding (an int when all items agree)."""
    if position_ids is None:
        raise PatchError(f"relpos.hf: {where}: position_ids were not passed "
                         f"to the attention (another transformers layout?)")
    p = position_ids
    if p.dim() == 1:
        p = p[None]
    if p.dim() != 2 or p.shape[-1] != nq or p.shape[0] not in (1, batch):
        raise PatchError(f"relpos.hf: {where}: position_ids of shape "
                         f"{tuple(position_ids.shape)} (expected [B, {nq}])")
    d = (p - torch.arange(nq, device=p.device)).expand(batch, nq).cpu()
    out = []
    for b in range(batch):
        lo = max(pad.starts[b] - off, 0)
        hi = min(pad.lengths[b] - off, nq)
        row = d[b, lo:hi]
        if row.numel() == 0:
            out.append(0)
            continue
        if bool((row != row[0]).any()):
            raise PatchError(
                f"relpos.hf: {where}: position_ids of item {b} do not "
                f"increase by one per token over its non-padding positions "
                f"(packed sequences or custom positions): not supported")
        out.append(int(row[0]))
    return out[0] if all(o == out[0] for o in out) else out


class _PatchedForward:
    """The forward that patch puts on a module (an instance attribute):
    calls fn(module, plan, *args, **kwargs), fn the architecture's
    module-level forward (_llama_forward, ...) and plan this object, which
    holds the module's name for messages (where) and what its checks
    found (RoPE's base, T5's table owner). An object of plain attributes
    rather than a closure, so that a patched model pickles (torch.save of
    the whole model) and deep-copies."""

    def __init__(self, fn, module, where, **found):
        self.fn, self.module, self.where = fn, module, where
        vars(self).update(found)

    def __call__(self, *args, **kwargs):
        return self.fn(self.module, self, *args, **kwargs)


def _merge(o):
    """[B, H, N, d] -> [B, N, H * d]."""
    b, h, n, d = o.shape
    return o.transpose(1, 2).reshape(b, n, h * d)


# --------------------------------------------------------------------------
# T5 and mT5


def _heads(x, dh):
    """[B, N, heads * dh] -> [B, heads, N, dh] (a view)."""
    b, n = x.shape[:2]
    return x.view(b, n, -1, dh).transpose(1, 2)


def _check_scaling(where, module):
    """relpos scales scores by 1 / sqrt(head_dim): refuse any other."""
    if abs(module.scaling - module.head_dim ** -0.5) > 1e-12:
        raise PatchError(f"relpos.hf.patch: {where}: scaling "
                         f"{module.scaling} is not head_dim ** -0.5; nothing "
                         f"was patched")


def _t5_plan(where, module, owner):
    _require_attrs(where, module, ("q", "k", "v", "o", "n_heads",
                                   "key_value_proj_dim", "is_decoder",
                                   "relative_attention_num_buckets",
                                   "relative_attention_max_distance",
                                   "dropout", "layer_idx", "scaling"))
    if owner is None or not getattr(owner, "has_relative_attention_bias",
                                    False):
        raise PatchError(
            f"relpos.hf.patch: {where}: no relative_attention_bias table "
            f"found for this self-attention (T5 keeps it in block 0 of each "
            f"stack); nothing was patched")
    if bool(getattr(module, "is_causal", module.is_decoder)) != \
            bool(module.is_decoder):
        raise PatchError(f"relpos.hf.patch: {where}: is_causal "
                         f"({module.is_causal}) differs from is_decoder "
                         f"({module.is_decoder}); nothing was patched")
    if module.scaling != 1.0:
        raise PatchError(f"relpos.hf.patch: {where}: scaling "
                         f"{module.scaling} (T5 has 1.0); nothing was patched")
    # The owner is kept on the forward object (not a submodule, so the
    # module tree and state_dict are unchanged; a deepcopy or pickle of the
    # model copies it along with the model).
    return _PatchedForward(_t5_forward, module, where, owner=owner)


def _t5_forward(self, plan, hidden_states, mask=None, key_value_states=None,
                position_bias=None, cache=None, **kwargs):
    where = plan.where
    rp = _relpos()
    state = getattr(self, "_relpos_hf_model_state", None)
    _check_call(where, self, kwargs, self.dropout)
    if key_value_states is not None or position_bias is not None:
        what = "key_value_states" if key_value_states is not None \
            else "position_bias"
        raise PatchError(
            f"relpos.hf: {where}: called with {what} (the patched T5 "
            f"self-attention computes its own bias from the table of its "
            f"stack's first block)")
    bsz, n = hidden_states.shape[:2]
    dh = self.key_value_proj_dim
    q, k, v = (_heads(p(hidden_states), dh) for p in
               (self.q, self.k, self.v))
    past = 0
    if cache is not None:
        from transformers.cache_utils import EncoderDecoderCache
        cur = cache.self_attention_cache \
            if isinstance(cache, EncoderDecoderCache) else cache
        _check_cache_kind(where, cur, self.layer_idx)
        past = int(cur.get_seq_length(self.layer_idx))
        k, v = cur.update(k, v, self.layer_idx)
    nk = k.shape[2]
    _check_cache(where, past, n, nk)
    causal = bool(self.is_decoder)
    pad = _padding(state, where, mask, bsz, n, nk, past, causal)
    table = plan.owner.relative_attention_bias.weight  # [nb, H]
    out = rp.torch.attention(
        q, k, v, causal=causal, scale=1.0, bias=table.t(),
        buckets=rp.T5Buckets(self.relative_attention_num_buckets,
                             self.relative_attention_max_distance,
                             not causal),
        **pad.kwargs())
    return self.o(_merge(out)), None, None


def _t5_plans(model):
    """(module, forward) for every T5 / mT5 self-attention; the owner of the
    bias table is block 0's self-attention of the same stack."""
    plans, owners = [], {}
    for name, m in model.named_modules():
        if type(m).__qualname__ in ("T5Stack", "MT5Stack") and \
                hasattr(m, "block") and len(m.block):
            try:
                first = m.block[0].layer[0].SelfAttention
            except (AttributeError, IndexError, TypeError):
                raise PatchError(f"relpos.hf.patch: {name}: a T5 stack "
                                 f"without block.0.layer.0.SelfAttention "
                                 f"(another transformers layout?); nothing "
                                 f"was patched") from None
            for blk in m.block:
                owners[id(blk.layer[0].SelfAttention)] = first
    cross = []
    for name, m in model.named_modules():
        if _qualname(m) not in _T5_CLASSES:
            continue
        if name.endswith("EncDecAttention"):
            cross.append(name)  # stays Hugging Face's (no positions)
            continue
        owner = owners.get(id(m), m if getattr(
            m, "has_relative_attention_bias", False) else None)
        where = f"{name or '<model>'} ({type(m).__qualname__})"
        plans.append((name, m, _t5_plan(where, m, owner)))
    return plans, cross


_T5_CLASSES = {
    "transformers.models.t5.modeling_t5.T5Attention",
    "transformers.models.mt5.modeling_mt5.MT5Attention",
}
_T5_SIGNATURE = ("self", "hidden_states", "mask", "key_value_states",
                 "position_bias", "cache", "kwargs")


# --------------------------------------------------------------------------
# Wav2Vec2-BERT and Wav2Vec2-Conformer (encoder self-attention)


def _w2v_plan(where, module):
    _require_attrs(where, module, ("linear_q", "linear_k", "linear_v",
                                   "linear_out", "num_heads", "head_size",
                                   "position_embeddings_type", "dropout",
                                   "scaling", "is_causal"))
    kind = module.position_embeddings_type
    if kind == "relative_key":
        _require_attrs(where, module, ("distance_embedding",
                                       "left_max_position_embeddings",
                                       "right_max_position_embeddings"))
    elif kind == "relative":
        _require_attrs(where, module, ("linear_pos", "pos_bias_u",
                                       "pos_bias_v"))
        if module.linear_pos.bias is not None:
            raise PatchError(f"relpos.hf.patch: {where}: linear_pos has a "
                             f"bias; nothing was patched")
    else:
        raise PatchError(
            f"relpos.hf.patch: {where}: position_embeddings_type={kind!r} is "
            f"not supported (relative_key and relative are); nothing was "
            f"patched")
    if module.is_causal:
        raise PatchError(f"relpos.hf.patch: {where}: is_causal=True; nothing "
                         f"was patched")
    if abs(module.scaling - module.head_size ** -0.5) > 1e-12:
        raise PatchError(f"relpos.hf.patch: {where}: scaling "
                         f"{module.scaling} is not head_size ** -0.5; "
                         f"nothing was patched")
    return _PatchedForward(_w2v_forward, module, where)


def _w2v_forward(self, plan, hidden_states, attention_mask=None,
                 relative_position_embeddings=None, **kwargs):
    where = plan.where
    rp = _relpos()
    state = getattr(self, "_relpos_hf_model_state", None)
    _check_call(where, self, kwargs, self.dropout.p)
    bsz, n = hidden_states.shape[:2]
    dh = self.head_size
    q, k, v = (_heads(p(hidden_states), dh) for p in
               (self.linear_q, self.linear_k, self.linear_v))
    pad = _padding(state, where, attention_mask, bsz, n, n, 0, False)
    if self.position_embeddings_type == "relative_key":
        out = rp.torch.attention(
            q, k, v, self.distance_embedding.weight,
            buckets=rp.ClipBuckets(self.left_max_position_embeddings,
                                   self.right_max_position_embeddings),
            **pad.kwargs())
    else:
        pe = relative_position_embeddings
        if pe is None or pe.dim() != 3 or pe.shape[0] != 1 or \
                pe.shape[1] != 2 * n - 1:
            shape = None if pe is None else tuple(pe.shape)
            raise PatchError(
                f"relpos.hf: {where}: relative_position_embeddings must "
                f"be [1, 2N - 1, D] = [1, {2 * n - 1}, D] (got {shape})")
        # Row m of the projected encodings is XL's distance i - j =
        # N - 1 - m, i.e. relpos's r + (N - 1): relpos's per-head key
        # table at max_distance N - 1, unchanged.
        ak = self.linear_pos(pe[0]).view(2 * n - 1, self.num_heads, dh) \
            .transpose(0, 1)
        u = self.pos_bias_u
        out = rp.torch.attention(
            q + u[None, :, None, :], k, v, ak, max_distance=n - 1,
            pb=self.pos_bias_v - u, **pad.kwargs())
    return self.linear_out(_merge(out)), None


_W2V_CLASSES = {
    "transformers.models.wav2vec2_bert.modeling_wav2vec2_bert."
    "Wav2Vec2BertSelfAttention",
    "transformers.models.wav2vec2_conformer.modeling_wav2vec2_conformer."
    "Wav2Vec2ConformerSelfAttention",
}
_W2V_SIGNATURE = ("self", "hidden_states", "attention_mask",
                  "relative_position_embeddings", "kwargs")


# --------------------------------------------------------------------------
# BLOOM (ALiBi)


def _bloom_plan(where, module):
    _require_attrs(where, module, ("query_key_value", "dense", "num_heads",
                                   "head_dim", "inv_norm_factor", "beta",
                                   "attention_dropout", "hidden_dropout",
                                   "pretraining_tp", "slow_but_exact",
                                   "layer_idx", "_reshape"))
    if module.pretraining_tp > 1 and module.slow_but_exact:
        raise PatchError(f"relpos.hf.patch: {where}: pretraining_tp="
                         f"{module.pretraining_tp} with slow_but_exact=True "
                         f"(a sliced output projection) is not supported; "
                         f"nothing was patched")
    if module.beta != 1.0 or \
            abs(module.inv_norm_factor - module.head_dim ** -0.5) > 1e-12:
        raise PatchError(f"relpos.hf.patch: {where}: beta={module.beta}, "
                         f"inv_norm_factor={module.inv_norm_factor} (BLOOM "
                         f"has 1 and head_dim ** -0.5); nothing was patched")
    from transformers.models.bloom import modeling_bloom as mb
    for fn in ("_get_alibi_slopes", "dropout_add"):
        if not hasattr(mb, fn):
            raise PatchError(f"relpos.hf.patch: {where}: "
                             f"transformers.models.bloom.modeling_bloom has "
                             f"no {fn} (another transformers version?); "
                             f"nothing was patched")
    return _PatchedForward(_bloom_forward, module, where)


def _bloom_forward(self, plan, hidden_states, residual, alibi,
                   attention_mask, layer_past=None, use_cache=False,
                   output_attentions=False, **kwargs):
    from transformers.models.bloom import modeling_bloom as mb
    where = plan.where
    rp = _relpos()
    state = getattr(self, "_relpos_hf_model_state", None)
    kwargs = dict(kwargs, output_attentions=output_attentions)
    _check_call(where, self, kwargs, self.attention_dropout.p)
    bsz, n = hidden_states.shape[:2]
    q, k, v = self._reshape(self.query_key_value(hidden_states))
    past = 0
    if layer_past is not None:
        _check_cache_kind(where, layer_past, self.layer_idx)
        past = int(layer_past.get_seq_length(self.layer_idx))
        k, v = layer_past.update(k, v, self.layer_idx)
    nk = k.shape[2]
    _check_cache(where, past, n, nk)
    if not isinstance(alibi, torch.Tensor) or \
            tuple(alibi.shape) != (bsz * self.num_heads, 1, nk):
        shape = tuple(alibi.shape) if isinstance(alibi, torch.Tensor) \
            else type(alibi).__name__
        raise PatchError(
            f"relpos.hf: {where}: alibi must be BloomModel's "
            f"[B * heads, 1, Nk] = [{bsz * self.num_heads}, 1, {nk}] "
            f"(got {shape})")
    pad = _padding(state, where, attention_mask, bsz, n, nk, past, True)
    # BLOOM adds m_h * (key position among the non-padding tokens); under
    # the causal mask that is -m_h |r| plus a constant per query row,
    # which softmax ignores. BLOOM's own float32 slopes.
    slopes = mb._get_alibi_slopes(self.num_heads, q.device).to(q.dtype)
    out = rp.torch.attention(q, k, v, max_distance=0, causal=True,
                             alibi=slopes,
                             **pad.kwargs())
    output = self.dense(_merge(out))
    output = mb.dropout_add(output, residual, self.hidden_dropout,
                            self.training)
    return output, None


_BLOOM_CLASSES = {"transformers.models.bloom.modeling_bloom.BloomAttention"}
_BLOOM_SIGNATURE = ("self", "hidden_states", "residual", "alibi",
                    "attention_mask", "layer_past", "use_cache",
                    "output_attentions", "kwargs")


# --------------------------------------------------------------------------
# RoPE decoders: Llama, Mistral, Qwen2 (split halves, GQA), GPT-J
# (interleaved on rotary_dim), GPT-NeoX (split halves on rotary_pct)


def _rope_base(where, config):
    params = getattr(config, "rope_parameters", None)
    if not isinstance(params, dict) or "rope_theta" not in params:
        raise PatchError(f"relpos.hf.patch: {where}: config.rope_parameters "
                         f"has no rope_theta (another transformers layout?); "
                         f"nothing was patched")
    kind = params.get("rope_type", "default")
    if kind != "default":
        raise PatchError(
            f"relpos.hf.patch: {where}: rope_parameters rope_type={kind!r} "
            f"(RoPE scaling changes the frequencies) is not supported; "
            f"nothing was patched")
    return float(params["rope_theta"])


def _sliding_window(module):
    w = getattr(module, "sliding_window", None)
    if w is None and type(module).__qualname__ == "MistralAttention":
        w = getattr(module.config, "sliding_window", None)
    return w


def _llama_plan(where, module):
    _require_attrs(where, module, ("q_proj", "k_proj", "v_proj", "o_proj",
                                   "head_dim", "scaling", "config",
                                   "attention_dropout", "layer_idx",
                                   "num_key_value_groups"))
    base = _rope_base(where, module.config)
    _check_scaling(where, module)
    if module.head_dim % 2:
        raise PatchError(f"relpos.hf.patch: {where}: odd head_dim "
                         f"{module.head_dim}; nothing was patched")
    return _PatchedForward(_llama_forward, module, where, base=base)


def _llama_forward(self, plan, hidden_states, position_embeddings=None,
                   attention_mask=None, cache=None, **kwargs):
    where = plan.where
    state = getattr(self, "_relpos_hf_model_state", None)
    _check_call(where, self, kwargs, self.attention_dropout)
    bsz, n = hidden_states.shape[:2]
    dh = self.head_dim
    q, k, v = (_heads(p(hidden_states), dh) for p in
               (self.q_proj, self.k_proj, self.v_proj))
    return _rope_decoder(self, where, state, q, k, v, bsz, n, cache,
                         attention_mask, kwargs.get("position_ids"),
                         plan.base, "split_halves", dh, self.o_proj)


def _rope_decoder(self, where, state, q, k, v, bsz, n, cache, mask,
                  position_ids, base, layout, rot, out_proj):
    """RoPE on the first rot dimensions, cache, causal GQA attention."""
    rp = _relpos()
    past = 0
    if cache is not None:
        _check_cache_kind(where, cache, self.layer_idx)
        past = int(cache.get_seq_length(self.layer_idx))
    nk_total = past + n
    w = _sliding_window(self)
    if w is not None and nk_total > w:
        raise PatchError(
            f"relpos.hf: {where}: sliding_window={w} takes effect at "
            f"{nk_total} keys: not supported (it is exact up to {w} keys)")
    # Mask bounds first: the positions are checked on non-padding rows only.
    pad = _padding(state, where, mask, bsz, n, nk_total, past, True)
    off = _rope_offsets(where, position_ids, pad, bsz, n, past)
    d = q.shape[-1]

    def rotate(x):
        if rot == d:
            return rp.torch.rope(x, position_offset=off, base=base,
                                 layout=layout)
        return torch.cat([rp.torch.rope(x[..., :rot], position_offset=off,
                                        base=base, layout=layout),
                          x[..., rot:]], dim=-1)

    q, k = rotate(q), rotate(k)
    if cache is not None:
        k, v = cache.update(k, v, self.layer_idx)
    nk = k.shape[2]
    _check_cache(where, past, n, nk)
    out = rp.torch.attention(q, k, v, max_distance=0, causal=True,
                             **pad.kwargs())
    return out_proj(_merge(out)), None


def _gptj_plan(where, module):
    _require_attrs(where, module, ("q_proj", "k_proj", "v_proj", "out_proj",
                                   "head_dim", "scaling", "rotary_dim",
                                   "attention_dropout", "resid_dropout",
                                   "layer_idx", "config"))
    rot = module.rotary_dim
    if rot is None or rot <= 0 or rot % 2 or rot > module.head_dim:
        raise PatchError(f"relpos.hf.patch: {where}: rotary_dim={rot!r} "
                         f"(relpos needs an even rotary_dim <= head_dim "
                         f"{module.head_dim}); nothing was patched")
    _check_scaling(where, module)
    return _PatchedForward(_gptj_forward, module, where)


def _gptj_forward(self, plan, hidden_states, position_embeddings=None,
                  attention_mask=None, cache=None, **kwargs):
    where = plan.where
    state = getattr(self, "_relpos_hf_model_state", None)
    _check_call(where, self, kwargs, self.attention_dropout)
    bsz, n = hidden_states.shape[:2]
    dh = self.head_dim
    q, k, v = (_heads(p(hidden_states), dh) for p in
               (self.q_proj, self.k_proj, self.v_proj))
    # GPT-J's table create_sinusoidal_positions has base 10000.
    out, _ = _rope_decoder(self, where, state, q, k, v, bsz, n, cache,
                           attention_mask, kwargs.get("position_ids"),
                           10000.0, "interleaved", self.rotary_dim,
                           self.out_proj)
    return self.resid_dropout(out), None


def _neox_plan(where, module):
    _require_attrs(where, module, ("query_key_value", "dense", "head_size",
                                   "rotary_ndims", "scaling", "config",
                                   "attention_dropout", "layer_idx"))
    base = _rope_base(where, module.config)
    rot = module.rotary_ndims
    if rot <= 0 or rot % 2 or rot > module.head_size:
        raise PatchError(f"relpos.hf.patch: {where}: rotary_ndims={rot} "
                         f"(relpos needs an even number of rotated "
                         f"dimensions, > 0); nothing was patched")
    if abs(module.scaling - module.head_size ** -0.5) > 1e-12:
        raise PatchError(f"relpos.hf.patch: {where}: scaling "
                         f"{module.scaling} is not head_size ** -0.5; "
                         f"nothing was patched")
    return _PatchedForward(_neox_forward, module, where, base=base)


def _neox_forward(self, plan, hidden_states, attention_mask=None,
                  layer_past=None, position_embeddings=None, **kwargs):
    where = plan.where
    state = getattr(self, "_relpos_hf_model_state", None)
    _check_call(where, self, kwargs, self.attention_dropout)
    bsz, n = hidden_states.shape[:2]
    dh = self.head_size
    qkv = self.query_key_value(hidden_states).view(bsz, n, -1, 3 * dh) \
        .transpose(1, 2)
    q, k, v = qkv.chunk(3, dim=-1)
    return _rope_decoder(self, where, state, q, k, v, bsz, n, layer_past,
                         attention_mask, kwargs.get("position_ids"),
                         plan.base, "split_halves", self.rotary_ndims,
                         self.dense)


_LLAMA_CLASSES = {
    "transformers.models.llama.modeling_llama.LlamaAttention",
    "transformers.models.mistral.modeling_mistral.MistralAttention",
    "transformers.models.qwen2.modeling_qwen2.Qwen2Attention",
}
_LLAMA_SIGNATURE = ("self", "hidden_states", "position_embeddings",
                    "attention_mask", "cache", "kwargs")
_GPTJ_CLASSES = {"transformers.models.gptj.modeling_gptj.GPTJAttention"}
_GPTJ_SIGNATURE = _LLAMA_SIGNATURE
_NEOX_CLASSES = {
    "transformers.models.gpt_neox.modeling_gpt_neox.GPTNeoXAttention"}
_NEOX_SIGNATURE = ("self", "hidden_states", "attention_mask", "layer_past",
                   "position_embeddings", "kwargs")

# class -> (forward signature it was written for, plan builder, summary)
_ARCH = {}
for _names, _sig, _plan, _what in (
        (_W2V_CLASSES, _W2V_SIGNATURE, _w2v_plan,
         "relative_key: Shaw key term, ClipBuckets(left, right); relative: "
         "Transformer-XL (per-head ak from linear_pos, pb = v - u)"),
        (_BLOOM_CLASSES, _BLOOM_SIGNATURE, _bloom_plan,
         "causal ALiBi with BLOOM's slopes"),
        (_LLAMA_CLASSES, _LLAMA_SIGNATURE, _llama_plan,
         "RoPE split halves on head_dim, causal, grouped-query"),
        (_GPTJ_CLASSES, _GPTJ_SIGNATURE, _gptj_plan,
         "RoPE interleaved on rotary_dim, causal"),
        (_NEOX_CLASSES, _NEOX_SIGNATURE, _neox_plan,
         "RoPE split halves on rotary_ndims, causal")):
    for _n in _names:
        _ARCH[_n] = (_sig, _plan, _what)
for _n in _T5_CLASSES:
    _ARCH[_n] = (_T5_SIGNATURE, None,
                 "self-attention: T5 bias, T5Buckets (bidirectional in the "
                 "encoder, causal in the decoder), scale 1; cross-attention "
                 "stays Hugging Face's")

SUPPORTED = {k.rsplit(".", 1)[1]: v[2] for k, v in sorted(_ARCH.items())}


# --------------------------------------------------------------------------
# patch / unpatch


class _State:
    def __init__(self, modules, cross):
        self.modules = modules  # [(name, module)]
        self.cross = cross      # names left as Hugging Face's
        self.mask_cache = None

    def __getstate__(self):
        # The mask cache holds a weak reference, which does not pickle; a
        # copy starts with an empty cache.
        return dict(vars(self), mask_cache=None)


def is_patched(model):
    return getattr(model, _STATE, None) is not None


_ROTARY = {
    "transformers.models.llama.modeling_llama.LlamaRotaryEmbedding",
    "transformers.models.mistral.modeling_mistral.MistralRotaryEmbedding",
    "transformers.models.qwen2.modeling_qwen2.Qwen2RotaryEmbedding",
    "transformers.models.gpt_neox.modeling_gpt_neox.GPTNeoXRotaryEmbedding",
}


def _check_rotary(model):
    """The model's rotary modules make the cos / sin that relpos's RoPE
    makes: inv_freq = rope_theta ** (-2t / d) (float32 rounding aside), no
    attention_scaling; GPT-J's table rows are sin / cos of p * 10000 **
    (-2t / rotary_dim). Catches frequencies changed after loading."""
    for name, m in model.named_modules():
        q = _qualname(m)
        where = f"{name or '<model>'} ({type(m).__qualname__})"
        if q in _ROTARY:
            base = _rope_base(where, m.config)
            inv = getattr(m, "inv_freq", None)
            if not isinstance(inv, torch.Tensor) or inv.dim() != 1:
                raise PatchError(f"relpos.hf.patch: {where}: no inv_freq "
                                 f"buffer; nothing was patched")
            d = 2 * inv.numel()
            want = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
            scaling = getattr(m, "attention_scaling", 1.0)
            if scaling != 1.0 or not torch.allclose(
                    inv.detach().double().cpu(), want, rtol=1e-5, atol=0):
                raise PatchError(
                    f"relpos.hf.patch: {where}: inv_freq is not rope_theta "
                    f"** (-2t / {d}) with rope_theta={base:g} (or "
                    f"attention_scaling={scaling} is not 1): relpos's RoPE "
                    f"would rotate differently; nothing was patched")
        elif q == ("transformers.models.gptj.modeling_gptj."
                   "GPTJRotaryEmbedding"):
            table = getattr(m, "embed_positions", None)
            if not isinstance(table, torch.Tensor) or table.dim() != 2 or \
                    table.shape[0] < 2:
                raise PatchError(f"relpos.hf.patch: {where}: no "
                                 f"embed_positions table; nothing was "
                                 f"patched")
            d = table.shape[1]
            ang = 10000.0 ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)
            want = torch.cat([ang.sin(), ang.cos()])  # position 1
            if not torch.allclose(table[1].detach().double().cpu(), want,
                                  rtol=0, atol=1e-5):
                raise PatchError(
                    f"relpos.hf.patch: {where}: embed_positions is not GPT-J's "
                    f"sin / cos table of base 10000: relpos's RoPE would "
                    f"rotate differently; nothing was patched")


def _find_known_subclasses(model):
    """Modules whose class derives from a known attention class without
    being one (a subclass may change anything)."""
    bad = []
    for name, m in model.named_modules():
        if _qualname(m) in _ARCH:
            continue
        for base in type(m).__mro__[1:]:
            if base.__module__ + "." + base.__qualname__ in _ARCH:
                bad.append((name, type(m).__name__, base.__name__))
                break
    return bad


def patch(model):
    """Make every supported attention module of ``model`` call relpos.

    Replaces the ``forward`` of each supported attention module (an
    instance attribute; the class is untouched) by one that reads the
    module's own parameters, so gradients reach them and the model's
    state_dict is unchanged. Checks everything first: raises PatchError,
    with nothing changed, for an unsupported architecture or setting.
    Returns the model. See docs/hf.md.
    """
    if not isinstance(model, torch.nn.Module):
        raise PatchError(f"relpos.hf.patch: model must be a torch.nn.Module "
                         f"(got {type(model).__name__})")
    if is_patched(model):
        raise PatchError("relpos.hf.patch: the model is already patched "
                         "(relpos.hf.unpatch restores it)")
    config = getattr(model, "config", None)
    impl = getattr(config, "_attn_implementation", None)
    if impl not in ("eager", "sdpa"):
        raise PatchError(
            f"relpos.hf.patch: attn_implementation={impl!r} is not supported "
            f"(eager and sdpa are: their masks are 4-D tensors); nothing was "
            f"patched")
    bad = _find_known_subclasses(model)
    if bad:
        name, cls, base = bad[0]
        raise PatchError(f"relpos.hf.patch: {name or '<model>'}: {cls} "
                         f"subclasses {base} and may change its forward: not "
                         f"supported; nothing was patched")
    plans, cross = [], []
    t5_seen = False
    for name, m in model.named_modules():
        q = _qualname(m)
        if q not in _ARCH:
            continue
        sig, builder, _ = _ARCH[q]
        where = f"{name or '<model>'} ({type(m).__qualname__})"
        if _signature(type(m)) != sig:
            raise PatchError(
                f"relpos.hf.patch: {where}: forward{_signature(type(m))[1:]} "
                f"is not the layout relpos.hf was written for "
                f"(forward{sig[1:]}, transformers 5.24); nothing was patched")
        if "forward" in vars(m):
            raise PatchError(f"relpos.hf.patch: {where}: its forward is "
                             f"already replaced on the instance (another "
                             f"library's hook?); nothing was patched")
        if builder is None:
            t5_seen = True
            continue
        if q in _W2V_CLASSES and m.position_embeddings_type is None:
            cross.append(name)  # adapter attention: no positions, stays HF's
            continue
        plans.append((name, m, builder(where, m)))
    if t5_seen:
        t5, t5_cross = _t5_plans(model)
        plans += [(n, m, f) for n, m, f in t5]
        cross += t5_cross
    _check_rotary(model)
    if not plans:
        raise PatchError(
            f"relpos.hf.patch: {type(model).__name__} has no attention module "
            f"relpos.hf supports (supported: "
            f"{', '.join(sorted(SUPPORTED))}); nothing was patched")
    if model.training:
        for name, m, _ in plans:
            p = _dropout_of(m)
            if p > 0:
                raise PatchError(
                    f"relpos.hf.patch: {name} ({type(m).__qualname__}): "
                    f"attention dropout {p} and the model is in training "
                    f"mode (relpos has no dropout on the probabilities); set "
                    f"the dropout to 0 or call model.eval(); nothing was "
                    f"patched")
    # Everything checked: now change the modules.
    state = _State([(n, m) for n, m, _ in plans], cross)
    for name, m, fn in plans:
        # Plain instance attributes (object.__setattr__: nn.Module would
        # register a module-holding value as a submodule).
        object.__setattr__(m, "forward", fn)
        object.__setattr__(m, "_relpos_hf_model_state", state)
    setattr(model, _STATE, state)
    return model


def _dropout_of(m):
    for attr in ("attention_dropout", "dropout"):
        p = getattr(m, attr, 0.0)
        if isinstance(p, torch.nn.Dropout):
            p = p.p
        if isinstance(p, (int, float)) and p > 0:
            return float(p)
    return 0.0


def unpatch(model):
    """Restore the original forward of every module patch replaced."""
    state = getattr(model, _STATE, None)
    if state is None:
        raise PatchError("relpos.hf.unpatch: the model is not patched")
    for _, m in state.modules:
        vars(m).pop("forward", None)
        vars(m).pop("_relpos_hf_model_state", None)
    delattr(model, _STATE)
    return model


def patched_modules(model):
    """Names of the modules patch replaced (empty if not patched)."""
    state = getattr(model, _STATE, None)
    return [] if state is None else [n for n, _ in state.modules]


__all__ += ["patched_modules"]


# --------------------------------------------------------------------------
# Loaders: one attention layer's weights from a state_dict (numpy)


def from_wav2vec2_bert(state_dict: Mapping, num_heads: int, prefix: str = "",
                       left: int = 64, right: int = 8) -> LoadedAttention:
    """A Hugging Face ``Wav2Vec2BertSelfAttention`` (``relative_key``) from
    its tensors ``{prefix}linear_q / linear_k / linear_v / linear_out
    .weight / .bias`` and ``{prefix}distance_embedding.weight``, e.g. prefix
    ``"encoder.layers.3.self_attn."``. left / right: the config's
    ``left_max_position_embeddings`` / ``right_max_position_embeddings``."""
    source = Source("Wav2Vec2-BERT", "hf.from_wav2vec2_bert")
    left, right = _clip(source, "left", left), _clip(source, "right", right)
    e, d = _geometry(state_dict, prefix + "linear_q.weight", num_heads, source)

    get, w = _projections(state_dict, prefix, source, e,
                          ("linear_q", "linear_k", "linear_v", "linear_out"))
    table = get("distance_embedding.weight", (left + right + 1, d))
    return LoadedAttention(num_heads=num_heads, ak=table, av=None,
                           buckets=ClipBuckets(left, right),
                           source=str(source),
                           **w)


# The block index of a T5 prefix: "encoder.block.3.layer.0.SelfAttention."
_T5_BLOCK = re.compile(r"(^|.*\.)block\.(\d+)\.(.*)$")
_T5_STACK = re.compile(r"(^|\.)(encoder|decoder)\.block\.\d+\.")


def _t5_check_prefix(prefix):
    """Refuses a prefix that is not a str or names cross-attention."""
    if not isinstance(prefix, str):
        raise TypeError(f"relpos.hf.from_t5: prefix must be a str (got "
                        f"{type(prefix).__name__})")
    if "EncDecAttention" in prefix:
        raise ValueError(
            f"relpos.hf.from_t5: prefix {prefix!r} is T5's cross-attention "
            f"(EncDecAttention), which has no relative position bias; "
            f"from_t5 loads self-attention layers (layer.0.SelfAttention)")


def _t5_geometry(state_dict, config, prefix, num_heads, d_kv, source):
    """num_heads, d_kv and d_model of a T5 layer: the keywords, else the
    config, else (d_kv) the q rows / num_heads."""
    if num_heads is None:
        num_heads = _setting(config, "num_heads")
    if num_heads is None:
        raise ValueError(f"relpos.hf.from_t5: from_t5 needs num_heads (a "
                         "keyword, or a config with num_heads)")
    num_heads = _positive(source, "num_heads", num_heads)
    inner, d_model = _rows(state_dict, prefix + "q.weight", source)
    if d_kv is None:
        d_kv = _setting(config, "d_kv")
    if d_kv is None:
        if inner % num_heads:
            raise ValueError(
                f"relpos.hf.from_t5: {source} tensor '{prefix}q.weight' has "
                f"{inner} rows, not divisible by num_heads = {num_heads}")
        d_kv = inner // num_heads
    return num_heads, _positive(source, "d_kv", d_kv), d_model


def _t5_is_decoder(config, prefix, is_decoder):
    """is_decoder checked, or else the stack the prefix names, else
    config.is_decoder, else False."""
    if is_decoder is None:
        stack = _T5_STACK.search(prefix)
        is_decoder = (stack.group(2) == "decoder" if stack else
                      bool(_setting(config, "is_decoder", False)))
    elif not isinstance(is_decoder, (bool, np.bool_)):
        raise TypeError(f"relpos.hf.from_t5: is_decoder must be a bool (got "
                        f"{type(is_decoder).__name__})")
    return is_decoder


def _t5_bias_prefix(prefix, bias_prefix):
    """bias_prefix, or else the prefix with its block index replaced by 0
    (the prefix itself if it names no block)."""
    if bias_prefix is None:
        block = _T5_BLOCK.match(prefix)
        bias_prefix = (f"{block.group(1)}block.0.{block.group(3)}" if block
                       else prefix)
    return bias_prefix


def _t5_buckets(state_dict, config, bias_name, num_buckets, max_distance,
                is_decoder, source):
    """The layer's T5Buckets (keywords, else config, else the bias table's
    rows and max_distance 128), validated by relpos.t5_bucket."""
    if num_buckets is None:
        num_buckets = _setting(config, "relative_attention_num_buckets")
    if num_buckets is None:
        num_buckets = _rows(state_dict, bias_name, source)[0]
    num_buckets = _positive(source, "num_buckets", num_buckets)
    max_distance = _positive(source, "max_distance", max_distance
                             if max_distance is not None else
                             _setting(config,
                                      "relative_attention_max_distance", 128))
    buckets = T5Buckets(num_buckets, max_distance, not is_decoder)
    try:  # relpos's validation of the bucket map, at load time
        t5_bucket(np.zeros(1, np.int64), **buckets._asdict())
    except ValueError as err:
        raise ValueError(f"relpos.hf.from_t5: {source} buckets {buckets}: "
                         f"{str(err).removeprefix('relpos: ')}") from None
    return buckets


def from_t5(state_dict: Mapping, config=None, *,
            prefix: str = "encoder.block.0.layer.0.SelfAttention.",
            bias_prefix: Optional[str] = None,
            num_heads: Optional[int] = None, d_kv: Optional[int] = None,
            num_buckets: Optional[int] = None,
            max_distance: Optional[int] = None,
            is_decoder: Optional[bool] = None) -> LoadedAttention:
    """A Hugging Face ``T5Attention`` self-attention layer (T5, mT5, ByT5,
    Flan-T5, T5 v1.1) from its tensors ``{prefix}q / k / v / o .weight``
    (no biases; q, k, v [num_heads * d_kv, d_model], o [d_model, num_heads
    * d_kv]) and the stack's ``{bias_prefix}relative_attention_bias.weight``
    [num_buckets, num_heads].

    Args:
        config: a ``T5Config`` / ``MT5Config`` or its config.json as a dict
            (``num_heads``, ``d_kv``, ``relative_attention_num_buckets``,
            ``relative_attention_max_distance``, ``is_decoder`` are read);
            the keywords below override it. Without it, num_heads is
            required; d_kv is the q rows / num_heads, num_buckets the bias
            table's rows, max_distance 128 (T5Config's default).
        prefix: the layer, e.g. ``"encoder.block.3.layer.0.SelfAttention."``
            or ``"decoder.block.1.layer.0.SelfAttention."``. Cross-attention
            (``EncDecAttention``) has no position term and is refused.
        bias_prefix: where the bias table is; default: the prefix with its
            block index replaced by 0 (only block 0 of each stack holds the
            table; the stack's other blocks reuse it), or the prefix itself
            if it names no block.
        is_decoder: causal buckets and mask (decoder self-attention) or
            bidirectional buckets, no mask (encoder). Default: the stack the
            prefix names (``encoder.`` / ``decoder.``), else
            ``config.is_decoder``, else False. (A
            ``T5ForConditionalGeneration`` config says ``is_decoder =
            False`` for both stacks; Hugging Face sets it per stack, as the
            prefix does here.)

    relpos: ``score_bias`` = weight.T [H, nb], ``buckets =
    T5Buckets(num_buckets, max_distance, bidirectional=not is_decoder)``,
    ``scale = 1.0`` (T5 does not divide q . k by sqrt(d_kv)), ``causal =
    is_decoder``.
    """
    source = Source("T5", "hf.from_t5")
    _t5_check_prefix(prefix)
    num_heads, d_kv, d_model = _t5_geometry(state_dict, config, prefix,
                                            num_heads, d_kv, source)
    inner = num_heads * d_kv  # checked against every projection's shape
    is_decoder = _t5_is_decoder(config, prefix, is_decoder)
    bias_name = (_t5_bias_prefix(prefix, bias_prefix) +
                 "relative_attention_bias.weight")
    buckets = _t5_buckets(state_dict, config, bias_name, num_buckets,
                          max_distance, is_decoder, source)

    _, w = _projections(state_dict, prefix, source, d_model,
                        ("q", "k", "v", "o"), inner=inner, bias=False)
    table = _array(state_dict, bias_name, (buckets.num_buckets, num_heads),
                   source)
    return LoadedAttention(
        num_heads=num_heads, ak=None, av=None, buckets=buckets,
        source=str(source), score_bias=np.ascontiguousarray(table.T),
        scale=1.0,
        causal=bool(is_decoder), **w)


def from_wav2vec2_conformer(state_dict: Mapping, num_heads,
                            prefix: str = "") -> LoadedAttention:
    """A Hugging Face ``Wav2Vec2ConformerSelfAttention`` with
    ``position_embeddings_type = "relative"`` from its tensors
    ``{prefix}linear_q / linear_k / linear_v / linear_out .weight / .bias``
    [E, E] / [E], ``{prefix}linear_pos.weight`` [E, E] (no bias) and
    ``{prefix}pos_bias_u`` / ``pos_bias_v`` [H, E / H], e.g. prefix
    ``"wav2vec2.encoder.layers.0.self_attn."``. num_heads: an int, or the
    model's ``Wav2Vec2ConformerConfig`` (or its dict), whose
    ``num_attention_heads`` is read and whose ``position_embeddings_type``
    must be "relative".

    Hugging Face scores ``((q_i + pos_bias_u) . k_j + (q_i + pos_bias_v) .
    linear_pos(pe(i - j))) / sqrt(E / H)``, ``pe`` its sinusoids of width E
    with sin and cos interleaved (``pe[2t] = sin(x f_t)``, ``pe[2t+1] =
    cos(x f_t)``, ``f_t = 10000^(-2t/E)``), the distance unclipped (its
    rel_shift). relpos's scheme ``xl`` (docs/math.md section 8) lays its
    sinusoids out sines first, then cosines, so the loader permutes
    linear_pos's input columns: ``xl_weight[:, t] = linear_pos.weight[:,
    2t]`` and ``xl_weight[:, E/2 + t] = linear_pos.weight[:, 2t + 1]``;
    ``xl_u = pos_bias_u`` (content), ``xl_v = pos_bias_v`` (position).
    """
    source = Source("Wav2Vec2-Conformer", "hf.from_wav2vec2_conformer")
    if not isinstance(num_heads, (int, np.integer)):
        kind = _setting(num_heads, "position_embeddings_type")
        if kind is not None and kind != "relative":
            raise ValueError(
                f"relpos.{source.where}: {source} config has "
                f"position_embeddings_type = {kind!r}; "
                f"from_wav2vec2_conformer loads "
                f"\"relative\" (Transformer-XL) attention only")
        num_heads = _setting(num_heads, "num_attention_heads", num_heads)
    e, d = _geometry(state_dict, prefix + "linear_q.weight", num_heads, source)
    if e % 2:
        raise ValueError(f"relpos.{source.where}: {source} width {e} is odd; "
                         f"its sinusoids pair sin and cos, so it must be "
                         f"even")
    get, w = _projections(state_dict, prefix, source, e,
                          ("linear_q", "linear_k", "linear_v", "linear_out"))
    pos = get("linear_pos.weight", (e, e))
    perm = np.concatenate([np.arange(0, e, 2), np.arange(1, e, 2)])
    return LoadedAttention(
        num_heads=int(num_heads), ak=None, av=None, buckets=None,
        source=str(source), xl_weight=np.ascontiguousarray(pos[:, perm]),
        xl_u=get("pos_bias_u", (num_heads, d)),
        xl_v=get("pos_bias_v", (num_heads, d)), **w)

"""Load relative-position self-attention weights trained elsewhere into
relpos's attention (docs/interop.md describes each source's convention).

Two sources:

- Hugging Face Wav2Vec2-BERT (``Wav2Vec2BertSelfAttention`` with
  ``position_embeddings_type = "relative_key"``; w2v-BERT 2.0):
  :func:`from_wav2vec2_bert`. One key table ``distance_embedding.weight``
  [left + right + 1, head_size] shared by the heads, distance ``j - i``
  clipped to [-left, right] (config ``left_max_position_embeddings`` = 64,
  ``right_max_position_embeddings`` = 8), row ``distance + left``, the
  table term added to the scores before the 1/sqrt(head_size) scale like
  q.k; no value table. relpos: ``ak`` = that table, ``av`` none, buckets
  ``ClipBuckets(left, right)`` (the same row rule).
- OpenNMT-py (``MultiHeadedAttention`` with ``max_relative_positions = k >
  0``): :func:`from_opennmt`. One table ``relative_positions_embeddings
  .weight`` [2k+1, dim_per_head] used for both keys and values, distance
  ``j - i`` clipped to [-k, k], row ``distance + k``, the query scaled by
  1/sqrt(dim_per_head) before both the key and the table product. relpos:
  ``ak`` = ``av`` = that table, symmetric clip k (Shaw et al.).

Both give a :class:`LoadedAttention`: the projections in
``torch.nn.Linear`` layout ([out, in] weights, y = x W^T + b, the layout all
three libraries store) plus the tables and bucket map. Run it with
:meth:`LoadedAttention.forward` (numpy, relpos's kernel),
:meth:`LoadedAttention.forward_torch` (differentiable, relpos.torch), or
turn it into ``relpos.torch.RelativeMultiheadAttention`` (scheme "shaw" for
a symmetric clip, "shaw-asym" otherwise) with
:meth:`LoadedAttention.to_torch_module`.

``state_dict`` is any mapping from tensor names to arrays (numpy arrays,
torch tensors, a safetensors dict): only the names and shapes matter.
"""

from __future__ import annotations

from typing import Mapping, NamedTuple, Optional

import numpy as np

from . import ClipBuckets, attention

__all__ = ["LoadedAttention", "from_opennmt", "from_wav2vec2_bert"]


class LoadedAttention(NamedTuple):
    """One self-attention layer's weights in relpos's conventions.

    Projections [E, E] / [E] in torch.nn.Linear layout; ak / av: key- and
    value-side tables [left + right + 1, E / num_heads] (None: that term is
    off), row ``clip(j - i, -left, right) + left`` for query i, key j
    (docs/math.md section 1; section 8 for the clip buckets).
    """

    num_heads: int
    q_weight: np.ndarray
    q_bias: np.ndarray
    k_weight: np.ndarray
    k_bias: np.ndarray
    v_weight: np.ndarray
    v_bias: np.ndarray
    out_weight: np.ndarray
    out_bias: np.ndarray
    ak: Optional[np.ndarray]
    av: Optional[np.ndarray]
    buckets: ClipBuckets
    source: str

    @property
    def embed_dim(self) -> int:
        return self.q_weight.shape[0]

    @property
    def head_dim(self) -> int:
        return self.embed_dim // self.num_heads

    def _kwargs(self):
        b = self.buckets
        if b.left == b.right:  # the symmetric clip: Shaw's max_distance
            return dict(max_distance=b.left)
        return dict(buckets=b)

    def forward(self, x, key_lengths=None, causal=False) -> np.ndarray:
        """x [B, N, E] (float32 or float64) -> [B, N, E]: the layer's output
        (before any residual / dropout of the source model). key_lengths: B
        valid lengths (keys at or beyond are padding, as the sources' masks
        of trailing padding)."""
        x = np.asarray(x)
        if x.ndim != 3 or x.shape[2] != self.embed_dim:
            raise ValueError(
                f"relpos.interop: x must be [B, N, {self.embed_dim}] (got "
                f"shape {tuple(x.shape)})")
        dt = x.dtype if x.dtype in (np.float32, np.float64) else np.float64
        x = x.astype(dt, copy=False)
        b, n, e = x.shape
        h, d = self.num_heads, self.head_dim

        def proj(w, bias):
            return x @ w.astype(dt).T + bias.astype(dt)

        def heads(y):  # [B, N, E] -> [B, H, N, d]
            y = y.reshape(b, n, h, d).transpose(0, 2, 1, 3)
            return np.ascontiguousarray(y)

        table = (lambda t: None if t is None else np.ascontiguousarray(t, dt))
        o = attention(heads(proj(self.q_weight, self.q_bias)),
                      heads(proj(self.k_weight, self.k_bias)),
                      heads(proj(self.v_weight, self.v_bias)),
                      table(self.ak), table(self.av), causal=causal,
                      key_lengths=key_lengths, **self._kwargs())
        o = o.transpose(0, 2, 1, 3).reshape(b, n, e)
        return o @ self.out_weight.astype(dt).T + self.out_bias.astype(dt)

    def forward_torch(self, x, key_lengths=None, causal=False):
        """forward() in PyTorch through relpos.torch.attention: x [B, N, E]
        float32/float64 CPU tensor; differentiable in x (the weights are
        constants here; use to_torch_module to train the layer)."""
        import torch

        from . import torch as rtorch

        b, n, e = x.shape
        h, d = self.num_heads, self.head_dim

        def t(a):
            return None if a is None else torch.from_numpy(
                np.ascontiguousarray(a)).to(x.dtype)

        def heads(y):
            return y.view(b, n, h, d).transpose(1, 2)

        lin = torch.nn.functional.linear
        q = heads(lin(x, t(self.q_weight), t(self.q_bias)))
        k = heads(lin(x, t(self.k_weight), t(self.k_bias)))
        v = heads(lin(x, t(self.v_weight), t(self.v_bias)))
        o = rtorch.attention(q, k, v, t(self.ak), t(self.av), causal=causal,
                             key_lengths=key_lengths, **self._kwargs())
        return lin(o.transpose(1, 2).reshape(b, n, e), t(self.out_weight),
                   t(self.out_bias))

    def to_torch_module(self, causal=False):
        """A relpos.torch.RelativeMultiheadAttention holding these weights
        (float32): scheme "shaw" for a symmetric clip (left == right, as
        OpenNMT-py), "shaw-asym" with k_left = left, k_right = right
        otherwise (Wav2Vec2-BERT). OpenNMT-py's one shared table becomes two
        equal parameters rel_k and rel_v: equal at load, they diverge if
        trained unless the caller ties them."""
        import torch

        from .torch import RelativeMultiheadAttention

        b = self.buckets
        reach = (dict(max_distance=b.left) if b.left == b.right else
                 dict(scheme="shaw-asym", k_left=b.left, k_right=b.right))
        m = RelativeMultiheadAttention(
            self.embed_dim, self.num_heads, key_term=self.ak is not None,
            value_term=self.av is not None, causal=causal, **reach)
        with torch.no_grad():
            for proj, w, bias in ((m.q_proj, self.q_weight, self.q_bias),
                                  (m.k_proj, self.k_weight, self.k_bias),
                                  (m.v_proj, self.v_weight, self.v_bias),
                                  (m.out_proj, self.out_weight, self.out_bias)):
                proj.weight.copy_(torch.from_numpy(np.asarray(w, np.float32)))
                proj.bias.copy_(torch.from_numpy(np.asarray(bias, np.float32)))
            for param, table in ((m.rel_k, self.ak), (m.rel_v, self.av)):
                if param is not None:
                    param.copy_(torch.from_numpy(np.asarray(table, np.float32)))
        return m


def _array(state_dict: Mapping, name: str, shape, source: str) -> np.ndarray:
    if name not in state_dict:
        raise KeyError(f"relpos.interop: {source} state_dict has no tensor "
                       f"'{name}'")
    a = state_dict[name]
    if hasattr(a, "detach"):  # a torch tensor
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if tuple(a.shape) != tuple(shape):
        raise ValueError(
            f"relpos.interop: {source} tensor '{name}' has shape "
            f"{tuple(a.shape)}, expected {tuple(shape)}")
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"relpos.interop: {source} tensor '{name}' has "
                         f"dtype {a.dtype}, expected a floating type")
    return a


def _geometry(state_dict, name, num_heads, source):
    if isinstance(num_heads, bool) or not isinstance(num_heads, int) or \
            num_heads <= 0:
        raise ValueError(f"relpos.interop: num_heads must be an int > 0 "
                         f"(got {num_heads!r})")
    if name not in state_dict:
        raise KeyError(f"relpos.interop: {source} state_dict has no tensor "
                       f"'{name}'")
    e = int(state_dict[name].shape[0])
    if e % num_heads:
        raise ValueError(f"relpos.interop: {source} width {e} is not "
                         f"divisible by num_heads = {num_heads}")
    return e, e // num_heads


def _projections(state_dict, prefix, source, e, names):
    """A getter of checked tensors under `prefix`, and the q, k, v, out
    projections ([E, E] weights, [E] biases) under the source's `names`."""

    def get(name, shape):
        return _array(state_dict, prefix + name, shape, source)

    w = {}
    for ours, theirs in zip(("q", "k", "v", "out"), names):
        w[ours + "_weight"] = get(theirs + ".weight", (e, e))
        w[ours + "_bias"] = get(theirs + ".bias", (e,))
    return get, w


def _clip(name, value):
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"relpos.interop: {name} must be an int >= 0 (got "
                         f"{value!r})")
    return value


def from_wav2vec2_bert(state_dict: Mapping, num_heads: int, prefix: str = "",
                       left: int = 64, right: int = 8) -> LoadedAttention:
    """A Hugging Face ``Wav2Vec2BertSelfAttention`` (``relative_key``) from
    its tensors ``{prefix}linear_q / linear_k / linear_v / linear_out
    .weight / .bias`` and ``{prefix}distance_embedding.weight``, e.g. prefix
    ``"encoder.layers.3.self_attn."``. left / right: the config's
    ``left_max_position_embeddings`` / ``right_max_position_embeddings``."""
    source = "Wav2Vec2-BERT"
    left, right = _clip("left", left), _clip("right", right)
    e, d = _geometry(state_dict, prefix + "linear_q.weight", num_heads, source)

    get, w = _projections(state_dict, prefix, source, e,
                          ("linear_q", "linear_k", "linear_v", "linear_out"))
    table = get("distance_embedding.weight", (left + right + 1, d))
    return LoadedAttention(num_heads=num_heads, ak=table, av=None,
                           buckets=ClipBuckets(left, right), source=source,
                           **w)


def from_opennmt(state_dict: Mapping, num_heads: int,
                 max_relative_positions: int,
                 prefix: str = "") -> LoadedAttention:
    """An OpenNMT-py ``MultiHeadedAttention`` with ``max_relative_positions
    = k > 0`` from its tensors ``{prefix}linear_query / linear_keys /
    linear_values / final_linear .weight / .bias`` and
    ``{prefix}relative_positions_embeddings.weight``, e.g. prefix
    ``"encoder.transformer.0.self_attn."``."""
    source = "OpenNMT-py"
    k = _clip("max_relative_positions", max_relative_positions)
    if k == 0:
        raise ValueError("relpos.interop: max_relative_positions = 0 has no "
                         "relative table (OpenNMT-py's plain attention)")
    e, d = _geometry(state_dict, prefix + "linear_query.weight", num_heads,
                     source)

    get, w = _projections(state_dict, prefix, source, e,
                          ("linear_query", "linear_keys", "linear_values",
                           "final_linear"))
    table = get("relative_positions_embeddings.weight", (2 * k + 1, d))
    return LoadedAttention(num_heads=num_heads, ak=table, av=table,
                           buckets=ClipBuckets(k, k), source=source, **w)

"""What relpos's converters share (relpos.hf, relpos.opennmt,
relpos.ctranslate2): the mapping from a foreign attention layer's tensors to
relpos's schemes (:class:`LoadedAttention`), the checked reading of a
foreign state_dict, and :class:`UnsupportedModelError`.

Each loader names its source with a :class:`Source` (the framework, and
the function for messages); the loaders themselves live with the rest of
what relpos knows about their framework: ``relpos.hf.from_t5``,
``from_wav2vec2_bert``, ``from_wav2vec2_conformer``;
``relpos.opennmt.from_opennmt``. docs/interop.md describes each source's
convention.

``state_dict`` is any mapping from tensor names to arrays (numpy arrays,
torch tensors, a safetensors dict): only the names and shapes matter.
"""

from __future__ import annotations

import math
from typing import Mapping, NamedTuple, Optional, Union

import numpy as np

from . import ClipBuckets, T5Buckets, attention
from ._checks import integer
from .position_schemes import encode_buckets
from .position_schemes import xl_sinusoids as _xl_sinusoids

__all__ = ["LoadedAttention", "UnsupportedModelError"]


class UnsupportedModelError(ValueError):
    """A model (or one of its options) a relpos converter cannot represent;
    the message names the option (relpos.opennmt, relpos.ctranslate2)."""


class Source(str):
    """A loader's source: the framework's name (the str itself, "T5") and
    ``where``, the loader for messages ("hf.from_t5")."""

    def __new__(cls, name, where):
        self = super().__new__(cls, name)
        self.where = where
        return self


class LoadedAttention(NamedTuple):
    """One self-attention layer's weights in relpos's conventions.

    Projections in torch.nn.Linear layout: q / k / v weights [I, E] (I =
    num_heads * head_dim, the inner width; E the model width), out weight
    [E, I]; biases [I] / [E], or None where the source has none (T5).

    The position scheme, one of:

    - Shaw (``scheme`` "shaw" / "shaw-asym"): ``ak`` / ``av`` key- and
      value-side tables [left + right + 1, head_dim] (None: that term is
      off), ``buckets = ClipBuckets(left, right)``, row ``clip(j - i,
      -left, right) + left`` for query i, key j (docs/math.md sections 1
      and 8);
    - T5 ("t5"): ``score_bias`` [H, nb], the scalar added to the score of
      head h at row ``b(j - i)`` of ``buckets = T5Buckets(...)``;
    - Transformer-XL ("xl"): ``xl_weight`` [I, D] applied to relpos's
      sinusoids of width D (sines, then cosines, of ``i - j``; docs/math.md
      section 8), ``xl_u`` (content bias) and ``xl_v`` (position bias)
      [H, head_dim]; no clipping (``buckets`` None): the key table of a
      call covers every distance of that call.

    ``scale`` multiplies ``q . k`` (and the Shaw / XL position products);
    None means relpos's 1/sqrt(head_dim), T5 uses 1.0. ``causal``: the
    layer's own mask (T5's decoder), the default of forward's ``causal``.
    """

    num_heads: int
    q_weight: np.ndarray
    q_bias: Optional[np.ndarray]
    k_weight: np.ndarray
    k_bias: Optional[np.ndarray]
    v_weight: np.ndarray
    v_bias: Optional[np.ndarray]
    out_weight: np.ndarray
    out_bias: Optional[np.ndarray]
    ak: Optional[np.ndarray]
    av: Optional[np.ndarray]
    buckets: Union[ClipBuckets, T5Buckets, None]
    source: str
    score_bias: Optional[np.ndarray] = None
    scale: Optional[float] = None
    causal: bool = False
    xl_weight: Optional[np.ndarray] = None
    xl_u: Optional[np.ndarray] = None
    xl_v: Optional[np.ndarray] = None

    @property
    def embed_dim(self) -> int:
        """E, the width of the layer's input and output."""
        return self.q_weight.shape[1]

    @property
    def inner_dim(self) -> int:
        """I = num_heads * head_dim (T5's inner_dim; E elsewhere)."""
        return self.q_weight.shape[0]

    @property
    def head_dim(self) -> int:
        return self.inner_dim // self.num_heads

    @property
    def score_scale(self) -> float:
        """The factor on q . k: scale, or 1/sqrt(head_dim) if None."""
        return 1.0 / math.sqrt(self.head_dim) if self.scale is None else \
            float(self.scale)

    @property
    def scheme(self) -> str:
        """The relpos scheme: "shaw", "shaw-asym", "t5" or "xl"."""
        if self.xl_weight is not None:
            return "xl"
        kind, args = encode_buckets("LoadedAttention", self.buckets)
        if kind == "t5":
            return "t5"
        return "shaw" if args[0] == args[1] else "shaw-asym"

    def _position_kwargs(self, n):
        """relpos.attention's bucket keywords for a self-attention of n
        tokens."""
        b = self.buckets
        if self.xl_weight is not None:  # unclipped: k covers every distance
            return dict(max_distance=max(n - 1, 0))
        kind, args = encode_buckets("LoadedAttention", b)
        if kind == "clip" and args[0] == args[1]:
            return dict(max_distance=args[0])  # the symmetric clip: Shaw's k
        return dict(buckets=b)

    def _check_x(self, shape):
        if len(shape) != 3 or shape[2] != self.embed_dim:
            raise ValueError(
                f"relpos: LoadedAttention: x must be [B, N, "
                f"{self.embed_dim}] (got shape {tuple(shape)})")

    def forward(self, x, key_lengths=None, causal=None) -> np.ndarray:
        """x [B, N, E] (float32 or float64) -> [B, N, E]: the layer's output
        (before any residual / dropout of the source model). key_lengths: B
        valid lengths (keys at or beyond are padding, as the sources' masks
        of trailing padding). causal: None takes the layer's own
        (``self.causal``: True for a T5 decoder)."""
        x = np.asarray(x)
        self._check_x(x.shape)
        dt = x.dtype if x.dtype in (np.float32, np.float64) else np.float64
        x = x.astype(dt, copy=False)
        b, n, _ = x.shape
        h, d = self.num_heads, self.head_dim

        def cast(a):
            return None if a is None else np.ascontiguousarray(a, dt)

        def proj(y, w, bias):
            y = y @ w.astype(dt).T
            return y if bias is None else y + bias.astype(dt)

        def heads(y):  # [B, N, I] -> [B, H, N, d]
            return np.ascontiguousarray(
                y.reshape(b, n, h, d).transpose(0, 2, 1, 3))

        q = heads(proj(x, self.q_weight, self.q_bias))
        k = heads(proj(x, self.k_weight, self.k_bias))
        v = heads(proj(x, self.v_weight, self.v_bias))
        kw = self._position_kwargs(n)
        ak, pb = cast(self.ak), None
        if self.xl_weight is not None:
            reach = kw["max_distance"]
            flat = _xl_sinusoids(reach, self.xl_weight.shape[1]) @ \
                self.xl_weight.astype(np.float64).T  # [2k+1, I]
            ak = cast(flat.reshape(2 * reach + 1, h, d).transpose(1, 0, 2))
            u, pv = self.xl_u.astype(dt), self.xl_v.astype(dt)
            q = np.ascontiguousarray(q + u[None, :, None, :])
            pb = cast(pv - u)
        # scale multiplies q . k and the vector table term (None: relpos's
        # 1/sqrt(d)); T5's scalar bias is added unscaled.
        o = attention(q, k, v, ak, cast(self.av), scale=self.scale,
                      bias=cast(self.score_bias), pb=pb,
                      causal=self.causal if causal is None else causal,
                      key_lengths=key_lengths, **kw)
        o = o.transpose(0, 2, 1, 3).reshape(b, n, h * d)
        return proj(o, self.out_weight, self.out_bias)

    def forward_torch(self, x, key_lengths=None, causal=None):
        """forward() in PyTorch through relpos.torch.attention: x [B, N, E]
        float32/float64 CPU tensor; differentiable in x (the weights are
        constants here; use to_torch_module to train the layer)."""
        import torch

        from . import torch as rtorch

        self._check_x(x.shape)
        b, n, _ = x.shape
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
        kw = self._position_kwargs(n)
        ak, pb = t(self.ak), None
        if self.xl_weight is not None:
            reach = kw["max_distance"]
            r = torch.from_numpy(
                _xl_sinusoids(reach, self.xl_weight.shape[1])).to(x.device)
            flat = r @ torch.from_numpy(
                np.asarray(self.xl_weight, np.float64)).t()
            ak = flat.view(2 * reach + 1, h, d).transpose(0, 1) \
                .contiguous().to(x.dtype)
            u, pv = t(self.xl_u), t(self.xl_v)
            q = q + u[None, :, None, :]
            pb = pv - u
        o = rtorch.attention(q, k, v, ak, t(self.av), scale=self.scale,
                             bias=t(self.score_bias), pb=pb,
                             causal=self.causal if causal is None else causal,
                             key_lengths=key_lengths, **kw)
        return lin(o.transpose(1, 2).reshape(b, n, h * d),
                   t(self.out_weight), t(self.out_bias))

    def to_torch_module(self, causal=None, dtype=None):
        """A relpos.torch.RelativeMultiheadAttention holding these weights
        (parameters of ``dtype``, default torch.float32; causal: None takes
        the layer's own). Shaw tables: scheme "shaw" for a symmetric clip
        (left == right, as OpenNMT-py), "shaw-asym" with k_left = left,
        k_right = right otherwise (Wav2Vec2-BERT); OpenNMT-py's one shared
        table becomes two equal parameters rel_k and rel_v (equal at load,
        they diverge if trained unless the caller ties them). T5: scheme "t5"
        with t5_bias = score_bias, head_dim = d_kv (mT5's inner width may
        differ from d_model) and scale = 1.0 (T5's unscaled scores). XL:
        scheme "xl" with xl_w, xl_u, xl_v.

        Raises ValueError where the module cannot hold the layer: T5
        buckets whose direction is not the module's (bidirectional exactly
        when not causal), an XL sinusoid or inner width other than E."""
        import torch

        from .torch import RelativeMultiheadAttention

        causal = self.causal if causal is None else bool(causal)
        scheme, e = self.scheme, self.embed_dim

        def refuse(why):
            raise ValueError(
                f"relpos: LoadedAttention: this {self.source} layer cannot "
                f"become a relpos.torch.RelativeMultiheadAttention: {why}; use "
                f"forward_torch (or forward), which computes it exactly")

        default_scale = self.score_scale * math.sqrt(self.head_dim) == 1.0
        if scheme == "t5":
            b = self.buckets
            if b.bidirectional == causal:
                refuse(f"its T5 buckets are "
                       f"{'bidirectional' if b.bidirectional else 'causal'} "
                       f"and the module would be "
                       f"{'causal' if causal else 'bidirectional'} (the "
                       f"module's T5 buckets are bidirectional exactly when "
                       f"it is not causal, as in T5)")
            kw = dict(scheme="t5", num_buckets=b.num_buckets,
                      bucket_max_distance=b.max_distance)
        elif scheme == "xl":
            if self.xl_weight.shape[1] != e or self.inner_dim != e:
                refuse(f"its sinusoids have width {self.xl_weight.shape[1]} "
                       f"and its inner width is {self.inner_dim}; the "
                       f"module's are both E = {e}")
            kw = dict(scheme="xl")
        else:
            b = self.buckets
            kw = (dict(max_distance=b.left) if b.left == b.right else
                  dict(scheme="shaw-asym", k_left=b.left, k_right=b.right))
            kw.update(key_term=self.ak is not None,
                      value_term=self.av is not None)
        biases = (self.q_bias, self.k_bias, self.v_bias, self.out_bias)
        with_bias = any(x is not None for x in biases)
        m = RelativeMultiheadAttention(
            e, self.num_heads, causal=causal, bias=with_bias,
            head_dim=self.head_dim,
            scale=None if default_scale else self.score_scale,
            dtype=torch.float32 if dtype is None else dtype, **kw)

        def put(param, value, factor=1.0):
            param.copy_(torch.from_numpy(
                np.asarray(value, np.float64) * factor).to(param.dtype))

        with torch.no_grad():
            for proj, w, bias, f in (
                    (m.q_proj, self.q_weight, self.q_bias, 1.0),
                    (m.k_proj, self.k_weight, self.k_bias, 1.0),
                    (m.v_proj, self.v_weight, self.v_bias, 1.0),
                    (m.out_proj, self.out_weight, self.out_bias, 1.0)):
                put(proj.weight, w, f)
                if with_bias:
                    if bias is None:
                        proj.bias.zero_()
                    else:
                        put(proj.bias, bias, f)
            if scheme == "t5":
                put(m.t5_bias, self.score_bias)
            elif scheme == "xl":
                put(m.xl_w, self.xl_weight)
                put(m.xl_u, self.xl_u)
                put(m.xl_v, self.xl_v)
            else:
                for param, table in ((m.rel_k, self.ak), (m.rel_v, self.av)):
                    if param is not None:
                        put(param, table)
        return m


def _array(state_dict: Mapping, name: str, shape, source: str) -> np.ndarray:
    if name not in state_dict:
        raise KeyError(f"relpos.{source.where}: {source} state_dict has no "
                       f"tensor '{name}'")
    a = state_dict[name]
    if hasattr(a, "detach"):  # a torch tensor
        a = a.detach().cpu().numpy()
    a = np.asarray(a)
    if tuple(a.shape) != tuple(shape):
        raise ValueError(
            f"relpos.{source.where}: {source} tensor '{name}' has shape "
            f"{tuple(a.shape)}, expected {tuple(shape)}")
    if not np.issubdtype(a.dtype, np.floating):
        raise ValueError(f"relpos.{source.where}: {source} tensor '{name}' "
                         f"has dtype {a.dtype}, expected a floating type")
    return a


def _positive(source, name, value):
    return integer(source.where, name, value, minimum=1,
                   wrong_type=ValueError)


def _rows(state_dict, name, source, ndim=2):
    """The shape of a named tensor (KeyError naming it if absent)."""
    if name not in state_dict:
        raise KeyError(f"relpos.{source.where}: {source} state_dict has no "
                       f"tensor '{name}'")
    shape = tuple(int(s) for s in state_dict[name].shape)
    if len(shape) != ndim:
        raise ValueError(f"relpos.{source.where}: {source} tensor '{name}' "
                         f"has shape {shape}, expected {ndim} dimensions")
    return shape


def _geometry(state_dict, name, num_heads, source):
    num_heads = _positive(source, "num_heads", num_heads)
    e = _rows(state_dict, name, source)[0]
    if e % num_heads:
        raise ValueError(f"relpos.{source.where}: {source} width {e} is not "
                         f"divisible by num_heads = {num_heads}")
    return e, e // num_heads


def _projections(state_dict, prefix, source, e, names, inner=None,
                 bias=True):
    """A getter of checked tensors under `prefix`, and the q, k, v, out
    projections ([I, E] weights, [E, I] for out, [I] / [E] biases or None)
    under the source's `names`."""
    inner = e if inner is None else inner

    def get(name, shape):
        return _array(state_dict, prefix + name, shape, source)

    w = {}
    for ours, theirs in zip(("q", "k", "v", "out"), names):
        out, into = (e, inner) if ours == "out" else (inner, e)
        w[ours + "_weight"] = get(theirs + ".weight", (out, into))
        w[ours + "_bias"] = get(theirs + ".bias", (out,)) if bias else None
    return get, w


def _clip(source, name, value):
    return integer(source.where, name, value, minimum=0,
                   wrong_type=ValueError)


def _setting(config, name, default=None):
    """config.name (an object such as transformers' T5Config) or
    config[name] (a config.json dict); default if absent or None."""
    if config is None:
        return default
    if isinstance(config, Mapping):
        value = config.get(name)
    else:
        value = getattr(config, name, None)
    return default if value is None else value



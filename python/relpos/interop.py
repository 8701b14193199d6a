"""Load relative-position self-attention weights trained elsewhere into
relpos's attention (docs/interop.md describes each source's convention).

Four sources:

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
- Hugging Face T5 / mT5 (``T5Attention``, self-attention): :func:`from_t5`.
  q, k, v, o without biases, ``inner_dim = num_heads * d_kv`` (may differ
  from d_model), one scalar per head and bucket
  (``relative_attention_bias.weight`` [num_buckets, num_heads], held by
  block 0 of each stack and reused by its other blocks), T5's log buckets
  (bidirectional in the encoder, causal in the decoder), scores not scaled.
  relpos: ``score_bias`` = weight.T [H, nb], ``buckets = T5Buckets(...)``,
  ``scale = 1``.
- Hugging Face Wav2Vec2-Conformer (``Wav2Vec2ConformerSelfAttention`` with
  ``position_embeddings_type = "relative"``): :func:`from_wav2vec2_conformer`.
  Transformer-XL's form (content bias ``pos_bias_u``, position bias
  ``pos_bias_v``, ``linear_pos`` applied to sinusoids of ``i - j``, no
  clipping). relpos: scheme ``xl`` with ``xl_weight`` = linear_pos.weight
  with its input columns permuted from Hugging Face's interleaved sin/cos to
  relpos's sines-then-cosines, ``xl_u`` = pos_bias_u, ``xl_v`` = pos_bias_v.

Each gives a :class:`LoadedAttention`: the projections in
``torch.nn.Linear`` layout ([out, in] weights, y = x W^T + b, the layout all
these libraries store) plus the scheme's tables and bucket map. Run it with
:meth:`LoadedAttention.forward` (numpy, relpos's kernel),
:meth:`LoadedAttention.forward_torch` (differentiable, relpos.torch), or
turn it into ``relpos.torch.RelativeMultiheadAttention`` (scheme "shaw",
"shaw-asym", "t5" or "xl") with :meth:`LoadedAttention.to_torch_module`.

``state_dict`` is any mapping from tensor names to arrays (numpy arrays,
torch tensors, a safetensors dict): only the names and shapes matter.
"""

from __future__ import annotations

import math
import re
from typing import Mapping, NamedTuple, Optional, Union

import numpy as np

from . import ClipBuckets, T5Buckets, attention, t5_bucket
from .position_schemes import xl_sinusoids as _xl_sinusoids

__all__ = ["LoadedAttention", "from_opennmt", "from_t5",
           "from_wav2vec2_bert", "from_wav2vec2_conformer"]


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
        if isinstance(self.buckets, T5Buckets):
            return "t5"
        b = self.buckets
        return "shaw" if b.left == b.right else "shaw-asym"

    def _position_kwargs(self, n):
        """relpos.attention's bucket keywords for a self-attention of n
        tokens."""
        b = self.buckets
        if self.xl_weight is not None:  # unclipped: k covers every distance
            return dict(max_distance=max(n - 1, 0))
        if isinstance(b, ClipBuckets) and b.left == b.right:
            return dict(max_distance=b.left)  # the symmetric clip: Shaw's k
        return dict(buckets=b)

    def _check_x(self, shape):
        if len(shape) != 3 or shape[2] != self.embed_dim:
            raise ValueError(
                f"relpos.interop: x must be [B, N, {self.embed_dim}] (got "
                f"shape {tuple(shape)})")

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
                f"relpos.interop: this {self.source} layer cannot become a "
                f"relpos.torch.RelativeMultiheadAttention: {why}; use "
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


def _positive(name, value):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) \
            or value <= 0:
        raise ValueError(f"relpos.interop: {name} must be an int > 0 (got "
                         f"{value!r})")
    return int(value)


def _rows(state_dict, name, source, ndim=2):
    """The shape of a named tensor (KeyError naming it if absent)."""
    if name not in state_dict:
        raise KeyError(f"relpos.interop: {source} state_dict has no tensor "
                       f"'{name}'")
    shape = tuple(int(s) for s in state_dict[name].shape)
    if len(shape) != ndim:
        raise ValueError(f"relpos.interop: {source} tensor '{name}' has "
                         f"shape {shape}, expected {ndim} dimensions")
    return shape


def _geometry(state_dict, name, num_heads, source):
    num_heads = _positive("num_heads", num_heads)
    e = _rows(state_dict, name, source)[0]
    if e % num_heads:
        raise ValueError(f"relpos.interop: {source} width {e} is not "
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


# The block index of a T5 prefix: "encoder.block.3.layer.0.SelfAttention."
_T5_BLOCK = re.compile(r"(^|.*\.)block\.(\d+)\.(.*)$")
_T5_STACK = re.compile(r"(^|\.)(encoder|decoder)\.block\.\d+\.")


def _t5_check_prefix(prefix):
    """Refuses a prefix that is not a str or names cross-attention."""
    if not isinstance(prefix, str):
        raise TypeError(f"relpos.interop: prefix must be a str (got "
                        f"{type(prefix).__name__})")
    if "EncDecAttention" in prefix:
        raise ValueError(
            f"relpos.interop: prefix {prefix!r} is T5's cross-attention "
            f"(EncDecAttention), which has no relative position bias; "
            f"from_t5 loads self-attention layers (layer.0.SelfAttention)")


def _t5_geometry(state_dict, config, prefix, num_heads, d_kv, source):
    """num_heads, d_kv and d_model of a T5 layer: the keywords, else the
    config, else (d_kv) the q rows / num_heads."""
    if num_heads is None:
        num_heads = _setting(config, "num_heads")
    if num_heads is None:
        raise ValueError("relpos.interop: from_t5 needs num_heads (a "
                         "keyword, or a config with num_heads)")
    num_heads = _positive("num_heads", num_heads)
    inner, d_model = _rows(state_dict, prefix + "q.weight", source)
    if d_kv is None:
        d_kv = _setting(config, "d_kv")
    if d_kv is None:
        if inner % num_heads:
            raise ValueError(
                f"relpos.interop: {source} tensor '{prefix}q.weight' has "
                f"{inner} rows, not divisible by num_heads = {num_heads}")
        d_kv = inner // num_heads
    return num_heads, _positive("d_kv", d_kv), d_model


def _t5_is_decoder(config, prefix, is_decoder):
    """is_decoder checked, or else the stack the prefix names, else
    config.is_decoder, else False."""
    if is_decoder is None:
        stack = _T5_STACK.search(prefix)
        is_decoder = (stack.group(2) == "decoder" if stack else
                      bool(_setting(config, "is_decoder", False)))
    elif not isinstance(is_decoder, (bool, np.bool_)):
        raise TypeError(f"relpos.interop: is_decoder must be a bool (got "
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
    num_buckets = _positive("num_buckets", num_buckets)
    max_distance = _positive("max_distance", max_distance
                             if max_distance is not None else
                             _setting(config,
                                      "relative_attention_max_distance", 128))
    buckets = T5Buckets(num_buckets, max_distance, not is_decoder)
    try:  # relpos's validation of the bucket map, at load time
        t5_bucket(np.zeros(1, np.int64), **buckets._asdict())
    except ValueError as err:
        raise ValueError(f"relpos.interop: {source} buckets {buckets}: "
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
    source = "T5"
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
        source=source, score_bias=np.ascontiguousarray(table.T), scale=1.0,
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
    source = "Wav2Vec2-Conformer"
    if not isinstance(num_heads, (int, np.integer)):
        kind = _setting(num_heads, "position_embeddings_type")
        if kind is not None and kind != "relative":
            raise ValueError(
                f"relpos.interop: {source} config has position_embeddings_"
                f"type = {kind!r}; from_wav2vec2_conformer loads "
                f"\"relative\" (Transformer-XL) attention only")
        num_heads = _setting(num_heads, "num_attention_heads", num_heads)
    e, d = _geometry(state_dict, prefix + "linear_q.weight", num_heads, source)
    if e % 2:
        raise ValueError(f"relpos.interop: {source} width {e} is odd; its "
                         f"sinusoids pair sin and cos, so it must be even")
    get, w = _projections(state_dict, prefix, source, e,
                          ("linear_q", "linear_k", "linear_v", "linear_out"))
    pos = get("linear_pos.weight", (e, e))
    perm = np.concatenate([np.arange(0, e, 2), np.arange(1, e, 2)])
    return LoadedAttention(
        num_heads=int(num_heads), ak=None, av=None, buckets=None,
        source=source, xl_weight=np.ascontiguousarray(pos[:, perm]),
        xl_u=get("pos_bias_u", (num_heads, d)),
        xl_v=get("pos_bias_v", (num_heads, d)), **w)

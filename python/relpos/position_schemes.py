"""The position schemes, in one module: the registry of named schemes,
the bucket maps, ALiBi slopes, RoPE and the fixed tables (docs/math.md
section 8, docs/schemes.md). The rest of the package imports them from here.

Distances follow relpos's convention r = j - (i + off): key position minus
query position, negative when the key is in the past. This is Hugging Face
T5's ``relative_position = memory_position - context_position``.

The registry (include/relpos/schemes.h, through the extension):
    schemes, scheme   every named scheme / one by name or alias
    Scheme, SchemeTable, SchemeCall
    SETTING_DEFAULTS  {key: default} of every scheme setting, in order

Bucket maps (the ``buckets=`` of relpos.attention), each with its
behaviour (``rows()``, ``reach()``, ``bucket(r)``):
    ClipBuckets       asymmetric clip clip(r, -left, right) + left
    T5Buckets         T5's logarithmic buckets

Functions:
    t5_bucket         T5's logarithmic buckets of an array of distances
    t5_bucket_reach   the distance beyond which T5 buckets stop changing
    clip_bucket       asymmetric clip buckets clip(r, -left, right) + left
    alibi_slopes      ALiBi's per-head slopes for any head count
    rope              rotary position embedding of [..., N, d] rows
    rope_backward     its gradient (rotation by the opposite angle)

Fixed tables (float64 numpy arrays):
    sinusoidal_table  the absolute sinusoidal table of relpos's models
    xl_sinusoids      Transformer-XL's encodings of the distances -k .. k
"""

from __future__ import annotations

import math
from typing import NamedTuple, Optional, Tuple

import numpy as np

from . import _relpos_ext as _ext
# The package's argument checks (relpos/_checks.py): the same messages
# everywhere.
from ._checks import boolean as _bool
from ._checks import choice, float_array, integer as _int, number

__all__ = [
    "ClipBuckets",
    "SETTING_DEFAULTS",
    "Scheme",
    "SchemeCall",
    "SchemeTable",
    "T5Buckets",
    "alibi_slopes",
    "clip_bucket",
    "rope",
    "rope_backward",
    "scheme",
    "schemes",
    "sinusoidal_table",
    "t5_bucket",
    "t5_bucket_reach",
    "xl_sinusoids",
]

_INT64_MAX = 2**63 - 1
_LAYOUTS = ("split_halves", "interleaved")


class ClipBuckets(NamedTuple):
    """Asymmetric clip: row ``clip(r, -left, right) + left`` of a table with
    ``left + right + 1`` rows (r = key position - query position; row 0 is
    ``left`` or more in the past). ``left == right == k`` is the default
    symmetric clip. Wav2Vec2-BERT / w2v-BERT 2.0 use ``ClipBuckets(64, 8)``.
    """

    left: int
    right: int

    def rows(self):
        """Rows of a table under this map: left + right + 1."""
        return self.left + self.right + 1

    def reach(self):
        """(L, R): every r <= -L reads row 0, every r >= R the last row."""
        return self.left, self.right

    def bucket(self, r):
        """The table rows (int64 array) of the distances r."""
        return clip_bucket(r, left=self.left, right=self.right)

    def _encode(self, fn):
        """("clip", [left, right]), the integers checked."""
        return "clip", [_int(fn, "buckets.left", self.left),
                        _int(fn, "buckets.right", self.right)]


class T5Buckets(NamedTuple):
    """T5's logarithmic buckets (relpos.t5_bucket): ``num_buckets`` rows,
    exact for short distances, logarithmic up to ``max_distance``;
    bidirectional (encoders) or causal (decoders)."""

    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True

    def _kw(self):
        return dict(num_buckets=self.num_buckets,
                    max_distance=self.max_distance,
                    bidirectional=bool(self.bidirectional))

    def rows(self):
        """Rows of a table under this map: num_buckets."""
        return self.num_buckets

    def reach(self):
        """(a, a), a = t5_bucket_reach: the buckets stop changing beyond."""
        a = t5_bucket_reach(**self._kw())
        return a, a

    def bucket(self, r):
        """The table rows (int64 array) of the distances r."""
        return t5_bucket(r, **self._kw())

    def _encode(self, fn):
        """("t5", [num_buckets, max_distance, bidirectional]), checked."""
        return "t5", [
            _int(fn, "buckets.num_buckets", self.num_buckets),
            _int(fn, "buckets.max_distance", self.max_distance),
            int(_bool(fn, "buckets.bidirectional", self.bidirectional))]


_BUCKET_KINDS = {"clip": ClipBuckets, "t5": T5Buckets}


def check_buckets(fn, buckets):
    """buckets, a ClipBuckets or T5Buckets (TypeError naming the argument
    otherwise)."""
    if not isinstance(buckets, tuple(_BUCKET_KINDS.values())):
        raise TypeError(
            f"relpos.{fn}: buckets must be None, relpos.ClipBuckets or "
            f"relpos.T5Buckets (got {type(buckets).__name__})")
    return buckets


def encode_buckets(fn, buckets):
    """A call's buckets= as (kind, integer arguments), checked: ("", [])
    for None (the symmetric clip by max_distance), ("clip", [left, right])
    or ("t5", [num_buckets, max_distance, bidirectional]): the form of the
    extension's SchemeArgs and of the relpos::attention op's schema."""
    if buckets is None:
        return "", []
    return check_buckets(fn, buckets)._encode(fn)


def decode_buckets(kind, args):
    """The bucket map encode_buckets encoded (None for kind "")."""
    if kind == "":
        return None
    if kind == "t5":
        return T5Buckets(args[0], args[1], bool(args[2]))
    if kind in _BUCKET_KINDS:
        return _BUCKET_KINDS[kind](*args)
    raise ValueError(f"relpos: unknown bucket kind {kind!r}")


def bucket_map(buckets, max_distance):
    """The map of a call: buckets, or the symmetric clip by max_distance
    (ClipBuckets(k, k), the same rows) when buckets is None."""
    if buckets is None:
        return ClipBuckets(int(max_distance), int(max_distance))
    return buckets


def _require_bindings():
    # The bindings live in python/src/position_schemes_ext.cc and are
    # registered by relpos_ext.cc's module body; an extension built without
    # that hook must fail loudly, not half-work.
    if not hasattr(_ext, "rope_f32"):
        raise RuntimeError(
            "relpos: this build of relpos._relpos_ext has no position-scheme "
            "bindings (relpos_ext.cc must call relpos::BindPositionSchemes)")


def _distances(fn, r):
    """r as a C-contiguous int64 array (any shape); integers only."""
    a = np.asarray(r)
    if a.dtype.kind not in "iu":
        raise TypeError(f"relpos.{fn}: r must hold integers (got dtype "
                        f"{a.dtype})")
    if a.dtype.kind == "u" and a.size and a.max() > _INT64_MAX:
        raise ValueError(f"relpos.{fn}: r has values above 2^63 - 1")
    return np.ascontiguousarray(a, dtype=np.int64)


def t5_bucket(r, *, num_buckets=32, max_distance=128, bidirectional=True):
    """T5's relative position buckets, as Hugging Face / Mesh TensorFlow.

    Args:
        r: integer array (any shape) of distances j - i (key minus query).
        num_buckets: table rows nb (T5: 32).
        max_distance: reach of the logarithmic range (T5: 128).
        bidirectional: True for encoders (r > 0 uses the upper half of the
            buckets), False for decoders (every r >= 0 is bucket 0).

    Returns:
        int64 array shaped like r, entries in [0, num_buckets). Identical to
        ``T5Attention._relative_position_bucket(torch.tensor(r), ...)`` of
        Hugging Face (float32 logarithm and products, see docs/schemes.md).
    """
    _require_bindings()
    fn = "t5_bucket"
    a = _distances(fn, r)
    out = np.empty(a.shape, np.int64)
    _ext.t5_bucket(a, out, _int(fn, "num_buckets", num_buckets),
                   _int(fn, "max_distance", max_distance),
                   _bool(fn, "bidirectional", bidirectional))
    return out


def t5_bucket_reach(*, num_buckets=32, max_distance=128, bidirectional=True):
    """Smallest a >= 1 with t5_bucket constant for r >= a and for r <= -a."""
    _require_bindings()
    fn = "t5_bucket_reach"
    return _ext.t5_bucket_reach(_int(fn, "num_buckets", num_buckets),
                                _int(fn, "max_distance", max_distance),
                                _bool(fn, "bidirectional", bidirectional))


def clip_bucket(r, *, left, right):
    """Asymmetric clip buckets ``clip(r, -left, right) + left``.

    A table for them has left + right + 1 rows; left == right == k is Shaw's
    symmetric clipping (relpos.attention's max_distance k). Wav2Vec2-BERT
    uses left 64, right 8.
    """
    _require_bindings()
    fn = "clip_bucket"
    a = _distances(fn, r)
    out = np.empty(a.shape, np.int64)
    _ext.clip_bucket(a, out, _int(fn, "left", left), _int(fn, "right", right))
    return out


def alibi_slopes(num_heads):
    """ALiBi slopes m_h (float64 array of num_heads), the paper's rule.

    H a power of two: m_h = 2^(-8 (h + 1) / H). Otherwise the slopes of the
    largest power of two P below H, then every other slope of 2P. Head h
    adds -m_h |r| (bidirectional) or -m_h (i + off - j) (causal) to its
    scores.
    """
    _require_bindings()
    return np.asarray(
        _ext.alibi_slopes(_int("alibi_slopes", "num_heads", num_heads)),
        dtype=np.float64)


def rope_base_layout(fn, base, layout):
    """(base as a float, layout) of a RoPE call, checked (shared by
    relpos.rope and relpos.triton.rope)."""
    base = number(fn, "base", base)
    if not math.isfinite(base) or base <= 0:
        raise ValueError(f"relpos.{fn}: base must be finite and > 0 "
                         f"(got {base})")
    return base, choice(fn, "layout", layout, _LAYOUTS)


def rope_offsets(fn, position_offset):
    """position_offset as (one offset, per-row offsets or []): an integer,
    or one integer per batch item of a [B, H, N, d] input (a sequence, a
    1-D integer array or tensor)."""
    x = position_offset
    if hasattr(x, "detach"):  # a torch tensor
        x = x.detach().cpu().numpy()
    if isinstance(x, (int, np.integer)) or (isinstance(x, np.ndarray)
                                            and x.ndim == 0):
        return _int(fn, "position_offset", x), []
    a = np.asarray(x)
    if a.ndim != 1 or a.dtype.kind not in "iu":
        raise TypeError(
            f"relpos.{fn}: position_offset must be an integer or one "
            f"integer per batch item (got {type(position_offset).__name__}"
            f"{'' if a.ndim != 1 else ' of dtype ' + str(a.dtype)})")
    return 0, [_int(fn, f"position_offset[{i}]", int(v))
               for i, v in enumerate(a)]


def _rope_call(fn, x, position_offset, base, layout, backward):
    _require_bindings()
    a = float_array(fn, "dy" if backward else "x", x)
    if a.ndim not in (1, 2, 3, 4):
        raise ValueError(f"relpos.{fn}: {'dy' if backward else 'x'} must "
                         f"have rank 1 to 4, [..., N, d] (got shape "
                         f"{a.shape})")
    a = np.ascontiguousarray(a)
    offset, offsets = rope_offsets(fn, position_offset)
    base, layout = rope_base_layout(fn, base, layout)
    out = np.empty_like(a)
    suffix = "f32" if a.dtype == np.float32 else "f64"
    getattr(_ext, "rope_" + suffix)(a, out, offset, base, layout, backward,
                                    offsets)
    return out


def rope(x, *, position_offset=0, base=10000.0, layout="split_halves"):
    """Rotary position embedding (Su et al. 2021) of every row of x.

    Row n of x (along the N axis) sits at position position_offset + n; its
    pair t of dimensions is rotated by position * base^(-2t/d). For
    attention, rotate the queries with position_offset = the attention's
    query offset (Nk - Nq by default) and the keys with 0.

    Args:
        x: [d], [N, d], [H, N, d] or [B, H, N, d], float32 (fast SIMD path)
            or float64 (reference); d even.
        position_offset: position of row 0; every position within +-2^40.
            Or, for x of rank 4, one integer per batch item: row n of item
            b is at position position_offset[b] + n (Hugging Face's
            position_ids = offset_b + n, batched prompts of different
            lengths).
        base: 10000 (paper, Llama 2), 500000 (Llama 3), ...
        layout: "split_halves" pairs (t, t + d/2), Hugging Face Llama /
            GPT-NeoX ``rotate_half`` (the default); "interleaved" pairs
            (2t, 2t+1), the paper, GPT-J, Meta's original Llama.

    Returns:
        A new array shaped like x.
    """
    return _rope_call("rope", x, position_offset, base, layout, False)


def rope_backward(dy, *, position_offset=0, base=10000.0,
                  layout="split_halves"):
    """Gradient of :func:`rope`: rotates dy by the opposite angles.

    Takes the same options as the forward call it differentiates.
    """
    return _rope_call("rope_backward", dy, position_offset, base, layout,
                      True)


# --- fixed tables ----------------------------------------------------------


def sinusoidal_table(rows, d):
    """The absolute sinusoidal table of relpos's models (scheme
    "sinusoidal", docs/model.md; Vaswani et al. 3.5), float64 [rows, d]:
    PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(p / 10000^(2i/d)).
    Computed by the C++ library (relpos::SinusoidalTable), the same code as
    the C++ models' input positions."""
    out = np.empty((_int("sinusoidal_table", "rows", rows, minimum=0),
                    _int("sinusoidal_table", "d", d, minimum=1)),
                   dtype=np.float64)
    _ext.sinusoidal_table_f64(out)
    return out


def xl_sinusoids(k, dim):
    """Transformer-XL's encodings R_{-r} for r = -k .. k (row r + k),
    float64 [2k+1, dim]: sin(x f_t) for t < dim/2, then cos(x f_t), x = -r
    (XL's distance i - j), f_t = 10000^(-2t/dim). relpos.torch's scheme
    "xl" multiplies them by its learned xl_w (docs/math.md section 8).
    Computed by the C++ library (relpos::XlSinusoidTable), the same code as
    the C++ models' xl layers."""
    k = _int("xl_sinusoids", "k", k, minimum=0)
    out = np.empty((2 * k + 1, _int("xl_sinusoids", "dim", dim, minimum=2)),
                   dtype=np.float64)
    _ext.xl_sinusoid_table_f64(k, out)
    return out


# --- the registry (include/relpos/schemes.h) --------------------------------
#
#     schemes()       every named scheme, in the registry's order
#     scheme(name)    one, by name or alias (ValueError listing the names)
#
# Each Scheme says what the C++ entry says: its name and aliases, where it
# acts (sides), the settings it reads with their defaults, its learned
# tables (names, shapes for a layer, initialisation) and the attention call
# a layer makes (Scheme.call). relpos.torch builds RelativeMultiheadAttention
# from it (its keyword arguments are the settings); the C++ model,
# `relpos bench` and `relpos compare` use the same entries.

# {key: default} of every setting (relpos::SchemeSettings, the papers'
# defaults), in its order.
SETTING_DEFAULTS = {key: getattr(_ext.SchemeSettings(), key)
                    for key in _ext.scheme_setting_keys()}


class SchemeTable(NamedTuple):
    """One learned tensor of a scheme in a layer. ``name`` is the tensor's
    name in the layer (the C++ model's checkpoint calls it
    ``blocks.L.attn.<name>``; the input table is ``embed.position``);
    ``role`` what the layer does with it ("key_table", "value_table",
    "score_bias", "xl_projection", "xl_content_bias", "xl_position_bias",
    "input_table"); ``init`` "xavier_normal" (times ``scale``, docs/math.md
    section 5) or "normal" (std ``scale``)."""

    name: str
    role: str
    shape: Tuple[int, ...]
    init: str
    scale: float


class SchemeCall(NamedTuple):
    """How a layer runs a scheme: ``attention`` holds the keywords of
    relpos.attention / relpos.torch.attention for the scheme's options
    (max_distance or buckets, alibi, causal); the other fields the options
    the tables must match, RoPE's rotation (None, or dict(base=, layout=))
    and whether the layer builds Transformer-XL's key table."""

    attention: dict
    key_term: bool
    value_term: bool
    per_head_tables: bool
    position_query_bias: bool
    rope: Optional[dict]
    xl_table: bool


def _settings(fn, given):
    """The settings given by keyword, type-checked against the defaults'
    types (values are the C++ registry's to check)."""
    out = {}
    for key, value in given.items():
        if key not in SETTING_DEFAULTS:
            raise TypeError(f"relpos.{fn}: unknown scheme setting {key!r} "
                            f"(settings: {', '.join(SETTING_DEFAULTS)})")
        default = SETTING_DEFAULTS[key]
        if isinstance(default, bool):
            out[key] = _bool(fn, key, value)
        elif isinstance(default, int):
            out[key] = _int(fn, key, value)
        elif isinstance(default, float):
            out[key] = number(fn, key, value)
        elif not isinstance(value, str):
            raise TypeError(f"relpos.{fn}: {key} must be a str (got "
                            f"{type(value).__name__})")
        else:
            out[key] = value
    return out


def _attention_keywords(a):
    kw = dict(causal=a["causal"])
    if a["buckets"] in _BUCKET_KINDS:
        kw["buckets"] = decode_buckets(a["buckets"], a["bucket_args"])
    else:
        kw["max_distance"] = a["max_distance"]
    if a["score"] == "alibi":
        kw["alibi"] = True
    return kw


class Scheme:
    """One entry of the registry (read-only attributes):

    name, aliases, summary, sides ("input", "score", "value",
    "query_bias", "rotation"), input ("none", "sinusoid", "learned_table"),
    settings ({key: default} of the settings it reads), table_names (every
    table it may have, in order) and their table_roles (SchemeTable.role),
    inside_attention.
    """

    __slots__ = ("name", "aliases", "summary", "sides", "input", "settings",
                 "table_names", "table_roles", "label")

    def __init__(self, entry):
        self.name = entry["name"]
        self.aliases = tuple(entry["aliases"])
        self.summary = entry["summary"]
        self.sides = tuple(entry["sides"])
        self.input = entry["input"]
        self.settings = {k: SETTING_DEFAULTS[k] for k in entry["settings"]}
        self.table_names = tuple(t[0] for t in entry["tables"])
        self.table_roles = tuple(t[1] for t in entry["tables"])
        self.label = entry["label"]

    @property
    def inside_attention(self):
        return any(side != "input" for side in self.sides)

    def _layer(self, fn, num_heads, head_dim, causal, settings):
        native = _ext.SchemeSettings()
        for key, value in _settings(fn, settings).items():
            setattr(native, key, value)
        return (_int(fn, "num_heads", num_heads),
                _int(fn, "head_dim", head_dim),
                _bool(fn, "causal", causal), native)

    def tables(self, num_heads, head_dim, *, causal=False, **settings):
        """The tables of a layer of num_heads heads of width head_dim
        (settings: any subset of relpos.SETTING_DEFAULTS' keys, the rest at
        their defaults); ValueError naming a setting the scheme cannot run
        with."""
        h, d, c, s = self._layer("Scheme.tables", num_heads, head_dim, causal,
                                 settings)
        return tuple(SchemeTable(name, role, tuple(shape), init, scale)
                     for name, role, shape, init, scale
                     in _ext.scheme_tables(self.name, h, d, c, s))

    def call(self, num_heads, head_dim, *, causal=False, max_key_length=1,
             **settings):
        """The attention call of such a layer over at most max_key_length
        keys (only Transformer-XL's unclipped table depends on it)."""
        fn = "Scheme.call"
        h, d, c, s = self._layer(fn, num_heads, head_dim, causal, settings)
        n = _int(fn, "max_key_length", max_key_length)
        raw = _ext.scheme_call(self.name, h, d, c, n, s)
        a = raw["attention"]
        return SchemeCall(_attention_keywords(a), a["key_term"],
                          a["value_term"], a["per_head_tables"],
                          a["position_query_bias"], raw["rope"],
                          raw["xl_table"])

    def __repr__(self):
        return f"relpos.scheme({self.name!r})"


_SCHEMES = tuple(Scheme(e) for e in _ext.scheme_entries())


def schemes():
    """Every scheme of the registry, in its order (none, sinusoidal,
    learned, shaw, shaw-asym, shaw-log, t5, alibi, rope, xl)."""
    return _SCHEMES


def scheme(name):
    """The scheme called `name` or one of its aliases ("relative" is
    "shaw"); ValueError listing the accepted names otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"relpos.scheme: name must be a str (got "
                        f"{type(name).__name__})")
    canonical = _ext.scheme_name(name)  # the C++ registry's FindScheme
    return next(s for s in _SCHEMES if s.name == canonical)

"""Bucket maps, ALiBi slopes and RoPE: the pieces of the relative-position
family (docs/math.md section 8, docs/schemes.md), numpy interface.

Distances follow relpos's convention r = j - (i + off): key position minus
query position, negative when the key is in the past. This is Hugging Face
T5's ``relative_position = memory_position - context_position``.

Bucket maps (the ``buckets=`` of relpos.attention):
    ClipBuckets       asymmetric clip clip(r, -left, right) + left
    T5Buckets         T5's logarithmic buckets

Functions:
    t5_bucket         T5's logarithmic buckets of an array of distances
    t5_bucket_reach   the distance beyond which T5 buckets stop changing
    clip_bucket       asymmetric clip buckets clip(r, -left, right) + left
    alibi_slopes      ALiBi's per-head slopes for any head count
    rope              rotary position embedding of [..., N, d] rows
    rope_backward     its gradient (rotation by the opposite angle)
"""

from __future__ import annotations

import math
from typing import NamedTuple

import numpy as np

from . import _relpos_ext as _ext
# The package's argument checks (relpos/_checks.py): the same messages
# everywhere.
from ._checks import boolean as _bool
from ._checks import choice, float_array, integer as _int, number

__all__ = [
    "ClipBuckets",
    "T5Buckets",
    "alibi_slopes",
    "clip_bucket",
    "rope",
    "rope_backward",
    "t5_bucket",
    "t5_bucket_reach",
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


class T5Buckets(NamedTuple):
    """T5's logarithmic buckets (relpos.t5_bucket): ``num_buckets`` rows,
    exact for short distances, logarithmic up to ``max_distance``;
    bidirectional (encoders) or causal (decoders)."""

    num_buckets: int = 32
    max_distance: int = 128
    bidirectional: bool = True


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

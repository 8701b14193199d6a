"""The front door of an attention call's arguments in Python: every path
(relpos.attention and relpos.attention_backward on numpy arrays, hence
relpos.torch on CPU tensors; relpos.triton's kernels on GPU tensors;
relpos.torch.context_parallel_attention) parses the scheme and row options
here, with one set of messages.

    parse(fn, ...) -> CallArgs

Types and the rules between arguments are checked here (max_distance or
buckets; at most one of ak, bias, alibi; pb needs ak; one offset or one per
batch item; a finite positive scale). Values against the tensors' shapes
(ranges, table rows, one entry per batch item) are the C++ core's to check
(src/op/core/attention_problem.cc), and only there: the numpy path reaches
it through the kernels; the Triton path and the context-parallel path
(which checks each rank's options before its ring starts) ask it through
check_problem (the extension's check_attention_problem, on the tensors'
shapes), and relpos/triton/_problem.py refuses only what the Triton
kernels cannot do (grouped-query attention, left padding, per-row offsets).
"""

from __future__ import annotations

import math
from typing import List, NamedTuple, Optional

import numpy as np

from . import _relpos_ext as _ext
from ._checks import boolean, integer
from .position_schemes import bucket_map, encode_buckets

__all__ = ["CallArgs", "check_problem", "check_scale", "native", "parse",
           "per_head_tables", "per_item"]


class CallArgs(NamedTuple):
    """One call's options, checked and normalised.

    bucket_kind / bucket_args: encode_buckets's form ("" for the symmetric
    clip by max_distance, "clip" [left, right], "t5" [num_buckets,
    max_distance, bidirectional]); buckets the map itself (None for the
    symmetric clip); max_distance k of the symmetric clip (0 with buckets).
    score: "vector" (ak), "scalar_table" (bias), "alibi" or "none" (no key
    term). alibi: None (off), [] (the paper's slopes) or one slope per
    head. query_offset: one offset (None: Nk - Nq) unless query_offsets
    (one per batch item) is non-empty. key_lengths / key_starts: one
    integer per batch item, or [] when not given. scale: None (1 /
    sqrt(dk)) or the multiplier.
    """

    bucket_kind: str
    bucket_args: List[int]
    buckets: object
    max_distance: int
    score: str
    alibi: Optional[List[float]]
    has_pb: bool
    causal: bool
    key_lengths: List[int]
    query_offset: Optional[int]
    query_offsets: List[int]
    key_starts: List[int]
    scale: Optional[float]

    def bucket_map(self):
        """The map's own behaviour (rows, reach, bucket): buckets, or
        ClipBuckets(k, k) for the symmetric clip."""
        return bucket_map(self.buckets, self.max_distance)


def _host(x):
    """A torch tensor as a numpy array (one copy to the host); anything
    else as it is."""
    if hasattr(x, "detach") and hasattr(x, "cpu"):
        return x.detach().cpu().numpy()
    return x


def per_item(fn, name, x):
    """B integers, one per batch item (None -> []), as a list of ints: a
    sequence, a 1-D integer array or tensor."""
    if x is None:
        return []
    a = np.asarray(_host(x))
    if a.dtype.kind not in "iu":
        raise TypeError(
            f"relpos.{fn}: {name} must hold integers (got dtype {a.dtype})")
    if a.ndim != 1:
        raise ValueError(
            f"relpos.{fn}: {name} must be one-dimensional, one entry per "
            f"batch item (got shape {a.shape})")
    # Ranges are checked against the call's shapes later; int64 kept intact.
    return [integer(fn, f"{name}[{i}]", int(v)) for i, v in enumerate(a)]


def _query_offset(fn, x):
    """query_offset as (one offset or None, per-row offsets or [])."""
    x = _host(x)
    if x is None or isinstance(x, (int, np.integer)) or (
            isinstance(x, np.ndarray) and x.ndim == 0):
        return integer(fn, "query_offset", x, allow_none=True), []
    return None, per_item(fn, "query_offset", x)


def check_scale(fn, x):
    """None, or the score multiplier as a float, finite and > 0."""
    if x is None:
        return None
    if isinstance(x, (bool, np.bool_)) or not isinstance(
            x, (int, float, np.floating, np.integer)):
        raise TypeError(f"relpos.{fn}: scale must be None or a number (got "
                        f"{type(x).__name__})")
    x = float(x)
    if not (x > 0 and math.isfinite(x)):
        raise ValueError(f"relpos.{fn}: scale must be finite and > 0 (got "
                         f"{x})")
    return x


def _alibi(fn, alibi):
    """None (off), [] (the paper's slopes) or the slopes as floats."""
    if alibi is None or alibi is False:
        return None
    if alibi is True:
        return []
    slopes = np.asarray(_host(alibi))
    if slopes.ndim != 1 or slopes.dtype.kind not in "iuf":
        raise TypeError(
            f"relpos.{fn}: alibi must be True, False, None or a sequence of "
            f"one slope per head (got {alibi!r})")
    return [float(m) for m in slopes]


def parse(fn, *, ak=None, bias=None, pb=None, max_distance=None,
          buckets=None, alibi=None, causal=False, key_lengths=None,
          query_offset=None, key_starts=None, scale=None):
    """The options of one call of relpos.attention (or of the GPU or
    context-parallel path) as CallArgs; ak, bias and pb only say whether
    they are given. TypeError / ValueError naming the argument."""
    if buckets is None:
        if max_distance is None:
            raise TypeError(
                f"relpos.{fn}: max_distance (the clipping distance k) is "
                f"required unless buckets is given")
        max_distance = integer(fn, "max_distance", max_distance)
    elif max_distance is not None:
        raise ValueError(
            f"relpos.{fn}: max_distance applies to the default symmetric "
            f"clip only; leave it out with buckets={buckets!r}")
    else:
        max_distance = 0
    kind, args = encode_buckets(fn, buckets)

    slopes = _alibi(fn, alibi)
    given = [name for name, on in (("ak", ak is not None),
                                   ("bias", bias is not None),
                                   ("alibi", slopes is not None)) if on]
    if len(given) > 1:
        raise ValueError(
            f"relpos.{fn}: ak, bias and alibi are alternative score terms; "
            f"give at most one (got {', '.join(given)})")
    if pb is not None and ak is None:
        raise ValueError(
            f"relpos.{fn}: pb (the position query bias) needs the key table "
            f"ak (got ak=None)")
    score = ("vector" if ak is not None else "scalar_table"
             if bias is not None else "alibi" if slopes is not None
             else "none")
    offset, offsets = _query_offset(fn, query_offset)
    return CallArgs(
        bucket_kind=kind, bucket_args=args,
        buckets=None if buckets is None else buckets,
        max_distance=max_distance, score=score, alibi=slopes,
        has_pb=pb is not None, causal=boolean(fn, "causal", causal),
        key_lengths=per_item(fn, "key_lengths", key_lengths),
        query_offset=offset, query_offsets=offsets,
        key_starts=per_item(fn, "key_starts", key_starts),
        scale=check_scale(fn, scale))


def per_head_tables(fn, ak, av):
    """Whether the tables are per head ([H, nb, d], rank 3) or shared
    ([nb, d]), read from the ranks; both tables must agree."""
    ranks = {len(t.shape) for t in (ak, av) if t is not None}
    if len(ranks) == 2:
        raise ValueError(
            f"relpos.{fn}: ak has shape {_shape(ak)} and av has shape "
            f"{_shape(av)}; both must be shared [2k+1, d] or both per-head "
            f"[H, 2k+1, d]")
    return ranks == {3}


def _shape(t):
    return tuple(int(s) for s in t.shape) if isinstance(t, np.ndarray) \
        else "[" + ", ".join(str(int(s)) for s in t.shape) + "]"


def native(a):
    """The extension's (SchemeArgs, RowArgs) of parsed options."""
    s = _ext.SchemeArgs()
    if a.bucket_kind == "clip":
        s.buckets = "clip"
        s.clip_left, s.clip_right = a.bucket_args
    elif a.bucket_kind == "t5":
        s.buckets = "t5"
        s.t5_num_buckets, s.t5_max_distance, bidirectional = a.bucket_args
        s.t5_bidirectional = bool(bidirectional)
    if a.score in ("scalar_table", "alibi"):
        s.score = a.score
        s.alibi_slopes = a.alibi or []  # []: the paper's slopes
    rows = _ext.RowArgs()
    rows.query_offsets = a.query_offsets
    rows.key_starts = a.key_starts
    rows.scale = a.scale
    return s, rows


def check_problem(fn, a, q, k, v, ak=None, av=None, bias=None, pb=None):
    """The C++ core's checks of a call (src/op/core/attention_problem.cc:
    shapes against each other and the options, every range) on the
    tensors' shapes alone, for a path that does not call the core
    (relpos.triton); the resolved problem as a dict (heads, kv_heads,
    table_rows, t5_reach, alibi_slopes, query_offsets, key_lengths,
    key_starts, min_offset, max_offset). ValueError as the core words it,
    with relpos.<fn> in front."""
    def shape(t):
        return None if t is None else [int(s) for s in t.shape]

    scheme, rows = native(a)
    try:
        return _ext.check_attention_problem(
            shape(q), shape(k), shape(v), shape(ak), shape(av), shape(bias),
            shape(pb), a.max_distance, per_head_tables(fn, ak, av), a.causal,
            a.key_lengths, a.query_offset, scheme, rows)
    except ValueError as e:
        raise ValueError(f"relpos.{fn}: "
                         f"{str(e).removeprefix('relpos: ')}") from None

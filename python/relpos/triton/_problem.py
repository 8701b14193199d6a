"""Argument checks of the GPU path: everything relpos.torch.attention takes,
validated into a Call (the kernels' scalar parameters and small device
tensors). Every message names the argument; the wording follows the C++
core's (src/op/core/attention_problem.cc) with the calling function in
front.

The bucket map is stored as the kernels use it (docs/math.md section 8):
distances r <= -L share row bL, r >= R row bR, and the interior distances
-L < r < R have the row r + LROW (a clip) or ROWMAP[r + L - 1] (T5). L and R
are the map's reaches cut to the distances the call has (at most Nq - 1 +
off on the left, Nk - 1 - off on the right), so a huge clip or T5 reach costs
nothing beyond the call's size.
"""

from __future__ import annotations

import dataclasses
import math
import operator
import os
from typing import Optional

import numpy as np
import torch

import relpos

from .._checks import number
from ._interpret import fix_bfloat16_dot

# Score terms, as the kernels number them (_kernels.py).
NONE, VECTOR, SCALAR, ALIBI = 0, 1, 2, 3

_MAX_DISTANCE = 1 << 24      # the C++ core's kMaxDistance
_MAX_OFFSET = 1 << 40        # the C++ core's kMaxQueryOffset
_MAX_ALIBI = float(1 << 20)  # the C++ core's kMaxAlibiSlope
# The kernels form distances in int32: |query_offset| + Nq + Nk (and the
# reaches) must stay below 2^30.
_GPU_RANGE = 1 << 30

FLOAT_DTYPES = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
_DTYPE_NAMES = "torch.float16, torch.bfloat16, torch.float32 or torch.float64"


def interpreting():
    """True when Triton's interpreter runs the kernels (TRITON_INTERPRET=1):
    then they run on CPU tensors too."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_tensor(fn, name, t, like=None):
    """Type, layout, dtype and device of one tensor argument."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"relpos.{fn}: {name} must be a torch.Tensor (got "
                        f"{type(t).__name__})")
    if t.layout != torch.strided:
        raise ValueError(f"relpos.{fn}: {name} must be a dense (strided) "
                         f"tensor (got layout {t.layout})")
    if t.dtype not in FLOAT_DTYPES:
        if t.dtype.is_floating_point:
            raise NotImplementedError(
                f"relpos.{fn}: {name} has dtype {t.dtype}; the GPU path "
                f"runs {_DTYPE_NAMES}")
        raise TypeError(f"relpos.{fn}: {name} must have dtype "
                        f"{_DTYPE_NAMES} (got {t.dtype})")
    if like is None:
        if t.device.type == "cpu" and not interpreting():
            raise ValueError(
                f"relpos.{fn}: {name} is on the CPU; the Triton kernels run "
                f"on a GPU, or on the CPU under Triton's interpreter "
                f"(TRITON_INTERPRET=1); relpos.torch.attention runs CPU "
                f"tensors on relpos's C++ kernel")
        return
    if t.device != like.device:
        raise ValueError(f"relpos.{fn}: {name} is on {t.device} but q is on "
                         f"{like.device}; every tensor of one call must be "
                         f"on one device")
    if t.dtype != like.dtype:
        raise TypeError(f"relpos.{fn}: {name} has dtype {t.dtype} but q has "
                        f"{like.dtype}; all tensors of one call must share a "
                        f"dtype")


def _int(fn, name, x):
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"relpos.{fn}: {name} must be an integer (got bool)")
    if isinstance(x, torch.Tensor) and x.numel() == 1 and \
            not x.dtype.is_floating_point:
        x = int(x.item())
    try:
        return operator.index(x)
    except TypeError:
        raise TypeError(f"relpos.{fn}: {name} must be an integer (got "
                        f"{type(x).__name__})") from None


def _shape(t):
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _check_rank(fn, name, t, rank):
    if t.dim() != rank or t.numel() == 0:
        what = "must not be empty" if t.numel() == 0 and t.dim() == rank \
            else f"must have rank {rank} (got shape {_shape(t)})"
        raise ValueError(f"relpos.{fn}: {name} {what}")


def _check_dim(fn, name, t, axis, want, what):
    if t.shape[axis] != want:
        raise ValueError(f"relpos.{fn}: {name} has shape {_shape(t)} but "
                         f"dim {axis} must equal {what} = {want}")


@dataclasses.dataclass
class Buckets:
    """The bucket map as the kernels see it (module docstring)."""
    nb: int            # table rows
    rows_name: str     # for messages, as the C++ core names them
    clip: bool
    left: int          # the map's true reaches
    right: int
    b_left: int        # row of every r <= -left
    b_right: int       # row of every r >= right
    t5: Optional[relpos.T5Buckets] = None


def _buckets(fn, buckets, max_distance):
    if buckets is None:
        if max_distance is None:
            raise TypeError(f"relpos.{fn}: max_distance (the clipping "
                            f"distance k) is required unless buckets is "
                            f"given")
        k = _int(fn, "max_distance", max_distance)
        if k < 0:
            raise ValueError(f"relpos.{fn}: max_distance must be >= 0 (got "
                             f"{k})")
        if k > _MAX_DISTANCE:
            raise ValueError(f"relpos.{fn}: max_distance must be <= "
                             f"{_MAX_DISTANCE} (got {k})")
        return Buckets(2 * k + 1, "2*max_distance+1", True, k, k, 0, 2 * k)
    if max_distance is not None:
        raise ValueError(f"relpos.{fn}: max_distance applies to the default "
                         f"symmetric clip only; leave it out with "
                         f"buckets={buckets!r}")
    if isinstance(buckets, relpos.ClipBuckets):
        left = _int(fn, "buckets.left", buckets.left)
        right = _int(fn, "buckets.right", buckets.right)
        if left < 0 or right < 0:
            raise ValueError(f"relpos.{fn}: buckets.clip: left and right "
                             f"must be >= 0 (got left {left}, right "
                             f"{right})")
        if left > _MAX_DISTANCE or right > _MAX_DISTANCE:
            raise ValueError(f"relpos.{fn}: buckets.clip: left and right "
                             f"must be <= {_MAX_DISTANCE} (got left {left}, "
                             f"right {right})")
        return Buckets(left + right + 1,
                       "buckets.clip.left+buckets.clip.right+1", True, left,
                       right, 0, left + right)
    if isinstance(buckets, relpos.T5Buckets):
        t5 = relpos.T5Buckets(
            _int(fn, "buckets.num_buckets", buckets.num_buckets),
            _int(fn, "buckets.max_distance", buckets.max_distance),
            buckets.bidirectional)
        if not isinstance(t5.bidirectional, (bool, np.bool_)):
            raise TypeError(f"relpos.{fn}: buckets.bidirectional must be a "
                            f"bool (got {type(t5.bidirectional).__name__})")
        kw = dict(num_buckets=t5.num_buckets, max_distance=t5.max_distance,
                  bidirectional=bool(t5.bidirectional))
        reach = relpos.t5_bucket_reach(**kw)  # validates, as the C++ core
        ends = relpos.t5_bucket(np.array([-reach, reach]), **kw)
        return Buckets(t5.num_buckets, "buckets.t5.num_buckets", False,
                       reach, reach, int(ends[0]), int(ends[1]), t5)
    raise TypeError(f"relpos.{fn}: buckets must be None, relpos.ClipBuckets "
                    f"or relpos.T5Buckets (got {type(buckets).__name__})")


@dataclasses.dataclass
class Call:
    """One validated call: shapes, scheme, and the kernels' parameters."""
    fn: str
    b: int
    h: int
    nq: int
    nk: int
    dk: int
    dv: int
    off: int
    causal: bool
    score: int
    has_pb: bool
    has_av: bool
    per_head: bool
    buckets: Buckets
    left: int          # L and R cut to the call's distances
    right: int
    all_far: bool      # every pair of the call reads one row (or none)
    lens: Optional[torch.Tensor]     # int32 [B] on the device
    rowmap: Optional[torch.Tensor]   # int32 interior rows (T5)
    slopes: Optional[torch.Tensor]   # ALiBi slopes [H]
    device: torch.device
    dtype: torch.dtype

    scale_given: Optional[float] = None  # None: 1 / sqrt(dk)

    @property
    def scale(self):
        """The multiplier of q . k and of the vector table term."""
        if self.scale_given is not None:
            return self.scale_given
        return 1.0 / math.sqrt(self.dk)

    @property
    def interior(self):
        """Number of interior distances -L < r < R."""
        return max(self.left + self.right - 1, 0)


def _check_tables(fn, q, k, v, ak, av, bias, pb, bk):
    b, h, _, dk = q.shape
    _check_rank(fn, "k", k, 4)
    _check_rank(fn, "v", v, 4)
    _check_dim(fn, "k", k, 0, b, "batch of q")
    hkv = k.shape[1]
    if hkv != h and hkv > 0 and h % hkv == 0:
        raise NotImplementedError(
            f"relpos.{fn}: grouped-query attention (k and v with {hkv} "
            f"heads for {h} query heads) is not implemented on the GPU path; "
            f"repeat k and v to {h} heads (torch.repeat_interleave(k, "
            f"{h // hkv}, dim=1)) or run on the CPU")
    _check_dim(fn, "k", k, 1, h, "heads of q")
    _check_dim(fn, "k", k, 3, dk, "dk of q")
    _check_dim(fn, "v", v, 0, b, "batch of q")
    _check_dim(fn, "v", v, 1, h, "heads of q")
    _check_dim(fn, "v", v, 2, k.shape[2], "Nk of k")
    ranks = {t.dim() for t in (ak, av) if t is not None}
    if len(ranks) == 2:
        raise ValueError(f"relpos.{fn}: ak has shape {_shape(ak)} and av has "
                         f"shape {_shape(av)}; both must be shared [2k+1, d] "
                         f"or both per-head [H, 2k+1, d]")
    per_head = ranks == {3}
    for name, t, width, wname in (("ak", ak, dk, "dk"),
                                  ("av", av, v.shape[3], "dv")):
        if t is None:
            continue
        if t.dim() not in (2, 3):
            raise ValueError(f"relpos.{fn}: {name} must have rank 2 or 3 "
                             f"(got shape {_shape(t)})")
        lead = 1 if per_head else 0
        if per_head:
            _check_dim(fn, name, t, 0, h, "heads")
        _check_dim(fn, name, t, lead, bk.nb, bk.rows_name)
        _check_dim(fn, name, t, lead + 1, width, wname)
    if bias is not None:
        _check_rank(fn, "bias", bias, 2)
        _check_dim(fn, "bias", bias, 0, h, "heads")
        _check_dim(fn, "bias", bias, 1, bk.nb, bk.rows_name)
    if pb is not None:
        _check_rank(fn, "pb", pb, 2)
        _check_dim(fn, "pb", pb, 0, h, "heads")
        _check_dim(fn, "pb", pb, 1, dk, "dk")
    return per_head


def _score(fn, ak, bias, alibi, pb):
    use_alibi = not (alibi is None or alibi is False)
    given = [n for n, on in (("ak", ak is not None),
                             ("bias", bias is not None),
                             ("alibi", use_alibi)) if on]
    if len(given) > 1:
        raise ValueError(f"relpos.{fn}: ak, bias and alibi are alternative "
                         f"score terms; give at most one (got "
                         f"{', '.join(given)})")
    if pb is not None and ak is None:
        raise ValueError(f"relpos.{fn}: pb (the position query bias) needs "
                         f"the key table ak (got ak=None)")
    if ak is not None:
        return VECTOR
    if bias is not None:
        return SCALAR
    return ALIBI if use_alibi else NONE


def _slopes(fn, alibi, heads, device, dtype):
    if alibi is True:
        slopes = relpos.alibi_slopes(heads)
    else:
        if isinstance(alibi, torch.Tensor):
            alibi = alibi.detach().cpu().numpy()
        slopes = np.asarray(alibi)
        if slopes.ndim != 1 or slopes.dtype.kind not in "iuf":
            raise TypeError(f"relpos.{fn}: alibi must be True, False, None "
                            f"or a sequence of one slope per head (got "
                            f"{alibi!r})")
        if slopes.shape[0] != heads:
            raise ValueError(f"relpos.{fn}: alibi_slopes must have one entry "
                             f"per head (heads = {heads}, got "
                             f"{slopes.shape[0]})")
        for i, m in enumerate(slopes.astype(np.float64)):
            if not (math.isfinite(m) and abs(m) <= _MAX_ALIBI):
                raise ValueError(f"relpos.{fn}: alibi_slopes[{i}] must be "
                                 f"finite with |m| <= 2^20 (got {m})")
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return torch.as_tensor(np.asarray(slopes, np.float64), dtype=acc,
                           device=device)


def _lengths(fn, key_lengths, b, nk, device):
    if key_lengths is None:
        return None
    if isinstance(key_lengths, torch.Tensor):
        if key_lengths.dtype.is_floating_point or key_lengths.is_complex() \
                or key_lengths.dtype == torch.bool:
            raise TypeError(f"relpos.{fn}: key_lengths must hold integers "
                            f"(got dtype {key_lengths.dtype})")
        host = key_lengths.detach().cpu().numpy()  # one sync for device ones
    else:
        host = np.asarray(key_lengths)
        if host.dtype.kind not in "iu":
            raise TypeError(f"relpos.{fn}: key_lengths must hold integers "
                            f"(got dtype {host.dtype})")
    if host.ndim != 1:
        raise ValueError(f"relpos.{fn}: key_lengths must be one-dimensional, "
                         f"one entry per batch item (got shape "
                         f"{host.shape})")
    if host.shape[0] != b:
        raise ValueError(f"relpos.{fn}: key_lengths must have one entry per "
                         f"batch item (batch = {b}, got {host.shape[0]})")
    for i, n in enumerate(host.tolist()):
        if not 0 <= n <= nk:
            raise ValueError(f"relpos.{fn}: key_lengths[{i}] must be in "
                             f"[0, Nk = {nk}] (got {n})")
    return torch.as_tensor(host.astype(np.int32), device=device)


def _cut_reaches(bk, nq, nk, off):
    """(L, R): the reaches cut to the distances the call has."""
    left = min(bk.left, max(nq - 1 + off + 1, 0))
    right = min(bk.right, max(nk - 1 - off + 1, 0))
    return left, right


def _rowmap(bk, left, right, device):
    if bk.clip or left + right - 1 <= 0:
        return None
    r = np.arange(1 - left, right, dtype=np.int64)
    rows = relpos.t5_bucket(r, num_buckets=bk.t5.num_buckets,
                            max_distance=bk.t5.max_distance,
                            bidirectional=bool(bk.t5.bidirectional))
    return torch.as_tensor(rows.astype(np.int32), device=device)


def prepare(fn, q, k, v, ak=None, av=None, bias=None, pb=None, *,
            max_distance=None, causal=False, key_lengths=None,
            query_offset=None, buckets=None, alibi=None, key_starts=None,
            scale=None):
    """Validates one call of relpos.torch.attention's arguments."""
    check_tensor(fn, "q", q)
    for name, t in (("k", k), ("v", v), ("ak", ak), ("av", av),
                    ("bias", bias), ("pb", pb)):
        if t is not None or name in ("k", "v"):
            check_tensor(fn, name, t, like=q)
    _check_rank(fn, "q", q, 4)
    bk = _buckets(fn, buckets, max_distance)
    score = _score(fn, ak, bias, alibi, pb)
    per_head = _check_tables(fn, q, k, v, ak, av, bias, pb, bk)
    if not isinstance(causal, (bool, np.bool_)):
        raise TypeError(f"relpos.{fn}: causal must be a bool (got "
                        f"{type(causal).__name__})")
    b, h, nq, dk = q.shape
    nk, dv = k.shape[2], v.shape[3]
    if key_starts is not None:
        raise NotImplementedError(
            f"relpos.{fn}: key_starts (left padding) is not implemented on "
            f"the GPU path; pad on the right (key_lengths) or run on the CPU")
    if isinstance(query_offset, (list, tuple, np.ndarray, torch.Tensor)) \
            and np.ndim(query_offset if not isinstance(
                query_offset, torch.Tensor) else query_offset.cpu()) == 1:
        raise NotImplementedError(
            f"relpos.{fn}: one query_offset per batch item is not "
            f"implemented on the GPU path; give one offset, or run on the "
            f"CPU")
    if scale is not None:
        scale = number(fn, "scale", scale)
        if not (math.isfinite(scale) and scale > 0):
            raise ValueError(f"relpos.{fn}: scale must be finite and > 0 "
                             f"(got {scale})")
    off = nk - nq if query_offset is None else \
        _int(fn, "query_offset", query_offset)
    if abs(off) > _MAX_OFFSET:
        raise ValueError(f"relpos.{fn}: query_offset must be within +-2^40 "
                         f"(got {off})")
    if abs(off) + nq + nk >= _GPU_RANGE:
        raise NotImplementedError(
            f"relpos.{fn}: |query_offset| + Nq + Nk must be below 2^30 on "
            f"the GPU path (32-bit distances; got query_offset {off}, Nq "
            f"{nq}, Nk {nk})")
    left, right = _cut_reaches(bk, nq, nk, off)
    if interpreting() and q.dtype == torch.bfloat16:
        fix_bfloat16_dot()
    has_av = av is not None
    bucketed = score in (VECTOR, SCALAR) or has_av
    return Call(
        fn=fn, b=b, h=h, nq=nq, nk=nk, dk=dk, dv=dv, off=off,
        causal=bool(causal), score=score, has_pb=pb is not None,
        has_av=has_av, per_head=per_head, buckets=bk, left=left, right=right,
        all_far=not bucketed or bk.nb == 1,
        lens=_lengths(fn, key_lengths, b, nk, q.device),
        rowmap=_rowmap(bk, left, right, q.device),
        slopes=_slopes(fn, alibi, h, q.device, q.dtype)
        if score == ALIBI else None,
        device=q.device, dtype=q.dtype, scale_given=scale)

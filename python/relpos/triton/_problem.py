"""Argument checks of the GPU path: everything relpos.torch.attention takes,
validated into a Call (the kernels' scalar parameters and small device
tensors). The options go through the package's one parsing path
(relpos/_call.py, shared with the numpy / CPU and context-parallel paths);
their values against the tensors' shapes are checked by the C++ core's own
problem check (src/op/core/attention_problem.cc, through
relpos._call.check_problem: the rules live only there, the messages are its
own with the calling function in front). Here are only the tensors' checks
(relpos/_checks.py) and the refusals of what the kernels cannot do
(empty tensors, grouped-query attention, left padding, per-row offsets,
distances beyond 32 bits).

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
import os
from typing import Optional

import numpy as np
import torch

import relpos

from .._call import check_problem, per_head_tables
from .._call import parse as parse_call
from .._checks import gpu_tensor
from ..position_schemes import decode_buckets
from ._interpret import fix_bfloat16_dot

# Score terms, as the kernels number them (_kernels.py).
NONE, VECTOR, SCALAR, ALIBI = 0, 1, 2, 3

# The kernels form distances in int32: |query_offset| + Nq + Nk (and the
# reaches) must stay below 2^30.
_GPU_RANGE = 1 << 30

def interpreting():
    """True when Triton's interpreter runs the kernels (TRITON_INTERPRET=1):
    then they run on CPU tensors too."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def check_tensor(fn, name, t, like=None):
    """One tensor argument of the GPU path (relpos._checks.gpu_tensor)."""
    gpu_tensor(fn, name, t, like, interpreting())


def _shape(t):
    return "[" + ", ".join(str(s) for s in t.shape) + "]"


def _check_rank(fn, name, t, rank):
    if t.dim() != rank or t.numel() == 0:
        what = "must not be empty" if t.numel() == 0 and t.dim() == rank \
            else f"must have rank {rank} (got shape {_shape(t)})"
        raise ValueError(f"relpos.{fn}: {name} {what}")


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


def _buckets(a, problem):
    """The kernels' form of the call's bucket map (checked by the C++
    core: problem is check_problem's)."""
    if a.bucket_kind in ("", "clip"):
        left, right = a.bucket_map().reach()
        name = ("2*max_distance+1" if a.bucket_kind == "" else
                "buckets.clip.left+buckets.clip.right+1")
        return Buckets(left + right + 1, name, True, left, right, 0,
                       left + right)
    t5 = decode_buckets(a.bucket_kind, a.bucket_args)
    reach = problem["t5_reach"]
    ends = t5.bucket(np.array([-reach, reach]))
    return Buckets(t5.num_buckets, "buckets.t5.num_buckets", False,
                   reach, reach, int(ends[0]), int(ends[1]), t5)


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


_SCORES = {"none": NONE, "vector": VECTOR, "scalar_table": SCALAR,
           "alibi": ALIBI}


def _slopes(slopes, dtype, device):
    """The call's ALiBi slopes (resolved and checked by the C++ core)."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return torch.as_tensor(np.asarray(slopes, np.float64), dtype=acc,
                           device=device)


def _lengths(a, problem, device):
    """key_lengths (checked by the C++ core) as int32 on the device; None
    when none was given."""
    if not a.key_lengths:
        return None
    return torch.as_tensor(np.asarray(problem["key_lengths"], np.int32),
                           device=device)


def _cut_reaches(bk, nq, nk, off):
    """(L, R): the reaches cut to the distances the call has."""
    left = min(bk.left, max(nq - 1 + off + 1, 0))
    right = min(bk.right, max(nk - 1 - off + 1, 0))
    return left, right


def _rowmap(bk, left, right, device):
    if bk.clip or left + right - 1 <= 0:
        return None
    r = np.arange(1 - left, right, dtype=np.int64)
    rows = bk.t5.bucket(r)
    return torch.as_tensor(rows.astype(np.int32), device=device)


def prepare(fn, q, k, v, ak=None, av=None, bias=None, pb=None, *,
            max_distance=None, causal=False, key_lengths=None,
            query_offset=None, buckets=None, alibi=None, key_starts=None,
            scale=None):
    """Validates one call of relpos.torch.attention's arguments: the options
    through the package's one parsing path (relpos/_call.py), their values
    against the shapes by the C++ core's own checks (check_problem), then
    what the kernels cannot do."""
    check_tensor(fn, "q", q)
    for name, t in (("k", k), ("v", v), ("ak", ak), ("av", av),
                    ("bias", bias), ("pb", pb)):
        if t is not None or name in ("k", "v"):
            check_tensor(fn, name, t, like=q)
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_rank(fn, name, t, 4)
    a = parse_call(fn, ak=ak, bias=bias, pb=pb, max_distance=max_distance,
                   buckets=buckets, alibi=alibi, causal=causal,
                   key_lengths=key_lengths, query_offset=query_offset,
                   key_starts=key_starts, scale=scale)
    b, h, nq, dk = q.shape
    nk, dv = k.shape[2], v.shape[3]
    # Capability limits of the kernels, not argument rules.
    hkv = k.shape[1]
    if hkv != h and hkv > 0 and h % hkv == 0:
        raise NotImplementedError(
            f"relpos.{fn}: grouped-query attention (k and v with {hkv} "
            f"heads for {h} query heads) is not implemented on the GPU path; "
            f"repeat k and v to {h} heads (torch.repeat_interleave(k, "
            f"{h // hkv}, dim=1)) or run on the CPU")
    if key_starts is not None:
        raise NotImplementedError(
            f"relpos.{fn}: key_starts (left padding) is not implemented on "
            f"the GPU path; pad on the right (key_lengths) or run on the CPU")
    if a.query_offsets:
        raise NotImplementedError(
            f"relpos.{fn}: one query_offset per batch item is not "
            f"implemented on the GPU path; give one offset, or run on the "
            f"CPU")
    problem = check_problem(fn, a, q, k, v, ak, av, bias, pb)
    off = problem["min_offset"]  # the one offset (per-row ones refused)
    if abs(off) + nq + nk >= _GPU_RANGE:
        raise NotImplementedError(
            f"relpos.{fn}: |query_offset| + Nq + Nk must be below 2^30 on "
            f"the GPU path (32-bit distances; got query_offset {off}, Nq "
            f"{nq}, Nk {nk})")
    bk = _buckets(a, problem)
    score = _SCORES[a.score]
    left, right = _cut_reaches(bk, nq, nk, off)
    if interpreting() and q.dtype == torch.bfloat16:
        fix_bfloat16_dot()
    has_av = av is not None
    bucketed = score in (VECTOR, SCALAR) or has_av
    return Call(
        fn=fn, b=b, h=h, nq=nq, nk=nk, dk=dk, dv=dv, off=off,
        causal=a.causal, score=score, has_pb=pb is not None,
        has_av=has_av, per_head=per_head_tables(fn, ak, av), buckets=bk,
        left=left, right=right, all_far=not bucketed or bk.nb == 1,
        lens=_lengths(a, problem, q.device),
        rowmap=_rowmap(bk, left, right, q.device),
        slopes=_slopes(problem["alibi_slopes"], q.dtype, q.device)
        if score == ALIBI else None,
        device=q.device, dtype=q.dtype, scale_given=a.scale)

"""Argument checks of the GPU path: everything relpos.torch.attention takes,
validated into a Call (the kernels' scalar parameters and small device
tensors). The options go through the package's one parsing path
(relpos/_call.py, shared with the numpy / CPU and context-parallel paths);
their values against the tensors' shapes are checked by the C++ core's own
problem check (src/op/core/attention_problem.cc, through
relpos._call.check_problem: the rules live only there, the messages are its
own with the calling function in front). Here are only the tensors' checks
(relpos/_checks.py) and the refusals of what the kernels cannot do
(empty tensors, distances beyond 32 bits, head dims above 256,
B or H above CUDA's grid limit).

The bucket map is stored as the kernels use it (docs/math.md section 8):
distances r <= -L share row bL, r >= R row bR, and the interior distances
-L < r < R have the row r + LROW (a clip) or ROWMAP[r + L - 1] (T5). L and R
are the map's reaches cut to the distances the call has (at most Nq - 1 +
max off on the left, Nk - 1 - min off on the right, over the rows' offsets),
so a huge clip or T5 reach costs nothing beyond the call's size.
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
# The largest head dim dk, dv: the kernels hold a tile's rows of
# next_power_of_2(d) columns in registers.
_MAX_DIM = 256
# CUDA's limit on the second and third grid axes (the kernels' H and B).
_MAX_GRID = 65535

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
    off: int           # the query offset; the smallest with per-row ones
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
    hkv: int = 0       # key / value heads (0: H)
    offs: Optional[torch.Tensor] = None    # int32 [B] per-row offsets
    off_span: int = 0  # largest offset - smallest (0 without offs)
    starts: Optional[torch.Tensor] = None  # int32 [B] key_starts
    scale_given: Optional[float] = None  # None: 1 / sqrt(dk)

    @property
    def group(self):
        """Query heads per key / value head (query head h reads key /
        value head h // group)."""
        return self.h // (self.hkv or self.h)

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


def to_device(host, device):
    """A CPU tensor `host` copied to `device` without a host
    synchronisation: on CUDA through pinned memory with non_blocking
    (PyTorch copies pageable memory with cudaMemcpyAsync and then waits for
    the stream; from a pinned block, whose reuse its caching host
    allocator defers until the copy is done, it does not wait)."""
    if device.type != "cuda":
        return host.to(device)
    if torch.cuda.is_current_stream_capturing():
        # A captured copy would read the pinned block again at every
        # replay; the synchronous copy refuses capture as before.
        return host.to(device)
    return host.pin_memory().to(device, non_blocking=True)


# Small per-device tensors that depend only on the call's configuration
# (ALiBi slopes, T5's interior rows, the kernels' dummy arguments), made
# once per device: a call then allocates, fills and uploads none of them.
_CONSTANTS = {}
_CONSTANTS_MAX = 256


def device_constant(key, device, make):
    """make() (a CPU tensor) on `device`, kept under (key, device).
    Nothing is kept while a CUDA graph is being captured (a tensor made
    then would belong to the graph's memory pool), and the oldest entry
    goes when _CONSTANTS_MAX are held."""
    full = (key, device)
    t = _CONSTANTS.get(full)
    if t is not None:
        return t
    t = to_device(make(), device)
    if device.type == "cuda" and torch.cuda.is_current_stream_capturing():
        return t
    if len(_CONSTANTS) >= _CONSTANTS_MAX:
        del _CONSTANTS[next(iter(_CONSTANTS))]
    _CONSTANTS[full] = t
    return t


def _slopes(slopes, dtype, device):
    """The call's ALiBi slopes (resolved and checked by the C++ core)."""
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    key = ("alibi", acc, tuple(float(m) for m in slopes))
    return device_constant(key, device, lambda: torch.as_tensor(
        np.asarray(slopes, np.float64), dtype=acc))


def _lengths(a, problem, device):
    """key_lengths (checked by the C++ core) as int32 on the device; None
    when none was given."""
    if not a.key_lengths:
        return None
    return _per_item(problem["key_lengths"], device)


def _cut_reaches(bk, nq, nk, off_lo, off_hi):
    """(L, R): the reaches cut to the distances the call has, with query
    offsets in [off_lo, off_hi]."""
    left = min(bk.left, max(nq - 1 + off_hi + 1, 0))
    right = min(bk.right, max(nk - 1 - off_lo + 1, 0))
    return left, right


def _per_item(values, device):
    """One int per batch item as int32 on the device."""
    return to_device(torch.as_tensor(np.asarray(values, np.int32)), device)


def _rowmap(bk, left, right, device):
    if bk.clip or left + right - 1 <= 0:
        return None

    def make():
        r = np.arange(1 - left, right, dtype=np.int64)
        return torch.as_tensor(bk.t5.bucket(r).astype(np.int32))
    t5 = bk.t5
    return device_constant(("t5_rows", t5.num_buckets, t5.max_distance,
                            t5.bidirectional, left, right), device, make)


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
    problem = check_problem(fn, a, q, k, v, ak, av, bias, pb)
    # Grouped-query heads (checked: Hkv divides H), per-row offsets and
    # left padding as the C++ core resolved them.
    hkv = problem["kv_heads"]
    off, off_hi = problem["min_offset"], problem["max_offset"]
    # Capability limit of the kernels, not an argument rule.
    far = max(abs(off), abs(off_hi))
    if far + nq + nk >= _GPU_RANGE:
        raise NotImplementedError(
            f"relpos.{fn}: |query_offset| + Nq + Nk must be below 2^30 on "
            f"the GPU path (32-bit distances; got query_offset "
            f"{off if abs(off) == far else off_hi}, Nq {nq}, Nk {nk})")
    if max(b, h) > _MAX_GRID:
        raise NotImplementedError(
            f"relpos.{fn}: the GPU path launches its programs on a (tiles, "
            f"H, B) grid, whose last two axes stop at {_MAX_GRID}: B and H "
            f"must each be at most {_MAX_GRID} (got B {b}, H {h}); split "
            f"the batch")
    if max(dk, dv) > _MAX_DIM:
        raise NotImplementedError(
            f"relpos.{fn}: the GPU path takes head dims up to {_MAX_DIM} "
            f"(32, 64, 80, 96, 128, 256 and any other: a dim that is not a "
            f"power of two is padded to the next one); got dk {dk}, dv {dv}")
    offs = None
    if off_hi != off:  # one offset per item, not all equal
        offs = _per_item(problem["query_offsets"], q.device)
    starts = None
    if key_starts is not None and any(problem["key_starts"]):
        starts = _per_item(problem["key_starts"], q.device)
    bk = _buckets(a, problem)
    score = _SCORES[a.score]
    left, right = _cut_reaches(bk, nq, nk, off, off_hi)
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
        device=q.device, dtype=q.dtype, hkv=hkv, offs=offs,
        off_span=off_hi - off, starts=starts, scale_given=a.scale)


def choose_tiles(override, by_dtype, wide_heads, dtype, width):
    """The tiles of a table for inputs of `dtype` whose padded head width
    (the next power of two of max(dk, dv), at least 16) is `width`: the
    tests' override if set, else the wide-head entry for 16-bit inputs,
    else the dtype's. Shared by _attention's and _decode's tables."""
    if override:
        return override
    if dtype in (torch.float16, torch.bfloat16) and width in wide_heads:
        return wide_heads[width]
    return by_dtype[dtype]

"""Host side of relpos.triton.attention: kernel launches, the deterministic
reductions of the table gradients, and the autograd Function.

Memory beyond inputs, outputs and gradients: the forward's lse [B, H, Nq]
and, when the scheme has band tiles, the far kernel's per-row state
[B H, 6, Nq] and (inputs not in the accumulator's dtype) its accumulator
[B, H, Nq, dv]; in the backward a per-row buffer RC [B, H, 6, Nq], the dQ
far kernel's state (the same two shapes, band tiles only), the dK / dV far
kernel's sums [B, H, Nk, dk], [B, H, Nk, dv] (band tiles; not when the
gradients are already in the accumulator's dtype), the
per-query-tile partial sums of the end rows ([B H, Nq / BLOCK_M, 2, d],
only for the terms the scheme has) and the tile diagonals' partial sums
([S, H, T, 2 BLOCK, d], T the number of tile diagonals that reach interior
distances: about (L + R) / BLOCK + 2 for a bounded reach, (Nq + Nk) /
BLOCK for Transformer-XL's unclipped one, plus the span of per-row offsets
/ BLOCK). With grouped-query heads (k, v with Hkv < H heads) dK / dV are
first formed per query head in the accumulator type ([B, H, Nk, d]) and
summed over each group in a fixed order. Nothing of size Nq x Nk.

Per call: the forward is one launch (every tile far: no position term,
ALiBi, one table row) or two (far, band); the backward three (_bwd_prep,
dQ, dK / dV) or up to six (with band tiles: the far and band kernel of
each, and _bwd_diag when interior distances exist), then, for a learned
table, a few torch reductions in a fixed order. Nothing is zero-filled
that a kernel writes in full, the unused pointer arguments (_dummy) and
the call's configuration constants (_problem.device_constant) are made
once per device, and neither pass reads device data back to the host
(prepare does when key_lengths, query_offset, key_starts or alibi come as
device tensors: their values are checked and shape the launches there).
bench/gpu_host_profile.py counts all of this without a GPU;
tests/test_triton_host.py holds the counts.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch
from torch.autograd.function import once_differentiable
import triton

from . import _decode
from . import _kernels as K
from ._problem import (ALIBI, NONE, SCALAR, VECTOR, choose_tiles,
                       device_constant, prepare)

LOG2E = 1.4426950408889634


@dataclasses.dataclass
class Blocks:
    """Tile sizes and launch settings (docs/python.md, "GPU"). The far
    kernels use far_m x far_n tiles, the band kernels band_m x band_n
    (dividing the far ones), the diagonal kernel diag x diag. Chosen from
    ptxas's static report for sm_90 (registers and spills: tests/
    test_triton_compile.py prints it), not timed: no GPU was available.
    The interpreter tests use 16 x 16 tiles so that small sizes reach
    every tile kind."""
    far_m: int = 64
    far_n: int = 64
    band_m: int = 32
    band_n: int = 32
    diag: int = 16
    far_warps: int = 4
    band_warps: int = 8
    diag_warps: int = 4
    num_stages: int = 2
    # Programs the diagonal kernel aims for: each diagonal's tile pairs are
    # split into that many / (diagonals x heads) chunks.
    diag_programs: int = 1024

    def __post_init__(self):
        if self.far_m % self.band_m or self.far_n % self.band_n:
            raise ValueError(f"relpos.triton: band tiles must divide far "
                             f"tiles (got far {self.far_m} x {self.far_n}, "
                             f"band {self.band_m} x {self.band_n})")


# Per input dtype. float32 (IEEE products: no tensor cores) and float64 hold
# more per element in registers: smaller tiles.
_WIDE = dict(far_m=32, far_n=32, band_m=16, band_n=16, diag=16, far_warps=8,
             band_warps=4, diag_warps=4)
BLOCKS = {torch.float16: Blocks(), torch.bfloat16: Blocks(),
          torch.float32: Blocks(**_WIDE), torch.float64: Blocks(**_WIDE)}
# 16-bit inputs with wide heads, by the padded width max(DK, DV): the
# tiles above spill registers (ptxas, sm_90, bfloat16 Shaw: the backward's
# dK/dV and dQ kernels) once it passes 64. 32 x 32 far and 16 x 16 band
# tiles: no spill at 128; at 256 (8 warps) 4 bytes in the dQ band kernel.
WIDE_HEADS = {128: Blocks(far_m=32, far_n=32, band_m=16, band_n=16, diag=16,
                          far_warps=4, band_warps=4, diag_warps=4),
              256: Blocks(far_m=32, far_n=32, band_m=16, band_n=16, diag=16,
                          far_warps=8, band_warps=8, diag_warps=8)}
# Tests set this to one Blocks for every dtype (small tiles).
OVERRIDE = None


def blocks_for(dtype, width=64):
    """The tiles for inputs of `dtype` whose padded head width is
    `width` (_problem.choose_tiles)."""
    return choose_tiles(OVERRIDE, BLOCKS, WIDE_HEADS, dtype, width)


def _width(c):
    return max(_pow2(c.dk), _pow2(c.dv))


def _pow2(x, lo=16):
    return max(lo, triton.next_power_of_2(max(int(x), 1)))


def _prec(dtype):
    """tl.dot's precision for float32 inputs: IEEE float32 unless PyTorch's
    own matmuls may use TF32 (torch.backends.cuda.matmul.allow_tf32)."""
    if dtype == torch.float32 and torch.backends.cuda.matmul.allow_tf32:
        return "tf32"
    return "ieee"


def _acc(dtype):
    return torch.float64 if dtype == torch.float64 else torch.float32


def _dummy(dtype, device):
    """The one-element tensor passed for an unused pointer argument (the
    kernels never read it: every read is under its constexpr flag), made
    once per device and dtype."""
    return device_constant(("dummy", dtype), device,
                           lambda: torch.zeros(1, dtype=dtype))


class _Args:
    """The leading arguments every attention kernel takes (_kernels.py,
    COMMON) and the launch settings."""

    def __init__(self, c, q, k, v, ak, av, bias, pb, blocks, dout=None,
                 rc=None):
        dummy, i32, acc = (_dummy(t, c.device) for t in
                           (c.dtype, torch.int32, _acc(c.dtype)))
        self.tables = [None if t is None else t.contiguous()
                       for t in (ak, av, bias, pb)]
        ak_, av_, bias_, pb_ = (dummy if t is None else t
                                for t in self.tables)
        self.dummy, self.acc_dummy = dummy, acc
        ptrs = [q, k, v, ak_, av_, bias_, pb_,
                acc if c.slopes is None else c.slopes,
                i32 if c.lens is None else c.lens,
                i32 if c.rowmap is None else c.rowmap,
                dummy if dout is None else dout,
                acc if rc is None else rc]

        def table_strides(t, width):
            if t is None:
                return 0, 0
            return (t.shape[1] * width if t.dim() == 3 else 0), width

        strides = [*q.stride(), *k.stride(), *v.stride(),
                   *((0, 0, 0, 0) if dout is None else dout.stride()),
                   *table_strides(ak, c.dk), *table_strides(av, c.dv)]
        bk = c.buckets
        scalars = [c.h, c.nq, c.nk, c.dk, c.dv, c.off, c.left, c.right,
                   bk.b_left, bk.b_right, bk.left, bk.nb, c.scale * LOG2E,
                   c.scale, c.group, i32 if c.offs is None else c.offs,
                   i32 if c.starts is None else c.starts]
        self.common = ptrs + strides + scalars
        self.dk_pad, self.dv_pad = _pow2(c.dk), _pow2(c.dv)
        self.flags = dict(SCORE=c.score, HAS_PB=c.has_pb, HAS_AV=c.has_av,
                          CLIP=bk.clip, CAUSAL=c.causal,
                          HAS_LEN=c.lens is not None,
                          ROW_OFF=c.offs is not None,
                          HAS_START=c.starts is not None, ALL_FAR=c.all_far,
                          DK=self.dk_pad, DV=self.dv_pad,
                          PREC=_prec(c.dtype))
        b = blocks
        self.far = dict(BLOCK_M=b.far_m, BLOCK_N=b.far_n,
                        num_warps=b.far_warps, num_stages=b.num_stages)
        self.band = dict(BLOCK_M=b.band_m, BLOCK_N=b.band_n, FAR_M=b.far_m,
                         FAR_N=b.far_n,
                         WIN=_pow2(min(c.interior, b.band_m + b.band_n - 1)),
                         num_warps=b.band_warps, num_stages=b.num_stages)
        self.diag = dict(BLOCK=b.diag, num_warps=b.diag_warps,
                         num_stages=b.num_stages)


def _state(like, acc, *shape):
    """A buffer for a far kernel's partial result: `like` itself when it
    already has the accumulator's dtype (the band kernel then finishes in
    place), else a new one."""
    if like.dtype == acc:
        return like
    return torch.empty(shape, dtype=acc, device=like.device)


def _far_then_band(c, a, far, band, n, far_tile, band_tile, *buffers):
    """Launches a far kernel over (cdiv(n, far_tile), H, B) programs
    (_kernels._head_item), then
    (unless every tile is far, when the far kernel finishes alone) its band
    kernel; both take the common arguments and `buffers`."""
    far[(triton.cdiv(n, far_tile), c.h, c.b)](*a.common, *buffers,
                                        FINAL=c.all_far, **a.flags, **a.far)
    if not c.all_far:
        band[(triton.cdiv(n, band_tile), c.h, c.b)](*a.common, *buffers,
                                              **a.flags, **a.band)


def forward(c, q, k, v, ak=None, av=None, bias=None, pb=None, blocks=None):
    """(out [B, H, Nq, dv] in q's dtype, lse [B, H, Nq] float32, float64
    for float64 inputs) of a prepared call."""
    blocks = blocks or blocks_for(c.dtype, _width(c))
    a = _Args(c, q, k, v, ak, av, bias, pb, blocks)
    split = _decode.forward(c, a)  # few query rows, many keys: split keys
    if split is not None:
        return split
    acc = _acc(c.dtype)
    out = torch.empty((c.b, c.h, c.nq, c.dv), dtype=c.dtype, device=c.device)
    lse = torch.empty((c.b, c.h, c.nq), dtype=acc, device=c.device)
    st = acc_buf = a.acc_dummy
    if not c.all_far:
        st = torch.empty((c.b * c.h, 6, c.nq), dtype=acc, device=c.device)
        acc_buf = _state(out, acc, c.b, c.h, c.nq, c.dv)
    _far_then_band(c, a, K._fwd_far, K._fwd_band, c.nq, blocks.far_m,
                   blocks.band_m, out, lse, st, acc_buf)
    return out, lse


@dataclasses.dataclass
class Needs:
    """Which gradients to compute (q, k, v always come out together)."""
    dak: bool = True
    dav: bool = True
    dbias: bool = True
    dpb: bool = True


def _diagonals(c, bd):
    """(t_lo, T): the tile diagonals (BLOCK x BLOCK tiles) holding pairs at
    interior distances; diagonal t has its distances in
    [t bd - off - bd + 1, t bd - off + bd - 1] (off the smallest offset:
    an item with a larger one pairs query tile qi with the keys from
    (qi + t) bd + off_b - off, _kernels._bwd_diag)."""
    if c.all_far or c.interior == 0:
        return 0, 0
    lo_num = 2 - c.left + c.off - bd         # t bd >= lo_num
    t_lo = -((-lo_num) // bd)
    t_hi = (c.right - 2 + c.off + bd) // bd  # t bd <= R - 2 + off + bd
    if c.causal:  # visible pairs have r <= 0: the window must start <= 0
        t_hi = min(t_hi, (c.off + bd - 1) // bd)
    t_lo = max(t_lo, -(triton.cdiv(c.nq, bd) - 1)
               - triton.cdiv(c.off_span, bd))
    t_hi = min(t_hi, triton.cdiv(c.nk, bd) - 1)
    return t_lo, max(t_hi - t_lo + 1, 0)


def _interior_rows(c, part, t_lo, bd, out):
    """Adds to out [H, nb, ...] the per-head sums by table row of the
    diagonal kernel's partial sums part [S, H, T, 2 bd, ...] (interior
    distances only)."""
    s, h, t = part.shape[:3]
    tail = part.shape[4:]
    part = part.sum(0).view(h, t, 2, bd, *tail)
    dist = part.new_zeros((h, t + 1, bd, *tail))
    dist[:, :t] += part[:, :, 0]
    dist[:, 1:] += part[:, :, 1]
    dist = dist.view(h, (t + 1) * bd, *tail)
    d0 = t_lo * bd - c.off - bd + 1          # distance of dist[:, 0]
    lo = max(1 - c.left, d0)
    hi = min(c.right - 1, d0 + (t + 1) * bd - 1)
    if lo > hi:
        return
    vals = dist[:, lo - d0:hi - d0 + 1]
    if c.buckets.clip:
        out[:, lo + c.buckets.left:hi + c.buckets.left + 1] += vals
        return
    # T5: several distances share a row; a one-hot product (float64, a
    # fixed summation order) adds them up. The one-hot matrix [nb, hi - lo
    # + 1] (row of each distance lo .. hi) depends only on the map: made
    # once per device.
    t5, nb = c.buckets.t5, c.buckets.nb

    def make():
        rows = t5.bucket(np.arange(lo, hi + 1, dtype=np.int64))
        return torch.as_tensor(rows[None, :] == np.arange(nb)[:, None],
                               dtype=torch.float64)
    onehot = device_constant(("t5_onehot", t5.num_buckets, t5.max_distance,
                              t5.bidirectional, lo, hi), c.device, make)
    flat = vals.reshape(h, vals.shape[1], -1).double()
    out += torch.matmul(onehot, flat).view(h, c.buckets.nb, *tail).to(
        part.dtype)


def _end_rows(c, part):
    """[H, nb, ...] of the dQ kernel's partial sums part [B*H, nQT, 2, ...]
    (the end rows bL, bR only; zeros elsewhere)."""
    tail = part.shape[3:]
    ends = part.sum(1).view(c.b, c.h, 2, *tail).sum(0)
    out = part.new_zeros((c.h, c.buckets.nb, *tail))
    out[:, c.buckets.b_left] += ends[:, 0]
    out[:, c.buckets.b_right] += ends[:, 1]
    return out


def _launch_diag(c, a, blocks, need_eq, need_es, need_wv):
    bd = blocks.diag
    t_lo, t = _diagonals(c, bd)
    acc = _acc(c.dtype)
    if t == 0:
        return None, None, None, t_lo
    items = c.b * triton.cdiv(c.nq, bd)
    split = max(1, min(items, blocks.diag_programs // (t * c.h)))

    def buf(on, *shape):
        if not on:  # not written (its NEED_ flag is off)
            return a.acc_dummy
        return torch.empty((split, c.h, t, 2 * bd, *shape), dtype=acc,
                           device=c.device)

    pwq, pwv, pws = (buf(need_eq, a.dk_pad), buf(need_wv, a.dv_pad),
                     buf(need_es))
    K._bwd_diag[(t, c.h, split)](
        *a.common, pwq, pwv, pws, c.b, t_lo, split,
        triton.cdiv(c.off_span, bd), NEED_EQ=need_eq,
        NEED_ES=need_es, NEED_WV=need_wv, **a.flags, **a.diag)
    return (pwq if need_eq else None, pwv if need_wv else None,
            pws if need_es else None, t_lo)


def _table_grads(c, a, blocks, peq, pew, pes, needs):
    """(dak, dav, dbias, dpb) from the dQ kernel's end sums and the diagonal
    kernel's interior sums (docs/math.md sections 3 and 8)."""
    ak, av, bias, pb = a.tables
    vector = c.score == VECTOR
    need_eq = vector and needs.dak
    need_es = (c.score == SCALAR and needs.dbias) or \
        (c.has_pb and (needs.dak or needs.dpb))
    need_wv = c.has_av and needs.dav
    pwq, pwv, pws, t_lo = _launch_diag(c, a, blocks, need_eq, need_es,
                                       need_wv)
    bd = blocks.diag

    def rows(end, interior, width):
        # The interior sums are added into the end rows' zeros: the same
        # values as adding two separate [H, nb] results (a row adds
        # its end sum first, then its interior sum), in fewer operators.
        x = _end_rows(c, end[..., :width] if width else end)
        if interior is not None:
            _interior_rows(c, interior[..., :width] if width
                           else interior, t_lo, bd, x)
        return x

    e = rows(pes, pws, 0) if need_es else None  # [H, nb]: sum of dS by row
    dak = dav = dbias = dpb = None
    if need_eq:
        dak = rows(peq, pwq, c.dk)
        if c.has_pb:
            dak += e[:, :, None] * pb.to(dak.dtype)[:, None, :]
        dak.mul_(c.scale)
    if need_wv:
        dav = rows(pew, pwv, c.dv)
    if c.score == SCALAR and needs.dbias:
        dbias = e.to(c.dtype)
    if c.has_pb and needs.dpb:
        table = ak.to(e.dtype) if ak.dim() == 3 else ak.to(e.dtype)[None]
        dpb = (torch.einsum("hb,hbd->hd", e, table.expand(c.h, -1, -1))
               * c.scale).to(c.dtype)
    if not c.per_head:
        dak = None if dak is None else dak.sum(0)
        dav = None if dav is None else dav.sum(0)
    return (None if dak is None else dak.to(c.dtype),
            None if dav is None else dav.to(c.dtype), dbias, dpb)


def _prep(c, a, blocks, q, out, dout, lse, rc):
    """Fills the per-row buffer RC [B, H, 6, Nq] of the backward kernels
    (every plane of every row: _kernels._bwd_prep writes zeros in the
    planes the scheme has no term for, so RC needs no zero fill)."""
    ak_, av_, bias_, pb_ = a.common[3:7]
    K._bwd_prep[(triton.cdiv(c.nq, blocks.far_m), c.h, c.b)](
        q, ak_, av_, bias_, pb_, out.contiguous(), dout, lse, rc,
        *q.stride(), *dout.stride(), *a.common[28:32], c.h, c.nq, c.dk,
        c.dv, c.buckets.b_left, c.buckets.b_right, c.buckets.nb,
        c.scale * LOG2E, SCORE=c.score, HAS_PB=c.has_pb, HAS_AV=c.has_av,
        BLOCK_M=blocks.far_m, DK=a.dk_pad, DV=a.dv_pad,
        num_warps=blocks.far_warps)


def _group_sum(c, part):
    """[B, Hkv, Nk, d] in the inputs' dtype: the per-query-head parts
    [B, H, Nk, d] summed over each group of G query heads, in head order
    (a fixed order: the result repeats bit for bit)."""
    g = c.group
    part = part.view(c.b, c.h // g, g, *part.shape[2:])
    total = part[:, :, 0].clone()
    for i in range(1, g):
        total += part[:, :, i]
    return total.to(c.dtype)


def _dkdv(c, a, blocks):
    acc = _acc(c.dtype)
    # Grouped heads: per-query-head parts in the accumulator type.
    out_t = acc if c.group > 1 else c.dtype
    dk = torch.empty((c.b, c.h, c.nk, c.dk), dtype=out_t, device=c.device)
    dv = torch.empty((c.b, c.h, c.nk, c.dv), dtype=out_t, device=c.device)
    dks = dvs = a.acc_dummy
    if not c.all_far:
        dks = _state(dk, acc, c.b, c.h, c.nk, c.dk)
        dvs = _state(dv, acc, c.b, c.h, c.nk, c.dv)
    _far_then_band(c, a, K._bwd_dkdv_far, K._bwd_dkdv_band, c.nk,
                    blocks.far_n, blocks.band_n, dk, dv, dks, dvs)
    if c.group > 1:
        return _group_sum(c, dk), _group_sum(c, dv)
    return dk, dv


def _dq(c, a, blocks):
    """dq and the per-query-tile partial sums of the end rows."""
    acc = _acc(c.dtype)
    bh = c.b * c.h
    dq = torch.empty((c.b, c.h, c.nq, c.dk), dtype=c.dtype, device=c.device)
    nqt = triton.cdiv(c.nq, blocks.far_m if c.all_far else blocks.band_m)

    def part(on, *shape):
        # The finishing kernel (_kernels._dq_finish: one program per query
        # tile, nqt of them) writes every element of each buffer its
        # scheme has, and _table_grads reads only those: no zero fill; a
        # dummy for the others.
        if not on:
            return a.acc_dummy
        return torch.empty((bh, nqt, 2, *shape), dtype=acc, device=c.device)
    peq = part(c.score == VECTOR, a.dk_pad)
    pew = part(c.has_av, a.dv_pad)
    pes = part(c.score in (VECTOR, SCALAR))
    dqs = es = a.acc_dummy
    if not c.all_far:
        dqs = _state(dq, acc, c.b, c.h, c.nq, c.dk)
        es = torch.empty((bh, 6, c.nq), dtype=acc, device=c.device)
    _far_then_band(c, a, K._bwd_dq_far, K._bwd_dq_band, c.nq, blocks.far_m,
                   blocks.band_m, dq, dqs, es, peq, pew, pes)
    return dq, peq, pew, pes


def backward(c, dout, q, k, v, ak=None, av=None, bias=None, pb=None,
             out=None, lse=None, needs=None, blocks=None):
    """(dq, dk, dv, dak, dav, dbias, dpb) of a prepared call, given the
    forward's out and lse; a table's gradient is None when the table is
    None (or its gradient is not needed)."""
    blocks = blocks or blocks_for(c.dtype, _width(c))
    needs = needs or Needs()
    rc = torch.empty((c.b, c.h, 6, c.nq), dtype=_acc(c.dtype),
                     device=c.device)
    a = _Args(c, q, k, v, ak, av, bias, pb, blocks, dout=dout, rc=rc)
    _prep(c, a, blocks, q, out, dout, lse, rc)
    # dQ first: its kernels correct D in rc (the rowsum correction,
    # _kernels._rowsum_fix) for the dK / dV and diagonal kernels.
    dq, peq, pew, pes = _dq(c, a, blocks)
    dk, dv = _dkdv(c, a, blocks)
    tables = (None, None, None, None)
    if c.score in (VECTOR, SCALAR) or c.has_av:
        tables = _table_grads(c, a, blocks, peq, pew, pes, needs)
    return (dq, dk, dv) + tables


class AttentionFunction(torch.autograd.Function):
    """relpos.triton.attention as one autograd node (not twice
    differentiable): saves the inputs, the output and lse, and recomputes
    the probabilities in the backward."""

    @staticmethod
    def forward(ctx, q, k, v, ak, av, bias, pb, call):
        out, lse = forward(call, q, k, v, ak, av, bias, pb)
        ctx.call = call
        ctx.save_for_backward(q, k, v, ak, av, bias, pb, out, lse)
        return out

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        q, k, v, ak, av, bias, pb, out, lse = ctx.saved_tensors
        need = ctx.needs_input_grad
        grads = backward(ctx.call, dout, q, k, v, ak, av, bias, pb, out,
                         lse, Needs(dak=need[3], dav=need[4], dbias=need[5],
                                    dpb=need[6]))
        return tuple(g if need[i] else None
                     for i, g in enumerate(grads)) + (None,)


def attention(q, k, v, ak=None, av=None, *, max_distance=None, causal=False,
              key_lengths=None, query_offset=None, buckets=None, bias=None,
              alibi=None, pb=None, key_starts=None, scale=None,
              fn="triton.attention"):
    """relpos.triton.attention (documented in relpos/triton/__init__.py)."""
    call = prepare(fn, q, k, v, ak, av, bias, pb, max_distance=max_distance,
                   causal=causal, key_lengths=key_lengths,
                   query_offset=query_offset, buckets=buckets, alibi=alibi,
                   key_starts=key_starts, scale=scale)
    return AttentionFunction.apply(q, k, v, ak, av, bias, pb, call)


__all__ = ["ALIBI", "NONE", "attention", "backward", "forward", "prepare"]

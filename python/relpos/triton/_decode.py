"""The forward's split-key path for decoding (few query rows, many keys).

The regular forward (_kernels._fwd_far / _fwd_band) runs one program per
(query tile, head, batch item), each walking every key of its rows. At
decode time Nq is 1 to a few rows: one query tile, so B H programs in all,
each walking thousands of keys alone. Here the keys are split instead
(FlashDecoding's idea, written for relpos's tile kinds):

- _fwd_split, grid (S, H, B): program s takes the query rows [0, BLOCK_M)
  (every row: Nq <= BLOCK_M) against the key tiles [s T, (s + 1) T) (T
  tiles of BLOCK_N keys: the chunk). Inside its chunk a key tile is far on
  the left, band or far on the right, exactly as _kernels._far_ranges
  splits the keys of one query tile; far tiles take _kernels._fwd_far_tile
  (gL / gR, the mass to WL / WR), band keys _kernels._fwd_band_tile in
  BAND_N steps (the window product G_w, the window's probabilities times
  AV_w), with every mask of the regular path (causal with the query offset
  or per-row offsets, key_lengths, key_starts). It writes its partial
  state unnormalised: per row the running max m (log2 units), the sum l,
  the far masses WL, WR ([B H, S, 4, BLOCK_M]) and the accumulator
  ([B H, S, BLOCK_M, DV]), float32 (float64 for float64 inputs). A chunk
  whose keys are all masked (past a key length, before key_starts, past
  the causal end) leaves m = -inf, l = 0.
- _fwd_merge, grid (1, H, B): per row, in split order 0, 1, ..., S - 1
  (fixed: no atomics, results repeat bit for bit), M = max_s m_s,
  l = sum_s l_s 2^(m_s - M), and likewise acc, WL, WR; then
  _kernels._fwd_finish as the regular path finishes (adds WL AV[bL] +
  WR AV[bR], divides by l, writes out and the natural lse; a row that sees
  no key gets zeros and lse -inf).

The forward returns (out, lse) like the regular one, so the autograd
Function and the backward (the regular kernels) are unchanged.

When it is taken: plan() is the one rule. A call whose query rows fit one
split query tile (Nq <= BLOCK_M = 16) and whose regular grid has fewer than
`programs` programs (B H, one query tile each) takes it when its keys give
at least two splits of at least `min_tiles` key tiles; the split count
aims at `programs` programs in all (S B H), at most one split per
`min_tiles` tiles. Otherwise the regular grid runs.

Not measured: no GPU was available. The tile sizes and `programs` (4 x 132,
an H100's / H200's multiprocessors four times) are guesses checked only by
ptxas's static report (no register spills for bfloat16 at head dim 64 and
128, tests/test_triton_compile.py); the split path's arithmetic is tested
under Triton's interpreter (tests/test_triton_decode.py). No speed is
claimed.
"""

from __future__ import annotations

import dataclasses
from typing import Optional

import torch
import triton
import triton.language as tl

from ._problem import choose_tiles
from ._kernels import (_band_start, _far_ranges, _first_tile, _fwd_band_tile,
                       _fwd_far_tile, _fwd_finish, _fwd_setup, _head_item,
                       _kend)


@dataclasses.dataclass
class SplitBlocks:
    """Tiles and launch settings of the split path (module docstring).
    block_m: the query rows of every program (the path takes Nq <= block_m);
    block_n: far key tiles (a split's chunk is a whole number of them);
    band_n: band key steps (dividing block_n); programs: the program count
    the split count aims at; min_tiles: the fewest key tiles per split."""
    block_m: int = 16
    block_n: int = 64
    band_n: int = 32
    warps: int = 4
    merge_warps: int = 4
    num_stages: int = 2
    programs: int = 4 * 132
    min_tiles: int = 4

    def __post_init__(self):
        if self.block_n % self.band_n:
            raise ValueError(f"relpos.triton: band_n must divide block_n "
                             f"(got {self.block_n}, {self.band_n})")


# Per input dtype; float32 (IEEE products) and float64 hold more per
# element in registers: narrower key tiles.
_WIDE = dict(block_n=32, band_n=16)
BLOCKS = {torch.float16: SplitBlocks(), torch.bfloat16: SplitBlocks(),
          torch.float32: SplitBlocks(**_WIDE),
          torch.float64: SplitBlocks(**_WIDE)}
# 16-bit inputs by padded head width max(DK, DV) above 128.
WIDE_HEADS = {256: SplitBlocks(block_n=32, band_n=16, warps=8)}
# Tests set this to one SplitBlocks for every dtype (small tiles).
OVERRIDE = None


def blocks_for(dtype, width=64):
    """The split path's tiles for inputs of `dtype` and padded head width
    `width` (_problem.choose_tiles)."""
    return choose_tiles(OVERRIDE, BLOCKS, WIDE_HEADS, dtype, width)


def plan(c, blocks) -> Optional[tuple[int, int]]:
    """The rule (the only place it is decided): (S splits, T key tiles per
    split) when call c takes the split path with `blocks`, else None."""
    if c.nq > blocks.block_m:
        return None
    heads = c.b * c.h  # the regular grid's programs: one query tile each
    if heads >= blocks.programs:
        return None
    tiles = triton.cdiv(c.nk, blocks.block_n)
    splits = min(tiles // blocks.min_tiles,
                 triton.cdiv(blocks.programs, heads))
    if splits < 2:
        return None
    per = triton.cdiv(tiles, splits)
    return triton.cdiv(tiles, per), per


def forward(c, a):
    """(out, lse) of call c by the split path, or None when plan() says
    the regular grid. a: the call's _attention._Args (the kernels' common
    arguments and flags)."""
    blocks = blocks_for(c.dtype, max(a.dk_pad, a.dv_pad))
    p = plan(c, blocks)
    if p is None:
        return None
    splits, tiles = p
    acc = a.acc_dummy.dtype
    bm = blocks.block_m
    st = torch.empty((c.b * c.h, splits, 4, bm), dtype=acc, device=c.device)
    part = torch.empty((c.b * c.h, splits, bm, a.dv_pad), dtype=acc,
                       device=c.device)
    out = torch.empty((c.b, c.h, c.nq, c.dv), dtype=c.dtype, device=c.device)
    lse = torch.empty((c.b, c.h, c.nq), dtype=acc, device=c.device)
    win = max(16, triton.next_power_of_2(
        max(min(c.interior, bm + blocks.band_n - 1), 1)))
    _fwd_split[(splits, c.h, c.b)](
        *a.common, st, part, tiles, splits, **a.flags, BLOCK_M=bm,
        BLOCK_N=blocks.block_n, BAND_N=blocks.band_n, WIN=win,
        num_warps=blocks.warps, num_stages=blocks.num_stages)
    _fwd_merge[(1, c.h, c.b)](
        *a.common, st, part, out, lse, splits, HAS_AV=c.has_av,
        DV=a.dv_pad, BLOCK_M=bm, num_warps=blocks.merge_warps)
    return out, lse


@triton.jit
def _fwd_split(Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC,
               sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
               sdb, sdh, sdn, sdd, s_akh, s_akr, s_avh, s_avr,
               H, Nq, Nk, dk, dv, off, L, R, bL, bR, LROW, nb, scale2, scale,
               G, OFFS, STARTS, ST, PART, TILES, S,
               SCORE: tl.constexpr, HAS_PB: tl.constexpr,
               HAS_AV: tl.constexpr, CLIP: tl.constexpr,
               CAUSAL: tl.constexpr, HAS_LEN: tl.constexpr,
               ROW_OFF: tl.constexpr, HAS_START: tl.constexpr,
               ALL_FAR: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
               PREC: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, BAND_N: tl.constexpr,
               WIN: tl.constexpr):
    """Query rows [0, BLOCK_M) against the key tiles [s TILES, (s + 1)
    TILES) of program s: far tiles, then band keys; the unnormalised
    state to ST [BH, S, 4, BLOCK_M] (m, l, WL, WR) and PART
    [BH, S, BLOCK_M, DV]."""
    sp = tl.program_id(0)
    (bh, b, h, rows, row_ok, q, klen, e, gL, gR, slope2, kbase, vbase, off,
     ks) = _fwd_setup(Q, AK, BIAS, PB, SLOPES, LENS, OFFS, STARTS, sqb, sqh,
                      sqn, sqd, skb, skh, svb, svh, s_akh, s_akr, H, G, Nq,
                      Nk, dk, off, bL, bR, nb, scale2, 0, SCORE, HAS_PB,
                      CAUSAL, HAS_LEN, ROW_OFF, HAS_START, DK, BLOCK_M)
    acc_t = tl.float64 if q.dtype == tl.float64 else tl.float32
    emin = tl.min(tl.where(row_ok, e, Nk))
    kend = _kend(0, BLOCK_M, Nq, off, klen, CAUSAL)
    nL, tR, nK = _far_ranges(0, off, L, R, kend, ALL_FAR, BLOCK_M, BLOCK_N)
    t0 = sp * TILES
    t1 = t0 + TILES
    # This chunk's far tiles: [lA, lB) on the left, [rA, rB) on the right.
    lA = tl.maximum(t0, _first_tile(ks, nL, HAS_START, BLOCK_N))
    lB = tl.maximum(tl.minimum(t1, nL), lA)
    rA = tl.maximum(t0, tR)
    rB = tl.maximum(tl.minimum(t1, nK), rA)
    m = tl.full([BLOCK_M], float("-inf"), acc_t)
    l = tl.zeros([BLOCK_M], acc_t)
    wl = tl.zeros([BLOCK_M], acc_t)
    wr = tl.zeros([BLOCK_M], acc_t)
    acc = tl.zeros([BLOCK_M, DV], acc_t)
    for u in range(0, lB - lA + rB - rA):
        left = u < lB - lA
        m, l, acc, wl, wr = _fwd_far_tile(
            q, K, V, kbase, vbase, skn, skd, svn, svd, Nk, dk, dv,
            tl.where(left, lA + u, rA + u - (lB - lA)) * BLOCK_N, left, 0,
            off, e, emin, ks, gL, gR, slope2, scale2, m, l, acc, wl, wr,
            SCORE, HAS_AV, HAS_START, DK, DV, PREC, BLOCK_M, BLOCK_N)
    if not ALL_FAR:
        # This chunk's band keys, in BAND_N steps.
        j_lo = tl.maximum(t0, nL) * BLOCK_N
        j_hi = tl.minimum(tl.minimum(t1, tR) * BLOCK_N, kend)
        for j0 in range(_band_start(j_lo, ks, HAS_START, BAND_N), j_hi,
                        BAND_N):
            m, l, acc, wl, wr = _fwd_band_tile(
                q, K, V, AK, AV, BIAS, PB, ROWMAP, kbase, vbase, skn, skd,
                svn, svd, s_akh, s_akr, s_avh, s_avr, h, Nk, dk, dv, j0, 0,
                off, L, R, bL, bR, LROW, nb, e, ks, gL, gR, slope2, scale2,
                m, l, acc, wl, wr, SCORE, HAS_PB, HAS_AV, CLIP, HAS_START,
                DK, DV, PREC, BLOCK_M, BAND_N, WIN)
    ii = tl.arange(0, BLOCK_M)
    part = bh.to(tl.int64) * S + sp
    st = ST + part * 4 * BLOCK_M
    tl.store(st + ii, m)
    tl.store(st + BLOCK_M + ii, l)
    if HAS_AV:
        tl.store(st + 2 * BLOCK_M + ii, wl)
        tl.store(st + 3 * BLOCK_M + ii, wr)
    cols = tl.arange(0, DV)
    tl.store(PART + part * BLOCK_M * DV + ii[:, None] * DV + cols[None, :],
             acc)


@triton.jit
def _fwd_merge(Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC,
               sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
               sdb, sdh, sdn, sdd, s_akh, s_akr, s_avh, s_avr,
               H, Nq, Nk, dk, dv, off, L, R, bL, bR, LROW, nb, scale2, scale,
               G, OFFS, STARTS, ST, PART, OUT, LSE, S,
               HAS_AV: tl.constexpr, DV: tl.constexpr,
               BLOCK_M: tl.constexpr):
    """Merges the S partial states of one (b, h) in split order, then
    finishes as the regular path (_fwd_finish)."""
    bh, b, h = _head_item(H)
    ii = tl.arange(0, BLOCK_M)
    cols = tl.arange(0, DV)
    acc_t = ST.dtype.element_ty
    base = bh.to(tl.int64) * S
    mx = tl.full([BLOCK_M], float("-inf"), acc_t)
    for s in range(0, S):
        mx = tl.maximum(mx, tl.load(ST + (base + s) * 4 * BLOCK_M + ii))
    # A row no split saw: every m_s = -inf, every weight 2^-inf = 0.
    m_use = tl.where(mx == float("-inf"), 0.0, mx)
    l = tl.zeros([BLOCK_M], acc_t)
    wl = tl.zeros([BLOCK_M], acc_t)
    wr = tl.zeros([BLOCK_M], acc_t)
    acc = tl.zeros([BLOCK_M, DV], acc_t)
    for s in range(0, S):
        st = ST + (base + s) * 4 * BLOCK_M
        f = tl.exp2(tl.load(st + ii) - m_use)
        l += f * tl.load(st + BLOCK_M + ii)
        if HAS_AV:
            wl += f * tl.load(st + 2 * BLOCK_M + ii)
            wr += f * tl.load(st + 3 * BLOCK_M + ii)
        acc += f[:, None] * tl.load(PART + (base + s) * BLOCK_M * DV
                                    + ii[:, None] * DV + cols[None, :])
    _fwd_finish(OUT, LSE, AV, h * s_avh, s_avr, bL, bR, acc, mx, l, wl, wr,
                bh, ii, ii < Nq, Nq, dv, HAS_AV, DV)

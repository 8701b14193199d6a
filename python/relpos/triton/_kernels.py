"""Triton kernels of relpos's GPU path (docs/python.md, "GPU").

FlashAttention-2 style (Dao 2023): an online softmax over key tiles in the
forward, recomputation from the log-sum-exp in the backward, nothing of size
Nq x Nk in memory. The relative terms follow the CPU kernel's decomposition
(docs/math.md sections 4 and 8, docs/kernel.md):

- The bucket map is constant beyond its reach: every distance r <= -L has
  row bL, every r >= R row bR; the L + R - 1 "interior" distances between
  have their own rows (r + LROW for a clip, a lookup table ROWMAP for T5).
- A tile pair whose distances all lie on one side beyond the reach is a
  **far** tile: its key term is one number per query row (gL or gR, added
  to the scores), its value term a row sum of P kept per row (WL / WR) and
  applied once at the end as a rank-1 update (O += WL AV[bL] + WR AV[bR]).
- The other tile pairs are **band** tiles. Their interior distances form a
  window of at most WIN consecutive distances starting at rs; the key term
  is G_w = Q AK_w^T (one small product with the window's rows), read per
  pair with tl.gather at column r - rs, and the value term is the window's
  probabilities W_w[i, c] = P[i, j(i, c)] (again a gather: one key per
  distance and row) times AV_w; pairs beyond the reach take gL / gR and
  WL / WR as in far tiles.

Each pass is two kernels so that far tiles cost what plain attention costs,
registers included (a GPU kernel's register allocation is that of its
heaviest loop): a **far** kernel (FAR_M x FAR_N tiles) visits the far tiles
and leaves its state (the forward's running max, sum and accumulator; the
backward's partial gradients) in memory, and a **band** kernel (smaller
tiles) visits the band tiles of the same tiling, adds its part and finishes
(output, lse, end rows, scaling). When the scheme has no bucketed term
(plain attention, ALiBi) or one table row only (k = 0) every tile is far and
the far kernel finishes on its own (FINAL).

Scores are kept in log2 units (exp2). Accumulators are float32 (float64 for
float64 inputs); products take the inputs' dtype with float32 accumulation.
Distances are int32 (the host checks the range).

The backward: _bwd_prep (per row: D = dO . O, the log2 lse, the end terms
gL, gR, uL, uR), the dK/dV pair (a program per key tile), the dQ pair (a
program per query tile; they also keep per-row end sums of dS and P and
leave per-query-tile partial sums of the end rows of the table gradients),
and _bwd_diag (the interior rows of the table gradients: a program per tile
diagonal, whose pairs share one window of distances, so it sums E^T Q and
W^T dO for its distances over every query tile without atomics). The host
reduces the partial sums with torch in a fixed order: no float atomics
anywhere, so results repeat bit for bit run to run.

Every attention kernel takes the same leading arguments (COMMON below):
pointers Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC (unused
ones get a dummy), the strides of q, k, v, dout and of the tables (head
stride 0 for a shared table), then H, Nq, Nk, dk, dv, off, L, R, bL, bR,
LROW, nb, scale2 (log2(e) / sqrt(dk)), scale (1 / sqrt(dk)), G (query
heads per key / value head), OFFS (int32 [B] per-row query offsets, read
when ROW_OFF; off is then the smallest) and STARTS (int32 [B] left-padding
starts, read when HAS_START).

Grouped-query heads: query head h reads key / value head h // G (k and v
are indexed, never copied); the dK / dV kernels write one part per query
head and the host sums a group's parts in a fixed order. Left padding:
key j of item b is visible iff STARTS[b] <= j < its row's end; the
distances are those of the padded index (docs/conventions.md).
"""

import triton
import triton.language as tl

# Score terms (the SCORE constexpr).
NONE = tl.constexpr(0)
VECTOR = tl.constexpr(1)  # Shaw's key table ak (with XL's pb)
SCALAR = tl.constexpr(2)  # T5's bias[h, b]
ALIBI = tl.constexpr(3)   # -m_h |r|

LOG2E = tl.constexpr(1.4426950408889634)
LN2 = tl.constexpr(0.6931471805599453)


# --- small helpers -----------------------------------------------------------


@triton.jit
def _rows_of(r, ok, L, R, bL, bR, LROW, ROWMAP, CLIP: tl.constexpr):
    """Table row of each distance r (int32 tensor). Interior distances
    -L < r < R: r + LROW for a clip, ROWMAP[r + L - 1] otherwise."""
    inner = (r > -L) & (r < R)
    if CLIP:
        row = r + LROW
    else:
        row = tl.load(ROWMAP + (r + L - 1), mask=inner & ok, other=0)
    return tl.where(r <= -L, bL, tl.where(r >= R, bR, row))


@triton.jit
def _key_end(rows, off, klen, CAUSAL: tl.constexpr):
    """e_i: query row i sees exactly the keys [0, e_i) (docs/math.md 1)."""
    if CAUSAL:
        return tl.maximum(tl.minimum(rows + off + 1, klen), 0)
    return tl.zeros_like(rows) + klen


@triton.jit
def _load_tile(PTR, base, idx, ok, s_n, s_d, D: tl.constexpr, d):
    """Rows idx (masked by ok) of a [N, d] matrix, padded to D columns."""
    cols = tl.arange(0, D)
    ptrs = (PTR + base + idx[:, None].to(tl.int64) * s_n
            + cols[None, :].to(tl.int64) * s_d)
    return tl.load(ptrs, mask=ok[:, None] & (cols[None, :] < d), other=0.0)


@triton.jit
def _store_tile(PTR, base, idx, ok, s_n, x, D: tl.constexpr, d):
    cols = tl.arange(0, D)
    ptrs = PTR + base + idx[:, None].to(tl.int64) * s_n + cols[None, :]
    tl.store(ptrs, x.to(PTR.dtype.element_ty),
             mask=ok[:, None] & (cols[None, :] < d))


@triton.jit
def _end_terms(q, AK, ak_base, s_akr, BIAS, bias_base, PB, pb_base, bL, bR,
               dk, scale2, SCORE: tl.constexpr, HAS_PB: tl.constexpr,
               DK: tl.constexpr, BLOCK_M: tl.constexpr):
    """(gL, gR): the key term of rows bL and bR for each query row, in log2
    units (zeros without a bucketed score term)."""
    acc_t = tl.float64 if q.dtype == tl.float64 else tl.float32
    gL = tl.zeros([BLOCK_M], acc_t)
    gR = tl.zeros([BLOCK_M], acc_t)
    if SCORE == VECTOR:
        cols = tl.arange(0, DK)
        akl = tl.load(AK + ak_base + bL.to(tl.int64) * s_akr + cols,
                      mask=cols < dk, other=0.0).to(gL.dtype)
        akr = tl.load(AK + ak_base + bR.to(tl.int64) * s_akr + cols,
                      mask=cols < dk, other=0.0).to(gL.dtype)
        qf = q.to(gL.dtype)
        gL = tl.sum(qf * akl[None, :], 1)
        gR = tl.sum(qf * akr[None, :], 1)
        if HAS_PB:
            pb = tl.load(PB + pb_base + cols, mask=cols < dk,
                         other=0.0).to(gL.dtype)
            gL += tl.sum(pb * akl)
            gR += tl.sum(pb * akr)
        gL = gL * scale2
        gR = gR * scale2
    elif SCORE == SCALAR:
        gL += tl.load(BIAS + bias_base + bL).to(gL.dtype) * LOG2E
        gR += tl.load(BIAS + bias_base + bR).to(gL.dtype) * LOG2E
    return gL, gR


@triton.jit
def _window(r0, r1, L, R, bL, bR, LROW, ROWMAP, CLIP: tl.constexpr,
            WIN: tl.constexpr):
    """Window of distances [r0, r0 + WIN), valid up to r1: (distances,
    validity, table rows)."""
    wr = r0 + tl.arange(0, WIN)
    ok = wr <= r1
    return wr, ok, _rows_of(wr, ok, L, R, bL, bR, LROW, ROWMAP, CLIP)


@triton.jit
def _window_scores(q, AK, ak_base, s_akr, BIAS, bias_base, PB, pb_base,
                   wrow, wok, dk, scale2, SCORE: tl.constexpr,
                   HAS_PB: tl.constexpr, DK: tl.constexpr,
                   BLOCK_M: tl.constexpr, WIN: tl.constexpr,
                   PREC: tl.constexpr):
    """(G_w [BLOCK_M, WIN] in log2 units, AK_w [WIN, DK]): the key term of
    every query row at every window distance, and the window's key rows."""
    acc_t = tl.float64 if q.dtype == tl.float64 else tl.float32
    if SCORE == VECTOR:
        cols = tl.arange(0, DK)
        akw = tl.load(AK + ak_base + wrow[:, None].to(tl.int64) * s_akr
                      + cols[None, :],
                      mask=wok[:, None] & (cols[None, :] < dk), other=0.0)
        gw = tl.dot(q, tl.trans(akw.to(q.dtype)), input_precision=PREC,
                    out_dtype=acc_t)
        if HAS_PB:
            pb = tl.load(PB + pb_base + cols, mask=cols < dk,
                         other=0.0).to(acc_t)
            gw += tl.sum(akw.to(acc_t) * pb[None, :], 1)[None, :]
        return gw * scale2, akw
    else:  # SCALAR: one bias per distance, the same for every row
        b = tl.load(BIAS + bias_base + wrow, mask=wok, other=0.0).to(acc_t)
        gw = tl.broadcast_to((b * LOG2E)[None, :], (BLOCK_M, WIN))
        return gw, gw


@triton.jit
def _pick(r, L, R, left, right, band):
    """left[i] where r <= -L, right[i] where r >= R, band elsewhere."""
    return tl.where(r <= -L, left[:, None],
                    tl.where(r >= R, right[:, None], band))


@triton.jit
def _by_window(x, wr, wok, rbase, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr):
    """x [BLOCK_M, BLOCK_N] (per pair) -> [BLOCK_M, WIN] (per window
    distance): element (i, c) is x at the one key j of row i whose distance
    is wr[c] (zero if that key is outside the tile)."""
    ii = tl.arange(0, BLOCK_M)
    jw = wr[None, :] - rbase + ii[:, None]
    ok = wok[None, :] & (jw >= 0) & (jw < BLOCK_N)
    g = tl.gather(x, tl.minimum(tl.maximum(jw, 0), BLOCK_N - 1), 1)
    return tl.where(ok, g, 0.0)


@triton.jit
def _far_ranges(i0, off, L, R, kend, ALL_FAR: tl.constexpr,
                BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Key tiles of query tile i0: (nL, tR, nK). Tiles [0, nL) are far on
    the left (every r <= -L), [nL, tR) band, [tR, nK) far on the right."""
    nK = (kend + BLOCK_N - 1) // BLOCK_N
    if ALL_FAR:
        nL = nK
        tR = nK
    else:
        nL = tl.minimum(tl.maximum(i0 + off - L + 1, 0) // BLOCK_N, nK)
        tR = (tl.maximum(i0 + BLOCK_M - 1 + off + R, 0)
              + BLOCK_N - 1) // BLOCK_N
        tR = tl.minimum(tl.maximum(tR, nL), nK)
    return nL, tR, nK


@triton.jit
def _q_ranges(j0, off, L, R, q_lo, nQT, ALL_FAR: tl.constexpr,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Query tiles of key tile j0: [q_lo, nR) far on the right (every
    r >= R), [nR, qL) band, [qL, nQT) far on the left (every r <= -L)."""
    if ALL_FAR:
        nR = q_lo
        qL = q_lo
    else:
        nR = tl.minimum(tl.maximum(tl.maximum(j0 - off - R + 1, 0)
                                   // BLOCK_M, q_lo), nQT)
        qL = (tl.maximum(j0 + BLOCK_N - 1 - off + L, 0)
              + BLOCK_M - 1) // BLOCK_M
        qL = tl.minimum(tl.maximum(qL, nR), nQT)
    return nR, qL


@triton.jit
def _add_alibi(s, r, slope2):
    return s - slope2 * tl.abs(r).to(s.dtype)



@triton.jit
def _kend(i0, M, Nq, off, klen, CAUSAL: tl.constexpr):
    """Keys [0, kend) are all that query rows [i0, i0 + M) can see."""
    if CAUSAL:
        last = tl.minimum(i0 + M, Nq) - 1
        return tl.maximum(tl.minimum(last + off + 1, klen), 0)
    return klen


@triton.jit
def _klen(LENS, b, Nk, HAS_LEN: tl.constexpr):
    if HAS_LEN:
        return tl.load(LENS + b)
    return Nk


@triton.jit
def _row_setup(OFFS, STARTS, b, off, ROW_OFF: tl.constexpr,
               HAS_START: tl.constexpr):
    """(off, ks) of batch item b: its query offset (OFFS[b] with per-row
    offsets, else the call's one) and its first visible key (STARTS[b]
    with left padding, else 0)."""
    if ROW_OFF:
        off = tl.load(OFFS + b)
    ks = 0
    if HAS_START:
        ks = tl.load(STARTS + b)
    return off, ks


@triton.jit
def _visible(keys, e, ks, HAS_START: tl.constexpr):
    """[M, N] mask: key keys[j] is visible to row i iff ks <= key < e_i."""
    vis = keys[None, :] < e[:, None]
    if HAS_START:
        vis = vis & (keys[None, :] >= ks)
    return vis


@triton.jit
def _first_tile(ks, nL, HAS_START: tl.constexpr, BLOCK_N: tl.constexpr):
    """First key tile a far loop visits: the left-far tiles before the
    tile holding key ks are all invisible (left padding)."""
    if HAS_START:
        return tl.minimum(ks // BLOCK_N, nL)
    return 0


@triton.jit
def _band_start(j_lo, ks, HAS_START: tl.constexpr, BLOCK_N: tl.constexpr):
    """First key of a band loop from j_lo (a multiple of BLOCK_N), past
    the whole tiles before key ks."""
    if HAS_START:
        return tl.maximum(j_lo, (ks // BLOCK_N) * BLOCK_N)
    return j_lo


@triton.jit
def _head_item(H):
    """(bh, b, h) of this program: the attention kernels' grid is (tiles,
    H, B), so that B H may pass 65535 (CUDA's limit on the second and
    third axes, which now bounds H and B each); the tile count (first
    axis) may reach 2^31 - 1. bh = b H + h is int32, b and h int64."""
    h = tl.program_id(1)
    b = tl.program_id(2)
    return b * H + h, b.to(tl.int64), h.to(tl.int64)


@triton.jit
def _query_tile(CAUSAL: tl.constexpr):
    """The query tile of a forward or dQ program. With a causal mask the
    last query tiles see the most key tiles: they take the first program
    ids, so that the longest programs start first and the short ones fill
    the tail (the dK / dV kernels, whose longest key tiles are the first
    ones under a causal mask, keep the ascending order)."""
    if CAUSAL:
        return tl.num_programs(0) - 1 - tl.program_id(0)
    return tl.program_id(0)


@triton.jit
def _plane_off(bh, Nq, plane):
    """Offset of plane `plane` of row bh of a [BH, 6, Nq] buffer, in 64
    bits (plane * Nq alone overflows int32 once Nq > 2^31 / 6)."""
    return (bh.to(tl.int64) * 6 + plane) * Nq


@triton.jit
def _band_keys(q, AK, BIAS, PB, ROWMAP, h, j0, i0, off, L, R, bL, bR, LROW,
               nb, dk, s_akh, s_akr, scale2,
               SCORE: tl.constexpr, HAS_PB: tl.constexpr, CLIP: tl.constexpr,
               DK: tl.constexpr, BLOCK_M: tl.constexpr,
               BLOCK_N: tl.constexpr, WIN: tl.constexpr, PREC: tl.constexpr):
    """Geometry of a band tile pair: (r [M, N] distances, window distances,
    validity and rows, the gather index of each pair into the window, the
    key term's window G_w and AK_w)."""
    ii = tl.arange(0, BLOCK_M)
    jj = tl.arange(0, BLOCK_N)
    rbase = j0 - i0 - off
    r = rbase + jj[None, :] - ii[:, None]
    rs = tl.maximum(rbase - BLOCK_M + 1, 1 - L)
    wd, wok, wrow = _window(rs, tl.minimum(rbase + BLOCK_N - 1, R - 1), L,
                            R, bL, bR, LROW, ROWMAP, CLIP, WIN)
    gi = tl.minimum(tl.maximum(r - rs, 0), WIN - 1)
    gw = tl.zeros([BLOCK_M, WIN], tl.float32)
    akw = gw
    if SCORE == VECTOR or SCORE == SCALAR:
        gw, akw = _window_scores(q, AK, h * s_akh, s_akr, BIAS, h * nb, PB,
                                 h * dk, wrow, wok, dk, scale2, SCORE,
                                 HAS_PB, DK, BLOCK_M, WIN, PREC)
    return r, rbase, wd, wok, wrow, gi, gw, akw


# --- forward -------------------------------------------------------------------

# Planes of the forward's per-row state ST [BH, 6, Nq] (far -> band kernel).
ST_M = tl.constexpr(0)   # running max (log2 units)
ST_L = tl.constexpr(1)   # running sum
ST_WL = tl.constexpr(2)  # probability mass at distances r <= -L
ST_WR = tl.constexpr(3)  # ... and r >= R


@triton.jit
def _fwd_step(s, m, l, acc, v, PREC: tl.constexpr):
    """One online-softmax step (log2 units): the new max, sum and
    accumulator, the tile's probabilities and the rescale factor."""
    m_new = tl.maximum(m, tl.max(s, 1))
    m_use = tl.where(m_new == float("-inf"), 0.0, m_new)
    alpha = tl.exp2(m - m_use)
    p = tl.exp2(s - m_use[:, None])
    l = l * alpha + tl.sum(p, 1)
    acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v, input_precision=PREC,
                                        out_dtype=acc.dtype)
    return m_new, l, acc, p, alpha


@triton.jit
def _fwd_far_tile(q, K, V, kbase, vbase, skn, skd, svn, svd, Nk, dk, dv,
                  j0, left, i0, off, e, emin, ks, gL, gR, slope2, scale2, m,
                  l, acc, wl, wr, SCORE: tl.constexpr, HAS_AV: tl.constexpr,
                  HAS_START: tl.constexpr, DK: tl.constexpr,
                  DV: tl.constexpr, PREC: tl.constexpr,
                  BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """One far key tile (keys [j0, j0 + BLOCK_N), all on the left of the
    reach when `left`, else all on the right) of the query rows [i0, i0 +
    BLOCK_M): the key term is gL or gR per row, the value term's mass goes
    to wl or wr. emin is the smallest row end e_i (a tile below it and
    past ks needs no mask). Returns the new (m, l, acc, wl, wr)."""
    ii = tl.arange(0, BLOCK_M)
    jj = tl.arange(0, BLOCK_N)
    keys = j0 + jj
    kt = _load_tile(K, kbase, keys, keys < Nk, skn, skd, DK, dk)
    vt = _load_tile(V, vbase, keys, keys < Nk, svn, svd, DV, dv)
    s = tl.dot(q, tl.trans(kt), input_precision=PREC, out_dtype=acc.dtype)
    s = s * scale2 + tl.where(left, gL, gR)[:, None]
    if SCORE == ALIBI:
        s = _add_alibi(s, j0 - i0 - off + jj[None, :] - ii[:, None], slope2)
    if (j0 + BLOCK_N > emin) | (j0 < ks):
        s = tl.where(_visible(keys, e, ks, HAS_START), s, float("-inf"))
    m, l, acc, p, alpha = _fwd_step(s, m, l, acc, vt, PREC)
    if HAS_AV:
        ps = tl.sum(p, 1)
        wl = wl * alpha + tl.where(left, ps, 0.0)
        wr = wr * alpha + tl.where(left, 0.0, ps)
    return m, l, acc, wl, wr


@triton.jit
def _fwd_band_tile(q, K, V, AK, AV, BIAS, PB, ROWMAP, kbase, vbase, skn, skd,
                   svn, svd, s_akh, s_akr, s_avh, s_avr, h, Nk, dk, dv, j0,
                   i0, off, L, R, bL, bR, LROW, nb, e, ks, gL, gR, slope2,
                   scale2, m, l, acc, wl, wr, SCORE: tl.constexpr,
                   HAS_PB: tl.constexpr, HAS_AV: tl.constexpr,
                   CLIP: tl.constexpr, HAS_START: tl.constexpr,
                   DK: tl.constexpr, DV: tl.constexpr, PREC: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   WIN: tl.constexpr):
    """One band key tile (keys [j0, j0 + BLOCK_N)) of the query rows
    [i0, i0 + BLOCK_M): the window product G_w for the key term, the
    window's probabilities times AV_w for the value term, pairs beyond the
    reach as in far tiles. Returns the new (m, l, acc, wl, wr)."""
    keys = j0 + tl.arange(0, BLOCK_N)
    kt = _load_tile(K, kbase, keys, keys < Nk, skn, skd, DK, dk)
    vt = _load_tile(V, vbase, keys, keys < Nk, svn, svd, DV, dv)
    r, rbase, wd, wok, wrow, gi, gw, akw = _band_keys(
        q, AK, BIAS, PB, ROWMAP, h, j0, i0, off, L, R, bL, bR, LROW, nb, dk,
        s_akh, s_akr, scale2, SCORE, HAS_PB, CLIP, DK, BLOCK_M, BLOCK_N, WIN,
        PREC)
    s = tl.dot(q, tl.trans(kt), input_precision=PREC, out_dtype=acc.dtype)
    s = s * scale2
    if SCORE == VECTOR or SCORE == SCALAR:
        s += _pick(r, L, R, gL, gR, tl.gather(gw, gi, 1))
    if SCORE == ALIBI:
        s = _add_alibi(s, r, slope2)
    s = tl.where(_visible(keys, e, ks, HAS_START), s, float("-inf"))
    m, l, acc, p, alpha = _fwd_step(s, m, l, acc, vt, PREC)
    if HAS_AV:
        wl = wl * alpha + tl.sum(tl.where(r <= -L, p, 0.0), 1)
        wr = wr * alpha + tl.sum(tl.where(r >= R, p, 0.0), 1)
        cols = tl.arange(0, DV)
        avw = tl.load(AV + h * s_avh + wrow[:, None].to(tl.int64) * s_avr
                      + cols[None, :],
                      mask=wok[:, None] & (cols[None, :] < dv), other=0.0)
        ww = _by_window(p, wd, wok, rbase, BLOCK_M, BLOCK_N)
        acc += tl.dot(ww.to(vt.dtype), avw.to(vt.dtype),
                      input_precision=PREC, out_dtype=acc.dtype)
    return m, l, acc, wl, wr


@triton.jit
def _fwd_finish(OUT, LSE, AV, av_base, s_avr, bL, bR, acc, m, l, wl, wr, bh,
                rows, ok, Nq, dv, HAS_AV: tl.constexpr, DV: tl.constexpr):
    """O = (acc + WL AV[bL] + WR AV[bR]) / l, lse = m + log l (natural);
    a row that saw no key gets zeros and -inf."""
    if HAS_AV:
        cols = tl.arange(0, DV)
        avl = tl.load(AV + av_base + bL.to(tl.int64) * s_avr + cols,
                      mask=cols < dv, other=0.0).to(acc.dtype)
        avr = tl.load(AV + av_base + bR.to(tl.int64) * s_avr + cols,
                      mask=cols < dv, other=0.0).to(acc.dtype)
        acc += wl[:, None] * avl[None, :] + wr[:, None] * avr[None, :]
    seen = l > 0
    l_safe = tl.where(seen, l, 1.0)
    lse = tl.where(seen, (m + tl.log2(l_safe)) * LN2, float("-inf"))
    _store_tile(OUT, bh.to(tl.int64) * Nq * dv, rows, ok, dv,
                acc / l_safe[:, None], DV, dv)
    tl.store(LSE + bh.to(tl.int64) * Nq + rows, lse, mask=ok)


@triton.jit
def _fwd_setup(Q, AK, BIAS, PB, SLOPES, LENS, OFFS, STARTS, sqb, sqh, sqn,
               sqd, skb, skh, svb, svh, s_akh, s_akr, H, G, Nq, Nk, dk, off,
               bL, bR, nb, scale2, i0, SCORE: tl.constexpr,
               HAS_PB: tl.constexpr, CAUSAL: tl.constexpr,
               HAS_LEN: tl.constexpr, ROW_OFF: tl.constexpr,
               HAS_START: tl.constexpr, DK: tl.constexpr,
               BLOCK_M: tl.constexpr):
    """What a forward program knows of its query tile: (bh, b, h, rows,
    row_ok, q, klen, e, gL, gR, slope2, kbase, vbase, off, ks). Query head
    h reads key / value head h // G."""
    bh, b, h = _head_item(H)
    hk = h // G
    off, ks = _row_setup(OFFS, STARTS, b, off, ROW_OFF, HAS_START)
    rows = i0 + tl.arange(0, BLOCK_M)
    row_ok = rows < Nq
    q = _load_tile(Q, b * sqb + h * sqh, rows, row_ok, sqn, sqd, DK, dk)
    klen = _klen(LENS, b, Nk, HAS_LEN)
    gL, gR = _end_terms(q, AK, h * s_akh, s_akr, BIAS, h * nb, PB, h * dk,
                        bL, bR, dk, scale2, SCORE, HAS_PB, DK, BLOCK_M)
    slope2 = 0.0
    if SCORE == ALIBI:
        slope2 = tl.load(SLOPES + h).to(gL.dtype) * LOG2E
    return (bh, b, h, rows, row_ok, q, klen, _key_end(rows, off, klen, CAUSAL),
            gL, gR, slope2, b * skb + hk * skh, b * svb + hk * svh, off, ks)


@triton.jit
def _fwd_far(Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC,
             sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
             sdb, sdh, sdn, sdd, s_akh, s_akr, s_avh, s_avr,
             H, Nq, Nk, dk, dv, off, L, R, bL, bR, LROW, nb, scale2, scale,
             G, OFFS, STARTS, OUT, LSE, ST, ACC,
             SCORE: tl.constexpr, HAS_PB: tl.constexpr, HAS_AV: tl.constexpr,
             CLIP: tl.constexpr, CAUSAL: tl.constexpr, HAS_LEN: tl.constexpr,
             ROW_OFF: tl.constexpr, HAS_START: tl.constexpr,
             ALL_FAR: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
             PREC: tl.constexpr, BLOCK_M: tl.constexpr,
             BLOCK_N: tl.constexpr, FINAL: tl.constexpr):
    """The far tiles of one query tile: the key tiles [0, nL) (every
    distance <= -L) and [tR, nK) (every distance >= R). FINAL: write out and
    lse; otherwise the state ST (m, l, WL, WR) and ACC [BH, Nq, dv]."""
    tile = _query_tile(CAUSAL)
    i0 = tile * BLOCK_M
    (bh, b, h, rows, row_ok, q, klen, e, gL, gR, slope2, kbase, vbase, off,
     ks) = _fwd_setup(Q, AK, BIAS, PB, SLOPES, LENS, OFFS, STARTS, sqb, sqh,
                      sqn, sqd, skb, skh, svb, svh, s_akh, s_akr, H, G, Nq,
                      Nk, dk, off, bL, bR, nb, scale2, i0, SCORE, HAS_PB,
                      CAUSAL, HAS_LEN, ROW_OFF, HAS_START, DK, BLOCK_M)
    acc_t = tl.float64 if q.dtype == tl.float64 else tl.float32
    emin = tl.min(tl.where(row_ok, e, Nk))
    nL, tR, nK = _far_ranges(i0, off, L, R,
                             _kend(i0, BLOCK_M, Nq, off, klen, CAUSAL),
                             ALL_FAR, BLOCK_M, BLOCK_N)
    m = tl.full([BLOCK_M], float("-inf"), acc_t)
    l = tl.zeros([BLOCK_M], acc_t)
    wl = tl.zeros([BLOCK_M], acc_t)
    wr = tl.zeros([BLOCK_M], acc_t)
    acc = tl.zeros([BLOCK_M, DV], acc_t)
    for u in range(_first_tile(ks, nL, HAS_START, BLOCK_N), nL + nK - tR):
        left = u < nL
        m, l, acc, wl, wr = _fwd_far_tile(
            q, K, V, kbase, vbase, skn, skd, svn, svd, Nk, dk, dv,
            tl.where(left, u, u - nL + tR) * BLOCK_N, left, i0, off, e,
            emin, ks, gL, gR, slope2, scale2, m, l, acc, wl, wr, SCORE,
            HAS_AV, HAS_START, DK, DV, PREC, BLOCK_M, BLOCK_N)
    if FINAL:
        _fwd_finish(OUT, LSE, AV, h * s_avh, s_avr, bL, bR, acc, m, l, wl,
                    wr, bh, rows, row_ok, Nq, dv, HAS_AV, DV)
    else:
        tl.store(ST + _plane_off(bh, Nq, ST_M) + rows, m, mask=row_ok)
        tl.store(ST + _plane_off(bh, Nq, ST_L) + rows, l, mask=row_ok)
        tl.store(ST + _plane_off(bh, Nq, ST_WL) + rows, wl, mask=row_ok)
        tl.store(ST + _plane_off(bh, Nq, ST_WR) + rows, wr, mask=row_ok)
        _store_tile(ACC, bh.to(tl.int64) * Nq * dv, rows, row_ok, dv, acc,
                    DV, dv)


@triton.jit
def _fwd_band(Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC,
              sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
              sdb, sdh, sdn, sdd, s_akh, s_akr, s_avh, s_avr,
              H, Nq, Nk, dk, dv, off, L, R, bL, bR, LROW, nb, scale2, scale,
              G, OFFS, STARTS, OUT, LSE, ST, ACC,
              SCORE: tl.constexpr, HAS_PB: tl.constexpr, HAS_AV: tl.constexpr,
              CLIP: tl.constexpr, CAUSAL: tl.constexpr, HAS_LEN: tl.constexpr,
              ROW_OFF: tl.constexpr, HAS_START: tl.constexpr,
              ALL_FAR: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
              PREC: tl.constexpr, BLOCK_M: tl.constexpr,
              BLOCK_N: tl.constexpr, WIN: tl.constexpr, FAR_M: tl.constexpr,
              FAR_N: tl.constexpr):
    """The band tiles of one query tile (BLOCK_M rows inside one far query
    tile of FAR_M rows): the keys [nL FAR_N, tR FAR_N) that _fwd_far left,
    in BLOCK_N steps, starting from its state; then out and lse."""
    tile = _query_tile(CAUSAL)
    i0 = tile * BLOCK_M
    i0f = (i0 // FAR_M) * FAR_M
    (bh, b, h, rows, row_ok, q, klen, e, gL, gR, slope2, kbase, vbase, off,
     ks) = _fwd_setup(Q, AK, BIAS, PB, SLOPES, LENS, OFFS, STARTS, sqb, sqh,
                      sqn, sqd, skb, skh, svb, svh, s_akh, s_akr, H, G, Nq,
                      Nk, dk, off, bL, bR, nb, scale2, i0, SCORE, HAS_PB,
                      CAUSAL, HAS_LEN, ROW_OFF, HAS_START, DK, BLOCK_M)
    acc_t = tl.float64 if q.dtype == tl.float64 else tl.float32
    nL, tR, nK = _far_ranges(i0f, off, L, R,
                             _kend(i0f, FAR_M, Nq, off, klen, CAUSAL),
                             ALL_FAR, FAR_M, FAR_N)
    j_hi = tl.minimum(tR * FAR_N, _kend(i0, BLOCK_M, Nq, off, klen, CAUSAL))
    m = tl.load(ST + _plane_off(bh, Nq, ST_M) + rows, mask=row_ok, other=float("-inf"))
    l = tl.load(ST + _plane_off(bh, Nq, ST_L) + rows, mask=row_ok, other=0.0)
    wl = tl.load(ST + _plane_off(bh, Nq, ST_WL) + rows, mask=row_ok, other=0.0)
    wr = tl.load(ST + _plane_off(bh, Nq, ST_WR) + rows, mask=row_ok, other=0.0)
    acc = _load_tile(ACC, bh.to(tl.int64) * Nq * dv, rows, row_ok, dv, 1, DV,
                     dv).to(acc_t)
    for j0 in range(_band_start(nL * FAR_N, ks, HAS_START, BLOCK_N), j_hi,
                    BLOCK_N):
        m, l, acc, wl, wr = _fwd_band_tile(
            q, K, V, AK, AV, BIAS, PB, ROWMAP, kbase, vbase, skn, skd, svn,
            svd, s_akh, s_akr, s_avh, s_avr, h, Nk, dk, dv, j0, i0, off, L,
            R, bL, bR, LROW, nb, e, ks, gL, gR, slope2, scale2, m, l, acc,
            wl, wr, SCORE, HAS_PB, HAS_AV, CLIP, HAS_START, DK, DV, PREC,
            BLOCK_M, BLOCK_N, WIN)
    _fwd_finish(OUT, LSE, AV, h * s_avh, s_avr, bL, bR, acc, m, l, wl, wr,
                bh, rows, row_ok, Nq, dv, HAS_AV, DV)


# --- backward ------------------------------------------------------------------

# Planes of the per-row buffer RC [B, H, 6, Nq] written by _bwd_prep.
RC_LSE = tl.constexpr(0)  # lse in log2 units; +inf for a row that sees no key
RC_D = tl.constexpr(1)    # D_i = dO_i . o_i
RC_GL = tl.constexpr(2)   # the key term of row bL (log2 units)
RC_GR = tl.constexpr(3)
RC_UL = tl.constexpr(4)   # dO_i . AV[bL]
RC_UR = tl.constexpr(5)


@triton.jit
def _bwd_prep(Q, AK, AV, BIAS, PB, OUT, DOUT, LSE, RC,
              sqb, sqh, sqn, sqd, sdb, sdh, sdn, sdd,
              s_akh, s_akr, s_avh, s_avr,
              H, Nq, dk, dv, bL, bR, nb, scale2,
              SCORE: tl.constexpr, HAS_PB: tl.constexpr,
              HAS_AV: tl.constexpr, BLOCK_M: tl.constexpr,
              DK: tl.constexpr, DV: tl.constexpr):
    """The per-row quantities of the backward: every RC plane of rows
    [0, Nq) (zeros in the planes of a term the scheme lacks)."""
    bh, b, h = _head_item(H)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    ok = rows < Nq
    do = _load_tile(DOUT, b * sdb + h * sdh, rows, ok, sdn, sdd, DV, dv)
    o = _load_tile(OUT, bh.to(tl.int64) * Nq * dv, rows, ok, dv, 1, DV, dv)
    acc_t = tl.float64 if do.dtype == tl.float64 else tl.float32
    dof = do.to(acc_t)
    tl.store(RC + _plane_off(bh, Nq, RC_D) + rows, tl.sum(dof * o.to(acc_t), 1), mask=ok)
    lse = tl.load(LSE + bh.to(tl.int64) * Nq + rows, mask=ok, other=0.0)
    tl.store(RC + _plane_off(bh, Nq, RC_LSE) + rows,
             tl.where(lse == float("-inf"), float("inf"), lse * LOG2E),
             mask=ok)
    if SCORE == VECTOR or SCORE == SCALAR:
        q = _load_tile(Q, b * sqb + h * sqh, rows, ok, sqn, sqd, DK, dk)
        gL, gR = _end_terms(q, AK, h * s_akh, s_akr, BIAS, h * nb, PB,
                            h * dk, bL, bR, dk, scale2, SCORE, HAS_PB, DK,
                            BLOCK_M)
        tl.store(RC + _plane_off(bh, Nq, RC_GL) + rows, gL, mask=ok)
        tl.store(RC + _plane_off(bh, Nq, RC_GR) + rows, gR, mask=ok)
    else:  # read as zeros by the other kernels (RC is not zero-filled)
        zero = tl.zeros([BLOCK_M], acc_t)
        tl.store(RC + _plane_off(bh, Nq, RC_GL) + rows, zero, mask=ok)
        tl.store(RC + _plane_off(bh, Nq, RC_GR) + rows, zero, mask=ok)
    if HAS_AV:
        cols = tl.arange(0, DV)
        avl = tl.load(AV + h * s_avh + bL.to(tl.int64) * s_avr + cols,
                      mask=cols < dv, other=0.0).to(acc_t)
        avr = tl.load(AV + h * s_avh + bR.to(tl.int64) * s_avr + cols,
                      mask=cols < dv, other=0.0).to(acc_t)
        tl.store(RC + _plane_off(bh, Nq, RC_UL) + rows, tl.sum(dof * avl[None, :], 1), mask=ok)
        tl.store(RC + _plane_off(bh, Nq, RC_UR) + rows, tl.sum(dof * avr[None, :], 1), mask=ok)
    else:
        zero = tl.zeros([BLOCK_M], acc_t)
        tl.store(RC + _plane_off(bh, Nq, RC_UL) + rows, zero, mask=ok)
        tl.store(RC + _plane_off(bh, Nq, RC_UR) + rows, zero, mask=ok)


@triton.jit
def _rc(RC, bh, Nq, rows, ok, plane, other):
    return tl.load(RC + _plane_off(bh, Nq, plane) + rows,
                   mask=ok, other=other)


@triton.jit
def _bwd_pair(q, kt, vt, do, lse2, dd, s_rel, u_rel, r, mask, slope2,
              scale2, SCORE: tl.constexpr, HAS_AV: tl.constexpr,
              MASKED: tl.constexpr, PREC: tl.constexpr):
    """P and dS of one tile pair, recomputed: s_rel and u_rel are the key
    and value terms (log2 units / plain), already per pair or per row."""
    acc_t = lse2.dtype
    s = tl.dot(q, tl.trans(kt), input_precision=PREC, out_dtype=acc_t)
    s = s * scale2 + s_rel
    if SCORE == ALIBI:
        s = _add_alibi(s, r, slope2)
    if MASKED:
        s = tl.where(mask, s, float("-inf"))
    p = tl.exp2(s - lse2[:, None])
    dp = tl.dot(do, tl.trans(vt), input_precision=PREC, out_dtype=acc_t)
    if HAS_AV:
        dp += u_rel
    ds = p * (dp - dd[:, None])
    return p, ds


@triton.jit
def _window_values(do, AV, av_base, s_avr, wrow, wok, dv, DV: tl.constexpr,
                   PREC: tl.constexpr):
    """(U_w = dO AV_w^T [BLOCK_M, WIN], AV_w [WIN, DV])."""
    cols = tl.arange(0, DV)
    avw = tl.load(AV + av_base + wrow[:, None].to(tl.int64) * s_avr
                  + cols[None, :],
                  mask=wok[:, None] & (cols[None, :] < dv), other=0.0)
    uw = tl.dot(do, tl.trans(avw.to(do.dtype)), input_precision=PREC,
                out_dtype=tl.float64 if do.dtype == tl.float64
                else tl.float32)
    return uw, avw




@triton.jit
def _q_tile(Q, DOUT, RC, qbase, dbase, bh, i0, ii, Nq, dk, dv, sqn, sqd, sdn,
            sdd, DK: tl.constexpr, DV: tl.constexpr):
    """A query tile's rows, q, dO, log2 lse and D for the backward."""
    rows = i0 + ii
    ok = rows < Nq
    q = _load_tile(Q, qbase, rows, ok, sqn, sqd, DK, dk)
    do = _load_tile(DOUT, dbase, rows, ok, sdn, sdd, DV, dv)
    return (rows, ok, q, do, _rc(RC, bh, Nq, rows, ok, RC_LSE, float("inf")),
            _rc(RC, bh, Nq, rows, ok, RC_D, 0.0))


@triton.jit
def _dkdv_setup(K, V, LENS, SLOPES, OFFS, STARTS, skb, skh, skn, skd, svb,
                svh, svn, svd, H, G, Nq, Nk, dk, dv, off, L, R, j0, j0f,
                SCORE: tl.constexpr,
                FAR_M: tl.constexpr, FAR_N: tl.constexpr,
                CAUSAL: tl.constexpr, HAS_LEN: tl.constexpr,
                ROW_OFF: tl.constexpr, HAS_START: tl.constexpr,
                ALL_FAR: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                BLOCK_N: tl.constexpr):
    """What a dK/dV program knows of its key tile j0 (inside the far key
    tile j0f): (bh, b, h, klen, q_lo, nR, qL, nQT, keys, key_ok, K and V
    tiles, slope2, off, ks). The far tile's far query tiles are [q_lo, nR)
    (distances >= R) and [qL, nQT) (<= -L), in FAR_M units. The program
    of query head h reads key / value head h // G and writes that query
    head's part of dK / dV (the host sums a group's parts)."""
    bh, b, h = _head_item(H)
    hk = h // G
    off, ks = _row_setup(OFFS, STARTS, b, off, ROW_OFF, HAS_START)
    klen = _klen(LENS, b, Nk, HAS_LEN)
    nQT = (Nq + FAR_M - 1) // FAR_M
    q_lo = 0
    if CAUSAL:  # row i sees key j0f iff i + off >= j0f
        q_lo = tl.minimum(tl.maximum(j0f - off, 0) // FAR_M, nQT)
    q_lo = tl.where((j0f < klen) & (j0f + FAR_N > ks), q_lo, nQT)
    nR, qL = _q_ranges(j0f, off, L, R, q_lo, nQT, ALL_FAR, FAR_M, FAR_N)
    keys = j0 + tl.arange(0, BLOCK_N)
    key_ok = keys < Nk
    kt = _load_tile(K, b * skb + hk * skh, keys, key_ok, skn, skd, DK, dk)
    vt = _load_tile(V, b * svb + hk * svh, keys, key_ok, svn, svd, DV, dv)
    slope2 = 0.0
    if SCORE == ALIBI:
        slope2 = tl.load(SLOPES + h) * LOG2E
        slope2 = slope2.to(tl.float64) if kt.dtype == tl.float64 \
            else slope2.to(tl.float32)
    return (bh, b, h, klen, q_lo, nR, qL, nQT, keys, key_ok, kt, vt,
            slope2, off, ks)


@triton.jit
def _dkdv_finish(DKO, DVO, dk_acc, dv_acc, bh, keys, key_ok, Nk, dk, dv,
                 scale, DK: tl.constexpr, DV: tl.constexpr):
    _store_tile(DKO, bh.to(tl.int64) * Nk * dk, keys, key_ok, dk,
                dk_acc * scale, DK, dk)
    _store_tile(DVO, bh.to(tl.int64) * Nk * dv, keys, key_ok, dv, dv_acc,
                DV, dv)


@triton.jit
def _bwd_dkdv_far(Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC,
                  sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                  sdb, sdh, sdn, sdd, s_akh, s_akr, s_avh, s_avr,
                  H, Nq, Nk, dk, dv, off, L, R, bL, bR, LROW, nb, scale2,
                  scale, G, OFFS, STARTS, DKO, DVO, DKS, DVS,
                  SCORE: tl.constexpr, HAS_PB: tl.constexpr,
                  HAS_AV: tl.constexpr, CLIP: tl.constexpr,
                  CAUSAL: tl.constexpr, HAS_LEN: tl.constexpr,
                  ROW_OFF: tl.constexpr, HAS_START: tl.constexpr,
                  ALL_FAR: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                  PREC: tl.constexpr, BLOCK_M: tl.constexpr,
                  BLOCK_N: tl.constexpr, FINAL: tl.constexpr):
    """dK, dV of one key tile over its far query tiles. FINAL: scaled and
    stored in DKO / DVO (the gradients' dtype); otherwise the unscaled sums
    in DKS / DVS (the accumulator type) for _bwd_dkdv_band."""
    j0 = tl.program_id(0) * BLOCK_N
    (bh, b, h, klen, q_lo, nR, qL, nQT, keys, key_ok, kt, vt, slope2, off,
     ks) = _dkdv_setup(
        K, V, LENS, SLOPES, OFFS, STARTS, skb, skh, skn, skd, svb, svh, svn,
        svd, H, G, Nq, Nk, dk, dv, off, L, R, j0, j0, SCORE, BLOCK_M,
        BLOCK_N, CAUSAL, HAS_LEN, ROW_OFF, HAS_START, ALL_FAR, DK, DV,
        BLOCK_N)
    ii = tl.arange(0, BLOCK_M)
    jj = tl.arange(0, BLOCK_N)
    acc_t = tl.float64 if kt.dtype == tl.float64 else tl.float32
    dk_acc = tl.zeros([BLOCK_N, DK], acc_t)
    dv_acc = tl.zeros([BLOCK_N, DV], acc_t)
    n_right = nR - q_lo
    for u in range(0, n_right + nQT - qL):
        right = u < n_right
        i0 = tl.where(right, q_lo + u, u - n_right + qL) * BLOCK_M
        rows, ok, q, do, lse2, dd = _q_tile(
            Q, DOUT, RC, b * sqb + h * sqh, b * sdb + h * sdh, bh, i0, ii,
            Nq, dk, dv, sqn, sqd, sdn, sdd, DK, DV)
        g = tl.where(right, _rc(RC, bh, Nq, rows, ok, RC_GR, 0.0),
                     _rc(RC, bh, Nq, rows, ok, RC_GL, 0.0))
        uu = tl.where(right, _rc(RC, bh, Nq, rows, ok, RC_UR, 0.0),
                      _rc(RC, bh, Nq, rows, ok, RC_UL, 0.0))
        e = _key_end(rows, off, klen, CAUSAL)
        p, ds = _bwd_pair(q, kt, vt, do, lse2, dd, g[:, None], uu[:, None],
                          j0 - i0 - off + jj[None, :] - ii[:, None],
                          _visible(keys, e, ks, HAS_START), slope2, scale2,
                          SCORE, HAS_AV, True, PREC)
        dv_acc += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=PREC,
                         out_dtype=acc_t)
        dk_acc += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=PREC,
                         out_dtype=acc_t)
    if FINAL:
        _dkdv_finish(DKO, DVO, dk_acc, dv_acc, bh, keys, key_ok, Nk, dk, dv,
                     scale, DK, DV)
    else:
        _dkdv_finish(DKS, DVS, dk_acc, dv_acc, bh, keys, key_ok, Nk, dk, dv,
                     1.0, DK, DV)


@triton.jit
def _bwd_dkdv_band(Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC,
                   sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                   sdb, sdh, sdn, sdd, s_akh, s_akr, s_avh, s_avr,
                   H, Nq, Nk, dk, dv, off, L, R, bL, bR, LROW, nb, scale2,
                   scale, G, OFFS, STARTS, DKO, DVO, DKS, DVS,
                   SCORE: tl.constexpr, HAS_PB: tl.constexpr,
                   HAS_AV: tl.constexpr, CLIP: tl.constexpr,
                   CAUSAL: tl.constexpr, HAS_LEN: tl.constexpr,
                   ROW_OFF: tl.constexpr, HAS_START: tl.constexpr,
                   ALL_FAR: tl.constexpr, DK: tl.constexpr,
                   DV: tl.constexpr, PREC: tl.constexpr,
                   BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                   WIN: tl.constexpr, FAR_M: tl.constexpr,
                   FAR_N: tl.constexpr):
    """dK, dV of one key tile (BLOCK_N keys inside a far key tile of FAR_N):
    adds the band query rows [nR FAR_M, qL FAR_M) to _bwd_dkdv_far's sums,
    then scales and stores."""
    j0 = tl.program_id(0) * BLOCK_N
    (bh, b, h, klen, q_lo, nR, qL, nQT, keys, key_ok, kt, vt, slope2, off,
     ks) = _dkdv_setup(
        K, V, LENS, SLOPES, OFFS, STARTS, skb, skh, skn, skd, svb, svh, svn,
        svd, H, G, Nq, Nk, dk, dv, off, L, R, j0, (j0 // FAR_N) * FAR_N,
        SCORE, FAR_M, FAR_N, CAUSAL, HAS_LEN, ROW_OFF, HAS_START, ALL_FAR,
        DK, DV, BLOCK_N)
    ii = tl.arange(0, BLOCK_M)
    acc_t = tl.float64 if kt.dtype == tl.float64 else tl.float32
    dk_acc = _load_tile(DKS, bh.to(tl.int64) * Nk * dk, keys, key_ok, dk, 1,
                        DK, dk).to(acc_t)
    dv_acc = _load_tile(DVS, bh.to(tl.int64) * Nk * dv, keys, key_ok, dv, 1,
                        DV, dv).to(acc_t)
    for i0 in range(nR * FAR_M, tl.minimum(qL * FAR_M, Nq), BLOCK_M):
        rows, ok, q, do, lse2, dd = _q_tile(
            Q, DOUT, RC, b * sqb + h * sqh, b * sdb + h * sdh, bh, i0, ii,
            Nq, dk, dv, sqn, sqd, sdn, sdd, DK, DV)
        r, rbase, wd, wok, wrow, gi, gw, akw = _band_keys(
            q, AK, BIAS, PB, ROWMAP, h, j0, i0, off, L, R, bL, bR, LROW, nb,
            dk, s_akh, s_akr, scale2, SCORE, HAS_PB, CLIP, DK, BLOCK_M,
            BLOCK_N, WIN, PREC)
        s_rel = 0.0
        if SCORE == VECTOR or SCORE == SCALAR:
            s_rel = _pick(r, L, R, _rc(RC, bh, Nq, rows, ok, RC_GL, 0.0),
                          _rc(RC, bh, Nq, rows, ok, RC_GR, 0.0),
                          tl.gather(gw, gi, 1))
        u_rel = 0.0
        if HAS_AV:
            uw, avw = _window_values(do, AV, h * s_avh, s_avr, wrow, wok, dv,
                                     DV, PREC)
            u_rel = _pick(r, L, R, _rc(RC, bh, Nq, rows, ok, RC_UL, 0.0),
                          _rc(RC, bh, Nq, rows, ok, RC_UR, 0.0),
                          tl.gather(uw, gi, 1))
        e = _key_end(rows, off, klen, CAUSAL)
        p, ds = _bwd_pair(q, kt, vt, do, lse2, dd, s_rel, u_rel, r,
                          _visible(keys, e, ks, HAS_START), slope2, scale2,
                          SCORE, HAS_AV, True, PREC)
        dv_acc += tl.dot(tl.trans(p).to(do.dtype), do, input_precision=PREC,
                         out_dtype=acc_t)
        dk_acc += tl.dot(tl.trans(ds).to(q.dtype), q, input_precision=PREC,
                         out_dtype=acc_t)
    _dkdv_finish(DKO, DVO, dk_acc, dv_acc, bh, keys, key_ok, Nk, dk, dv,
                 scale, DK, DV)


# Planes of the dQ kernels' per-row state ES [BH, 6, Nq] (far -> band).
ES_EL = tl.constexpr(0)  # sum of dS over the pairs at distances r <= -L
ES_ER = tl.constexpr(1)  # ... r >= R
ES_WL = tl.constexpr(2)  # sum of P over the pairs at r <= -L
ES_WR = tl.constexpr(3)
ES_ET = tl.constexpr(4)  # sum of dS over every pair (the rowsum, exactly 0
                         # in exact arithmetic)


@triton.jit
def _rowsum_fix(RC, bh, Nq, rows, ok, dd, et, pt, el, er, wl, wr):
    """The rowsum correction (docs/python.md, "GPU", precision). D = dO . O
    comes from the stored output, rounded to the inputs' dtype, so the dS
    of a row sum to et = (sum P dP) - D sum P instead of zero; with
    bfloat16 that rounding (2^-9 |D|) is as large as the far rows' sums of
    dS, which cancel over hundreds of keys. The exact D is D + delta,
    delta = et / pt (pt = sum P), and each dS is short of -P delta: the end
    sums become el - wl delta, er - wr delta. The corrected D goes back
    into RC for the dK / dV and diagonal kernels, which run after this.
    Returns (el, er)."""
    delta = tl.where(pt > 0, et / tl.where(pt > 0, pt, 1.0), 0.0)
    tl.store(RC + _plane_off(bh, Nq, RC_D) + rows, dd + delta, mask=ok)
    return el - delta * wl, er - delta * wr


@triton.jit
def _dq_setup(Q, DOUT, RC, LENS, SLOPES, OFFS, STARTS, sqb, sqh, sqn, sqd,
              skb, skh, svb, svh, sdb, sdh, sdn, sdd, H, G, Nq, Nk, dk, dv,
              off, i0, SCORE: tl.constexpr, CAUSAL: tl.constexpr,
              HAS_LEN: tl.constexpr, ROW_OFF: tl.constexpr,
              HAS_START: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
              BLOCK_M: tl.constexpr):
    """What a dQ program knows of its query tile: (bh, b, h, rows, ok, q,
    dO, log2 lse, D, klen, e, gL, gR, uL, uR, slope2, kbase, vbase, off,
    ks); key / value head h // G."""
    bh, b, h = _head_item(H)
    hk = h // G
    off, ks = _row_setup(OFFS, STARTS, b, off, ROW_OFF, HAS_START)
    rows, ok, q, do, lse2, dd = _q_tile(
        Q, DOUT, RC, b * sqb + h * sqh, b * sdb + h * sdh, bh, i0,
        tl.arange(0, BLOCK_M), Nq, dk, dv, sqn, sqd, sdn, sdd, DK, DV)
    klen = _klen(LENS, b, Nk, HAS_LEN)
    slope2 = 0.0
    if SCORE == ALIBI:
        slope2 = tl.load(SLOPES + h).to(lse2.dtype) * LOG2E
    return (bh, b, h, rows, ok, q, do, lse2, dd, klen,
            _key_end(rows, off, klen, CAUSAL),
            _rc(RC, bh, Nq, rows, ok, RC_GL, 0.0),
            _rc(RC, bh, Nq, rows, ok, RC_GR, 0.0),
            _rc(RC, bh, Nq, rows, ok, RC_UL, 0.0),
            _rc(RC, bh, Nq, rows, ok, RC_UR, 0.0), slope2,
            b * skb + hk * skh, b * svb + hk * svh, off, ks)


@triton.jit
def _dq_finish(DQO, PEQ, PEW, PES, AK, q, do, dq, el, er, wl, wr, bh, h,
               tile, rows, ok, Nq, dk, dv, bL, bR, s_akh, s_akr, scale,
               SCORE: tl.constexpr, HAS_AV: tl.constexpr, DK: tl.constexpr,
               DV: tl.constexpr):
    """dQ += E_end AK[end rows], scaled and stored; the partial sums of the
    end rows' table gradients (PEQ, PEW, PES) of query tile `tile`."""
    acc_t = dq.dtype
    cols = tl.arange(0, DK)
    part = bh.to(tl.int64) * tl.num_programs(0) + tile
    if SCORE == VECTOR:
        akl = tl.load(AK + h * s_akh + bL.to(tl.int64) * s_akr + cols,
                      mask=cols < dk, other=0.0).to(acc_t)
        akr = tl.load(AK + h * s_akh + bR.to(tl.int64) * s_akr + cols,
                      mask=cols < dk, other=0.0).to(acc_t)
        dq += el[:, None] * akl[None, :] + er[:, None] * akr[None, :]
        qf = q.to(acc_t)
        tl.store(PEQ + part * 2 * DK + cols, tl.sum(el[:, None] * qf, 0))
        tl.store(PEQ + part * 2 * DK + DK + cols, tl.sum(er[:, None] * qf, 0))
    if SCORE == VECTOR or SCORE == SCALAR:
        tl.store(PES + part * 2, tl.sum(el))
        tl.store(PES + part * 2 + 1, tl.sum(er))
    if HAS_AV:
        vcols = tl.arange(0, DV)
        dof = do.to(acc_t)
        tl.store(PEW + part * 2 * DV + vcols, tl.sum(wl[:, None] * dof, 0))
        tl.store(PEW + part * 2 * DV + DV + vcols,
                 tl.sum(wr[:, None] * dof, 0))
    _store_tile(DQO, bh.to(tl.int64) * Nq * dk, rows, ok, dk, dq * scale, DK,
                dk)


@triton.jit
def _bwd_dq_far(Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC,
                sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                sdb, sdh, sdn, sdd, s_akh, s_akr, s_avh, s_avr,
                H, Nq, Nk, dk, dv, off, L, R, bL, bR, LROW, nb, scale2, scale,
                G, OFFS, STARTS, DQO, DQS, ES, PEQ, PEW, PES,
                SCORE: tl.constexpr, HAS_PB: tl.constexpr,
                HAS_AV: tl.constexpr, CLIP: tl.constexpr,
                CAUSAL: tl.constexpr, HAS_LEN: tl.constexpr,
                ROW_OFF: tl.constexpr, HAS_START: tl.constexpr,
                ALL_FAR: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                PREC: tl.constexpr, BLOCK_M: tl.constexpr,
                BLOCK_N: tl.constexpr, FINAL: tl.constexpr):
    """dQ of one query tile over its far key tiles, with the per-row end
    sums. FINAL: finished here (_dq_finish); otherwise the unscaled dQ
    in DQS and the end sums in ES for _bwd_dq_band."""
    tile = _query_tile(CAUSAL)
    i0 = tile * BLOCK_M
    (bh, b, h, rows, ok, q, do, lse2, dd, klen, e, gL, gR, uL, uR, slope2,
     kbase, vbase, off, ks) = _dq_setup(
        Q, DOUT, RC, LENS, SLOPES, OFFS, STARTS, sqb, sqh, sqn, sqd, skb,
        skh, svb, svh, sdb, sdh, sdn, sdd, H, G, Nq, Nk, dk, dv, off, i0,
        SCORE, CAUSAL, HAS_LEN, ROW_OFF, HAS_START, DK, DV, BLOCK_M)
    acc_t = tl.float64 if q.dtype == tl.float64 else tl.float32
    ii = tl.arange(0, BLOCK_M)
    jj = tl.arange(0, BLOCK_N)
    nL, tR, nK = _far_ranges(i0, off, L, R,
                             _kend(i0, BLOCK_M, Nq, off, klen, CAUSAL),
                             ALL_FAR, BLOCK_M, BLOCK_N)
    dq = tl.zeros([BLOCK_M, DK], acc_t)
    el = tl.zeros([BLOCK_M], acc_t)
    er = tl.zeros([BLOCK_M], acc_t)
    wl = tl.zeros([BLOCK_M], acc_t)
    wr = tl.zeros([BLOCK_M], acc_t)
    et = tl.zeros([BLOCK_M], acc_t)
    FIX_D: tl.constexpr = SCORE == VECTOR or SCORE == SCALAR or HAS_AV
    for u in range(_first_tile(ks, nL, HAS_START, BLOCK_N), nL + nK - tR):
        left = u < nL
        j0 = tl.where(left, u, u - nL + tR) * BLOCK_N
        keys = j0 + jj
        kt = _load_tile(K, kbase, keys, keys < Nk, skn, skd, DK, dk)
        vt = _load_tile(V, vbase, keys, keys < Nk, svn, svd, DV, dv)
        p, ds = _bwd_pair(q, kt, vt, do, lse2, dd,
                          tl.where(left, gL, gR)[:, None],
                          tl.where(left, uL, uR)[:, None],
                          j0 - i0 - off + jj[None, :] - ii[:, None],
                          _visible(keys, e, ks, HAS_START), slope2, scale2,
                          SCORE, HAS_AV, True, PREC)
        dq += tl.dot(ds.to(kt.dtype), kt, input_precision=PREC,
                     out_dtype=acc_t)
        if SCORE == VECTOR or SCORE == SCALAR:
            es = tl.sum(ds, 1)
            el += tl.where(left, es, 0.0)
            er += tl.where(left, 0.0, es)
        if FIX_D:
            et += tl.sum(ds, 1)
            ps = tl.sum(p, 1)
            wl += tl.where(left, ps, 0.0)
            wr += tl.where(left, 0.0, ps)
    if FINAL:
        if FIX_D:
            el, er = _rowsum_fix(RC, bh, Nq, rows, ok, dd, et, wl + wr, el,
                                 er, wl, wr)
        _dq_finish(DQO, PEQ, PEW, PES, AK, q, do, dq, el, er, wl, wr, bh, h,
                   tile, rows, ok, Nq, dk, dv, bL, bR, s_akh, s_akr, scale,
                   SCORE, HAS_AV, DK, DV)
    else:
        _store_tile(DQS, bh.to(tl.int64) * Nq * dk, rows, ok, dk, dq, DK, dk)
        tl.store(ES + _plane_off(bh, Nq, ES_EL) + rows, el, mask=ok)
        tl.store(ES + _plane_off(bh, Nq, ES_ER) + rows, er, mask=ok)
        tl.store(ES + _plane_off(bh, Nq, ES_WL) + rows, wl, mask=ok)
        tl.store(ES + _plane_off(bh, Nq, ES_WR) + rows, wr, mask=ok)
        tl.store(ES + _plane_off(bh, Nq, ES_ET) + rows, et, mask=ok)


@triton.jit
def _bwd_dq_band(Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC,
                 sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
                 sdb, sdh, sdn, sdd, s_akh, s_akr, s_avh, s_avr,
                 H, Nq, Nk, dk, dv, off, L, R, bL, bR, LROW, nb, scale2,
                 scale, G, OFFS, STARTS, DQO, DQS, ES, PEQ, PEW, PES,
                 SCORE: tl.constexpr, HAS_PB: tl.constexpr,
                 HAS_AV: tl.constexpr, CLIP: tl.constexpr,
                 CAUSAL: tl.constexpr, HAS_LEN: tl.constexpr,
                 ROW_OFF: tl.constexpr, HAS_START: tl.constexpr,
                 ALL_FAR: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
                 PREC: tl.constexpr, BLOCK_M: tl.constexpr,
                 BLOCK_N: tl.constexpr, WIN: tl.constexpr,
                 FAR_M: tl.constexpr, FAR_N: tl.constexpr):
    """dQ of one query tile (BLOCK_M rows inside a far tile of FAR_M): adds
    the band keys [nL FAR_N, tR FAR_N) to _bwd_dq_far's state, then
    finishes (_dq_finish)."""
    tile = _query_tile(CAUSAL)
    i0 = tile * BLOCK_M
    i0f = (i0 // FAR_M) * FAR_M
    (bh, b, h, rows, ok, q, do, lse2, dd, klen, e, gL, gR, uL, uR, slope2,
     kbase, vbase, off, ks) = _dq_setup(
        Q, DOUT, RC, LENS, SLOPES, OFFS, STARTS, sqb, sqh, sqn, sqd, skb,
        skh, svb, svh, sdb, sdh, sdn, sdd, H, G, Nq, Nk, dk, dv, off, i0,
        SCORE, CAUSAL, HAS_LEN, ROW_OFF, HAS_START, DK, DV, BLOCK_M)
    acc_t = tl.float64 if q.dtype == tl.float64 else tl.float32
    jj = tl.arange(0, BLOCK_N)
    nL, tR, nK = _far_ranges(i0f, off, L, R,
                             _kend(i0f, FAR_M, Nq, off, klen, CAUSAL),
                             ALL_FAR, FAR_M, FAR_N)
    j_hi = tl.minimum(tR * FAR_N, _kend(i0, BLOCK_M, Nq, off, klen, CAUSAL))
    dq = _load_tile(DQS, bh.to(tl.int64) * Nq * dk, rows, ok, dk, 1, DK,
                    dk).to(acc_t)
    el = tl.load(ES + _plane_off(bh, Nq, ES_EL) + rows, mask=ok, other=0.0)
    er = tl.load(ES + _plane_off(bh, Nq, ES_ER) + rows, mask=ok, other=0.0)
    wl = tl.load(ES + _plane_off(bh, Nq, ES_WL) + rows, mask=ok, other=0.0)
    wr = tl.load(ES + _plane_off(bh, Nq, ES_WR) + rows, mask=ok, other=0.0)
    et = tl.load(ES + _plane_off(bh, Nq, ES_ET) + rows, mask=ok, other=0.0)
    # P summed over the band pairs at interior distances (the far ones go
    # to wl, wr).
    pin = tl.zeros([BLOCK_M], acc_t)
    FIX_D: tl.constexpr = SCORE == VECTOR or SCORE == SCALAR or HAS_AV
    for j0 in range(_band_start(nL * FAR_N, ks, HAS_START, BLOCK_N), j_hi,
                    BLOCK_N):
        keys = j0 + jj
        kt = _load_tile(K, kbase, keys, keys < Nk, skn, skd, DK, dk)
        vt = _load_tile(V, vbase, keys, keys < Nk, svn, svd, DV, dv)
        r, rbase, wd, wok, wrow, gi, gw, akw = _band_keys(
            q, AK, BIAS, PB, ROWMAP, h, j0, i0, off, L, R, bL, bR, LROW, nb,
            dk, s_akh, s_akr, scale2, SCORE, HAS_PB, CLIP, DK, BLOCK_M,
            BLOCK_N, WIN, PREC)
        s_rel = 0.0
        if SCORE == VECTOR or SCORE == SCALAR:
            s_rel = _pick(r, L, R, gL, gR, tl.gather(gw, gi, 1))
        u_rel = 0.0
        if HAS_AV:
            uw, avw = _window_values(do, AV, h * s_avh, s_avr, wrow, wok, dv,
                                     DV, PREC)
            u_rel = _pick(r, L, R, uL, uR, tl.gather(uw, gi, 1))
        p, ds = _bwd_pair(q, kt, vt, do, lse2, dd, s_rel, u_rel, r,
                          _visible(keys, e, ks, HAS_START), slope2, scale2,
                          SCORE, HAS_AV, True, PREC)
        dq += tl.dot(ds.to(kt.dtype), kt, input_precision=PREC,
                     out_dtype=acc_t)
        if SCORE == VECTOR:
            ew = _by_window(ds, wd, wok, rbase, BLOCK_M, BLOCK_N)
            dq += tl.dot(ew.to(q.dtype), akw.to(q.dtype),
                         input_precision=PREC, out_dtype=acc_t)
        if SCORE == VECTOR or SCORE == SCALAR:
            el += tl.sum(tl.where(r <= -L, ds, 0.0), 1)
            er += tl.sum(tl.where(r >= R, ds, 0.0), 1)
        if FIX_D:
            et += tl.sum(ds, 1)
            pin += tl.sum(tl.where((r > -L) & (r < R), p, 0.0), 1)
            wl += tl.sum(tl.where(r <= -L, p, 0.0), 1)
            wr += tl.sum(tl.where(r >= R, p, 0.0), 1)
    if FIX_D:
        el, er = _rowsum_fix(RC, bh, Nq, rows, ok, dd, et, wl + wr + pin,
                             el, er, wl, wr)
    _dq_finish(DQO, PEQ, PEW, PES, AK, q, do, dq, el, er, wl, wr, bh, h,
               tile, rows, ok, Nq, dk, dv, bL, bR, s_akh, s_akr, scale,
               SCORE, HAS_AV, DK, DV)


@triton.jit
def _bwd_diag(Q, K, V, AK, AV, BIAS, PB, SLOPES, LENS, ROWMAP, DOUT, RC,
              sqb, sqh, sqn, sqd, skb, skh, skn, skd, svb, svh, svn, svd,
              sdb, sdh, sdn, sdd, s_akh, s_akr, s_avh, s_avr,
              H, Nq, Nk, dk, dv, off, L, R, bL, bR, LROW, nb, scale2, scale,
              G, OFFS, STARTS, PWQ, PWV, PWS, B, t_lo, n_split, DT,
              SCORE: tl.constexpr, HAS_PB: tl.constexpr, HAS_AV: tl.constexpr,
              CLIP: tl.constexpr, CAUSAL: tl.constexpr, HAS_LEN: tl.constexpr,
              ROW_OFF: tl.constexpr, HAS_START: tl.constexpr,
              ALL_FAR: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr,
              PREC: tl.constexpr, NEED_EQ: tl.constexpr,
              NEED_ES: tl.constexpr, NEED_WV: tl.constexpr,
              BLOCK: tl.constexpr):
    """Interior rows of the table gradients, by distance. Program (t, h, s)
    takes the tile pairs (query tile qi, key tile qi + t) of tile diagonal
    t (BLOCK x BLOCK tiles): all of them have their distances in the window
    [rd0, rd0 + 2 BLOCK - 1), rd0 = t BLOCK - off - BLOCK + 1. It visits
    the pairs s, s + n_split, ... over (batch, qi) and writes, per window
    distance c (interior distances only, zero elsewhere):
    PWQ[s, h, t - t_lo, c] = sum E[i, c] q_i, PWV[...] = sum W[i, c] dO_i,
    PWS[s, h, t - t_lo, c] = sum E[i, c].

    Per-row offsets: off is the call's smallest offset and batch item b
    (offset off_b) pairs query tile qi with the keys from qi BLOCK + t BLOCK
    + off_b - off (a key tile not aligned to BLOCK), so that its pairs have
    the same window of distances; DT = cdiv(max off_b - off, BLOCK) widens
    the range of query tiles to cover every item's."""
    td = tl.program_id(0)
    t = t_lo + td
    h = tl.program_id(1)
    sp = tl.program_id(2)
    h64 = h.to(tl.int64)
    W2: tl.constexpr = 2 * BLOCK
    ii = tl.arange(0, BLOCK)
    jj = tl.arange(0, BLOCK)
    c = tl.arange(0, W2)
    rd0 = t * BLOCK - off - BLOCK + 1
    wd = rd0 + c
    wok = c < W2 - 1
    inner = wok & (wd > -L) & (wd < R)
    wrow = _rows_of(wd, wok, L, R, bL, bR, LROW, ROWMAP, CLIP)
    cols = tl.arange(0, DK)
    vcols = tl.arange(0, DV)
    if SCORE == VECTOR:
        akw = tl.load(AK + h64 * s_akh + wrow[:, None].to(tl.int64) * s_akr
                      + cols[None, :],
                      mask=wok[:, None] & (cols[None, :] < dk), other=0.0)
    if HAS_AV:
        avw = tl.load(AV + h64 * s_avh + wrow[:, None].to(tl.int64) * s_avr
                      + vcols[None, :],
                      mask=wok[:, None] & (vcols[None, :] < dv), other=0.0)
    nQT = (Nq + BLOCK - 1) // BLOCK
    nKT = (Nk + BLOCK - 1) // BLOCK
    qlo = tl.maximum(0, -t - DT)
    n_q = tl.maximum(tl.minimum(nQT, nKT - t) - qlo, 0)
    acc_t = tl.float64 if Q.dtype.element_ty == tl.float64 else tl.float32
    slope2 = 0.0
    if SCORE == ALIBI:
        slope2 = tl.load(SLOPES + h64).to(acc_t) * LOG2E
    gi = jj[None, :] - ii[:, None] + BLOCK - 1
    eq = tl.zeros([W2, DK], acc_t)
    wv = tl.zeros([W2, DV], acc_t)
    es = tl.zeros([W2], acc_t)
    for u in range(sp, B * n_q, n_split):
        b = (u // n_q).to(tl.int64)
        offb, ks = _row_setup(OFFS, STARTS, b, off, ROW_OFF, HAS_START)
        i0 = (qlo + u % n_q) * BLOCK
        j0 = i0 + t * BLOCK + (offb - off)
        bh = b * H + h64
        rows = i0 + ii
        ok = rows < Nq
        keys = j0 + jj
        key_ok = (keys >= 0) & (keys < Nk)
        q = _load_tile(Q, b * sqb + h64 * sqh, rows, ok, sqn, sqd, DK, dk)
        do = _load_tile(DOUT, b * sdb + h64 * sdh, rows, ok, sdn, sdd, DV, dv)
        kt = _load_tile(K, b * skb + (h64 // G) * skh, keys, key_ok, skn,
                        skd, DK, dk)
        vt = _load_tile(V, b * svb + (h64 // G) * svh, keys, key_ok, svn,
                        svd, DV, dv)
        klen = Nk
        if HAS_LEN:
            klen = tl.load(LENS + b)
        s_rel = 0.0
        if SCORE == VECTOR:
            gw = tl.dot(q, tl.trans(akw.to(q.dtype)), input_precision=PREC,
                        out_dtype=acc_t)
            if HAS_PB:
                pb = tl.load(PB + h64 * dk + cols, mask=cols < dk,
                             other=0.0).to(acc_t)
                gw += tl.sum(akw.to(acc_t) * pb[None, :], 1)[None, :]
            s_rel = tl.gather(gw * scale2, gi, 1)
        elif SCORE == SCALAR:
            bw = tl.load(BIAS + h64 * nb + wrow, mask=wok, other=0.0)
            s_rel = tl.gather(tl.broadcast_to(
                (bw.to(acc_t) * LOG2E)[None, :], (BLOCK, W2)), gi, 1)
        u_rel = 0.0
        if HAS_AV:
            uw = tl.dot(do, tl.trans(avw.to(do.dtype)), input_precision=PREC,
                        out_dtype=acc_t)
            u_rel = tl.gather(uw, gi, 1)
        e = _key_end(rows, offb, klen, CAUSAL)
        r = j0 - i0 - offb + jj[None, :] - ii[:, None]
        p, ds = _bwd_pair(q, kt, vt, do, _rc(RC, bh, Nq, rows, ok, RC_LSE,
                                             float("inf")),
                          _rc(RC, bh, Nq, rows, ok, RC_D, 0.0), s_rel, u_rel,
                          r, _visible(keys, e, ks, HAS_START)
                          & (keys[None, :] >= 0), slope2, scale2,
                          SCORE, HAS_AV, True, PREC)
        if NEED_EQ or NEED_ES:
            ew = _by_window(ds, wd, inner, j0 - i0 - offb, BLOCK, BLOCK)
            if NEED_EQ:
                eq += tl.dot(tl.trans(ew).to(q.dtype), q,
                             input_precision=PREC, out_dtype=acc_t)
            if NEED_ES:
                es += tl.sum(ew, 0)
        if NEED_WV:
            ww = _by_window(p, wd, inner, j0 - i0 - offb, BLOCK, BLOCK)
            wv += tl.dot(tl.trans(ww).to(do.dtype), do, input_precision=PREC,
                         out_dtype=acc_t)
    part = (sp.to(tl.int64) * H + h64) * tl.num_programs(0) + td
    if NEED_EQ:
        tl.store(PWQ + part * W2 * DK + c[:, None] * DK + cols[None, :], eq)
    if NEED_WV:
        tl.store(PWV + part * W2 * DV + c[:, None] * DV + vcols[None, :], wv)
    if NEED_ES:
        tl.store(PWS + part * W2 + c, es)

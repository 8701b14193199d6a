"""An independent numpy implementation of docs/math.md sections 2-3 (the oracle).

Written from the equations, not from the C++ code, and deliberately literal:
the relative tables are gathered into full [H, Nq, Nk, d] tensors
(a[r(i, j)] for every pair) instead of the bucketed G / W / E form relpos
uses, so the two share no structure. Everything runs in float64 whatever the
input dtype. Only for small sizes (memory is O(H Nq Nk d)).

The scheme family of docs/math.md section 8 is here too, from its equations:
``buckets`` (an object with ``left`` / ``right``: asymmetric clip; with
``num_buckets`` / ``max_distance`` / ``bidirectional``: T5's log buckets),
``bias`` (T5 scalar table [H, nb], added unscaled), ``alibi`` (True: the
paper's slopes, or H slopes; -m_h |r| added unscaled) and ``pb`` (position
query bias [H, dk]: the ak term uses q + pb), ``key_starts`` (left
padding: keys j < key_starts[b] invisible) and ``scale`` (the multiplier of
q . k and of the ak term; default 1 / sqrt(dk)).
"""

import math

import numpy as np


def t5_rows(r, num_buckets, max_distance, bidirectional):
    """T5's _relative_position_bucket (Mesh TensorFlow / Hugging Face) with
    the float32 steps of docs/math.md section 8; the float32 logarithm is
    the float64 one rounded to float32 (the correctly rounded value up to
    double rounding)."""
    r = np.asarray(r, dtype=np.int64)
    if bidirectional:
        half = num_buckets // 2
        base = np.where(r > 0, half, 0)
        a = np.abs(r)
    else:
        half = num_buckets
        base = np.zeros_like(r)
        a = np.maximum(-r, 0)
    exact = half // 2
    quot = (a.astype(np.float32) / np.float32(exact)).astype(np.float32)
    with np.errstate(divide="ignore"):
        lg = np.log(quot.astype(np.float64)).astype(np.float32)
    denom = np.float32(math.log(max_distance / exact))
    far = (lg / denom).astype(np.float32) * np.float32(half - exact)
    # trunc toward zero (a >= exact, so the value is >= 0 where it is used)
    far = exact + np.trunc(np.where(a >= exact, far, 0)).astype(np.int64)
    return base + np.where(a < exact, a, np.minimum(far, half - 1))


def alibi_slopes(h):
    """The ALiBi paper's slope rule (its reference code's get_slopes)."""
    def power_of_2(n):
        start = 2.0 ** (-(2.0 ** -(math.log2(n) - 3)))
        return [start * start ** i for i in range(n)]
    if math.log2(h).is_integer():
        return power_of_2(h)
    p = 2 ** math.floor(math.log2(h))
    return power_of_2(p) + alibi_slopes(2 * p)[0::2][:h - p]


def _rows(r, max_distance, buckets):
    """(table row of every distance r, number of rows)."""
    if buckets is None:
        # docs/math.md section 1: r(i, j) = clip(j - (i + off), -k, k); table row r + k.
        return (np.clip(r, -max_distance, max_distance) + max_distance,
                2 * max_distance + 1)
    if hasattr(buckets, "left"):
        return (np.clip(r, -buckets.left, buckets.right) + buckets.left,
                buckets.left + buckets.right + 1)
    return (t5_rows(r, buckets.num_buckets, buckets.max_distance,
                    buckets.bidirectional), buckets.num_buckets)


def _setup(q, k, ak, av, max_distance, causal, key_lengths, query_offset,
           buckets=None, key_starts=None):
    b, h, nq, _ = q.shape
    nk = k.shape[2]
    off = nk - nq if query_offset is None else query_offset
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    dist = j - (i + off)
    rows, nrows = _rows(dist, max_distance, buckets)
    visible = np.ones((b, 1, nq, nk), dtype=bool)
    if causal:
        visible &= (j <= i + off)[None, None]
    if key_lengths is not None:
        lengths = np.asarray(key_lengths).reshape(b, 1, 1, 1)
        visible &= j[None, None] < lengths
    if key_starts is not None:  # left padding: keys j < start are invisible
        starts = np.asarray(key_starts).reshape(b, 1, 1, 1)
        visible &= j[None, None] >= starts

    def per_head(table):
        if table is None:
            return None
        t = np.asarray(table, dtype=np.float64)
        return np.broadcast_to(t, (h,) + t.shape) if t.ndim == 2 else t

    return rows, nrows, dist, visible, per_head(ak), per_head(av)


def _softmax(q, k, v, ak, av, max_distance, causal, key_lengths,
             query_offset, buckets=None, bias=None, alibi=None, pb=None,
             key_starts=None, scale=None):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    rows, nrows, dist, visible, akh, avh = _setup(
        q, k, ak, av, max_distance, causal, key_lengths, query_offset,
        buckets, key_starts)
    scale = 1.0 / np.sqrt(q.shape[3]) if scale is None else float(scale)
    # The position-term query: q, or q + pb (Transformer-XL).
    qp = q if pb is None else q + np.asarray(pb, np.float64)[None, :, None]
    # docs/math.md section 2: s_ij = (q_i . k_j + qp_i . AK[r(i,j)]) / sqrt(dk)
    s = np.einsum("bhid,bhjd->bhij", q, k)
    ak_ij = None
    if akh is not None:
        ak_ij = akh[:, rows]  # [H, Nq, Nk, dk]
        s = s + np.einsum("bhid,hijd->bhij", qp, ak_ij)
    s = s * scale
    if bias is not None:  # T5: + B[h, b(r)], unscaled
        s = s + np.asarray(bias, np.float64)[:, rows][None]
    if alibi is not None and alibi is not False:  # ALiBi: - m_h |r|
        h = q.shape[1]
        m = np.asarray(alibi_slopes(h) if alibi is True else alibi,
                       np.float64)
        s = s - m[None, :, None, None] * np.abs(dist)[None, None]
    s = np.where(visible, s, -np.inf)
    any_visible = visible.any(axis=3, keepdims=True)
    m = np.where(any_visible, s.max(axis=3, keepdims=True, initial=-np.inf),
                 0.0)
    e = np.where(visible, np.exp(s - m), 0.0)
    z = e.sum(axis=3, keepdims=True)
    # A row that sees no key: p = 0, output 0, lse = -inf (docs/math.md section 1).
    p = np.where(any_visible, e / np.where(z > 0, z, 1.0), 0.0)
    lse = np.where(any_visible[..., 0], np.log(np.where(z > 0, z, 1.0))[..., 0]
                   + m[..., 0], -np.inf)
    av_ij = None if avh is None else avh[:, rows]  # [H, Nq, Nk, dv]
    return q, k, v, rows, nrows, qp, p, lse, scale, ak_ij, av_ij


def forward(q, k, v, ak=None, av=None, *, max_distance=None, causal=False,
            key_lengths=None, query_offset=None, magnitudes=False,
            buckets=None, bias=None, alibi=None, pb=None, key_starts=None,
            scale=None):
    """Returns (out [B, H, Nq, dv], lse [B, H, Nq]) in float64.

    With magnitudes=True also the sum of the absolute values of the terms
    that make up each output element (sum_j p_ij (|v_j| + |AV[r]|)): the
    natural scale of its rounding error, which a plain |out| underestimates
    when terms cancel.
    """
    q, k, v, rows, nrows, qp, p, lse, scale, ak_ij, av_ij = _softmax(
        q, k, v, ak, av, max_distance, causal, key_lengths, query_offset,
        buckets, bias, alibi, pb, key_starts, scale)
    # docs/math.md section 2: o_i = sum_j p_ij v_j + sum_j p_ij AV[r(i,j)]
    out = np.einsum("bhij,bhjd->bhid", p, v)
    mag = np.einsum("bhij,bhjd->bhid", p, np.abs(v))
    if av_ij is not None:
        out = out + np.einsum("bhij,hijd->bhid", p, av_ij)
        mag = mag + np.einsum("bhij,hijd->bhid", p, np.abs(av_ij))
    return (out, lse, mag) if magnitudes else (out, lse)


def backward(dout, q, k, v, ak=None, av=None, *, max_distance=None,
             causal=False, key_lengths=None, query_offset=None,
             magnitudes=False, buckets=None, bias=None, alibi=None, pb=None,
             scheme_grads=False, key_starts=None, scale=None):
    """Returns (dq, dk, dv, dak, dav) in float64 (dak/dav None if no table);
    with scheme_grads=True, (dq, dk, dv, dak, dav, dbias, dpb) (None for an
    absent bias / pb).

    With magnitudes=True returns (grads, mags): mags holds, per gradient
    element, the same sums taken over absolute values (|dS| replaced by
    p (|dP| + |D|), the scale of its own rounding error). Gradients such as
    dAK at k = 0 are exact cancellations (sum_j dS_ij = 0), so only this
    scale, not the result, says how large their rounding error may be.
    """
    q, k, v, rows, nrows, qp, p, lse, scale, ak_ij, av_ij = _softmax(
        q, k, v, ak, av, max_distance, causal, key_lengths, query_offset,
        buckets, bias, alibi, pb, key_starts, scale)
    do = np.asarray(dout, dtype=np.float64)
    # docs/math.md section 3: dV_j = sum_i p_ij dO_i
    dv = np.einsum("bhij,bhid->bhjd", p, do)
    # dP_ij = dO_i . v_j + dO_i . AV[r(i,j)]
    dp = np.einsum("bhid,bhjd->bhij", do, v)
    if av_ij is not None:
        dp = dp + np.einsum("bhid,hijd->bhij", do, av_ij)
    # D_i = sum_j p_ij dP_ij ; dS_ij = p_ij (dP_ij - D_i)
    d = (p * dp).sum(axis=3, keepdims=True)
    ds = p * (dp - d)
    # dQ_i = (sum_j dS_ij k_j + sum_j dS_ij AK[r(i,j)]) / sqrt(dk)
    dq = np.einsum("bhij,bhjd->bhid", ds, k) * scale
    if ak_ij is not None:
        dq = dq + np.einsum("bhij,hijd->bhid", ds, ak_ij) * scale
    # dK_j = sum_i dS_ij q_i / sqrt(dk)
    dk = np.einsum("bhij,bhid->bhjd", ds, q) * scale

    def scatter(weights, vectors, table):
        # d table[h, r] = sum over (b, i, j) with row(i, j) = r of
        # weights[b,h,i,j] * vectors[b,h,i]; shared tables sum over h too.
        if table is None:
            return None
        table = np.asarray(table)
        h, nq, nk = weights.shape[1], weights.shape[2], weights.shape[3]
        grad = np.zeros((h, nrows, vectors.shape[3]))
        contrib = np.einsum("bhij,bhid->hijd", weights, vectors)
        for hh in range(h):
            np.add.at(grad[hh], rows.reshape(-1),
                      contrib[hh].reshape(nq * nk, -1))
        return grad.sum(axis=0) if table.ndim == 2 else grad

    def scalar_scatter(weights):
        # dB[h, r] = sum over (b, i, j) with row(i, j) = r of weights.
        h = weights.shape[1]
        grad = np.zeros((h, nrows))
        per_head = weights.sum(axis=0)  # [H, Nq, Nk]
        for hh in range(h):
            np.add.at(grad[hh], rows.reshape(-1), per_head[hh].reshape(-1))
        return grad

    # dAK[r] = sum_{(i,j): r(i,j)=r} dS_ij qp_i / sqrt(dk) (= E^T Q' / sqrt(dk))
    dak = scatter(ds * scale, qp, ak)
    # dAV[r] = sum_{(i,j): r(i,j)=r} p_ij dO_i              (= W^T dO)
    dav = scatter(p, do, av)
    # dB[h, r] = sum_{(b,i,j): r(i,j)=r} dS_ij (unscaled)
    dbias = None if bias is None else scalar_scatter(ds)
    # dpb_h = sum_{(b,i,j)} dS_ij AK[r(i,j)] / sqrt(dk)
    dpb = None if pb is None else np.einsum("bhij,hijd->hd", ds * scale,
                                            ak_ij)
    grads = (dq, dk, dv, dak, dav)
    if scheme_grads:
        grads += (dbias, dpb)
    if not magnitudes:
        return grads

    # The same sums over absolute values.
    ado = np.abs(do)
    dp_mag = np.einsum("bhid,bhjd->bhij", ado, np.abs(v))
    if av_ij is not None:
        dp_mag = dp_mag + np.einsum("bhid,hijd->bhij", ado, np.abs(av_ij))
    ds_mag = p * (dp_mag + (p * dp_mag).sum(axis=3, keepdims=True))
    dq_mag = np.einsum("bhij,bhjd->bhid", ds_mag, np.abs(k)) * scale
    if ak_ij is not None:
        dq_mag = dq_mag + np.einsum("bhij,hijd->bhid", ds_mag,
                                    np.abs(ak_ij)) * scale
    mags = (dq_mag,
            np.einsum("bhij,bhid->bhjd", ds_mag, np.abs(q)) * scale,
            np.einsum("bhij,bhid->bhjd", p, ado),
            scatter(ds_mag * scale, np.abs(qp), ak),
            scatter(p, ado, av))
    if scheme_grads:
        mags += (None if bias is None else scalar_scatter(ds_mag),
                 None if pb is None else np.einsum(
                     "bhij,hijd->hd", ds_mag * scale, np.abs(ak_ij)))
    return grads, mags

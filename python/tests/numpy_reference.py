"""An independent numpy implementation of SPEC.md sections 2-3 (the oracle).

Written from the equations, not from the C++ code, and deliberately literal:
the relative tables are gathered into full [H, Nq, Nk, d] tensors
(a[r(i, j)] for every pair) instead of the bucketed G / W / E form relpos
uses, so the two share no structure. Everything runs in float64 whatever the
input dtype. Only for small sizes (memory is O(H Nq Nk d)).
"""

import numpy as np


def _setup(q, k, ak, av, max_distance, causal, key_lengths, query_offset):
    b, h, nq, _ = q.shape
    nk = k.shape[2]
    off = nk - nq if query_offset is None else query_offset
    i = np.arange(nq)[:, None]
    j = np.arange(nk)[None, :]
    # SPEC 1: r(i, j) = clip(j - (i + off), -k, k); table row r + k.
    rows = np.clip(j - (i + off), -max_distance, max_distance) + max_distance
    visible = np.ones((b, 1, nq, nk), dtype=bool)
    if causal:
        visible &= (j <= i + off)[None, None]
    if key_lengths is not None:
        lengths = np.asarray(key_lengths).reshape(b, 1, 1, 1)
        visible &= j[None, None] < lengths

    def per_head(table):
        if table is None:
            return None
        t = np.asarray(table, dtype=np.float64)
        return np.broadcast_to(t, (h,) + t.shape) if t.ndim == 2 else t

    return rows, visible, per_head(ak), per_head(av)


def _softmax(q, k, v, ak, av, max_distance, causal, key_lengths,
             query_offset):
    q, k, v = (np.asarray(x, dtype=np.float64) for x in (q, k, v))
    rows, visible, akh, avh = _setup(q, k, ak, av, max_distance, causal,
                                     key_lengths, query_offset)
    scale = 1.0 / np.sqrt(q.shape[3])
    # SPEC 2: s_ij = (q_i . k_j + q_i . AK[r(i,j)]) / sqrt(dk)
    s = np.einsum("bhid,bhjd->bhij", q, k)
    ak_ij = None
    if akh is not None:
        ak_ij = akh[:, rows]  # [H, Nq, Nk, dk]
        s = s + np.einsum("bhid,hijd->bhij", q, ak_ij)
    s = s * scale
    s = np.where(visible, s, -np.inf)
    any_visible = visible.any(axis=3, keepdims=True)
    m = np.where(any_visible, s.max(axis=3, keepdims=True, initial=-np.inf),
                 0.0)
    e = np.where(visible, np.exp(s - m), 0.0)
    z = e.sum(axis=3, keepdims=True)
    # A row that sees no key: p = 0, output 0, lse = -inf (SPEC 1).
    p = np.where(any_visible, e / np.where(z > 0, z, 1.0), 0.0)
    lse = np.where(any_visible[..., 0], np.log(np.where(z > 0, z, 1.0))[..., 0]
                   + m[..., 0], -np.inf)
    av_ij = None if avh is None else avh[:, rows]  # [H, Nq, Nk, dv]
    return q, k, v, rows, p, lse, scale, ak_ij, av_ij


def forward(q, k, v, ak=None, av=None, *, max_distance, causal=False,
            key_lengths=None, query_offset=None, magnitudes=False):
    """Returns (out [B, H, Nq, dv], lse [B, H, Nq]) in float64.

    With magnitudes=True also the sum of the absolute values of the terms
    that make up each output element (sum_j p_ij (|v_j| + |AV[r]|)): the
    natural scale of its rounding error, which a plain |out| underestimates
    when terms cancel.
    """
    q, k, v, rows, p, lse, scale, ak_ij, av_ij = _softmax(
        q, k, v, ak, av, max_distance, causal, key_lengths, query_offset)
    # SPEC 2: o_i = sum_j p_ij v_j + sum_j p_ij AV[r(i,j)]
    out = np.einsum("bhij,bhjd->bhid", p, v)
    mag = np.einsum("bhij,bhjd->bhid", p, np.abs(v))
    if av_ij is not None:
        out = out + np.einsum("bhij,hijd->bhid", p, av_ij)
        mag = mag + np.einsum("bhij,hijd->bhid", p, np.abs(av_ij))
    return (out, lse, mag) if magnitudes else (out, lse)


def backward(dout, q, k, v, ak=None, av=None, *, max_distance, causal=False,
             key_lengths=None, query_offset=None, magnitudes=False):
    """Returns (dq, dk, dv, dak, dav) in float64 (dak/dav None if no table).

    With magnitudes=True returns (grads, mags): mags holds, per gradient
    element, the same sums taken over absolute values (|dS| replaced by
    p (|dP| + |D|), the scale of its own rounding error). Gradients such as
    dAK at k = 0 are exact cancellations (sum_j dS_ij = 0), so only this
    scale, not the result, says how large their rounding error may be.
    """
    q, k, v, rows, p, lse, scale, ak_ij, av_ij = _softmax(
        q, k, v, ak, av, max_distance, causal, key_lengths, query_offset)
    do = np.asarray(dout, dtype=np.float64)
    # SPEC 3: dV_j = sum_i p_ij dO_i
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
        grad = np.zeros((h, 2 * max_distance + 1, vectors.shape[3]))
        contrib = np.einsum("bhij,bhid->hijd", weights, vectors)
        for hh in range(h):
            np.add.at(grad[hh], rows.reshape(-1),
                      contrib[hh].reshape(nq * nk, -1))
        return grad.sum(axis=0) if table.ndim == 2 else grad

    # dAK[r] = sum_{(i,j): r(i,j)=r} dS_ij q_i / sqrt(dk)   (= E^T Q / sqrt(dk))
    dak = scatter(ds * scale, q, ak)
    # dAV[r] = sum_{(i,j): r(i,j)=r} p_ij dO_i              (= W^T dO)
    dav = scatter(p, do, av)
    grads = (dq, dk, dv, dak, dav)
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
            scatter(ds_mag * scale, np.abs(q), ak),
            scatter(p, ado, av))
    return grads, mags

#!/usr/bin/python3
"""Writes the golden files for relpos's attention (tests/golden/*.bin).

An independent numpy implementation of docs/math.md sections 1-3, written from the
docs/math.md and deliberately vectorised differently from the C++ reference: it builds
the full bucket-index matrix R[i, j] = clip(j - (i + off), -k, k) + k, gathers
the relative tensors AK[R] and AV[R] of shape [Nq, Nk, d] (the
"materialised" form the fused kernel avoids), uses einsum for every product and
np.add.at for the bucketed table gradients.

Run with Debian's python3 (it has numpy), from the repository root:

    /usr/bin/python3 tests/golden/gen_golden.py

File format (little-endian, one case per file), version 1:

    8 bytes   magic b"RPGOLD\\0\\0"
    uint32    format version (1)
    uint32    length of the case name, then the name (UTF-8)
    int64 x7  batch, heads, q_len, k_len, dk, dv, max_distance
    uint8 x5  per_head_tables, key_term, value_term, causal, has_query_offset
    int64     query_offset (0 when has_query_offset is 0: default Nk - Nq)
    int64     number of key_lengths (0 or batch), then that many int64
    uint32    number of arrays, then for each array:
                uint32 name length, name (ASCII), uint32 rank,
                int64 x rank extents, float64 data (row-major)

Arrays: inputs q, k, v, ak, av (a table is absent when its term is off),
dout; expected out, lse (-inf for rows that see no key), dq, dk, dv, dak,
dav (dak / dav absent when their term is off). Inputs are rounded to float32
values before the computation, so a float run sees exactly the same inputs.
"""

import os
import struct

import numpy as np

MAGIC = b"RPGOLD\0\0"
VERSION = 1


def bucket_matrix(q_len, k_len, off, k):
    """R[i, j] = clip(j - (i + off), -k, k) + k (docs/math.md section 1)."""
    i = np.arange(q_len)[:, None]
    j = np.arange(k_len)[None, :]
    return np.clip(j - (i + off), -k, k) + k


def visible_matrix(q_len, k_len, off, causal, length):
    """M[i, j]: key j visible to query i (padding and causal masks)."""
    i = np.arange(q_len)[:, None]
    j = np.arange(k_len)[None, :]
    vis = np.broadcast_to(j < length, (q_len, k_len))
    if causal:
        vis = vis & (j <= i + off)
    return vis


def attention(case, x):
    """Forward and backward for every (b, h); returns the expected arrays."""
    B, H, Nq, Nk = case["batch"], case["heads"], case["q_len"], case["k_len"]
    dk, dv, k = case["dk"], case["dv"], case["max_distance"]
    off = case["query_offset"] if case["query_offset"] is not None else Nk - Nq
    lengths = case["key_lengths"] or [Nk] * B
    scale = 1.0 / np.sqrt(dk)
    R = bucket_matrix(Nq, Nk, off, k)

    out = np.zeros((B, H, Nq, dv))
    lse = np.full((B, H, Nq), -np.inf)
    dq = np.zeros_like(x["q"])
    dkk = np.zeros_like(x["k"])
    dvv = np.zeros_like(x["v"])
    dak = np.zeros_like(x["ak"]) if "ak" in x else None
    dav = np.zeros_like(x["av"]) if "av" in x else None

    def table(name, h):
        t = x[name]
        return t[h] if case["per_head_tables"] else t

    for b in range(B):
        M = visible_matrix(Nq, Nk, off, case["causal"], lengths[b])
        seen = M.any(axis=1)  # rows with at least one visible key
        for h in range(H):
            q, kk, v = x["q"][b, h], x["k"][b, h], x["v"][b, h]
            do = x["dout"][b, h]
            # Gathered relative tensors, [Nq, Nk, d]; zeros for an off term.
            ak_g = table("ak", h)[R] if "ak" in x else np.zeros((Nq, Nk, dk))
            av_g = table("av", h)[R] if "av" in x else np.zeros((Nq, Nk, dv))
            # s_ij = (q_i . k_j + q_i . AK[r(i,j)]) / sqrt(dk)
            s = (q @ kk.T + np.einsum("id,ijd->ij", q, ak_g)) * scale
            s = np.where(M, s, -np.inf)
            m = np.where(seen, s.max(axis=1), 0.0)
            e = np.where(M, np.exp(s - m[:, None]), 0.0)
            z = e.sum(axis=1)
            p = np.where(seen[:, None], e / np.where(seen, z, 1.0)[:, None], 0.0)
            lse[b, h] = np.where(seen, m + np.log(np.where(seen, z, 1.0)), -np.inf)
            # o_i = sum_j p_ij v_j + sum_j p_ij AV[r(i,j)]
            o = p @ v + np.einsum("ij,ijd->id", p, av_g)
            out[b, h] = o
            # docs/math.md section 3.
            dP = do @ v.T + np.einsum("id,ijd->ij", do, av_g)
            D = np.einsum("id,id->i", do, o)
            dS = p * (dP - D[:, None])
            dq[b, h] = (dS @ kk + np.einsum("ij,ijd->id", dS, ak_g)) * scale
            dkk[b, h] = dS.T @ q * scale
            dvv[b, h] = p.T @ do
            if dak is not None:
                tgt = dak[h] if case["per_head_tables"] else dak
                np.add.at(tgt, R, dS[:, :, None] * q[:, None, :] * scale)
            if dav is not None:
                tgt = dav[h] if case["per_head_tables"] else dav
                np.add.at(tgt, R, p[:, :, None] * do[:, None, :])
    res = {"out": out, "lse": lse, "dq": dq, "dk": dkk, "dv": dvv}
    if dak is not None:
        res["dak"] = dak
    if dav is not None:
        res["dav"] = dav
    return res


def make_inputs(case, seed):
    rng = np.random.default_rng(seed)
    B, H, Nq, Nk = case["batch"], case["heads"], case["q_len"], case["k_len"]
    dk, dv, k = case["dk"], case["dv"], case["max_distance"]
    th = (H,) if case["per_head_tables"] else ()

    def normal(*shape):
        # float32-representable values (see the module docstring).
        return rng.standard_normal(shape).astype(np.float32).astype(np.float64)

    x = {"q": normal(B, H, Nq, dk), "k": normal(B, H, Nk, dk),
         "v": normal(B, H, Nk, dv)}
    if case["key_term"]:
        x["ak"] = normal(*th, 2 * k + 1, dk)
    if case["value_term"]:
        x["av"] = normal(*th, 2 * k + 1, dv)
    x["dout"] = normal(B, H, Nq, dv)
    return x


def case(name, batch, heads, q_len, k_len, dk, dv, max_distance,
         per_head_tables=False, key_term=True, value_term=True, causal=False,
         query_offset=None, key_lengths=None):
    return dict(name=name, batch=batch, heads=heads, q_len=q_len, k_len=k_len,
                dk=dk, dv=dv, max_distance=max_distance,
                per_head_tables=per_head_tables, key_term=key_term,
                value_term=value_term, causal=causal,
                query_offset=query_offset, key_lengths=key_lengths or [])


CASES = [
    case("shared_plain", 2, 2, 6, 6, 4, 4, 2),
    case("perhead_causal_dk_ne_dv", 1, 3, 7, 7, 3, 5, 3,
         per_head_tables=True, causal=True),
    # Default offset Nk - Nq = 5; batch item 2 sees no key at all.
    case("padding_causal_nq_lt_nk", 3, 1, 4, 9, 4, 2, 2, causal=True,
         key_lengths=[9, 5, 0]),
    # Rows 0 and 1 see no key (causal, off = -2).
    case("negative_offset_keyonly", 1, 2, 5, 6, 3, 3, 2, causal=True,
         query_offset=-2, value_term=False),
    case("k0_valueonly", 2, 1, 3, 5, 2, 3, 0, key_term=False),
    case("plain_nq_gt_nk", 1, 2, 5, 3, 3, 2, 1, key_term=False,
         value_term=False),
    case("k_gt_n_perhead", 1, 2, 4, 4, 2, 3, 10, per_head_tables=True),
    case("explicit_offset_far", 1, 1, 3, 8, 3, 2, 2, query_offset=20),
]


def write_case(path, c, x, res):
    arrays = [(n, x[n]) for n in ("q", "k", "v", "ak", "av", "dout") if n in x]
    arrays += [(n, res[n]) for n in
               ("out", "lse", "dq", "dk", "dv", "dak", "dav") if n in res]
    with open(path, "wb") as f:
        f.write(MAGIC)
        f.write(struct.pack("<I", VERSION))
        name = c["name"].encode()
        f.write(struct.pack("<I", len(name)) + name)
        f.write(struct.pack("<7q", c["batch"], c["heads"], c["q_len"],
                            c["k_len"], c["dk"], c["dv"], c["max_distance"]))
        has_off = c["query_offset"] is not None
        f.write(struct.pack("<5B", c["per_head_tables"], c["key_term"],
                            c["value_term"], c["causal"], has_off))
        f.write(struct.pack("<q", c["query_offset"] if has_off else 0))
        f.write(struct.pack("<q", len(c["key_lengths"])))
        f.write(struct.pack("<%dq" % len(c["key_lengths"]), *c["key_lengths"]))
        f.write(struct.pack("<I", len(arrays)))
        for n, a in arrays:
            f.write(struct.pack("<I", len(n)) + n.encode())
            f.write(struct.pack("<I", a.ndim))
            f.write(struct.pack("<%dq" % a.ndim, *a.shape))
            f.write(np.ascontiguousarray(a, dtype="<f8").tobytes())


def main():
    here = os.path.dirname(os.path.abspath(__file__))
    for old in os.listdir(here):
        if old.endswith(".bin"):
            os.remove(os.path.join(here, old))
    total = 0
    for seed, c in enumerate(CASES):
        x = make_inputs(c, 1000 + seed)
        res = attention(c, x)
        for n, a in res.items():
            finite = np.isfinite(a) if n != "lse" else np.isfinite(a) | (a == -np.inf)
            assert finite.all(), (c["name"], n)
        path = os.path.join(here, c["name"] + ".bin")
        write_case(path, c, x, res)
        total += os.path.getsize(path)
        print("wrote %s (%d bytes)" % (os.path.relpath(path), os.path.getsize(path)))
    print("total %d bytes" % total)


if __name__ == "__main__":
    main()

"""Context-parallel relative attention over torch.distributed (ring).

    context_parallel_attention(q, k, v, ak, av, ..., group=None)

Each rank of ``group`` holds one contiguous chunk of the sequence: rank r
holds positions o_r .. o_r + n_r - 1 with o_r = n_0 + ... + n_{r-1} (chunks
may differ in length). The key/value chunks travel a ring (rank r sends to
r + 1 and receives from r - 1) together with their global offsets, so after
P - 1 steps every query chunk has met every key chunk; the partial results of
the chunk pairs are combined with their log-sum-exps (docs/math.md section 4:
the same online softmax the tiled kernel uses within one process). The
result equals single-process relpos attention over the whole sequence.

For a chunk pair (queries at qo, keys at ko) the relative distance of local
query i and key j is r = (ko + j) - (qo + i), i.e. relpos attention on the
pair with query_offset = qo - ko. A pair farther apart than the scheme's
reach -- every r >= hi or every r <= lo, where the bucket map is constant --
uses one table row b for all its entries, so it takes the far shortcut:

    s_ij = q_i . k_j / sqrt(dk) + c_i      c_i = q_i . AK[b] / sqrt(dk)
                                           (Shaw) or bias[h, b] (T5)
    o_i  = sum_j p_ij v_j + AV[b]          (sum_j p_ij = 1 within the pair)

plain attention with a per-query constant and a value offset (torch
matmuls). Reach: Shaw [-k, k], ClipBuckets [-left, right], T5
+-relpos.t5_bucket_reach; ALiBi has none (every pair is near).

Backward (a torch.autograd.Function) runs the ring again: the K/V chunks
travel as in the forward, and each chunk's dK / dV accumulator travels one
step behind them and arrives back at its owner after P hops. A chunk pair's
gradient needs the GLOBAL softmax statistics (docs/math.md section 3: p_ij =
exp(s_ij - lse_i), D_i = dout_i . out_i with the whole row's lse and out),
which relpos.attention_backward takes as out= / lse=. Its float32 fused
kernel, which runs every scheme's backward, uses them as given; its float64
reference path recomputes the pair's own softmax, so float64 pairs (and the
far pairs of any dtype) take the chunk-pair backward in torch below. Both
are tested against single-process relpos attention.

CUDA tensors (relpos._ops.on_cuda(q)): the near pairs run relpos.triton's
kernels (float16, bfloat16, float32, float64); the running output, lse and
gradient accumulators are float32 for 16-bit inputs, and everything stays
on the device (the far shortcut and the torch pair path included). The
Triton backward cannot take a partial key set's global statistics (its
rowsum correction assumes a whole row), so a pair's gradient is split into
the pair's own backward plus its lse's cotangent (section "one near chunk
pair on the CUDA path" below): one Triton forward and one backward per
near pair. Tested with two gloo processes under Triton's interpreter
(tests/test_distributed_triton.py, CPU tensors through
relpos._ops.triton_on_cpu()); not measured on a GPU, never run over NCCL
(whose collectives the argument checks' all_gathers use the current CUDA
device for).

Table gradients (ak, av, bias) are this rank's contribution (its queries'
rows); sum them over the group -- DistributedDataParallel over the same
ranks does (it averages, matching a loss that is the mean over ranks), or
call torch.distributed.all_reduce on them.
"""

import hashlib
import math
import operator
from types import SimpleNamespace

import numpy as np
import torch
import torch.distributed as dist
from torch.autograd.function import once_differentiable

import relpos as _relpos
from relpos import _ops
from relpos._checks import torch_tensor
from relpos._call import check_problem
from relpos._call import parse as parse_call
from relpos.position_schemes import encode_buckets

__all__ = ["context_parallel_attention"]

_FN = "context_parallel_attention"
# Query rows per block of the torch chunk-pair path: a block's score matrix
# is B * H * rows * n_k entries.
_BLOCK_ENTRIES = 1 << 22


class _Scheme:
    """The position terms of a call (already validated by relpos.attention,
    context_parallel_attention's first step): the tables, the bucket map
    and its reach, and ALiBi's slopes."""

    def __init__(self, heads, ak, av, bias, args):
        # args: the call's options as relpos/_call.py parsed them.
        self.ak, self.av, self.bias = ak, av, bias
        self.slopes = None
        use_alibi = args.alibi is not None
        if use_alibi:
            self.slopes = args.alibi or list(_relpos.alibi_slopes(heads))
        self.kwargs = dict(
            max_distance=None if args.buckets is not None
            else args.max_distance, buckets=args.buckets,
            alibi=None if self.slopes is None else list(self.slopes))
        # The map's own behaviour (relpos/position_schemes.py); the
        # symmetric clip by max_distance is ClipBuckets(k, k).
        bmap = args.bucket_map()
        left, right = bmap.reach()
        self._map = bmap.bucket
        # The bucket map is constant for r >= hi and for r <= lo; ALiBi's
        # -m |r| is not, so it has no far pairs.
        self.reach = None if use_alibi else (-left, right)

    def bucket(self, r, lo, hi):
        """Table rows (int64 tensor on r's device) of the distances r
        (int64 tensor), all in [lo, hi]: the map runs on the host over that
        range, the lookup on r's device."""
        rows = torch.from_numpy(self._map(np.arange(lo, hi + 1)))
        return rows.to(r.device)[r - lo]

    def far_bucket(self, r):
        return int(self._map(torch.tensor([r]).numpy())[0])

    @staticmethod
    def relpos_backward_ok(dtype):
        # The fused float32 kernel, which runs every scheme's backward
        # (Shaw's tables under any bucket map, T5's bias, ALiBi), reads out
        # and lse as given: the global statistics. The float64 reference
        # recomputes the pair's own softmax, so float64 pairs take the torch
        # path below.
        return dtype == torch.float32


# --- one chunk pair in torch (far shortcut and the float64 path) ------------


def _gather(x, bucket):
    """x [B, H, m, nb] -> [B, H, m, n] (x[..., bucket]) or [B, H, m, 1]."""
    if isinstance(bucket, int):
        return x[..., bucket:bucket + 1]
    return x.gather(-1, bucket.expand(x.shape[0], x.shape[1], -1, -1))


def _scatter(x, bucket, nb):
    """x [B, H, m, n] -> [B, H, m, nb], summed into each entry's bucket."""
    out = x.new_zeros(x.shape[:-1] + (nb,))
    if isinstance(bucket, int):
        out[..., bucket] = x.sum(-1)
        return out
    return out.scatter_add_(-1, bucket.expand(x.shape[0], x.shape[1], -1, -1),
                            x)


def _table_times(w, table):
    """w [B, H, m, nb] times a table [nb, d] or [H, nb, d] -> [B, H, m, d]."""
    if table.dim() == 2:
        return w @ table
    return torch.einsum("bhmn,hnd->bhmd", w, table)


def _table_grad(w, x, table):
    """d(table) of _table_times(w, table) with upstream x [B, H, m, d]."""
    if table.dim() == 2:
        return torch.einsum("bhmn,bhmd->nd", w, x)
    return torch.einsum("bhmn,bhmd->hnd", w, x)


def _pair_scores(s, q, k, qo, ko, bucket):
    """Scaled scores [B, H, m, n] of queries q at qo and keys k at ko, and
    the causal mask (or None). bucket: an int (far pair) or None (near:
    computed here)."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    scores = (q @ k.transpose(-1, -2)) * scale
    mask = None
    dev = q.device
    keys = torch.arange(k.shape[2], device=dev)
    if bucket is None:
        r = (ko - qo) + (keys[None, :] -
                         torch.arange(q.shape[2], device=dev)[:, None])
        if s.causal:
            mask = r > 0
        if s.scheme.slopes is not None:
            slopes = torch.tensor(s.scheme.slopes, dtype=q.dtype, device=dev)
            scores = scores - slopes.view(1, -1, 1, 1) * r.abs().to(q.dtype)
        bucket = s.scheme.bucket(r, ko - qo - (q.shape[2] - 1),
                                 ko - qo + k.shape[2] - 1)
    ak, bias = s.scheme.ak, s.scheme.bias
    lengths = s.local_lengths(ko, k.shape[2])
    if lengths is not None:
        pad = (keys[None, :] >= torch.tensor(lengths, device=dev)[:, None]
               ).view(len(lengths), 1, 1, -1)
        mask = pad if mask is None else mask | pad
    if ak is not None:
        g = _table_times(q, ak.transpose(-1, -2))  # [B, H, m, nb]
        scores = scores + _gather(g, bucket) * scale
    if bias is not None:
        b = bias[:, bucket]  # [H] (far) or [H, m, n]
        scores = scores + (b.view(1, -1, 1, 1) if isinstance(bucket, int)
                           else b.unsqueeze(0))
    if mask is not None:
        scores = scores.masked_fill(mask, -math.inf)
    return scores, bucket


def _finite(lse):
    return torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)


def _blocks(q, n):
    b, h, m, _ = q.shape
    rows = max(1, _BLOCK_ENTRIES // max(1, b * h * n))
    return [(i, min(m, i + rows)) for i in range(0, m, rows)]


def _torch_forward(s, q, k, v, qo, ko, far):
    """(out [B, H, m, dv], lse [B, H, m]) of one chunk pair."""
    outs, lses = [], []
    for i0, i1 in _blocks(q, k.shape[2]):
        scores, bucket = _pair_scores(s, q[:, :, i0:i1], k, qo + i0, ko, far)
        lse = torch.logsumexp(scores, -1)
        p = torch.exp(scores - _finite(lse).unsqueeze(-1))
        out = p @ v
        if s.scheme.av is not None:
            nb = s.scheme.av.shape[-2]
            out = out + _table_times(_scatter(p, bucket, nb), s.scheme.av)
        outs.append(out)
        lses.append(lse)
    return torch.cat(outs, 2), torch.cat(lses, 2)


def _torch_backward(s, q, k, v, qo, ko, far, out, lse, dout, acc):
    """Adds one chunk pair's gradients (global out / lse) into acc."""
    scale = 1.0 / math.sqrt(q.shape[-1])
    sch = s.scheme
    for i0, i1 in _blocks(q, k.shape[2]):
        qb, ob, gb = q[:, :, i0:i1], out[:, :, i0:i1], dout[:, :, i0:i1]
        scores, bucket = _pair_scores(s, qb, k, qo + i0, ko, far)
        p = torch.exp(scores - _finite(lse[:, :, i0:i1]).unsqueeze(-1))
        dp = gb @ v.transpose(-1, -2)
        if sch.av is not None:
            u = _table_times(gb, sch.av.transpose(-1, -2))  # [B, H, m, nb]
            dp = dp + _gather(u, bucket)
        delta = (gb * ob).sum(-1, keepdim=True)
        ds = p * (dp - delta)
        acc["dq"][:, :, i0:i1] += (ds @ k) * scale
        acc["dk"] += (ds.transpose(-1, -2) @ qb) * scale
        acc["dv"] += p.transpose(-1, -2) @ gb
        if sch.ak is not None:
            e = _scatter(ds, bucket, sch.ak.shape[-2])
            acc["dq"][:, :, i0:i1] += _table_times(e, sch.ak) * scale
            acc["dak"] += _table_grad(e, qb, sch.ak) * scale
        if sch.bias is not None:
            e = _scatter(ds, bucket, sch.bias.shape[-1])
            acc["dbias"] += e.sum((0, 2))
        if sch.av is not None:
            w = _scatter(p, bucket, sch.av.shape[-2])
            acc["dav"] += _table_grad(w, gb, sch.av)


# --- classification of a chunk pair ----------------------------------------


def _pair_kind(s, qo, nq, ko, nk):
    """("skip", None), ("near", None) or ("far", table row)."""
    if nq == 0 or nk == 0:
        return "skip", None
    lengths = s.local_lengths(ko, nk)
    if lengths is not None and max(lengths) == 0:
        return "skip", None  # every key of the chunk is padding
    r_min = ko - (qo + nq - 1)
    r_max = ko + nk - 1 - qo
    if s.causal and r_min > 0:
        return "skip", None  # every key after every query
    if s.causal and r_max > 0:
        return "near", None  # the diagonal: needs the mask
    if s.scheme.reach is not None:
        lo, hi = s.scheme.reach
        if r_min >= hi:
            return "far", s.scheme.far_bucket(hi)
        if r_max <= lo:
            return "far", s.scheme.far_bucket(lo)
    return "near", None


def _np(t):
    return None if t is None else t.detach().contiguous().numpy()


def _relpos_kwargs(s, qo, ko, nk):
    return dict(causal=s.causal, query_offset=qo - ko,
                key_lengths=s.local_lengths(ko, nk), **s.scheme.kwargs)


def _pair_forward(s, q, k, v, qo, ko):
    kind, row = _pair_kind(s, qo, q.shape[2], ko, k.shape[2])
    if kind == "skip":
        return None
    if kind == "far":
        return _torch_forward(s, *_wide(s, q, k, v), qo, ko, row)
    if s.triton:
        return _triton_forward(s, q, k, v, qo, ko)
    sch = s.scheme
    out, lse = _relpos.attention(
        _np(q), _np(k), _np(v), _np(sch.ak), _np(sch.av),
        bias=_np(sch.bias), return_lse=True,
        **_relpos_kwargs(s, qo, ko, k.shape[2]))
    return torch.from_numpy(out), torch.from_numpy(lse)


def _pair_backward(s, q, k, v, qo, ko, out, lse, dout, acc):
    kind, row = _pair_kind(s, qo, q.shape[2], ko, k.shape[2])
    if kind == "skip":
        return
    sch = s.scheme
    if kind == "near" and s.triton and _triton_width_ok(s, q, v):
        _triton_backward(s, q, k, v, qo, ko, out, lse, dout, acc)
        return
    if kind == "near" and not s.triton and sch.relpos_backward_ok(q.dtype):
        g = _relpos.attention_backward(
            _np(dout), _np(q), _np(k), _np(v), _np(sch.ak), _np(sch.av),
            out=_np(out), lse=_np(lse), bias=_np(sch.bias),
            **_relpos_kwargs(s, qo, ko, k.shape[2]))
        for name in ("dq", "dk", "dv", "dak", "dav", "dbias"):
            x = getattr(g, name)
            if x is not None:
                acc[name] += torch.from_numpy(x)
        return
    q, k, v, dout = _wide(s, q, k, v, dout)
    _torch_backward(s, q, k, v, qo, ko, row, out, lse, dout, acc)


def _wide(s, *xs):
    """The tensors in the accumulator dtype (float32 for 16-bit inputs),
    for the torch chunk-pair path."""
    return tuple(x.to(s.acc) for x in xs)


# --- one near chunk pair on the CUDA path (relpos.triton) -------------------
#
# The forward is relpos.triton's with query_offset = qo - ko. The backward
# cannot hand the kernels the GLOBAL out / lse of a partial key set: their
# dQ kernels correct D from the row's own sum of dS (the rowsum correction,
# triton/_kernels.py _rowsum_fix), which is zero only over a whole row, so
# with global statistics of one chunk pair D becomes the pair's own
# dO . o_pair and dK, the table gradients and Shaw's dQ end terms come out
# wrong. So the pair's gradient is split in two exact parts:
#
#   dS_ij = p_ij (dP_ij - D_i)           (global p, global D = dO_i . out_i)
#         = w_i p'_ij (dP_ij - D'_i)  +  g_i p'_ij
#
# with the pair's own softmax p'_ij = p_ij / w_i, w_i = exp(lse'_i - lse_i),
# D'_i = dO_i . o'_i (o', lse': the pair's own output and lse) and
# g_i = w_i (D'_i - D_i) (the cotangent of the pair's lse through the
# merge). The first part is the kernels' backward of the pair on its own,
# with dO scaled by w (a whole row for them: their correction holds). The
# second is a softmax-weighted sum: for dQ, scale g_i sum_j p'_ij (k_j +
# AK[b_ij]), a forward with values k and value table ak; for dK, AK and
# the bias, sums of p'_ij x_i with x_i = scale g_i q_i (and g_i), which the
# same backward returns as dV and dAV of extra value columns (zero in v,
# av and o', so they change nothing else). One forward (recomputing o',
# lse' and the dQ sums) and one backward per near pair, value width
# dv + dk (+ 1 with a bias).


def _triton_tables(s):
    """The tables as the Triton calls here take them: per head
    [H, nb, d], in the inputs' dtype (a shared table expanded; its gradient
    is summed over the heads)."""
    t = s.scheme.tri
    return t["ak"], t["av"], t["bias"]


def _triton_call(s, q, k, v, qo, ko, ak, av, bias):
    from relpos.triton import _problem
    return _problem.prepare(_FN, q, k, v, ak, av, bias, None,
                            **_relpos_kwargs(s, qo, ko, k.shape[2]))


def _triton_forward(s, q, k, v, qo, ko):
    from relpos.triton import _attention
    ak, av, bias = _triton_tables(s)
    c = _triton_call(s, q, k, v, qo, ko, ak, av, bias)
    return _attention.forward(c, q, k, v, ak, av, bias, None)


def _extra_width(s, q):
    """Value columns the backward adds: dk for x_i, 1 for g_i (bias)."""
    return q.shape[3] + (s.scheme.bias is not None)


def _triton_width_ok(s, q, v):
    """Whether the widened calls stay within the kernels' head dims (at
    most 256); wider pairs take the torch chunk-pair path."""
    from relpos.triton import _problem
    return v.shape[3] + _extra_width(s, q) <= _problem._MAX_DIM


def _cat_table(t, h, nb, widths, like):
    """[H, nb, sum(widths)]: the table t (or zeros) in the first columns,
    zeros after."""
    parts = [t if t is not None else like.new_zeros((h, nb, widths[0]))]
    parts += [like.new_zeros((h, nb, w)) for w in widths[1:] if w]
    return torch.cat(parts, -1)


def _triton_backward(s, q, k, v, qo, ko, out, lse, dout, acc):
    """Adds one near chunk pair's gradients (global out / lse) into acc,
    through relpos.triton (the split above)."""
    from relpos.triton import _attention
    ak, av, bias = _triton_tables(s)
    b, h, m, dk = q.shape
    dv = v.shape[3]
    tables = [t for t in (ak, av) if t is not None]
    nb = (tables[0].shape[1] if tables else
          bias.shape[1] if bias is not None else 0)
    # The pair's own o', lse' and the dQ sums sum_j p'_ij (k_j + AK[b_ij]).
    vk = torch.cat([v, k], -1)
    avk = None
    if tables:
        avk = torch.cat([_cat_table(av, h, nb, (dv,), q),
                         ak if ak is not None
                         else q.new_zeros((h, nb, dk))], -1)
    c = _triton_call(s, q, k, vk, qo, ko, ak, avk, bias)
    both, lse_p = _attention.forward(c, q, k, vk, ak, avk, bias, None)
    o_p, ksum = both[..., :dv], both[..., dv:]
    lse = lse.to(lse_p.dtype)
    w = torch.where(torch.isinf(lse_p), torch.zeros_like(lse_p),
                    torch.exp(lse_p - _finite(lse)))
    dout_w = dout.to(s.acc)
    g = w * ((dout_w * (o_p.to(s.acc) - out.to(s.acc))).sum(-1))
    scale = 1.0 / math.sqrt(dk)
    # The pair on its own (dO scaled by w), x_i and g_i in extra columns.
    extra = _extra_width(s, q)
    cols = [dout_w * w.unsqueeze(-1),
            (scale * g).unsqueeze(-1) * q.to(s.acc)]
    if bias is not None:
        cols.append(g.unsqueeze(-1))
    d2 = torch.cat(cols, -1).to(q.dtype)
    v2 = torch.cat([v, v.new_zeros((b, h, k.shape[2], extra))], -1)
    o2 = torch.cat([o_p, o_p.new_zeros((b, h, m, extra))], -1)
    av2 = None
    if tables or bias is not None:
        av2 = _cat_table(av, h, nb, (dv, extra), q)
    c = _triton_call(s, q, k, v2, qo, ko, ak, av2, bias)
    dq, dk_, dv2, dak, dav2, dbias, _ = _attention.backward(
        c, d2.contiguous(), q, k, v2, ak, av2, bias, None,
        out=o2.contiguous(), lse=lse_p,
        needs=_attention.Needs(dak=ak is not None, dav=True,
                               dbias=bias is not None, dpb=False))
    acc["dq"] += dq.to(s.acc) + (scale * g).unsqueeze(-1) * ksum.to(s.acc)
    acc["dk"] += dk_.to(s.acc) + dv2[..., dv:dv + dk].to(s.acc)
    acc["dv"] += dv2[..., :dv].to(s.acc)
    shared = s.scheme.ak is not None and s.scheme.ak.dim() == 2 or \
        s.scheme.av is not None and s.scheme.av.dim() == 2

    def table_grad(x):
        x = x.to(s.acc)
        return x.sum(0) if shared else x

    if ak is not None:
        acc["dak"] += table_grad(dak.to(s.acc) +
                                 dav2[..., dv:dv + dk].to(s.acc))
    if av is not None:
        acc["dav"] += table_grad(dav2[..., :dv])
    if bias is not None:
        acc["dbias"] += (dbias.to(s.acc) + dav2[..., dv + dk].to(s.acc))


# --- the ring ----------------------------------------------------------------


class _Ring:
    """Ranks, chunk lengths and offsets of the group, and the exchange."""

    def __init__(self, group, n_local, lengths=None):
        """lengths: every rank's n_local, when already exchanged (_agree);
        else gathered here."""
        self.group = group
        self.size = dist.get_world_size(group)
        self.rank = dist.get_rank(group)
        if lengths is None:
            lengths = [torch.tensor([n_local])]
            if self.size > 1:
                lengths = _all_gather(group, lengths[0])
        self.lengths = [int(x) for x in lengths]
        self.offsets = [sum(self.lengths[:i]) for i in range(self.size)]
        self.next = self._global((self.rank + 1) % self.size)
        self.prev = self._global((self.rank - 1) % self.size)

    def _global(self, r):
        if self.group is None or self.group is dist.group.WORLD:
            return r
        if hasattr(dist, "get_global_rank"):
            return dist.get_global_rank(self.group, r)
        return dist.distributed_c10d._get_global_rank(self.group, r)

    def source(self, step):
        """The group rank whose chunk this rank holds at ring step `step`."""
        return (self.rank - step) % self.size

    def exchange(self, send, recv):
        """Starts sending `send` to the next rank and receiving `recv` from
        the previous one; returns the requests to wait on."""
        return [dist.isend(send, self.next, group=self.group),
                dist.irecv(recv, self.prev, group=self.group)]


class _Settings:
    def __init__(self, scheme, causal, ring, key_lengths=None, triton=False,
                 acc=None):
        self.scheme, self.causal, self.ring = scheme, causal, ring
        # None, or B global valid-key counts (padding at the sequence end).
        self.key_lengths = key_lengths
        # The CUDA path (relpos.triton) for the near pairs, and the dtype of
        # the accumulators (out, the gradients, the torch pair path):
        # float32 for 16-bit inputs, else the inputs' own.
        self.triton, self.acc = triton, acc

    def local_lengths(self, ko, nk):
        """The valid keys of the chunk at ko (B counts in [0, nk]), or
        None when nothing is padded."""
        if self.key_lengths is None:
            return None
        return [min(max(n - ko, 0), nk) for n in self.key_lengths]


def _split(buf, b, h, n, dims):
    """A flat buffer -> tensors [B, H, n, d] for each d of dims."""
    parts, at = [], 0
    for d in dims:
        size = b * h * n * d
        parts.append(buf[at:at + size].view(b, h, n, d))
        at += size
    return parts


def _ring_forward(s, q, k, v):
    ring = s.ring
    b, h, n, dv = v.shape
    dk = k.shape[3]
    out = q.new_zeros((b, h, q.shape[2], dv), dtype=s.acc)
    lse = q.new_full((b, h, q.shape[2]), -math.inf, dtype=s.acc)
    qo = ring.offsets[ring.rank]
    held = torch.cat([k.reshape(-1), v.reshape(-1)])
    for step in range(ring.size):
        src = ring.source(step)
        reqs = []
        if step + 1 < ring.size:
            nxt = ring.lengths[ring.source(step + 1)]
            recv = q.new_empty(b * h * nxt * (dk + dv))
            reqs = ring.exchange(held, recv)
        kc, vc = _split(held, b, h, ring.lengths[src], (dk, dv))
        part = _pair_forward(s, q, kc, vc, qo, ring.offsets[src])
        if part is not None:
            out, lse = _merge(out, lse, *(x.to(s.acc) for x in part))
        for r in reqs:
            r.wait()
        if reqs:
            held = recv
    return out, lse


def _merge(out, lse, o, l):
    """Combines two partial softmax results by their log-sum-exps."""
    m = _finite(torch.maximum(lse, l))
    a, c = torch.exp(lse - m), torch.exp(l - m)  # 0 for a -inf part
    total = a + c
    safe = torch.where(total > 0, total, torch.ones_like(total))
    new_out = (out * a.unsqueeze(-1) + o * c.unsqueeze(-1)) / \
        safe.unsqueeze(-1)
    return new_out, m + torch.log(total)


def _ring_backward(s, q, k, v, out, lse, dout):
    ring, sch = s.ring, s.scheme
    b, h, n, dv = v.shape
    dk = k.shape[3]
    qo = ring.offsets[ring.rank]
    acc = {"dq": torch.zeros_like(q, dtype=s.acc)}
    for name, t in (("dak", sch.ak), ("dav", sch.av), ("dbias", sch.bias)):
        if t is not None:
            acc[name] = torch.zeros_like(t, dtype=s.acc)
    held = torch.cat([k.reshape(-1), v.reshape(-1)])
    # dK, dV of the held chunk
    grads = q.new_zeros(b * h * n * (dk + dv), dtype=s.acc)
    for step in range(ring.size):
        src = ring.source(step)
        nk = ring.lengths[src]
        kv_reqs = []
        if step + 1 < ring.size:
            nxt = ring.lengths[ring.source(step + 1)]
            kv_recv = q.new_empty(b * h * nxt * (dk + dv))
            kv_reqs = ring.exchange(held, kv_recv)
        kc, vc = _split(held, b, h, nk, (dk, dv))
        acc["dk"], acc["dv"] = _split(grads, b, h, nk, (dk, dv))
        _pair_backward(s, q, kc, vc, qo, ring.offsets[src], out, lse, dout,
                       acc)
        if ring.size > 1:
            # The accumulator follows its chunk one hop; after the last step
            # it arrives back at the chunk's owner.
            back = ring.lengths[ring.source(step + 1)]
            g_recv = q.new_empty(b * h * back * (dk + dv), dtype=s.acc)
            for r in ring.exchange(grads, g_recv):
                r.wait()
            grads = g_recv
        for r in kv_reqs:
            r.wait()
        if kv_reqs:
            held = kv_recv
    dk_, dv_ = _split(grads, b, h, n, (dk, dv))

    def cast(x, like):
        return None if x is None else x.to(like.dtype)

    return (cast(acc["dq"], q), dk_.to(k.dtype, copy=True),
            dv_.to(v.dtype, copy=True), cast(acc.get("dak"), sch.user["ak"]),
            cast(acc.get("dav"), sch.user["av"]),
            cast(acc.get("dbias"), sch.user["bias"]))


class _ContextParallelFunction(torch.autograd.Function):
    """The ring forward / backward as one autograd node. Saves this rank's
    q, k, v, tables, out and lse (global statistics); nothing of size
    n x n. Not twice differentiable."""

    @staticmethod
    def forward(ctx, q, k, v, ak, av, bias, settings):
        q, k, v = (x.detach().contiguous() for x in (q, k, v))
        out, lse = _ring_forward(settings, q, k, v)
        ctx.settings = settings
        # out in the accumulator dtype: the backward's D = dO . out.
        ctx.save_for_backward(q, k, v, out, lse)
        return out.to(q.dtype)

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv, dak, dav, dbias = _ring_backward(
            ctx.settings, q, k, v, out, lse, dout.contiguous())
        need = ctx.needs_input_grad
        grads = (dq, dk, dv, dak, dav, dbias)
        return tuple(g if need[i] else None
                     for i, g in enumerate(grads)) + (None,)


# --- the arguments, checked on every rank and agreed across the ring ---------


def _check_local(q, k, v, ak, av, bias, max_distance, causal, buckets,
                 alibi):
    """This rank's own argument checks; returns the call's _Scheme."""
    check = torch_tensor
    if _ops.on_cuda(q):  # relpos.triton's: 16-bit dtypes too
        from relpos.triton._problem import check_tensor as check
    for name, t in (("q", q), ("k", k), ("v", v)):
        check("torch." + _FN, name, t)
        if t.dim() != 4:
            raise ValueError(f"relpos.{_FN}: {name} must be [B, H, n, d] "
                             f"(got shape {tuple(t.shape)})")
    for name, t in (("ak", ak), ("av", av), ("bias", bias)):
        if t is not None:
            check("torch." + _FN, name, t)
            if t.dtype != q.dtype:
                raise TypeError(f"relpos.{_FN}: {name} has dtype {t.dtype} "
                                f"but q has {q.dtype}")
    if k.shape[:3] != q.shape[:3] or v.shape[:3] != q.shape[:3] or \
            k.shape[3] != q.shape[3]:
        raise ValueError(
            f"relpos.{_FN}: q, k, v must be this rank's chunk of one "
            f"sequence, [B, H, n, dk], [B, H, n, dk], [B, H, n, dv] (got "
            f"{tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)})")
    if not isinstance(causal, bool):
        raise TypeError(f"relpos.{_FN}: causal must be a bool (got "
                        f"{type(causal).__name__})")
    args = parse_call(_FN, ak=ak, bias=bias, max_distance=max_distance,
                      buckets=buckets, alibi=alibi, causal=causal)
    # The C++ core's checks of the options against the shapes (table rows,
    # buckets, ALiBi slopes per head, ...; relpos._call.check_problem, on
    # shapes alone) for a one-row problem of this rank's heads and widths (an
    # empty chunk included), before the ring starts; _Scheme takes them as
    # checked.
    b, h, _, d = q.shape
    check_problem(_FN, args, SimpleNamespace(shape=(b, h, 1, d)),
                  SimpleNamespace(shape=(b, h, 1, d)),
                  SimpleNamespace(shape=(b, h, 1, v.shape[3])), ak, av, bias)
    return _Scheme(h, ak, av, bias, args)


def _digest(value):
    """A stable 63-bit digest of repr(value) (Python's hash() is salted per
    process, so ranks would disagree on it)."""
    h = hashlib.blake2b(repr(value).encode(), digest_size=8).digest()
    return int.from_bytes(h, "little") & ((1 << 63) - 1)


def _field(get):
    """get(), or -2 when the argument cannot even be read (the rank's own
    check then reports it)."""
    try:
        return get()
    except Exception:  # noqa: BLE001
        return -2


def _buckets_key(b):
    try:
        kind, args = encode_buckets(_FN, b)
    except (TypeError, ValueError):  # the rank's own check reports it
        return ("?", type(b).__name__)
    return None if b is None else (kind, *args)


def _table_key(t):
    return None if t is None else (tuple(t.shape), str(t.dtype))


def _lengths_key(x):
    if x is None:
        return None
    return tuple(x.tolist()) if isinstance(x, torch.Tensor) else tuple(x)


# The fingerprint: (name shown in the error, whether the value is a digest).
_FIELDS = (("status", False), ("dtype", True), ("batch B", False),
           ("heads H", False), ("head size dk", False),
           ("value size dv", False), ("causal", False),
           ("max_distance", True), ("buckets", True), ("alibi", True),
           ("ak (shape, dtype)", True), ("av (shape, dtype)", True),
           ("bias (shape, dtype)", True), ("key_lengths", True),
           ("n_local", False))


def _fingerprint(q, k, v, ak, av, bias, max_distance, causal, buckets, alibi,
                 key_lengths, ok):
    """A few int64s that equal ranks must share (n_local, last, may
    differ): the arguments' shapes, dtype, scheme and key lengths."""
    alibi_key = _field(lambda: alibi if alibi in (None, False, True)
                       else [float(m) for m in alibi])
    return [0 if ok else 1,
            _field(lambda: _digest(str(q.dtype))),
            _field(lambda: int(q.shape[0])),
            _field(lambda: int(q.shape[1])),
            _field(lambda: int(q.shape[3])),
            _field(lambda: int(v.shape[3])),
            _field(lambda: int(causal) if isinstance(causal, bool) else -3),
            _digest(_field(lambda: None if max_distance is None
                           else int(max_distance))),
            _digest(_field(lambda: _buckets_key(buckets))),
            _digest(alibi_key),
            _digest(_field(lambda: _table_key(ak))),
            _digest(_field(lambda: _table_key(av))),
            _digest(_field(lambda: _table_key(bias))),
            _digest(_field(lambda: _lengths_key(key_lengths))),
            _field(lambda: int(q.shape[2]))]


_ERROR_BYTES = 1024
_ERROR_TYPES = (TypeError, ValueError, RuntimeError, MemoryError)


def _all_gather(group, tensor):
    """all_gather of a small CPU tensor (the argument checks' messages),
    through this process's current CUDA device under NCCL (which sends CUDA
    tensors only); the results on the CPU."""
    if dist.get_backend(group) == "nccl":
        tensor = tensor.to(torch.device("cuda", torch.cuda.current_device()))
    out = [torch.zeros_like(tensor)
           for _ in range(dist.get_world_size(group))]
    dist.all_gather(out, tensor, group=group)
    return [x.cpu() for x in out]


def _agree(group, fingerprint, error):
    """Exchanges the ranks' fingerprints (one all_gather of a few int64s);
    returns every rank's n_local. Raises the same exception on every rank if
    any rank refused its arguments (the lowest such rank's, sent in a second
    all_gather) or if the ranks' arguments differ."""
    size = dist.get_world_size(group)
    if size == 1:
        if error is not None:
            raise error
        return [fingerprint[-1]]
    prints = [[int(x) for x in t] for t in
              _all_gather(group, torch.tensor(fingerprint, dtype=torch.int64))]
    refused = [r for r, fp in enumerate(prints) if fp[0] != 0]
    if refused:
        text = b""
        if error is not None:
            kind = next((i for i, t in enumerate(_ERROR_TYPES)
                         if isinstance(error, t)), 2)
            text = (bytes([kind]) + str(error).encode()[:_ERROR_BYTES - 1])
        buf = torch.zeros(_ERROR_BYTES, dtype=torch.uint8)
        buf[:len(text)] = torch.tensor(list(text), dtype=torch.uint8)
        first = bytes(_all_gather(group, buf)[refused[0]].tolist()).rstrip(b"\0")
        message = first[1:].decode(errors="replace")
        if len(refused) < size:
            message += (f" (on rank {refused[0]}; the arguments of ranks "
                        f"{[r for r in range(size) if r not in refused]} "
                        f"were accepted)")
        raise _ERROR_TYPES[first[0]](message)
    for i, (name, digest) in enumerate(_FIELDS[:-1]):
        values = [fp[i] for fp in prints]
        if len(set(values)) > 1:
            shown = ("differ between ranks" if digest else
                     "are " + ", ".join(f"{v} on rank {r}"
                                        for r, v in enumerate(values)))
            raise ValueError(
                f"relpos.{_FN}: every rank must pass the same arguments "
                f"(but its own chunk), and the ranks' {name} {shown}")
    return [fp[-1] for fp in prints]


def _global_lengths(key_lengths, batch, n):
    if key_lengths is None:
        return None
    if isinstance(key_lengths, torch.Tensor):
        if key_lengths.dtype.is_floating_point or key_lengths.dim() != 1:
            raise TypeError(f"relpos.{_FN}: key_lengths must be a 1-D "
                            f"integer tensor (got dtype {key_lengths.dtype}, "
                            f"shape {tuple(key_lengths.shape)})")
        key_lengths = key_lengths.tolist()
    values = list(key_lengths)
    if len(values) != batch:
        raise ValueError(f"relpos.{_FN}: key_lengths must have one entry per "
                         f"batch item ({batch}), got {len(values)}")
    for i, x in enumerate(values):
        try:
            values[i] = None if isinstance(x, bool) else operator.index(x)
        except TypeError:
            values[i] = None
        if values[i] is None or not 0 <= values[i] <= n:
            raise ValueError(f"relpos.{_FN}: key_lengths[{i}] must be an "
                             f"integer in [0, {n}] (the whole sequence; got "
                             f"{x!r})")
    return values


def context_parallel_attention(q, k, v, ak=None, av=None, *,
                               max_distance=None, causal=False, buckets=None,
                               bias=None, alibi=None, key_lengths=None,
                               group=None):
    """Exact relative self-attention over a sequence split across ranks.

    Call it on every rank of ``group`` (default: the whole world) with that
    rank's chunk; rank r of the group holds the r-th contiguous chunk
    (positions o_r .. o_r + n_r - 1, o_r = n_0 + ... + n_{r-1}).

    Args:
        q, k, v: [B, H, n_r, dk], [B, H, n_r, dk], [B, H, n_r, dv]: this
            rank's queries, keys and values (self-attention: the same
            positions), CPU float32 (relpos's fused kernel for the near
            chunk pairs) or float64, or CUDA float16, bfloat16, float32 or
            float64 (relpos.triton's kernels). B, H, dk, dv are equal on
            every rank.
        ak, av, max_distance, buckets, bias, alibi, causal: as in
            relpos.torch.attention (Shaw tables, ClipBuckets / T5Buckets,
            T5's scalar bias, ALiBi), the same on every rank. The tables are
            replicated (every rank holds all of them).
        key_lengths: None, or B integers (a sequence or an integer tensor,
            the same on every rank) in [0, n]: global keys at positions >=
            key_lengths[b] are padding, invisible to every query (padding
            at the end of the whole sequence); a row that sees no key is
            zero.
        group: a torch.distributed process group (gloo on CPUs, NCCL
            for CUDA tensors: untested, see the module docstring).

    Returns:
        out [B, H, n_r, dv]: rows o_r .. of single-process attention over
        the joined sequence. Gradients flow to q, k, v (this rank's chunk)
        and to the tables (this rank's contribution: sum them over the
        group, as DistributedDataParallel does).

    Communication per call: forward P - 1 ring steps, each sending one K/V
    chunk (B * H * n_r * (dk + dv) elements); backward P - 1 such steps plus
    P steps sending a dK/dV chunk of the same size.
    """
    if not dist.is_available() or not dist.is_initialized():
        raise RuntimeError(f"relpos.{_FN}: torch.distributed is not "
                           f"initialised (call init_process_group first)")
    # Every rank checks its own arguments, then the ranks compare the
    # arguments' fingerprints in one collective before the ring starts: a
    # rank whose arguments were refused, or ranks that disagree, raise the
    # same exception on every rank instead of leaving a peer blocked in the
    # ring or computing a wrong result.
    error = None
    scheme = None
    try:
        scheme = _check_local(q, k, v, ak, av, bias, max_distance, causal,
                              buckets, alibi)
    except Exception as e:  # noqa: BLE001 - sent to every rank, re-raised
        error = e
    fingerprint = _fingerprint(q, k, v, ak, av, bias, max_distance, causal,
                               buckets, alibi, key_lengths, error is None)
    n_locals = _agree(group, fingerprint, error)
    ring = _Ring(group, q.shape[2], n_locals)
    lengths = _global_lengths(key_lengths, q.shape[0], sum(ring.lengths))
    triton = _ops.on_cuda(q)
    acc = _ops.lse_dtype(q.dtype)  # float32 for 16-bit inputs
    settings = _Settings(scheme, causal, ring, lengths, triton, acc)
    # The tables enter through `settings` for the computation and as inputs
    # for autograd (so their gradients are returned): as given (user, for
    # the gradients' dtype), in the accumulator dtype for the torch pair
    # path, per head in the inputs' dtype for relpos.triton.
    scheme.user = dict(ak=ak, av=av, bias=bias)
    h = q.shape[1]
    scheme.tri = {}
    for name, t in (("ak", ak), ("av", av), ("bias", bias)):
        t = None if t is None else t.detach()
        setattr(scheme, name, None if t is None else t.to(acc).contiguous())
        if triton and t is not None and name != "bias" and t.dim() == 2:
            t = t.expand(h, -1, -1)
        scheme.tri[name] = None if t is None else t.contiguous()
    return _ContextParallelFunction.apply(q, k, v, ak, av, bias, settings)

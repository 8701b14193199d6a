"""PyTorch interface to relpos (CPU tensors).

    attention                   differentiable relative attention on
                                [B, H, N, d] tensors (a torch.autograd.Function;
                                on PyTorch >= 2.4 the torch.library custom op
                                relpos::attention_forward, relpos/_ops.py, so
                                torch.compile and torch.export go through it)
    RelativeMultiheadAttention  an nn.Module: Q, K, V and output projections
                                plus the relative position tables
    rope                        differentiable RoPE (relpos::rope likewise)
    context_parallel_attention  attention over a sequence split across the
                                ranks of a torch.distributed group
                                (relpos/distributed.py)

Tensors may be non-contiguous (they are copied to contiguous memory first)
but must live on the CPU; float32 runs on relpos's fast path, float64 on the
reference path (what torch.autograd.gradcheck should use). Data moves between
torch and relpos through numpy without copies (torch.from_numpy /
Tensor.numpy share memory).
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable

import relpos as _relpos
from relpos import _ops

__all__ = ["attention", "RelativeMultiheadAttention"]

_DTYPES = (torch.float32, torch.float64)


def _numpy(name, t):
    """A contiguous numpy view (or copy) of a CPU float tensor."""
    _ops.check_tensor("attention", name, t)
    return t.detach().contiguous().numpy()


def _optional_numpy(name, t):
    return None if t is None else _numpy(name, t)


def _key_lengths(x):
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy()
    return x


class _AttentionFunction(torch.autograd.Function):
    """relpos forward / backward as one autograd node.

    Saves the inputs, the output and the log-sum-exp; the backward pass
    recomputes the probabilities from them (docs/math.md section 4) instead of
    keeping anything of size Nq x Nk. Not twice differentiable.
    """

    @staticmethod
    def forward(ctx, q, k, v, ak, av, bias, pb, options):
        out, lse = _relpos.attention(
            _numpy("q", q), _numpy("k", k), _numpy("v", v),
            _optional_numpy("ak", ak), _optional_numpy("av", av),
            bias=_optional_numpy("bias", bias), pb=_optional_numpy("pb", pb),
            return_lse=True, **options)
        out_t = torch.from_numpy(out)
        ctx.options = options
        ctx.lse = lse  # not an output: plain state, never differentiated
        ctx.save_for_backward(q, k, v, ak, av, bias, pb, out_t)
        return out_t

    @staticmethod
    @once_differentiable
    def backward(ctx, dout):
        q, k, v, ak, av, bias, pb, out = ctx.saved_tensors
        grads = _relpos.attention_backward(
            _numpy("dout", dout), _numpy("q", q), _numpy("k", k),
            _numpy("v", v), _optional_numpy("ak", ak),
            _optional_numpy("av", av), out=out.numpy(), lse=ctx.lse,
            bias=_optional_numpy("bias", bias), pb=_optional_numpy("pb", pb),
            **ctx.options)

        def wrap(g, needed):
            return torch.from_numpy(g) if g is not None and needed else None

        need = ctx.needs_input_grad
        return (wrap(grads.dq, need[0]), wrap(grads.dk, need[1]),
                wrap(grads.dv, need[2]), wrap(grads.dak, need[3]),
                wrap(grads.dav, need[4]), wrap(grads.dbias, need[5]),
                wrap(grads.dpb, need[6]), None)


def attention(q, k, v, ak=None, av=None, *, max_distance=None, causal=False,
              key_lengths=None, query_offset=None, buckets=None, bias=None,
              alibi=None, pb=None):
    """Differentiable relative attention (see relpos.attention for the math).

    Args:
        q: [B, H, Nq, dk], k: [B, H, Nk, dk], v: [B, H, Nk, dv]; CPU tensors
            of one dtype, float32 or float64, contiguous or not.
        ak: None (key term off), [2k+1, dk] shared or [H, 2k+1, dk] per head.
        av: None (value term off), [2k+1, dv] or [H, 2k+1, dv].
        max_distance: k >= 0. causal, key_lengths (a sequence or an integer
            tensor of B lengths), query_offset: as in relpos.attention.
        buckets (relpos.ClipBuckets / relpos.T5Buckets), bias (T5 scalar
            table [H, nb], a tensor), alibi (True or H slopes; fixed),
            pb (position query bias [H, dk], a tensor): the schemes of
            relpos.attention.

    Returns:
        out [B, H, Nq, dv], with gradients for q, k, v, ak, av, bias and pb.
    """
    if _ops.ENABLED:  # PyTorch >= 2.4: the relpos::attention custom op
        return _ops.attention(q, k, v, ak, av, bias, pb,
                              max_distance=max_distance, causal=causal,
                              key_lengths=key_lengths,
                              query_offset=query_offset, buckets=buckets,
                              alibi=alibi)
    if isinstance(alibi, torch.Tensor):
        alibi = alibi.detach().cpu().numpy()
    options = dict(max_distance=max_distance, causal=causal,
                   key_lengths=_key_lengths(key_lengths),
                   query_offset=query_offset, buckets=buckets, alibi=alibi)
    return _AttentionFunction.apply(q, k, v, ak, av, bias, pb, options)


class RelativeMultiheadAttention(nn.Module):
    """Multi-head attention with relative position representations.

    Batch-first: forward(query [B, Nq, E], key [B, Nk, E] = query,
    value [B, Nk, E] = key) -> [B, Nq, E]. Each of the H heads has
    dk = dv = E / H; the scores are scaled by 1 / sqrt(dk) inside relpos.

    Args:
        embed_dim: E, divisible by num_heads.
        num_heads: H.
        max_distance: the clipping distance k >= 0.
        per_head_tables: False (Shaw et al.): one table pair [2k+1, E/H]
            shared by all heads; True: [H, 2k+1, E/H].
        key_term, value_term: Shaw's ablation switches; a switched-off term
            has no table (its parameter is None).
        causal: each query sees only keys at or before its position.
        bias: biases in the four projections.
        table_init: "xavier_normal" (std = table_init_scale *
            sqrt(2 / ((2k+1) + E/H)), docs/math.md section 5), "xavier_uniform"
            (bound = table_init_scale * sqrt(6 / ((2k+1) + E/H))) or "zeros".
        table_init_scale: the multiplier on the Xavier std / bound (too
            large and position dominates content early; too small and
            position takes many epochs to emerge).
        device, dtype: for the parameters; relpos runs on the CPU only.

    Parameters: q_proj, k_proj, v_proj, out_proj (nn.Linear E -> E,
    Xavier-uniform weights and zero biases, as torch.nn.MultiheadAttention),
    rel_k and rel_v (the tables, or None). Initialisation draws from torch's
    generator, so torch.manual_seed makes it reproducible.
    """

    def __init__(self, embed_dim, num_heads, max_distance, *,
                 per_head_tables=False, key_term=True, value_term=True,
                 causal=False, bias=True, table_init="xavier_normal",
                 table_init_scale=1.0, device=None, dtype=None):
        super().__init__()
        for name, value in (("embed_dim", embed_dim),
                            ("num_heads", num_heads),
                            ("max_distance", max_distance)):
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"RelativeMultiheadAttention: {name} must be "
                                f"an int (got {type(value).__name__})")
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"RelativeMultiheadAttention: embed_dim and num_heads must "
                f"be > 0 (got {embed_dim}, {num_heads})")
        if embed_dim % num_heads:
            raise ValueError(
                f"RelativeMultiheadAttention: embed_dim ({embed_dim}) must be "
                f"divisible by num_heads ({num_heads})")
        if max_distance < 0:
            raise ValueError(f"RelativeMultiheadAttention: max_distance must "
                             f"be >= 0 (got {max_distance})")
        if table_init not in ("xavier_normal", "xavier_uniform", "zeros"):
            raise ValueError(
                f"RelativeMultiheadAttention: table_init must be "
                f"'xavier_normal', 'xavier_uniform' or 'zeros' (got "
                f"{table_init!r})")
        scale = float(table_init_scale)
        if not math.isfinite(scale) or scale < 0:
            raise ValueError(f"RelativeMultiheadAttention: table_init_scale "
                             f"must be finite and >= 0 (got {scale})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = embed_dim // num_heads
        self.max_distance = max_distance
        self.per_head_tables = bool(per_head_tables)
        self.causal = bool(causal)
        self.table_init = table_init
        self.table_init_scale = scale

        factory = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        rows = 2 * max_distance + 1
        shape = ((num_heads, rows, self.head_dim) if self.per_head_tables
                 else (rows, self.head_dim))
        for name, on in (("rel_k", key_term), ("rel_v", value_term)):
            self.register_parameter(
                name, nn.Parameter(torch.empty(shape, **factory))
                if on else None)
        self.reset_parameters()

    def table_std(self):
        """Xavier normal std of a [2k+1, E/H] table (docs/math.md section 5)."""
        rows = 2 * self.max_distance + 1
        return self.table_init_scale * math.sqrt(2.0 / (rows + self.head_dim))

    def reset_parameters(self):
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        for table in (self.rel_k, self.rel_v):
            if table is None:
                continue
            with torch.no_grad():
                if self.table_init == "xavier_normal":
                    table.normal_(0.0, self.table_std())
                elif self.table_init == "xavier_uniform":
                    # U(-a, a) has std a / sqrt(3): a = sqrt(3) * std.
                    bound = math.sqrt(3.0) * self.table_std()
                    table.uniform_(-bound, bound)
                else:
                    table.zero_()

    def forward(self, query, key=None, value=None, *, key_lengths=None,
                query_offset=None):
        """query [B, Nq, E], key/value [B, Nk, E] -> [B, Nq, E].

        key defaults to query and value to key (self-attention).
        key_lengths: B valid key counts (padding at the end);
        query_offset: position of query 0 (default Nk - Nq).
        """
        if key is None:
            key = query
        if value is None:
            value = key
        for name, x in (("query", query), ("key", key), ("value", value)):
            if not isinstance(x, torch.Tensor) or x.dim() != 3 or \
                    x.shape[-1] != self.embed_dim:
                shape = tuple(x.shape) if isinstance(x, torch.Tensor) else \
                    type(x).__name__
                raise ValueError(
                    f"RelativeMultiheadAttention: {name} must be a tensor "
                    f"[B, N, {self.embed_dim}] (got {shape})")
        b, nq, _ = query.shape
        h, d = self.num_heads, self.head_dim

        def heads(x):  # [B, N, E] -> [B, H, N, d], a non-contiguous view
            return x.view(x.shape[0], x.shape[1], h, d).transpose(1, 2)

        o = attention(heads(self.q_proj(query)), heads(self.k_proj(key)),
                      heads(self.v_proj(value)), self.rel_k, self.rel_v,
                      max_distance=self.max_distance, causal=self.causal,
                      key_lengths=key_lengths, query_offset=query_offset)
        return self.out_proj(o.transpose(1, 2).reshape(b, nq, h * d))

    def extra_repr(self):
        return (f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
                f"max_distance={self.max_distance}, "
                f"per_head_tables={self.per_head_tables}, "
                f"key_term={self.rel_k is not None}, "
                f"value_term={self.rel_v is not None}, "
                f"causal={self.causal}")


class _RopeFunction(torch.autograd.Function):
    """relpos RoPE as one autograd node: the backward rotates the incoming
    gradient by the opposite angles (the rotation is orthogonal), so nothing
    is saved but the options. Twice differentiable in principle (the
    backward is again a rotation), but marked once_differentiable for
    simplicity."""

    @staticmethod
    def forward(ctx, x, options):
        ctx.options = options
        return torch.from_numpy(_relpos.rope(_rope_numpy("x", x), **options))

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        dx = _relpos.rope_backward(_rope_numpy("dy", dy), **ctx.options)
        return torch.from_numpy(dx), None


def _rope_numpy(name, t):
    _ops.check_tensor("rope", name, t)
    return t.detach().contiguous().numpy()


def rope(x, *, position_offset=0, base=10000.0, layout="split_halves"):
    """Differentiable rotary position embedding (see relpos.rope).

    x: [d], [N, d], [H, N, d] or [B, H, N, d] CPU tensor, float32 or
    float64; row n is at position position_offset + n. layout
    "split_halves" is Hugging Face Llama's rotate_half convention, so
    ``rope(q, base=config.rope_theta)`` equals ``apply_rotary_pos_emb``'s
    rotated q for position_ids 0..N-1 (up to Hugging Face's float32 angles).
    """
    if _ops.ENABLED:  # PyTorch >= 2.4: the relpos::rope custom op
        return _ops.rope(x, position_offset=position_offset, base=base,
                         layout=layout)
    options = dict(position_offset=position_offset, base=base, layout=layout)
    return _RopeFunction.apply(x, options)


__all__ += ["rope"]

# Context parallelism over torch.distributed (relpos/distributed.py).
from relpos.distributed import context_parallel_attention  # noqa: E402

__all__ += ["context_parallel_attention"]

"""PyTorch interface to relpos (CPU and CUDA tensors).

    attention                   differentiable relative attention on
                                [B, H, N, d] tensors (a torch.autograd.Function;
                                on PyTorch >= 2.4 the torch.library custom op
                                relpos::attention_forward, relpos/_ops.py, so
                                torch.compile and torch.export go through it)
    RelativeMultiheadAttention  an nn.Module: Q, K, V and output projections
                                plus the position scheme's parameters
                                (scheme= shaw, shaw-asym, shaw-log, t5,
                                alibi, rope, xl)
    rope                        differentiable RoPE (relpos::rope likewise)
    context_parallel_attention  attention over a sequence split across the
                                ranks of a torch.distributed group
                                (relpos/distributed.py)

CPU tensors run relpos's C++ kernel: they may be non-contiguous (they are
copied to contiguous memory first); float32 runs on relpos's fast path,
float64 on the reference path (what torch.autograd.gradcheck should use).
Data moves between torch and relpos through numpy without copies
(torch.from_numpy / Tensor.numpy share memory).

CUDA tensors (float16, bfloat16, float32, float64; any strides) run the
Triton kernels of relpos.triton, on their device, with the same arguments
and results (docs/python.md, "GPU"). Every tensor of one call must be on
one device.
"""

from __future__ import annotations

import math

import torch
from torch import nn
from torch.autograd.function import once_differentiable

import relpos as _relpos
from relpos import _ops

__all__ = ["attention", "RelativeMultiheadAttention", "SCHEMES"]

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
        q: [B, H, Nq, dk], k: [B, H, Nk, dk], v: [B, H, Nk, dv]; tensors
            of one dtype on one device, contiguous or not: CPU float32 or
            float64 (relpos's C++ kernel), or CUDA float16, bfloat16,
            float32 or float64 (the Triton kernels of relpos.triton).
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
        # (its CUDA kernel is relpos.triton's)
        return _ops.attention(q, k, v, ak, av, bias, pb,
                              max_distance=max_distance, causal=causal,
                              key_lengths=key_lengths,
                              query_offset=query_offset, buckets=buckets,
                              alibi=alibi)
    _ops.check_tensor("attention", "q", q)
    for name, t in (("k", k), ("v", v), ("ak", ak), ("av", av),
                    ("bias", bias), ("pb", pb)):
        if t is not None or name in ("k", "v"):
            _ops.check_tensor("attention", name, t, like=q)
    if _ops.on_cuda(q):  # the Triton kernels' own autograd Function
        from relpos.triton import _attention as gpu
        return gpu.attention(q, k, v, ak, av, max_distance=max_distance,
                             causal=causal, key_lengths=key_lengths,
                             query_offset=query_offset, buckets=buckets,
                             bias=bias, alibi=alibi, pb=pb,
                             fn="torch.attention")
    if isinstance(alibi, torch.Tensor):
        alibi = alibi.detach().cpu().numpy()
    options = dict(max_distance=max_distance, causal=causal,
                   key_lengths=_key_lengths(key_lengths),
                   query_offset=query_offset, buckets=buckets, alibi=alibi)
    return _AttentionFunction.apply(q, k, v, ak, av, bias, pb, options)


SCHEMES = ("shaw", "shaw-asym", "shaw-log", "t5", "alibi", "rope", "xl")
_SHAW_SCHEMES = ("shaw", "shaw-asym", "shaw-log")


def _xl_sinusoids(k, dim, dtype, device):
    """Transformer-XL's fixed encodings R_{-r} for r = -k .. k (row r + k),
    width dim: sin(x f_t) for t < dim/2, then cos(x f_t), x = -r (XL's
    distance i - j), f_t = 10000^(-2t/dim); computed in float64."""
    x = torch.arange(k, -k - 1, -1, dtype=torch.float64)
    t = torch.arange(dim // 2, dtype=torch.float64)
    freq = torch.exp(-math.log(10000.0) * 2.0 * t / dim)
    angles = x[:, None] * freq[None, :]
    r = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    return r.to(dtype=dtype, device=device)


class RelativeMultiheadAttention(nn.Module):
    """Multi-head attention with relative position representations, or any
    other scheme of the family (docs/math.md section 8).

    Batch-first: forward(query [B, Nq, E], key [B, Nk, E] = query,
    value [B, Nk, E] = key) -> [B, Nq, E]. Each of the H heads has
    dk = dv = E / H; the scores are scaled by 1 / sqrt(dk) inside relpos.

    Args:
        embed_dim: E, divisible by num_heads.
        num_heads: H.
        max_distance: the clipping distance k >= 0 of scheme "shaw"
            (default 16); the other schemes take none.
        scheme: how positions enter (docs/model.md lists the defaults and
            their sources):
            "shaw" (Shaw et al.): vector tables rel_k, rel_v under
                clip(r, -k, k);
            "shaw-asym": the same tables under clip(r, -k_left, k_right)
                (defaults 64 / 8, w2v-BERT 2.0);
            "shaw-log": the same tables under T5's logarithmic buckets
                (num_buckets 32, bucket_max_distance 128);
            "t5": one learned scalar per head and bucket, t5_bias [H, nb]
                (Raffel et al.; N(0, E^-1/2) as Hugging Face T5);
            "alibi": fixed -m_h |r| (Press et al.), nothing learned;
            "rope": queries and keys rotated by their positions (Su et
                al.; rope_base 10000, rope_layout "split_halves"), nothing
                learned;
            "xl": Transformer-XL, (q + u) . k + (q + v) . W R_{i-j} with XL's
                fixed sinusoids R, learned xl_w [E, E], xl_u and xl_v
                [H, E/H], unclipped.
            T5 buckets are bidirectional unless causal, as in Hugging Face
            T5's encoder and decoder.
        per_head_tables: Shaw's schemes. False (Shaw et al.): one table pair
            [nb, E/H] shared by all heads; True: [H, nb, E/H].
        key_term, value_term: Shaw's ablation switches (Shaw's schemes); a
            switched-off term has no table (its parameter is None).
        causal: each query sees only keys at or before its position.
        bias: biases in the four projections.
        table_init: Shaw's tables: "xavier_normal" (std = table_init_scale *
            sqrt(2 / (nb + E/H)), docs/math.md section 5), "xavier_uniform"
            (bound = table_init_scale * sqrt(6 / (nb + E/H))) or "zeros".
        table_init_scale: the multiplier on the Xavier std / bound (too
            large and position dominates content early; too small and
            position takes many epochs to emerge).
        k_left, k_right: "shaw-asym"'s reaches (>= 0).
        num_buckets, bucket_max_distance: "shaw-log" and "t5"'s buckets.
        rope_base, rope_layout: "rope" (layout "split_halves" or
            "interleaved"; needs an even E/H).
        device, dtype: for the parameters; CPU modules run relpos's C++
            kernel (float32 / float64), CUDA ones its Triton kernels
            (float16, bfloat16, float32, float64).

    Parameters: q_proj, k_proj, v_proj, out_proj (nn.Linear E -> E,
    Xavier-uniform weights and zero biases, as torch.nn.MultiheadAttention);
    rel_k and rel_v (Shaw's tables, or None); t5_bias ("t5"); xl_w, xl_u,
    xl_v ("xl"; xl_w N(0, 1/E), xl_u and xl_v N(0, 0.02^2) as Hugging Face
    Transformer-XL). The names are those of relpos's model checkpoints
    (blocks.L.attn.<name>). Initialisation draws from torch's generator, so
    torch.manual_seed makes it reproducible.
    """

    def __init__(self, embed_dim, num_heads, max_distance=None, *,
                 scheme="shaw", per_head_tables=False, key_term=True,
                 value_term=True, causal=False, bias=True,
                 table_init="xavier_normal", table_init_scale=1.0, k_left=64,
                 k_right=8, num_buckets=32, bucket_max_distance=128,
                 rope_base=10000.0, rope_layout="split_halves", device=None,
                 dtype=None):
        super().__init__()
        where = "RelativeMultiheadAttention"
        if scheme not in SCHEMES:
            raise ValueError(f"{where}: scheme must be one of "
                             f"{', '.join(SCHEMES)} (got {scheme!r})")
        if max_distance is None and scheme == "shaw":
            max_distance = 16
        if max_distance is not None and scheme != "shaw":
            raise ValueError(f"{where}: max_distance applies to scheme "
                             f"'shaw' only (got max_distance={max_distance!r} "
                             f"with scheme={scheme!r})")
        ints = [("embed_dim", embed_dim), ("num_heads", num_heads),
                ("k_left", k_left), ("k_right", k_right),
                ("num_buckets", num_buckets),
                ("bucket_max_distance", bucket_max_distance)]
        if scheme == "shaw":
            ints.append(("max_distance", max_distance))
        for name, value in ints:
            if isinstance(value, bool) or not isinstance(value, int):
                raise TypeError(f"{where}: {name} must be an int (got "
                                f"{type(value).__name__})")
        if embed_dim <= 0 or num_heads <= 0:
            raise ValueError(
                f"{where}: embed_dim and num_heads must be > 0 (got "
                f"{embed_dim}, {num_heads})")
        if embed_dim % num_heads:
            raise ValueError(
                f"{where}: embed_dim ({embed_dim}) must be divisible by "
                f"num_heads ({num_heads})")
        for name, value in (("max_distance", max_distance),
                            ("k_left", k_left), ("k_right", k_right)):
            if value is not None and value < 0:
                raise ValueError(f"{where}: {name} must be >= 0 (got "
                                 f"{value})")
        if table_init not in ("xavier_normal", "xavier_uniform", "zeros"):
            raise ValueError(
                f"{where}: table_init must be 'xavier_normal', "
                f"'xavier_uniform' or 'zeros' (got {table_init!r})")
        scale = float(table_init_scale)
        if not math.isfinite(scale) or scale < 0:
            raise ValueError(f"{where}: table_init_scale must be finite and "
                             f">= 0 (got {scale})")
        head_dim = embed_dim // num_heads
        if scheme in ("shaw-log", "t5"):
            half = num_buckets if causal else num_buckets // 2
            if half // 2 < 1:
                raise ValueError(
                    f"{where}: num_buckets must be >= {2 if causal else 4} "
                    f"for {'causal' if causal else 'bidirectional'} T5 "
                    f"buckets (got {num_buckets})")
            if bucket_max_distance <= half // 2:
                raise ValueError(
                    f"{where}: bucket_max_distance must exceed the exact "
                    f"buckets' reach {half // 2} (got {bucket_max_distance})")
        if scheme == "rope":
            if head_dim % 2:
                raise ValueError(f"{where}: scheme 'rope' needs an even "
                                 f"head width embed_dim / num_heads (got "
                                 f"{head_dim})")
            if rope_layout not in ("split_halves", "interleaved"):
                raise ValueError(f"{where}: rope_layout must be "
                                 f"'split_halves' or 'interleaved' (got "
                                 f"{rope_layout!r})")
            base = float(rope_base)
            if not math.isfinite(base) or base <= 0:
                raise ValueError(f"{where}: rope_base must be finite and > 0 "
                                 f"(got {rope_base})")
        if scheme == "xl" and embed_dim % 2:
            raise ValueError(f"{where}: scheme 'xl' needs an even embed_dim "
                             f"(sines and cosines; got {embed_dim})")
        self.embed_dim = embed_dim
        self.num_heads = num_heads
        self.head_dim = head_dim
        self.scheme = scheme
        self.max_distance = max_distance
        self.per_head_tables = bool(per_head_tables)
        self.causal = bool(causal)
        self.table_init = table_init
        self.table_init_scale = scale
        self.k_left, self.k_right = k_left, k_right
        self.num_buckets = num_buckets
        self.bucket_max_distance = bucket_max_distance
        self.rope_base = float(rope_base)
        self.rope_layout = rope_layout

        factory = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.k_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.v_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        self.out_proj = nn.Linear(embed_dim, embed_dim, bias=bias, **factory)
        rows = self.table_rows()
        shape = ((num_heads, rows, head_dim) if self.per_head_tables
                 else (rows, head_dim))
        shaw = scheme in _SHAW_SCHEMES
        for name, on in (("rel_k", key_term), ("rel_v", value_term)):
            self.register_parameter(
                name, nn.Parameter(torch.empty(shape, **factory))
                if shaw and on else None)
        self.register_parameter(
            "t5_bias", nn.Parameter(torch.empty(num_heads, rows, **factory))
            if scheme == "t5" else None)
        for name, size in (("xl_w", (embed_dim, embed_dim)),
                           ("xl_u", (num_heads, head_dim)),
                           ("xl_v", (num_heads, head_dim))):
            self.register_parameter(
                name, nn.Parameter(torch.empty(size, **factory))
                if scheme == "xl" else None)
        self.reset_parameters()

    def buckets(self):
        """The relpos bucket map of the scheme (None: the symmetric clip)."""
        if self.scheme == "shaw-asym":
            return _relpos.ClipBuckets(self.k_left, self.k_right)
        if self.scheme in ("shaw-log", "t5"):
            return _relpos.T5Buckets(self.num_buckets,
                                     self.bucket_max_distance,
                                     not self.causal)
        return None

    def table_rows(self):
        """Rows nb of the scheme's tables (Shaw's, T5's bias); 0 if none."""
        if self.scheme == "shaw":
            return 2 * self.max_distance + 1
        if self.scheme == "shaw-asym":
            return self.k_left + self.k_right + 1
        if self.scheme in ("shaw-log", "t5"):
            return self.num_buckets
        return 0

    def table_std(self):
        """Xavier normal std of an [nb, E/H] table (docs/math.md section 5)."""
        rows = self.table_rows()
        return self.table_init_scale * math.sqrt(2.0 / (rows + self.head_dim))

    def reset_parameters(self):
        for proj in (self.q_proj, self.k_proj, self.v_proj, self.out_proj):
            nn.init.xavier_uniform_(proj.weight)
            if proj.bias is not None:
                nn.init.zeros_(proj.bias)
        with torch.no_grad():
            for table in (self.rel_k, self.rel_v):
                if table is None:
                    continue
                if self.table_init == "xavier_normal":
                    table.normal_(0.0, self.table_std())
                elif self.table_init == "xavier_uniform":
                    # U(-a, a) has std a / sqrt(3): a = sqrt(3) * std.
                    bound = math.sqrt(3.0) * self.table_std()
                    table.uniform_(-bound, bound)
                else:
                    table.zero_()
            if self.t5_bias is not None:
                self.t5_bias.normal_(0.0, self.embed_dim ** -0.5)
            if self.xl_w is not None:
                self.xl_w.normal_(0.0, self.embed_dim ** -0.5)
                self.xl_u.normal_(0.0, 0.02)
                self.xl_v.normal_(0.0, 0.02)

    def xl_table(self, k):
        """Transformer-XL's key table [H, 2k+1, E/H]: row r + k of head h is
        W_h R_{-r} (docs/math.md section 8)."""
        r = _xl_sinusoids(k, self.embed_dim, self.xl_w.dtype, self.xl_w.device)
        flat = r @ self.xl_w.t()  # [2k+1, E] = [2k+1, H * dh]
        return flat.view(2 * k + 1, self.num_heads, self.head_dim) \
            .transpose(0, 1).contiguous()

    def forward(self, query, key=None, value=None, *, key_lengths=None,
                query_offset=None):
        """query [B, Nq, E], key/value [B, Nk, E] -> [B, Nq, E].

        key defaults to query and value to key (self-attention).
        key_lengths: B valid key counts (padding at the end);
        query_offset: position of query 0 (default Nk - Nq; keys are at
        positions 0 .. Nk-1).
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
        nk = key.shape[1]
        h, d = self.num_heads, self.head_dim
        off = nk - nq if query_offset is None else int(query_offset)

        def heads(x):  # [B, N, E] -> [B, H, N, d], a non-contiguous view
            return x.view(x.shape[0], x.shape[1], h, d).transpose(1, 2)

        q = heads(self.q_proj(query))
        k = heads(self.k_proj(key))
        v = heads(self.v_proj(value))
        kw = dict(causal=self.causal, key_lengths=key_lengths,
                  query_offset=query_offset)
        s = self.scheme
        if s in _SHAW_SCHEMES:
            buckets = self.buckets()
            o = attention(q, k, v, self.rel_k, self.rel_v,
                          max_distance=self.max_distance if buckets is None
                          else None, buckets=buckets, **kw)
        elif s == "t5":
            o = attention(q, k, v, buckets=self.buckets(), bias=self.t5_bias,
                          **kw)
        elif s == "alibi":
            o = attention(q, k, v, max_distance=0, alibi=True, **kw)
        elif s == "rope":
            rot = dict(base=self.rope_base, layout=self.rope_layout)
            o = attention(rope(q, position_offset=off, **rot),
                          rope(k, position_offset=0, **rot), v,
                          max_distance=0, **kw)
        else:  # xl: unclipped, so k covers every distance of the call
            reach = max(off + nq - 1, nk - 1 - off, 0)
            u = self.xl_u[None, :, None, :]
            o = attention(q + u, k, v, self.xl_table(reach),
                          max_distance=reach, pb=self.xl_v - self.xl_u, **kw)
        return self.out_proj(o.transpose(1, 2).reshape(b, nq, h * d))

    def extra_repr(self):
        text = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
        if self.scheme != "shaw":
            text += f"scheme={self.scheme!r}, "
        if self.scheme == "shaw":
            text += f"max_distance={self.max_distance}, "
        elif self.scheme == "shaw-asym":
            text += f"k_left={self.k_left}, k_right={self.k_right}, "
        elif self.scheme in ("shaw-log", "t5"):
            text += (f"num_buckets={self.num_buckets}, "
                     f"bucket_max_distance={self.bucket_max_distance}, ")
        elif self.scheme == "rope":
            text += (f"rope_base={self.rope_base}, "
                     f"rope_layout={self.rope_layout!r}, ")
        if self.scheme in _SHAW_SCHEMES:
            text += (f"per_head_tables={self.per_head_tables}, "
                     f"key_term={self.rel_k is not None}, "
                     f"value_term={self.rel_v is not None}, ")
        return text + f"causal={self.causal}"


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

    x: [d], [N, d], [H, N, d] or [B, H, N, d]: a CPU tensor, float32 or
    float64, or a CUDA tensor (float16 to float64: relpos.triton's kernel);
    row n is at position position_offset + n. layout
    "split_halves" is Hugging Face Llama's rotate_half convention, so
    ``rope(q, base=config.rope_theta)`` equals ``apply_rotary_pos_emb``'s
    rotated q for position_ids 0..N-1 (up to Hugging Face's float32 angles).
    """
    if _ops.ENABLED:  # PyTorch >= 2.4: the relpos::rope custom op
        return _ops.rope(x, position_offset=position_offset, base=base,
                         layout=layout)
    if _ops.on_cuda(x):
        from relpos.triton import _rope
        return _rope.RopeFunction.apply(x, position_offset, base, layout,
                                        "torch.rope")
    options = dict(position_offset=position_offset, base=base, layout=layout)
    return _RopeFunction.apply(x, options)


__all__ += ["rope"]

# Context parallelism over torch.distributed (relpos/distributed.py).
from relpos.distributed import context_parallel_attention  # noqa: E402

__all__ += ["context_parallel_attention"]

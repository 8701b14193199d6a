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
from relpos import _checks, _ops
from relpos._call import check_scale
from relpos.position_schemes import bucket_map, xl_sinusoids

__all__ = ["attention", "RelativeMultiheadAttention", "SCHEMES"]


def _numpy(name, t):
    """A contiguous numpy view (or copy) of a CPU float tensor."""
    _checks.torch_tensor("torch.attention", name, t)
    return t.detach().contiguous().numpy()


def _optional_numpy(name, t):
    return None if t is None else _numpy(name, t)


def _host_ints(x):
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
              alibi=None, pb=None, key_starts=None, scale=None):
    """Differentiable relative attention (see relpos.attention for the math).

    Args:
        q: [B, H, Nq, dk], k: [B, Hkv, Nk, dk], v: [B, Hkv, Nk, dv] (Hkv =
            H, or dividing H: grouped-query attention); tensors
            of one dtype on one device, contiguous or not: CPU float32 or
            float64 (relpos's C++ kernel), or CUDA float16, bfloat16,
            float32 or float64 (the Triton kernels of relpos.triton).
        ak: None (key term off), [2k+1, dk] shared or [H, 2k+1, dk] per head.
        av: None (value term off), [2k+1, dv] or [H, 2k+1, dv].
        max_distance: k >= 0. causal, key_lengths (a sequence or an integer
            tensor of B lengths), query_offset (an integer, or B per-row
            offsets as a sequence or 1-D integer tensor), key_starts (B
            left-padding starts), scale (None: 1 / sqrt(dk)): as in
            relpos.attention, on the CPU and on CUDA alike.
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
                              alibi=alibi, key_starts=key_starts,
                              scale=scale)
    _ops.check_tensors("torch.attention", q, k, v, ak, av, bias, pb)
    if _ops.on_cuda(q):  # the Triton kernels' own autograd Function
        from relpos.triton import _attention as gpu
        return gpu.attention(q, k, v, ak, av, max_distance=max_distance,
                             causal=causal, key_lengths=key_lengths,
                             query_offset=query_offset, buckets=buckets,
                             bias=bias, alibi=alibi, pb=pb,
                             key_starts=key_starts, scale=scale,
                             fn="torch.attention")
    if isinstance(alibi, torch.Tensor):
        alibi = alibi.detach().cpu().numpy()
    options = dict(max_distance=max_distance, causal=causal,
                   key_lengths=_host_ints(key_lengths),
                   query_offset=_host_ints(query_offset), buckets=buckets,
                   alibi=alibi, key_starts=_host_ints(key_starts),
                   scale=scale)
    return _AttentionFunction.apply(q, k, v, ak, av, bias, pb, options)


# The registry's schemes that act inside attention (relpos.schemes()):
# shaw, shaw-asym, shaw-log, t5, alibi, rope, xl.
SCHEMES = tuple(s.name for s in _relpos.schemes() if s.inside_attention)
# Every table any of them may have (a module registers the others as None).
_TABLE_NAMES = tuple(dict.fromkeys(
    t for s in SCHEMES for t in _relpos.scheme(s).table_names))
_D = _relpos.position_schemes.SETTING_DEFAULTS  # the papers' defaults
_TABLE_INITS = ("xavier_normal", "xavier_uniform", "zeros")
# The module's keyword for each registry setting it spells differently.
_KEYWORD = {"rel_init_scale": "table_init_scale"}
# The module's setting keywords: {keyword: registry key} of every setting
# some scheme of SCHEMES reads, in the registry's order (max_distance is
# also the third positional argument). A setting added to the registry is a
# keyword here with nothing to write.
_SETTINGS = {_KEYWORD.get(key, key): key for key in _D
             if any(key in _relpos.scheme(s).settings for s in SCHEMES)}


class RelativeMultiheadAttention(nn.Module):
    """Multi-head attention with relative position representations, or any
    other scheme of the family (docs/math.md section 8).

    Batch-first: forward(query [B, Nq, E], key [B, Nk, E] = query,
    value [B, Nk, E] = key) -> [B, Nq, E]. Each of the H heads has
    dk = dv = head_dim (default E / H); the scores are scaled by
    1 / sqrt(dk) inside relpos unless scale says otherwise.

    Args:
        embed_dim: E, divisible by num_heads unless head_dim is given.
        num_heads: H.
        head_dim: the width of each head (default E / H); the projections
            map E to the inner width H * head_dim and back (T5 / mT5's d_kv,
            where H * d_kv may differ from d_model). Not for "xl", whose
            sinusoids have width E.
        scale: None (1 / sqrt(head_dim)) or the multiplier of q . k and of
            Shaw's key term (T5: 1.0, its unscaled scores). T5's bias and
            ALiBi are never scaled.
        max_distance: the clipping distance k >= 0 of scheme "shaw"
            (default 16); the other schemes take none.
        scheme: how positions enter, a scheme of the registry that acts
            inside attention (relpos.scheme(name); SCHEMES lists them; the
            tables' names, shapes and initialisation are its entry's,
            docs/model.md lists the defaults and their sources):
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
        The setting keywords (per_head_tables, key_term, value_term,
        table_init_scale, k_left, ...) are the registry's settings
        (relpos.position_schemes.SETTING_DEFAULTS, the C++ SchemeSettings)
        that a scheme of SCHEMES reads, with the registry's defaults;
        table_init_scale is the registry's rel_init_scale.
        device, dtype: for the parameters; CPU modules run relpos's C++
            kernel (float32 / float64), CUDA ones its Triton kernels
            (float16, bfloat16, float32, float64).
        Every setting is type-checked; the values of those the scheme reads
        are checked by the registry (ValueError naming the setting), the
        others are kept as attributes and otherwise ignored.

    Parameters: q_proj, k_proj, v_proj (nn.Linear E -> H * head_dim),
    out_proj (H * head_dim -> E), Xavier-uniform weights and zero biases, as
    torch.nn.MultiheadAttention;
    rel_k and rel_v (Shaw's tables, or None); t5_bias ("t5"); xl_w, xl_u,
    xl_v ("xl"; xl_w N(0, 1/E), xl_u and xl_v N(0, 0.02^2) as Hugging Face
    Transformer-XL). The names are those of relpos's model checkpoints
    (blocks.L.attn.<name>). Initialisation draws from torch's generator, so
    torch.manual_seed makes it reproducible. Tables may be shared between
    modules by assigning one Parameter to several (T5 shares block 0's
    bias across a stack: ``m.t5_bias = first.t5_bias``).
    """

    def __init__(self, embed_dim, num_heads, max_distance=None, *,
                 scheme="shaw", causal=False, bias=True,
                 table_init="xavier_normal", head_dim=None, scale=None,
                 device=None, dtype=None, **settings):
        super().__init__()
        fn = "torch.RelativeMultiheadAttention"
        for keyword in settings:
            if keyword not in _SETTINGS:
                raise TypeError(
                    f"relpos.{fn}: unexpected keyword argument {keyword!r} "
                    f"(the scheme settings: {', '.join(_SETTINGS)})")
        try:
            entry = _relpos.scheme(scheme)
        except (TypeError, ValueError):
            entry = None
        if entry is None or entry.name not in SCHEMES:
            raise ValueError(f"relpos.{fn}: scheme must be one of "
                             f"{', '.join(SCHEMES)} (got {scheme!r})")
        reads = entry.settings
        if max_distance is not None and "max_distance" not in reads:
            readers = [s for s in SCHEMES
                       if "max_distance" in _relpos.scheme(s).settings]
            raise ValueError(f"relpos.{fn}: max_distance applies to scheme "
                             f"{', '.join(readers)} only (got max_distance="
                             f"{max_distance!r} with scheme={scheme!r})")
        embed_dim = _checks.integer(fn, "embed_dim", embed_dim)
        num_heads = _checks.integer(fn, "num_heads", num_heads)
        if embed_dim <= 0 or num_heads <= 0 or (
                head_dim is None and embed_dim % num_heads):
            raise ValueError(
                f"relpos.{fn}: embed_dim ({embed_dim}) must be divisible by "
                f"num_heads ({num_heads}), both > 0")
        if head_dim is not None:
            head_dim = _checks.integer(fn, "head_dim", head_dim)
            if head_dim <= 0:
                raise ValueError(f"relpos.{fn}: head_dim must be > 0 (got "
                                 f"{head_dim})")
            if entry.name == "xl" and head_dim * num_heads != embed_dim:
                raise ValueError(
                    f"relpos.{fn}: scheme 'xl' needs num_heads * head_dim "
                    f"= embed_dim (its sinusoids have width embed_dim; got "
                    f"{num_heads} * {head_dim} != {embed_dim})")
        self.scale = check_scale(fn, scale)
        self.table_init = _checks.choice(fn, "table_init", table_init,
                                         _TABLE_INITS)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = embed_dim // num_heads if head_dim is None \
            else head_dim
        inner = num_heads * self.head_dim
        self.scheme, self.causal = entry.name, bool(causal)
        # Every setting is type-checked and kept; the registry checks the
        # values of those the scheme reads (and its layer: RoPE's even head
        # width, XL's even embed_dim, T5's buckets) and gives the tables.
        # The registry's defaults, then the keywords given (the switches
        # taken as bools, as they always were).
        given = {key: _D[key] for key in _SETTINGS.values()}
        if max_distance is not None:
            given["max_distance"] = max_distance
        for keyword, value in settings.items():
            key = _SETTINGS[keyword]
            given[key] = bool(value) if isinstance(_D[key], bool) else value
        settings = _relpos.position_schemes._settings(fn, given)
        try:
            layer = (num_heads, self.head_dim)
            tables = entry.tables(*layer, causal=self.causal, **settings)
            self._call = entry.call(*layer, causal=self.causal, **settings)
        except ValueError as e:
            raise ValueError(
                f"relpos.{fn}: {str(e).removeprefix('relpos: ')}") from None
        for key, value in settings.items():
            setattr(self, _KEYWORD.get(key, key), value)
        if "max_distance" not in reads:
            self.max_distance = None
        self._settings = {k: v for k, v in settings.items() if k in reads}
        factory = dict(device=device, dtype=dtype)
        self.q_proj = nn.Linear(embed_dim, inner, bias=bias, **factory)
        self.k_proj = nn.Linear(embed_dim, inner, bias=bias, **factory)
        self.v_proj = nn.Linear(embed_dim, inner, bias=bias, **factory)
        self.out_proj = nn.Linear(inner, embed_dim, bias=bias, **factory)
        for name in _TABLE_NAMES:  # the scheme's own below, the others None
            self.register_parameter(name, None)
        self._tables = tables
        for t in tables:
            self.register_parameter(
                t.name, nn.Parameter(torch.empty(t.shape, **factory)))
        self.reset_parameters()

    def _table(self, role):
        """The parameter with this registry role, or None."""
        for t in self._tables:
            if t.role == role:
                return getattr(self, t.name)
        return None

    def buckets(self):
        """The relpos bucket map of the scheme (None: the symmetric clip)."""
        return self._call.attention.get("buckets")

    def table_rows(self):
        """Rows nb of the scheme's tables (Shaw's, T5's bias); 0 if none."""
        roles = _relpos.scheme(self.scheme).table_roles
        if not {"key_table", "value_table", "score_bias"} & set(roles):
            return 0
        return bucket_map(self.buckets(), self.max_distance).rows()

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
            # The registry's initialisation, in its table order; Shaw's
            # Xavier tables as table_init says.
            for t in self._tables:
                p = getattr(self, t.name)
                if t.init == "normal":
                    p.normal_(0.0, t.scale)
                elif self.table_init == "xavier_normal":
                    p.normal_(0.0, self.table_std())
                elif self.table_init == "xavier_uniform":
                    # U(-a, a) has std a / sqrt(3): a = sqrt(3) * std.
                    bound = math.sqrt(3.0) * self.table_std()
                    p.uniform_(-bound, bound)
                else:
                    p.zero_()

    def xl_table(self, k):
        """Transformer-XL's key table [H, 2k+1, E/H]: row r + k of head h is
        W_h R_{-r} (docs/math.md section 8)."""
        r = torch.from_numpy(xl_sinusoids(k, self.embed_dim)).to(
            dtype=self.xl_w.dtype, device=self.xl_w.device)
        flat = r @ self.xl_w.t()  # [2k+1, E] = [2k+1, H * dh]
        return flat.view(2 * k + 1, self.num_heads, self.head_dim) \
            .transpose(0, 1).contiguous()

    def forward(self, query, key=None, value=None, *, key_lengths=None,
                query_offset=None, key_starts=None):
        """query [B, Nq, E], key/value [B, Nk, E] -> [B, Nq, E].

        key defaults to query and value to key (self-attention).
        key_lengths: B valid key counts (padding at the end);
        key_starts: B first valid keys (padding at the start; distances are
        unchanged, docs/conventions.md "Left padding"; not with "rope",
        whose absolute rotation needs per-row positions: use
        relpos.torch.rope and attention directly);
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
        call = self._call
        kw = dict(call.attention, key_lengths=key_lengths,
                  query_offset=query_offset, key_starts=key_starts,
                  scale=self.scale)
        if key_starts is not None and call.rope is not None:
            raise ValueError(
                "RelativeMultiheadAttention: key_starts with scheme 'rope' "
                "would rotate the padded positions; rotate per row with "
                "relpos.torch.rope(x, position_offset=[...]) and call "
                "relpos.torch.attention")
        ak, av = self._table("key_table"), self._table("value_table")
        pb = None
        if call.rope is not None:  # q at positions off + i, k at j
            q = rope(q, position_offset=off, **call.rope)
            k = rope(k, position_offset=0, **call.rope)
        if call.xl_table:  # unclipped, so k covers every distance of the call
            reach = max(off + nq - 1, nk - 1 - off, 0)
            u = self._table("xl_content_bias")
            ak, pb = self.xl_table(reach), self._table("xl_position_bias") - u
            q = q + u[None, :, None, :]
            kw["max_distance"] = reach
        o = attention(q, k, v, ak, av, bias=self._table("score_bias"), pb=pb,
                      **kw)
        return self.out_proj(o.transpose(1, 2).reshape(b, nq, h * d))

    def extra_repr(self):
        text = f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, "
        if self.head_dim * self.num_heads != self.embed_dim:
            text += f"head_dim={self.head_dim}, "
        if self.scale is not None:
            text += f"scale={self.scale!r}, "
        if self.scheme != "shaw":
            text += f"scheme={self.scheme!r}, "
        for key, value in self._settings.items():  # those the scheme reads
            if key != "rel_init_scale":
                text += f"{key}={value!r}, "
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
    _checks.torch_tensor("torch.rope", name, t)
    return t.detach().contiguous().numpy()


def rope(x, *, position_offset=0, base=10000.0, layout="split_halves"):
    """Differentiable rotary position embedding (see relpos.rope).

    x: [d], [N, d], [H, N, d] or [B, H, N, d]: a CPU tensor, float32 or
    float64, or a CUDA tensor (float16 to float64: relpos.triton's kernel);
    row n is at position position_offset + n, or, for x [B, H, N, d] and
    position_offset B integers (a sequence or 1-D integer tensor), row n of
    item b at position_offset[b] + n (Hugging Face's per-row position_ids
    offset_b + n). layout
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

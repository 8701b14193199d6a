"""relpos's attention and RoPE as torch.library custom ops (PyTorch >= 2.4).

relpos.torch uses these when ENABLED, else its torch.autograd.Functions
(PyTorch 1.13, Debian). A custom op is opaque to torch.compile / torch.export:
they trace it through its fake (shape-only) kernel and call the real kernel
at run time, so ``torch.compile(model, fullgraph=True)`` and ``torch.export``
go through relpos attention and RoPE without a graph break.

Each op has two kernels: CPU tensors run relpos's C++ kernel (below), CUDA
tensors the Triton kernels of relpos.triton (registered with
register_kernel("cuda"); Triton is imported on the first CUDA call).
``on_cuda`` is the one test of which path a tensor takes, here and in
relpos.torch; inside ``triton_on_cpu()`` (tests only, under Triton's
interpreter) it says yes for CPU tensors too, so they run the CUDA path.

    relpos::attention_forward   (q, k, v, ak?, av?, bias?, pb?, options)
                                -> (out [B, H, Nq, dv], lse [B, H, Nq])
    relpos::attention_backward  (dout, the inputs, out, lse, options)
                                -> (dq, dk, dv, dak, dav, dbias, dpb)
    relpos::rope / relpos::rope_backward   (x, offset, base, layout,
                                            offsets?) -> y

Absent gradients (an input that was None) are empty tensors (numel 0) in
the backward op's result, since an op's outputs cannot be None.

On CUDA, lse is float32 for float16 / bfloat16 inputs (float64 for
float64), so the fake kernels give it that dtype.

Zero copy: a contiguous CPU float32 / float64 tensor reaches the C++ kernel
as a numpy view of its memory (Tensor.numpy shares storage), and the outputs
the kernel writes are wrapped with torch.from_numpy; a non-contiguous input
is copied once by .contiguous().

Options travel as schema-typed arguments: buckets is "" (the symmetric clip
by max_distance), "clip" (bucket_args = [left, right]) or "t5"
(bucket_args = [num_buckets, max_distance, bidirectional]); alibi is None
(off), [] (relpos's default slopes) or one slope per head; query_offsets
and key_starts are None or int64 tensors of one entry per batch item (per-row
query offsets, left-padding key starts); scale is None (1 / sqrt(dk)) or
the score multiplier. RoPE's offsets is None or B per-row offsets.
"""

import contextlib
from typing import List, Optional, Tuple

import torch
from torch import Tensor

import relpos as _relpos
from relpos._call import check_scale
from relpos._checks import boolean, torch_tensor
from relpos.position_schemes import decode_buckets, encode_buckets


def _version_at_least(major, minor):
    parts = torch.__version__.split("+")[0].split(".")
    try:
        return (int(parts[0]), int(parts[1])) >= (major, minor)
    except (IndexError, ValueError):
        return False


ENABLED = _version_at_least(2, 4) and hasattr(torch.library, "custom_op")


def check_tensors(fn, q, k, v, ak, av, bias, pb):
    """The tensors of an attention call (relpos._checks.torch_tensor): q
    fixes the device; the optional ones may be None."""
    torch_tensor(fn, "q", q)
    for name, t in (("k", k), ("v", v), ("ak", ak), ("av", av),
                    ("bias", bias), ("pb", pb)):
        if t is not None or name in ("k", "v"):
            torch_tensor(fn, name, t, like=q)


# How many triton_on_cpu() blocks are open (a module global, not a context
# variable: the autograd engine may run a backward on another thread).
_TRITON_ON_CPU = 0


@contextlib.contextmanager
def triton_on_cpu():
    """Test seam: inside the block, CPU tensors take the CUDA path, i.e.
    the custom ops' "cuda" kernels and relpos.torch's CUDA branch run
    relpos.triton's kernels on them under Triton's interpreter, so code
    written for CUDA tensors (relpos.hf's patched models, say) is tested
    end to end without a GPU. Only under TRITON_INTERPRET=1 (RuntimeError
    otherwise: without the interpreter the Triton kernels cannot run on
    CPU tensors); outside the block nothing changes. Not thread-local:
    every thread sees the switch while a block is open.

        with relpos._ops.triton_on_cpu():
            model(ids)   # every relpos attention / RoPE call: relpos.triton
    """
    global _TRITON_ON_CPU
    from relpos.triton._problem import interpreting
    if not interpreting():
        raise RuntimeError(
            "relpos._ops.triton_on_cpu: Triton's interpreter is off (set "
            "TRITON_INTERPRET=1 before Triton is imported); it is what runs "
            "the Triton kernels on CPU tensors")
    _TRITON_ON_CPU += 1
    try:
        yield
    finally:
        _TRITON_ON_CPU -= 1


def on_cuda(t):
    """Whether relpos runs tensor t on the CUDA path (relpos.triton): t is
    on a CUDA device, or on the CPU inside triton_on_cpu()."""
    if not isinstance(t, torch.Tensor):
        return False
    kind = t.device.type
    return kind == "cuda" or (kind == "cpu" and _TRITON_ON_CPU > 0)


def lse_dtype(dtype):
    """The log-sum-exp's dtype for inputs of `dtype`."""
    return torch.float32 if dtype in (torch.float16, torch.bfloat16) \
        else dtype


def encode_alibi(alibi):
    if alibi is None or alibi is False:
        return None
    if alibi is True:
        return []
    if isinstance(alibi, torch.Tensor):
        alibi = alibi.detach().cpu().tolist()
    return [float(m) for m in alibi]


def _view(t):
    """A numpy array sharing t's memory (one copy if t is not contiguous)."""
    return None if t is None else t.detach().contiguous().numpy()


def _ints(t):
    return None if t is None else t.detach().cpu().numpy()


def _options(max_distance, causal, key_lengths, query_offset, buckets,
             bucket_args, alibi, query_offsets, key_starts, scale):
    if alibi is None:
        alibi_arg = None
    elif len(alibi) == 0:
        alibi_arg = True
    else:
        alibi_arg = list(alibi)
    return dict(max_distance=max_distance, causal=causal,
                key_lengths=_ints(key_lengths),
                query_offset=query_offset if query_offsets is None
                else _ints(query_offsets),
                buckets=decode_buckets(buckets, bucket_args), alibi=alibi_arg,
                key_starts=_ints(key_starts), scale=scale)


def _gpu_options(max_distance, causal, key_lengths, query_offset, buckets,
                 bucket_args, alibi, query_offsets, key_starts, scale):
    """The op's schema-typed options as relpos.triton's keywords."""
    options = _options(max_distance, causal, None, query_offset, buckets,
                       bucket_args, alibi, None, None, scale)
    options["key_lengths"] = key_lengths
    if query_offsets is not None:
        options["query_offset"] = query_offsets
    options["key_starts"] = key_starts
    return options


if ENABLED:
    @torch.library.custom_op("relpos::attention_forward", mutates_args=())
    def attention_forward(
            q: Tensor, k: Tensor, v: Tensor, ak: Optional[Tensor],
            av: Optional[Tensor], bias: Optional[Tensor], pb: Optional[Tensor],
            max_distance: Optional[int], causal: bool,
            key_lengths: Optional[Tensor], query_offset: Optional[int],
            buckets: str, bucket_args: List[int],
            alibi: Optional[List[float]], query_offsets: Optional[Tensor],
            key_starts: Optional[Tensor],
            scale: Optional[float]) -> Tuple[Tensor, Tensor]:
        # q [B, H, Nq, dk], k [B, Hkv, Nk, dk], v [B, Hkv, Nk, dv]
        #   -> out [B, H, Nq, dv], lse [B, H, Nq]
        if on_cuda(q):  # CPU tensors inside triton_on_cpu()
            return attention_forward_cuda(
                q, k, v, ak, av, bias, pb, max_distance, causal, key_lengths,
                query_offset, buckets, bucket_args, alibi, query_offsets,
                key_starts, scale)
        out, lse = _relpos.attention(
            _view(q), _view(k), _view(v), _view(ak), _view(av),
            bias=_view(bias), pb=_view(pb), return_lse=True,
            **_options(max_distance, causal, key_lengths, query_offset,
                       buckets, bucket_args, alibi, query_offsets,
                       key_starts, scale))
        return torch.from_numpy(out), torch.from_numpy(lse)

    def attention_forward_cuda(q, k, v, ak, av, bias, pb, max_distance,
                               causal, key_lengths, query_offset, buckets,
                               bucket_args, alibi, query_offsets, key_starts,
                               scale):
        from relpos.triton import _attention as gpu
        call = gpu.prepare(
            "torch.attention", q, k, v, ak, av, bias, pb,
            **_gpu_options(max_distance, causal, key_lengths, query_offset,
                           buckets, bucket_args, alibi, query_offsets,
                           key_starts, scale))
        return gpu.forward(call, q, k, v, ak, av, bias, pb)

    attention_forward.register_kernel("cuda")(attention_forward_cuda)

    @attention_forward.register_fake
    def _(q, k, v, ak, av, bias, pb, max_distance, causal, key_lengths,
          query_offset, buckets, bucket_args, alibi, query_offsets,
          key_starts, scale):
        b, h, nq, _ = q.shape
        return (q.new_empty((b, h, nq, v.shape[3])),
                q.new_empty((b, h, nq), dtype=lse_dtype(q.dtype)))

    @torch.library.custom_op("relpos::attention_backward", mutates_args=())
    def attention_backward(
            dout: Tensor, q: Tensor, k: Tensor, v: Tensor, ak: Optional[Tensor],
            av: Optional[Tensor], bias: Optional[Tensor], pb: Optional[Tensor],
            out: Tensor, lse: Tensor, max_distance: Optional[int],
            causal: bool, key_lengths: Optional[Tensor],
            query_offset: Optional[int], buckets: str, bucket_args: List[int],
            alibi: Optional[List[float]], query_offsets: Optional[Tensor],
            key_starts: Optional[Tensor], scale: Optional[float]
    ) -> Tuple[Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor]:
        # dout [B, H, Nq, dv] -> (dq, dk, dv, dak, dav, dbias, dpb), each
        # shaped like its input; empty (numel 0) where the input is None.
        if on_cuda(q):  # CPU tensors inside triton_on_cpu()
            return attention_backward_cuda(
                dout, q, k, v, ak, av, bias, pb, out, lse, max_distance,
                causal, key_lengths, query_offset, buckets, bucket_args,
                alibi, query_offsets, key_starts, scale)
        g = _relpos.attention_backward(
            _view(dout), _view(q), _view(k), _view(v), _view(ak), _view(av),
            out=_view(out), lse=_view(lse), bias=_view(bias), pb=_view(pb),
            **_options(max_distance, causal, key_lengths, query_offset,
                       buckets, bucket_args, alibi, query_offsets,
                       key_starts, scale))
        # A fresh empty tensor for each absent gradient: outputs may not
        # alias one another.
        return tuple(q.new_empty((0,)) if x is None else torch.from_numpy(x)
                     for x in (g.dq, g.dk, g.dv, g.dak, g.dav, g.dbias, g.dpb))

    def attention_backward_cuda(dout, q, k, v, ak, av, bias, pb, out, lse,
                                max_distance, causal, key_lengths,
                                query_offset, buckets, bucket_args, alibi,
                                query_offsets, key_starts, scale):
        from relpos.triton import _attention as gpu
        call = gpu.prepare(
            "torch.attention", q, k, v, ak, av, bias, pb,
            **_gpu_options(max_distance, causal, key_lengths, query_offset,
                           buckets, bucket_args, alibi, query_offsets,
                           key_starts, scale))
        grads = gpu.backward(call, dout, q, k, v, ak, av, bias, pb, out, lse)
        return tuple(q.new_empty((0,)) if g is None else g for g in grads)

    attention_backward.register_kernel("cuda")(attention_backward_cuda)

    @attention_backward.register_fake
    def _(dout, q, k, v, ak, av, bias, pb, out, lse, max_distance, causal,
          key_lengths, query_offset, buckets, bucket_args, alibi,
          query_offsets, key_starts, scale):
        return tuple(q.new_empty((0,)) if x is None else x.new_empty(x.shape)
                     for x in (q, k, v, ak, av, bias, pb))

    def _attention_setup(ctx, inputs, output):
        q, k, v, ak, av, bias, pb = inputs[:7]
        out, lse = output
        ctx.options = inputs[7:]
        ctx.save_for_backward(q, k, v, ak, av, bias, pb, out, lse)
        ctx.mark_non_differentiable(lse)

    def _attention_grad(ctx, dout, _dlse):
        # lse is marked non-differentiable: _dlse carries nothing.
        q, k, v, ak, av, bias, pb, out, lse = ctx.saved_tensors
        grads = attention_backward(dout, q, k, v, ak, av, bias, pb, out, lse,
                                   *ctx.options)
        inputs = (q, k, v, ak, av, bias, pb)
        need = ctx.needs_input_grad
        result = [g if x is not None and need[i] else None
                  for i, (g, x) in enumerate(zip(grads, inputs))]
        return tuple(result) + (None,) * len(ctx.options)

    attention_forward.register_autograd(_attention_grad,
                                        setup_context=_attention_setup)

    def _rope_offset(position_offset, position_offsets):
        """The numpy layer's position_offset: one, or one per batch item."""
        if position_offsets is None:
            return position_offset
        return position_offsets.detach().cpu().numpy()

    @torch.library.custom_op("relpos::rope", mutates_args=())
    def rope_forward(x: Tensor, position_offset: int, base: float,
                     layout: str, position_offsets: Optional[Tensor]
                     ) -> Tensor:
        # x [..., N, d] -> the rotated rows, same shape.
        if on_cuda(x):  # CPU tensors inside triton_on_cpu()
            return rope_forward_cuda(x, position_offset, base, layout,
                                     position_offsets)
        return torch.from_numpy(_relpos.rope(
            _view(x), position_offset=_rope_offset(position_offset,
                                                   position_offsets),
            base=base, layout=layout))

    def rope_forward_cuda(x, position_offset, base, layout,
                          position_offsets):
        from relpos.triton import _rope
        return _rope.rotate("torch.rope", x,
                            _rope_offset(position_offset, position_offsets),
                            base, layout, 1)

    rope_forward.register_kernel("cuda")(rope_forward_cuda)

    @rope_forward.register_fake
    def _(x, position_offset, base, layout, position_offsets):
        return x.new_empty(x.shape)

    @torch.library.custom_op("relpos::rope_backward", mutates_args=())
    def rope_backward(dy: Tensor, position_offset: int, base: float,
                      layout: str, position_offsets: Optional[Tensor]
                      ) -> Tensor:
        # dy [..., N, d] -> dx, the rows rotated by the opposite angles.
        if on_cuda(dy):  # CPU tensors inside triton_on_cpu()
            return rope_backward_cuda(dy, position_offset, base, layout,
                                      position_offsets)
        return torch.from_numpy(_relpos.rope_backward(
            _view(dy), position_offset=_rope_offset(position_offset,
                                                    position_offsets),
            base=base, layout=layout))

    def rope_backward_cuda(dy, position_offset, base, layout,
                           position_offsets):
        from relpos.triton import _rope
        return _rope.rotate("torch.rope_backward", dy,
                            _rope_offset(position_offset, position_offsets),
                            base, layout, -1)

    rope_backward.register_kernel("cuda")(rope_backward_cuda)

    @rope_backward.register_fake
    def _(dy, position_offset, base, layout, position_offsets):
        return dy.new_empty(dy.shape)

    def _rope_setup(ctx, inputs, output):
        ctx.options = inputs[1:]

    def _rope_grad(ctx, dy):
        return (rope_backward(dy, *ctx.options),) + (None,) * 4

    rope_forward.register_autograd(_rope_grad, setup_context=_rope_setup)

    def _rope_backward_setup(ctx, inputs, output):
        ctx.options = inputs[1:]

    def _rope_backward_grad(ctx, ddx):
        # The backward is again a rotation (by the opposite angles): its
        # gradient is the forward rotation, so RoPE is twice differentiable.
        return (rope_forward(ddx, *ctx.options),) + (None,) * 4

    rope_backward.register_autograd(_rope_backward_grad,
                                    setup_context=_rope_backward_setup)


def _per_row(fn, name, x):
    """None, or x (a sequence or 1-D integer tensor of one entry per batch
    item) as an int64 tensor on the CPU."""
    if x is None:
        return None
    t = x if isinstance(x, torch.Tensor) else torch.as_tensor(x)
    if t.dim() != 1 or t.dtype.is_floating_point or t.dtype == torch.bool:
        raise TypeError(f"relpos.torch.{fn}: {name} must be one integer per "
                        f"batch item (got {t.dtype} of shape "
                        f"{tuple(t.shape)})")
    return t.to(device="cpu", dtype=torch.int64)


def _is_per_row(x):
    if isinstance(x, torch.Tensor):
        return x.dim() == 1
    return isinstance(x, (list, tuple)) or (
        hasattr(x, "ndim") and getattr(x, "ndim") == 1)


def attention(q, k, v, ak, av, bias, pb, *, max_distance, causal,
              key_lengths, query_offset, buckets, alibi, key_starts=None,
              scale=None):
    """relpos.torch.attention through relpos::attention_forward."""
    check_tensors("torch.attention", q, k, v, ak, av, bias, pb)
    if key_lengths is not None and not isinstance(key_lengths, torch.Tensor):
        key_lengths = torch.as_tensor(key_lengths, dtype=torch.int64)
    causal = boolean("torch.attention", "causal", causal)
    query_offsets = None
    if _is_per_row(query_offset):
        query_offsets = _per_row("attention", "query_offset", query_offset)
        query_offset = None
    elif isinstance(query_offset, torch.Tensor):  # a 0-d tensor
        query_offset = int(query_offset)
    scale = check_scale("torch.attention", scale)
    kind, args = encode_buckets("torch.attention", buckets)
    out, _ = attention_forward(q, k, v, ak, av, bias, pb, max_distance,
                               causal, key_lengths, query_offset,
                               kind, args, encode_alibi(alibi), query_offsets,
                               _per_row("attention", "key_starts",
                                        key_starts), scale)
    return out


def rope(x, *, position_offset, base, layout):
    """relpos.torch.rope through relpos::rope."""
    torch_tensor("torch.rope", "x", x)
    if _is_per_row(position_offset):
        return rope_forward(x, 0, float(base), str(layout),
                            _per_row("rope", "position_offset",
                                     position_offset))
    return rope_forward(x, int(position_offset), float(base), str(layout),
                        None)

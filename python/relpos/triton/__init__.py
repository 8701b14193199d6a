"""relpos's GPU path: relative attention and RoPE as Triton kernels.

    attention   differentiable relative attention, relpos.torch.attention's
                arguments and results, on the tensors' own device
    rope        differentiable RoPE, relpos.torch.rope's arguments

relpos.torch.attention, relpos.torch.rope and RelativeMultiheadAttention
send CUDA tensors here on their own (CPU tensors keep the C++ kernel);
these functions are the explicit entry points. They run the kernels on
whatever device the tensors are on: a CUDA GPU, or the CPU under Triton's
interpreter (TRITON_INTERPRET=1 set before Triton is imported), which is
how the tests run them.

Every scheme of docs/math.md section 8 runs here, forward and backward:
Shaw's clip (key and value tables, shared or per head, either term alone),
asymmetric clips, T5 log buckets (shaw-log), T5's scalar bias, ALiBi,
Transformer-XL's position query bias, causal and key-length masks,
Nq != Nk with query_offset, and with each of them grouped-query / multi-query
k and v (Hkv heads dividing H), left padding (key_starts) and one
query_offset per batch item, with the CPU op's conventions
(docs/conventions.md). Inputs are float16, bfloat16, float32 or float64
(one dtype per call); accumulation is float32 (float64 for float64), and
float32 products are IEEE float32 unless
torch.backends.cuda.matmul.allow_tf32 is set. Gradients come for q, k, v
and every learned table; no float atomics are used, so results repeat
bit for bit. The algorithm and its limits: docs/python.md, "GPU".
"""

from ._attention import attention as _attention_fn
from ._rope import RopeFunction as _RopeFunction

__all__ = ["attention", "rope"]


def attention(q, k, v, ak=None, av=None, *, max_distance=None, causal=False,
              key_lengths=None, query_offset=None, buckets=None, bias=None,
              alibi=None, pb=None, key_starts=None, scale=None):
    """Differentiable relative attention in Triton kernels.

    The arguments, conventions and result of relpos.torch.attention
    (docs/math.md, docs/conventions.md): q [B, H, Nq, dk], k [B, Hkv, Nk,
    dk], v [B, Hkv, Nk, dv] (any strides, read in place: e.g. permuted
    views of one fused [B, N, 3, H, d] projection; dk, dv up to 256, a
    dim that is not a power of two padded; Hkv = H, or dividing H:
    grouped-query heads, query head h reading head h // (H / Hkv)), ak / av
    tables ([nb, d] shared or [H, nb, d] per head, None: that term off),
    max_distance or buckets (relpos.ClipBuckets / relpos.T5Buckets),
    causal, key_lengths (B lengths: a sequence or an integer tensor),
    query_offset (default Nk - Nq; or B per-row offsets), key_starts (B
    left-padding starts), bias (T5's [H, nb]), alibi (True or H slopes), pb
    (Transformer-XL's [H, dk], with ak), scale (None: 1 / sqrt(dk); T5:
    1.0). Every tensor on one device, of one dtype.

    Returns out [B, H, Nq, dv] in q's dtype, with gradients for q, k, v, ak,
    av, bias and pb (dk, dv shaped like k, v: summed over each group of
    query heads).

    Raises TypeError / ValueError naming the argument (as relpos.torch),
    NotImplementedError for a floating dtype the kernels lack (float8) or a
    query_offset beyond their 32-bit distances (|query_offset| + Nq + Nk >=
    2^30, over every per-row offset) or dk / dv above 256, and ValueError for CPU tensors
    outside the interpreter.
    """
    return _attention_fn(q, k, v, ak, av, max_distance=max_distance,
                         causal=causal, key_lengths=key_lengths,
                         query_offset=query_offset, buckets=buckets,
                         bias=bias, alibi=alibi, pb=pb,
                         key_starts=key_starts, scale=scale)


def rope(x, *, position_offset=0, base=10000.0, layout="split_halves"):
    """Differentiable rotary position embedding (relpos.torch.rope's
    arguments): x [d], [N, d], [H, N, d] or [B, H, N, d], d even; row n at
    position position_offset + n (or, for rank 4, position_offset[b] + n
    with one offset per batch item); layout "split_halves" or "interleaved".
    Returns a new tensor shaped like x, in x's dtype."""
    return _RopeFunction.apply(x, position_offset, base, layout)

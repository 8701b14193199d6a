"""RoPE on the GPU path (docs/math.md section 8, "RoPE"): relpos.rope's
convention exactly. The angles pos * theta_t, theta_t = base^(-2t/d), and
their cosines and sines are formed in float64 (torch, on the tensor's
device) and rounded to float32 once, as the C++ kernel does; the Triton
kernel rotates the rows (float32 arithmetic, float64 for float64 inputs).
The backward is the rotation by the opposite angles."""

from __future__ import annotations

import operator

import numpy as np
import torch
from torch.autograd.function import once_differentiable
import triton
import triton.language as tl

from ..position_schemes import rope_base_layout, rope_offsets
from ._problem import check_tensor

_MAX_POSITION = 1 << 40


@triton.jit
def _rope_kernel(X, Y, CS, n, half, sxo, sxn, sxd, SIGN: tl.constexpr,
                 INTERLEAVED: tl.constexpr, BLOCK_R: tl.constexpr,
                 HALF: tl.constexpr):
    """Rows [r0, r0 + BLOCK_R) of slice o of x [outer, n, d] -> y
    (contiguous). CS [2, n, half]: cosines, then sines."""
    o = tl.program_id(1).to(tl.int64)
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    t = tl.arange(0, HALF)
    ok = (rows < n)[:, None] & (t < half)[None, :]
    if INTERLEAVED:
        ca = 2 * t
        cb = 2 * t + 1
    else:
        ca = t
        cb = t + half
    xrow = X + o * sxo + rows[:, None].to(tl.int64) * sxn
    a = tl.load(xrow + ca[None, :] * sxd, mask=ok, other=0.0)
    b = tl.load(xrow + cb[None, :] * sxd, mask=ok, other=0.0)
    cs = CS + rows[:, None].to(tl.int64) * half + t[None, :]
    c = tl.load(cs, mask=ok, other=0.0)
    s = tl.load(cs + n * half, mask=ok, other=0.0) * SIGN
    a = a.to(c.dtype)
    b = b.to(c.dtype)
    yrow = Y + (o * n + rows[:, None].to(tl.int64)) * (2 * half)
    tl.store(yrow + ca[None, :], (a * c - b * s).to(Y.dtype.element_ty),
             mask=ok)
    tl.store(yrow + cb[None, :], (b * c + a * s).to(Y.dtype.element_ty),
             mask=ok)


def _options(fn, x, position_offset, base, layout):
    name = "dy" if fn.endswith("backward") else "x"
    check_tensor(fn, name, x)
    if x.dim() not in (1, 2, 3, 4):
        raise ValueError(f"relpos.{fn}: {name} must have rank 1 to 4, "
                         f"[..., N, d] (got shape {tuple(x.shape)})")
    d = x.shape[-1]
    if d < 2 or d % 2:
        raise ValueError(f"relpos.{fn}: d (the last extent of {name}) must "
                         f"be even and >= 2 (got {d})")
    if isinstance(position_offset, (bool, np.bool_)):
        raise TypeError(f"relpos.{fn}: position_offset must be an integer "
                        f"(got bool)")
    try:
        offset = operator.index(position_offset)
    except TypeError:
        raise TypeError(f"relpos.{fn}: position_offset must be an integer "
                        f"(got {type(position_offset).__name__})") from None
    n = x.shape[-2] if x.dim() >= 2 else 1
    if abs(offset) > _MAX_POSITION:
        raise ValueError(f"relpos.{fn}: position_offset must be in "
                         f"[-2^40, 2^40] (got {offset})")
    if n - 1 > _MAX_POSITION - offset:
        raise ValueError(f"relpos.{fn}: the last position position_offset "
                         f"+ N - 1 must be <= 2^40 (got {offset} + {n - 1})")
    return (offset,) + rope_base_layout(fn, base, layout)


def _table(n, d, offset, base, device, dtype):
    """[2, n, d/2]: cos and sin of (offset + row) * base^(-2t/d), formed in
    float64 and rounded once to dtype (float32, float64 for float64)."""
    t = torch.arange(d // 2, dtype=torch.float64, device=device)
    theta = torch.pow(torch.tensor(base, dtype=torch.float64, device=device),
                      -2.0 * t / d)
    pos = offset + torch.arange(n, dtype=torch.float64, device=device)
    angle = pos[:, None] * theta[None, :]
    acc = torch.float64 if dtype == torch.float64 else torch.float32
    return torch.stack([torch.cos(angle), torch.sin(angle)]).to(acc)


def _per_row(position_offset):
    """Whether position_offset holds one offset per batch item."""
    if isinstance(position_offset, torch.Tensor):
        return position_offset.dim() == 1
    return isinstance(position_offset, (list, tuple, np.ndarray))


def rotate(fn, x, position_offset, base, layout, sign):
    """The rotated rows of x (sign -1: by the opposite angles); per-row
    offsets (x [B, H, N, d], B offsets) rotate each batch item at its own."""
    if _per_row(position_offset):
        offsets = rope_offsets(fn, position_offset)[1]
        name = "dy" if fn.endswith("backward") else "x"
        check_tensor(fn, name, x)
        if x.dim() != 4 or len(offsets) != x.shape[0]:
            raise ValueError(
                f"relpos.{fn}: one position_offset per batch item needs "
                f"{name} of rank 4 [B, H, N, d] and B offsets (got shape "
                f"{tuple(x.shape)} and {len(offsets)} offsets)")
        y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
        for b, off in enumerate(offsets):
            y[b] = rotate(fn, x[b], off, base, layout, sign)
        return y
    offset, base, layout = _options(fn, x, position_offset, base, layout)
    y = torch.empty(x.shape, dtype=x.dtype, device=x.device)
    if x.numel() == 0:
        return y
    d = x.shape[-1]
    n = x.shape[-2] if x.dim() >= 2 else 1
    x3 = x.reshape(-1, n, d)
    cs = _table(n, d, offset, base, x.device, x.dtype)
    block_r = 16
    half = d // 2
    _rope_kernel[(triton.cdiv(n, block_r), x3.shape[0])](
        x3, y, cs, n, half, *x3.stride(), SIGN=float(sign),
        INTERLEAVED=layout == "interleaved", BLOCK_R=block_r,
        HALF=max(16, triton.next_power_of_2(half)))
    return y


class RopeFunction(torch.autograd.Function):
    """relpos.triton.rope as one autograd node: the backward rotates the
    gradient by the opposite angles."""

    @staticmethod
    def forward(ctx, x, position_offset, base, layout, fn="triton.rope"):
        ctx.options = (position_offset, base, layout)
        ctx.fn = fn
        return rotate(fn, x, position_offset, base, layout, 1)

    @staticmethod
    @once_differentiable
    def backward(ctx, dy):
        return (rotate(ctx.fn + "_backward", dy, *ctx.options, -1),
                None, None, None, None)

"""The package's argument checks, in one place: every message names the
function (``relpos.<fn>``) and the argument.

    integer       an int (int64 range, bools refused), optionally within
                  [minimum, maximum]: every integer argument of the package
    boolean, number, choice
    float_array, contiguous     numpy arrays of the numpy API
    torch_tensor  a tensor of relpos.torch (CPU: the C++ kernel, float32 /
                  float64; CUDA: the Triton kernels, four float dtypes)
    gpu_tensor    a tensor of the Triton path (relpos.triton)

Every module of the package checks its arguments here; this module imports
nothing of the package (and PyTorch only inside the tensor checks, which
receive tensors), so no module needs another half-initialised. Types and
shapes are checked here; the values of an attention call (ranges,
consistency) by the C++ library, whose InvalidArgument arrives as
ValueError.
"""

from __future__ import annotations

import operator

import numpy as np

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
FLOAT_DTYPES = (np.float32, np.float64)


def integer(fn, name, x, allow_none=False, *, minimum=None, maximum=None,
            wrong_type=TypeError):
    """x as a Python int in the int64 range (bools refused; anything with
    __index__ taken, numpy integers and one-element integer tensors
    included), and within [minimum, maximum] where given (ValueError).
    wrong_type is the exception for a non-integer: TypeError, or ValueError
    where a function has always documented ValueError for every bad
    argument (relpos.translate, the converters)."""
    if x is None and allow_none:
        return None
    if isinstance(x, (bool, np.bool_)):
        raise wrong_type(f"relpos.{fn}: {name} must be an integer (got "
                         f"bool)")
    try:
        value = operator.index(x)
    except TypeError:
        raise wrong_type(
            f"relpos.{fn}: {name} must be an integer (got "
            f"{type(x).__name__})") from None
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"relpos.{fn}: {name} out of range (got {value})")
    if minimum is not None and maximum is not None:
        if not minimum <= value <= maximum:
            raise ValueError(f"relpos.{fn}: {name} must be in [{minimum}, "
                             f"{maximum}] (got {value})")
    elif minimum is not None and value < minimum:
        raise ValueError(f"relpos.{fn}: {name} must be >= {minimum} (got "
                         f"{value})")
    elif maximum is not None and value > maximum:
        raise ValueError(f"relpos.{fn}: {name} must be <= {maximum} (got "
                         f"{value})")
    return value


def boolean(fn, name, x):
    """x as a Python bool; only bool and numpy.bool_ are accepted."""
    if not isinstance(x, (bool, np.bool_)):
        raise TypeError(
            f"relpos.{fn}: {name} must be a bool (got {type(x).__name__})")
    return bool(x)


def number(fn, name, x):
    """x as a Python float (anything float() takes but a string)."""
    if isinstance(x, (str, bytes)):
        raise TypeError(f"relpos.{fn}: {name} must be a number (got "
                        f"{type(x).__name__})")
    try:
        return float(x)
    except (TypeError, ValueError):
        raise TypeError(f"relpos.{fn}: {name} must be a number (got "
                        f"{type(x).__name__})") from None


def choice(fn, name, x, choices):
    """x, one of the strings `choices`."""
    if not isinstance(x, str) or x not in choices:
        names = " or ".join(repr(c) for c in choices)
        raise ValueError(f"relpos.{fn}: {name} must be {names} (got {x!r})")
    return x


def float_array(fn, name, x):
    """x as an array of dtype float32 or float64 (not copied)."""
    if x is None:
        raise TypeError(f"relpos.{fn}: {name} must be an array, not None")
    a = np.asarray(x)
    if a.dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"relpos.{fn}: {name} must have dtype float32 or float64 "
            f"(got {a.dtype})")
    return a


def contiguous(fn, name, x, dtype, ranks):
    """x as a C-contiguous array of `dtype` and one of the ranks `ranks`
    (a copy only when needed)."""
    a = float_array(fn, name, x)
    if a.dtype != dtype:
        raise TypeError(
            f"relpos.{fn}: {name} has dtype {a.dtype} but q has {dtype}; "
            f"all arrays of one call must share a dtype")
    if a.ndim not in ranks:
        want = " or ".join(str(r) for r in ranks)
        raise ValueError(
            f"relpos.{fn}: {name} must have rank {want} (got shape {a.shape})")
    return np.ascontiguousarray(a)


# --- tensors (relpos.torch, relpos.triton, relpos.torch's context
# parallelism); PyTorch is imported only when a tensor is checked.

# The dtypes of relpos's C++ kernel (CPU tensors) and of the Triton kernels
# (CUDA tensors, and CPU ones under Triton's interpreter).
_TORCH_CPU_DTYPES = ("float32", "float64")
_TORCH_GPU_DTYPES = ("float16", "bfloat16", "float32", "float64")
_GPU_DTYPE_NAMES = ("torch.float16, torch.bfloat16, torch.float32 or "
                    "torch.float64")


def _tensor_type(fn, name, t):
    import torch
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"relpos.{fn}: {name} must be a torch.Tensor (got "
                        f"{type(t).__name__})")


def _dtype_name(dtype):
    return str(dtype).removeprefix("torch.")


def _same_device(fn, name, t, like):
    if like is not None and t.device != like.device:
        raise ValueError(f"relpos.{fn}: {name} is on {t.device} but q is on "
                         f"{like.device}; every tensor of one call must be "
                         f"on one device")


def torch_tensor(fn, name, t, like=None):
    """A tensor argument of relpos.torch: CPU tensors are float32 or
    float64 (the C++ kernel), CUDA tensors float16, bfloat16, float32 or
    float64 (the Triton kernels); `like` (q) fixes the call's device."""
    _tensor_type(fn, name, t)
    _same_device(fn, name, t, like)
    kind = t.device.type
    if kind == "cuda":
        if _dtype_name(t.dtype) not in _TORCH_GPU_DTYPES:
            error = (NotImplementedError if t.dtype.is_floating_point
                     else TypeError)
            raise error(f"relpos.{fn}: {name} must have dtype "
                        f"{_GPU_DTYPE_NAMES} on CUDA (got {t.dtype})")
        return
    if kind != "cpu":
        raise ValueError(f"relpos.{fn}: {name} is on {t.device}; relpos runs "
                         f"CPU tensors (its C++ kernel) and CUDA tensors "
                         f"(its Triton kernels)")
    if _dtype_name(t.dtype) not in _TORCH_CPU_DTYPES:
        raise TypeError(f"relpos.{fn}: {name} must have dtype torch.float32 "
                        f"or torch.float64 (got {t.dtype})")


def gpu_tensor(fn, name, t, like=None, interpreting=False):
    """A tensor argument of the Triton kernels: dense, float16, bfloat16,
    float32 or float64; on a GPU (or on the CPU when `interpreting`, Triton's
    interpreter); `like` (q) fixes the call's device and dtype."""
    import torch
    _tensor_type(fn, name, t)
    if t.layout != torch.strided:
        raise ValueError(f"relpos.{fn}: {name} must be a dense (strided) "
                         f"tensor (got layout {t.layout})")
    if _dtype_name(t.dtype) not in _TORCH_GPU_DTYPES:
        if t.dtype.is_floating_point:
            raise NotImplementedError(
                f"relpos.{fn}: {name} has dtype {t.dtype}; the GPU path "
                f"runs {_GPU_DTYPE_NAMES}")
        raise TypeError(f"relpos.{fn}: {name} must have dtype "
                        f"{_GPU_DTYPE_NAMES} (got {t.dtype})")
    if like is None:
        if t.device.type == "cpu" and not interpreting:
            raise ValueError(
                f"relpos.{fn}: {name} is on the CPU; the Triton kernels run "
                f"on a GPU, or on the CPU under Triton's interpreter "
                f"(TRITON_INTERPRET=1); relpos.torch.attention runs CPU "
                f"tensors on relpos's C++ kernel")
        return
    _same_device(fn, name, t, like)
    if t.dtype != like.dtype:
        raise TypeError(f"relpos.{fn}: {name} has dtype {t.dtype} but q has "
                        f"{like.dtype}; all tensors of one call must share a "
                        f"dtype")

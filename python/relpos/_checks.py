"""The package's argument checks, in one place: every message names the
function (``relpos.<fn>``) and the argument.

Imported by relpos/__init__.py, relpos/position_schemes.py,
relpos/_registry.py and relpos.torch; it imports nothing of the package, so
no module needs another half-initialised. Types and shapes are checked
here; values (ranges, consistency) by the C++ library, whose
InvalidArgument arrives as ValueError.
"""

from __future__ import annotations

import operator

import numpy as np

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
FLOAT_DTYPES = (np.float32, np.float64)


def integer(fn, name, x, allow_none=False):
    """x as a Python int in the int64 range (bools refused)."""
    if x is None and allow_none:
        return None
    if isinstance(x, (bool, np.bool_)):
        raise TypeError(f"relpos.{fn}: {name} must be an integer (got bool)")
    try:
        value = operator.index(x)
    except TypeError:
        raise TypeError(
            f"relpos.{fn}: {name} must be an integer (got "
            f"{type(x).__name__})") from None
    if not _INT64_MIN <= value <= _INT64_MAX:
        raise ValueError(f"relpos.{fn}: {name} out of range (got {value})")
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

"""Self-attention with relative position representations (Shaw et al., 2018).

numpy interface to the relpos C++ library. The mathematics and conventions are
those of the C++ API (docs/math.md sections 1-3)::

    r(i, j) = clip(j - (i + off), -k, k)          off = Nk - Nq by default
    s_ij    = (q_i . k_j + q_i . ak[r + k]) / sqrt(dk)     (masked -> -inf)
    p_ij    = softmax_j(s_ij)
    o_i     = sum_j p_ij v_j + sum_j p_ij av[r + k]

The other schemes of docs/math.md section 8 are keyword choices of the same
two functions: ``buckets=ClipBuckets(left, right)`` or ``T5Buckets(...)``
(which table row a distance uses), ``bias=`` (T5's scalar table [H, nb]
instead of ``ak``), ``alibi=True`` or a list of slopes (ALiBi instead of
``ak``), ``pb=`` (Transformer-XL's position query bias [H, dk], with
``ak``); ``av`` works with every bucket map.

Functions:
    attention           forward pass (optionally also the log-sum-exp)
    attention_backward  gradients of q, k, v and both tables
    init_relative_table seeded Xavier initialisation of a table (docs/math.md section 5)
    inspect             per-row statistics of a checkpoint's relative tables (docs/inspect.md)
    schemes, scheme     the registry of named position schemes (relpos/position_schemes.py)

Translation data and scores (BLEU / chrF as sacrebleu computes them, gettext
catalogs, the parallel corpus) are in the submodule ``relpos.translate``
(docs/translation.md); training and comparing models with the runner of
``relpos demo``, ``sweep`` and ``compare`` in ``relpos.experiment``
(docs/training.md).

float32 arrays run on relpos's fast path (the fused kernel where it is
built), float64 arrays on the reference path (used for gradient checks).
The GIL is released while relpos computes. The PyTorch interface is the
submodule ``relpos.torch`` (imported on first use; needs PyTorch).
"""

from __future__ import annotations

import importlib
import os
from typing import NamedTuple, Optional

import numpy as np

from . import _relpos_ext as _ext
from ._checks import boolean as _bool
from ._checks import contiguous as _array
from ._checks import float_array as _dtype_of
from ._checks import integer as _int
from ._call import native as native_args
from ._call import parse as parse_call
from ._call import per_head_tables
# Position schemes, one module (relpos/position_schemes.py, docs/schemes.md):
# the registry of named schemes, T5 / clip bucket maps, ALiBi slopes, RoPE.
from .position_schemes import (
    ClipBuckets, Scheme, SchemeCall, SchemeTable, T5Buckets, alibi_slopes,
    clip_bucket, rope, rope_backward, scheme, schemes, t5_bucket,
    t5_bucket_reach)

__version__ = _ext.__version__

# RELPOS_CPU_ISA caps the CPU kernels' instruction sets ("native",
# "avx512" or "avx2"; relpos/cpu.h, docs/generate.md "Instruction sets"), applied before
# any kernel runs; a bad value is a ValueError at import.
if os.environ.get("RELPOS_CPU_ISA"):
    try:
        _ext.limit_cpu_isa(os.environ["RELPOS_CPU_ISA"])
    except ValueError as e:
        raise ValueError(f"RELPOS_CPU_ISA: {e}") from None


def cpu_isa() -> str:
    """The instruction set relpos's int8 products dispatch to on this CPU
    ("AVX3+AMX", "AVX3+VNNI", "AVX3", "AVX2", ...): what ``RELPOS_CPU_ISA`` left."""
    return _ext.cpu_isa()

__all__ = [
    "AttentionGrads",
    "ClipBuckets",
    "T5Buckets",
    "attention",
    "attention_backward",
    "init_relative_table",
    "__version__",
]

class _AttentionGrads5(NamedTuple):
    dq: np.ndarray
    dk: np.ndarray
    dv: np.ndarray
    dak: Optional[np.ndarray]
    dav: Optional[np.ndarray]


class AttentionGrads(_AttentionGrads5):
    """Gradients returned by :func:`attention_backward`.

    Each has the shape of its input; ``dak`` / ``dav`` are None exactly when
    the table ``ak`` / ``av`` was None (that term switched off). As a tuple
    it is ``(dq, dk, dv, dak, dav)``; the gradients of the scheme inputs are
    the attributes ``dbias`` (T5 scalar table, [H, nb]) and ``dpb``
    (position query bias, [H, dk]), None when that input was None.
    """

    def __new__(cls, dq, dk, dv, dak, dav, dbias=None, dpb=None):
        self = super().__new__(cls, dq, dk, dv, dak, dav)
        self.dbias = dbias
        self.dpb = dpb
        return self


# The submodules not imported eagerly (some need PyTorch, Triton or
# CTranslate2, and importing PyTorch is slow): `relpos.interop` and the
# others work as attributes without an explicit `import relpos.interop`,
# imported on first use. Resolved by name, so a submodule that is not part
# of this installation is an AttributeError, not a half-import.
_LAZY_SUBMODULES = ("torch", "interop", "ctranslate2", "opennmt",
                    "distributed", "triton", "hf")


def _lazy_submodule_exists(name):
    import os
    here = os.path.dirname(__file__)
    return (os.path.isfile(os.path.join(here, name + ".py")) or
            os.path.isfile(os.path.join(here, name, "__init__.py")))


def __getattr__(name):
    if name in _LAZY_SUBMODULES:
        try:
            return importlib.import_module("." + name, __name__)
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise  # the submodule exists; one of its imports is missing
            raise AttributeError(
                f"module {__name__!r} has no attribute {name!r} (the "
                f"submodule {__name__}.{name} is not part of this "
                f"installation)") from None
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | {
        n for n in _LAZY_SUBMODULES if _lazy_submodule_exists(n)})


# --- argument checking: relpos/_checks.py (types), relpos/_call.py (an
# attention call's options); every message names the argument


class _Call:
    """The validated arguments of one attention call."""

    def __init__(self, fn, q, k, v, ak, av, max_distance, causal,
                 key_lengths, query_offset, buckets=None, bias=None,
                 alibi=None, pb=None, key_starts=None, scale=None):
        dtype = _dtype_of(fn, "q", q).dtype
        self.dtype = dtype
        self.q = _array(fn, "q", q, dtype, (4,))
        self.k = _array(fn, "k", k, dtype, (4,))
        self.v = _array(fn, "v", v, dtype, (4,))
        self.ak = None if ak is None else _array(fn, "ak", ak, dtype, (2, 3))
        self.av = None if av is None else _array(fn, "av", av, dtype, (2, 3))
        # Shared [2k+1, d] or per-head [H, 2k+1, d]: read from the rank.
        self.per_head_tables = per_head_tables(fn, self.ak, self.av)
        self.bias = None if bias is None else _array(fn, "bias", bias, dtype,
                                                     (2,))
        self.pb = None if pb is None else _array(fn, "pb", pb, dtype, (2,))
        # The options, through the package's one parsing path
        # (relpos/_call.py); the C++ core checks their values.
        a = parse_call(fn, ak=self.ak, bias=self.bias, pb=self.pb,
                       max_distance=max_distance, buckets=buckets,
                       alibi=alibi, causal=causal, key_lengths=key_lengths,
                       query_offset=query_offset, key_starts=key_starts,
                       scale=scale)
        self.scheme, self.rows = native_args(a)
        self.max_distance = a.max_distance
        self.causal = a.causal
        self.key_lengths = a.key_lengths
        self.query_offset = a.query_offset
        self.suffix = "f32" if dtype == np.float32 else "f64"

    def options(self):
        return dict(max_distance=self.max_distance,
                    per_head_tables=self.per_head_tables,
                    causal=self.causal,
                    key_lengths=self.key_lengths,
                    query_offset=self.query_offset,
                    bias=self.bias, pb=self.pb, scheme=self.scheme,
                    rows=self.rows)

    def forward(self):
        b, h, nq, _ = self.q.shape
        out = np.empty((b, h, nq, self.v.shape[3]), self.dtype)
        lse = np.empty((b, h, nq), self.dtype)
        getattr(_ext, "forward_" + self.suffix)(
            self.q, self.k, self.v, self.ak, self.av, out, lse,
            **self.options())
        return out, lse


# --- public API ------------------------------------------------------------


def attention(q, k, v, ak=None, av=None, *, max_distance=None, causal=False,
              key_lengths=None, query_offset=None, return_lse=False,
              buckets=None, bias=None, alibi=None, pb=None, key_starts=None,
              scale=None):
    """Relative-position self-attention, forward pass.

    Args:
        q: queries [B, H, Nq, dk], float32 or float64.
        k: keys [B, Hkv, Nk, dk], same dtype; Hkv = H, or Hkv dividing H
            for grouped-query attention (Hkv = 1: multi-query): query head
            h reads key/value head h // (H // Hkv), as Hugging Face's
            repeat_kv does.
        v: values [B, Hkv, Nk, dv], same dtype.
        ak: key-side table [2k+1, dk] shared by all heads, or [H, 2k+1, dk]
            per head; None switches the key term off.
        av: value-side table [2k+1, dv] or [H, 2k+1, dv]; None switches the
            value term off. If both tables are given, both are shared or
            both per-head.
        max_distance: the clipping distance k >= 0 (tables have 2k+1 rows,
            row r+k for distance r = key index - query position).
        causal: key j is visible to query i iff j <= i + query_offset.
        key_lengths: None, or B integers in [0, Nk]: keys j >= key_lengths[b]
            are padding and invisible.
        query_offset: absolute position of query row 0; default Nk - Nq
            (queries are the last Nq positions, as with a key/value cache).
            Or B integers, one per batch item: query row i of item b is at
            position i + query_offset[b] (batched decoding of prompts of
            different lengths).
        key_starts: None, or B integers in [0, key_lengths[b]]: keys
            j < key_starts[b] are padding and invisible (left padding).
            Distances stay those of the padded indices, r = j - (i + off),
            which are the distances counted from the row's first real key.
        return_lse: also return the log-sum-exp [B, H, Nq] of each row's
            scaled scores (-inf for a row that sees no key), which
            :func:`attention_backward` can reuse instead of recomputing.
        buckets: None (the symmetric clip by max_distance, Shaw),
            ClipBuckets(left, right) or T5Buckets(num_buckets, max_distance,
            bidirectional); tables then have left+right+1 or num_buckets
            rows, and max_distance must be left out.
        bias: T5's scalar table [H, nb] (instead of ak): bias[h, b(r)] is
            added to the scaled score.
        alibi: True (the paper's slopes, relpos.alibi_slopes(H)) or one
            slope per head (instead of ak): -m_h |r| is added to the scaled
            score. Nothing is learned.
        pb: Transformer-XL's position query bias [H, dk] (needs ak): the
            key-table term becomes (q_i + pb_h) . ak[b(r)] / sqrt(dk).
        scale: None (1 / sqrt(dk)) or the multiplier, finite and > 0, of
            q . k and of the vector table term (T5: 1.0, unscaled scores).
            T5's scalar bias and ALiBi are never scaled.

    Returns:
        out [B, H, Nq, dv], or (out, lse) if return_lse. A row that sees no
        key at all is zero.

    Raises:
        TypeError: an argument of the wrong type or dtype.
        ValueError: inconsistent shapes or out-of-range options.
    """
    call = _Call("attention", q, k, v, ak, av, max_distance, causal,
                 key_lengths, query_offset, buckets, bias, alibi, pb,
                 key_starts, scale)
    out, lse = call.forward()
    return (out, lse) if _bool("attention", "return_lse", return_lse) else out


def attention_backward(dout, q, k, v, ak=None, av=None, *,
                       max_distance=None, causal=False, key_lengths=None,
                       query_offset=None, out=None, lse=None, buckets=None,
                       bias=None, alibi=None, pb=None, key_starts=None,
                       scale=None):
    """Gradients of :func:`attention` with respect to every input.

    Takes the gradient of the loss with respect to the output, dout
    [B, H, Nq, dv], then exactly the arguments given to :func:`attention`.
    ``out`` and ``lse`` may be passed (from ``attention(...,
    return_lse=True)``) to skip the forward pass this function otherwise
    runs first; pass both or neither.

    Returns:
        AttentionGrads(dq, dk, dv, dak, dav), each shaped like its input;
        dak / dav are None when ak / av is None; .dbias / .dpb likewise
        for bias / pb. Shared tables receive the sum over batch and heads;
        with grouped-query attention dk / dv ([B, Hkv, Nk, d]) are the sums
        over each group's query heads.
        Rows that see no key get zero gradient.
    """
    fn = "attention_backward"
    call = _Call(fn, q, k, v, ak, av, max_distance, causal, key_lengths,
                 query_offset, buckets, bias, alibi, pb, key_starts, scale)
    dout = _array(fn, "dout", dout, call.dtype, (4,))
    if (out is None) != (lse is None):
        raise ValueError(
            f"relpos.{fn}: out and lse must be given together (got "
            f"out={'None' if out is None else 'an array'}, "
            f"lse={'None' if lse is None else 'an array'})")
    if out is None:
        out, lse = call.forward()
    else:
        out = _array(fn, "out", out, call.dtype, (4,))
        lse = _array(fn, "lse", lse, call.dtype, (3,))
    grads = AttentionGrads(
        dq=np.empty_like(call.q),
        dk=np.empty_like(call.k),
        dv=np.empty_like(call.v),
        dak=None if call.ak is None else np.empty_like(call.ak),
        dav=None if call.av is None else np.empty_like(call.av),
        dbias=None if call.bias is None else np.empty_like(call.bias),
        dpb=None if call.pb is None else np.empty_like(call.pb))
    getattr(_ext, "backward_" + call.suffix)(
        call.q, call.k, call.v, call.ak, call.av, out, lse, dout,
        grads.dq, grads.dk, grads.dv, grads.dak, grads.dav,
        dbias=grads.dbias, dpb=grads.dpb, **call.options())
    return grads


def init_relative_table(shape, *, init="xavier_normal", scale=1.0, seed=0):
    """A new float32 relative position table, initialised as in docs/math.md section 5.

    Args:
        shape: (2k+1, d) for a shared table or (H, 2k+1, d) per head.
        init: "xavier_normal" (std = scale * sqrt(2 / ((2k+1) + d))),
            "xavier_uniform" (bound = scale * sqrt(6 / ((2k+1) + d))) or
            "zeros".
        scale: multiplier on the Xavier std / bound, finite and >= 0.
        seed: relpos's own generator gives the same table for a seed on
            every platform (the C++ library and CLI use it too).
    """
    fn = "init_relative_table"
    if not isinstance(shape, (tuple, list)):
        raise TypeError(f"relpos.{fn}: shape must be a tuple of integers "
                        f"(got {type(shape).__name__})")
    dims = tuple(_int(fn, "shape", s) for s in shape)
    if len(dims) not in (2, 3) or any(s <= 0 for s in dims):
        raise ValueError(f"relpos.{fn}: shape must be (2k+1, d) or "
                         f"(H, 2k+1, d) with positive extents (got {dims})")
    if not isinstance(init, str):
        raise TypeError(f"relpos.{fn}: init must be a str (got "
                        f"{type(init).__name__})")
    try:
        scale = float(scale)
    except (TypeError, ValueError):
        raise TypeError(f"relpos.{fn}: scale must be a number (got "
                        f"{type(scale).__name__})") from None
    seed = _int(fn, "seed", seed)
    if seed < 0:
        raise ValueError(f"relpos.{fn}: seed must be >= 0 (got {seed})")
    table = np.empty(dims, np.float32)
    _ext.init_relative_table(table, init, scale, seed)
    return table


__all__ += ["alibi_slopes", "clip_bucket", "rope", "rope_backward",
            "t5_bucket", "t5_bucket_reach", "Scheme", "SchemeCall",
            "SchemeTable", "scheme", "schemes"]

# Inspecting a checkpoint's relative tables (relpos/_inspect.py,
# docs/inspect.md).
from ._inspect import inspect  # noqa: E402

__all__ += ["inspect", "cpu_isa"]

# Translation data and scores (relpos/translate.py, docs/translation.md).
from . import translate  # noqa: E402

# The experiment runner (relpos/experiment.py, docs/training.md).
from . import experiment  # noqa: E402

"""Grouped-query heads, per-row query offsets, left padding (key_starts),
the score scale, and per-row RoPE positions: numpy, PyTorch (CPU, custom
ops, torch.compile) and the refusals of the GPU path.

key_starts and scale are checked against the numpy oracle (which has them
from their definitions: keys j < key_starts[b] invisible; scale multiplies
q . k and the ak term). Grouped-query heads and per-row offsets are checked
by what they are defined to equal: k / v repeated to H heads, and one call
per batch item with its own offset.
"""

import math

import numpy as np
import pytest

import numpy_reference as ref
import relpos
from cases import assert_close

EPS = {np.float32: np.finfo(np.float32).eps, np.float64: np.finfo(np.float64).eps}

# (name, scheme keywords, which tables: "ak", "av", "bias", "pb")
SCHEMES = [
    ("shaw", dict(max_distance=3), ("ak", "av")),
    ("shaw_perhead", dict(max_distance=2), ("ak_h", "av_h")),
    ("asym", dict(buckets=relpos.ClipBuckets(4, 1)), ("ak", "av")),
    ("t5", dict(buckets=relpos.T5Buckets(8, 20)), ("bias",)),
    ("alibi", dict(max_distance=0, alibi=True), ()),
    ("xl", dict(max_distance=5), ("ak", "pb")),
    ("plain", dict(max_distance=0), ()),
]
SCHEME_IDS = [s[0] for s in SCHEMES]


def _rows(kw):
    b = kw.get("buckets")
    if b is None:
        return 2 * kw["max_distance"] + 1
    if isinstance(b, relpos.ClipBuckets):
        return b.left + b.right + 1
    return b.num_buckets


def _inputs(dtype, kw, tables, b=3, h=4, hkv=4, nq=6, nk=9, dk=6, dv=5,
            seed=0):
    rng = np.random.default_rng(seed)

    def randn(*shape):
        return rng.standard_normal(shape).astype(dtype)

    nb = _rows(kw)
    q, k, v = randn(b, h, nq, dk), randn(b, hkv, nk, dk), randn(b, hkv, nk, dv)
    extra = {}
    ak = av = None
    if "ak" in tables:
        ak = randn(nb, dk)
    if "ak_h" in tables:
        ak = randn(h, nb, dk)
    if "av" in tables:
        av = randn(nb, dv)
    if "av_h" in tables:
        av = randn(h, nb, dv)
    if "bias" in tables:
        extra["bias"] = randn(h, nb)
    if "pb" in tables:
        extra["pb"] = randn(h, dk)
    return (q, k, v, ak, av), extra


def _tol(dtype, n):
    # Rounding of sums of n terms grows like eps sqrt(n); the constant
    # covers the chained products, exp and division (as cases.tolerance).
    return 64.0 * EPS[dtype] * math.sqrt(n)


# --- key_starts and scale against the oracle --------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scheme", SCHEMES, ids=SCHEME_IDS)
def test_key_starts_and_scale_match_the_oracle(scheme, causal, dtype):
    _, kw, tables = scheme
    (q, k, v, ak, av), extra = _inputs(dtype, kw, tables)
    # Item 0: left padding 3; item 1: starts = lengths (sees nothing);
    # item 2: no padding. Queries at positions 3..8 (offset Nk - Nq).
    opts = dict(kw, causal=causal, key_lengths=[9, 5, 9],
                key_starts=[3, 5, 0], **extra)
    for scale in (None, 1.0, 0.3):
        out, lse = relpos.attention(q, k, v, ak, av, scale=scale,
                                    return_lse=True, **opts)
        want, want_lse, mag = ref.forward(q, k, v, ak, av, scale=scale,
                                          magnitudes=True, **opts)
        tol = _tol(dtype, 9 * 6)
        assert_close(out, want, mag, tol, f"out (scale {scale})")
        np.testing.assert_array_equal(np.isfinite(lse), np.isfinite(want_lse))
        assert np.all(out[1] == 0)  # item 1 sees no key: exact zeros
        dout = np.random.default_rng(5).standard_normal(out.shape).astype(
            dtype)
        got = relpos.attention_backward(dout, q, k, v, ak, av, scale=scale,
                                        **opts)
        exp, mags = ref.backward(dout, q, k, v, ak, av, scale=scale,
                                 magnitudes=True, scheme_grads=True, **opts)
        tol = _tol(dtype, 3 * 4 * 6 * 9)
        for name, g, e, m in zip(("dq", "dk", "dv", "dak", "dav", "dbias",
                                  "dpb"),
                                 tuple(got) + (got.dbias, got.dpb), exp, mags):
            if e is None:
                assert g is None, name
                continue
            assert_close(g, e, m, tol, f"{name} (scale {scale})")


def test_left_padding_equals_the_call_on_the_real_keys():
    # The definition of the distances under left padding: a row's visible
    # keys j in [s, L) see r = j - (i + off), i.e. the same call on the
    # real keys k[s:L] with query offset off - s.
    kw, tables = dict(max_distance=2), ("ak", "av")
    (q, k, v, ak, av), _ = _inputs(np.float64, kw, tables, b=2, nq=4, nk=8)
    starts, off = [3, 1], 4
    out = relpos.attention(q, k, v, ak, av, causal=True, key_starts=starts,
                           query_offset=off, **kw)
    for b, s in enumerate(starts):
        want = relpos.attention(q[b:b + 1], k[b:b + 1, :, s:],
                                v[b:b + 1, :, s:], ak, av, causal=True,
                                query_offset=off - s, **kw)
        np.testing.assert_allclose(out[b:b + 1], want, rtol=0, atol=1e-13)


def test_scale_is_a_multiplier_of_the_scaled_terms():
    # scale = c equals q (and pb) multiplied by c sqrt(dk) at the default
    # scale; T5's bias is not scaled.
    kw, tables = dict(max_distance=3), ("ak", "pb")
    (q, k, v, ak, _), extra = _inputs(np.float64, kw, tables)
    c, f = 0.7, 0.7 * math.sqrt(q.shape[3])
    got = relpos.attention(q, k, v, ak, scale=c, pb=extra["pb"], **kw)
    want = relpos.attention(q * f, k, v, ak, pb=extra["pb"] * f, **kw)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)
    # A wrong scale is seen: the test can fail.
    other = relpos.attention(q, k, v, ak, scale=0.5, pb=extra["pb"], **kw)
    assert np.abs(other - want).max() > 1e-3


# --- grouped-query heads ----------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("hkv", [1, 2])
@pytest.mark.parametrize("scheme", SCHEMES, ids=SCHEME_IDS)
def test_grouped_query_heads_equal_repeated_kv(scheme, hkv, dtype):
    _, kw, tables = scheme
    (q, k, v, ak, av), extra = _inputs(dtype, kw, tables, hkv=hkv)
    group = q.shape[1] // hkv
    kr, vr = np.repeat(k, group, axis=1), np.repeat(v, group, axis=1)
    opts = dict(kw, causal=True, key_lengths=[9, 4, 7], **extra)
    out = relpos.attention(q, k, v, ak, av, **opts)
    want = relpos.attention(q, kr, vr, ak, av, **opts)
    tol = 16 * EPS[dtype]
    np.testing.assert_allclose(out, want, rtol=tol, atol=tol)
    dout = np.random.default_rng(3).standard_normal(out.shape).astype(dtype)
    g = relpos.attention_backward(dout, q, k, v, ak, av, **opts)
    w = relpos.attention_backward(dout, q, kr, vr, ak, av, **opts)
    assert g.dk.shape == k.shape and g.dv.shape == v.shape

    def summed(x):  # the group's query heads summed: [B, Hkv, Nk, d]
        return x.reshape(x.shape[0], hkv, group, *x.shape[2:]).sum(axis=2)

    tol = 64 * EPS[dtype] * math.sqrt(3 * 4 * 6 * 9)
    for got, exp in ((g.dq, w.dq), (g.dk, summed(w.dk)), (g.dv, summed(w.dv)),
                     (g.dak, w.dak), (g.dav, w.dav), (g.dbias, w.dbias),
                     (g.dpb, w.dpb)):
        if exp is None:
            assert got is None
            continue
        scale = 1 + np.abs(exp).max()
        np.testing.assert_allclose(got, exp, rtol=0, atol=tol * scale)


def test_grouped_query_heads_must_divide():
    kw = dict(max_distance=1)
    (q, k, v, ak, av), _ = _inputs(np.float32, kw, ("ak",), h=4, hkv=3)
    with pytest.raises(ValueError, match="k"):
        relpos.attention(q, k, v, ak, **kw)


# --- per-row query offsets --------------------------------------------------


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("scheme", SCHEMES, ids=SCHEME_IDS)
def test_per_row_offsets_equal_one_call_per_item(scheme, dtype):
    _, kw, tables = scheme
    (q, k, v, ak, av), extra = _inputs(dtype, kw, tables, nq=2, nk=9)
    offsets = [7, 2, -1]  # a decode step at 7; a short prompt; before 0
    opts = dict(kw, causal=True, **extra)
    out = relpos.attention(q, k, v, ak, av, query_offset=offsets, **opts)
    dout = np.random.default_rng(9).standard_normal(out.shape).astype(dtype)
    g = relpos.attention_backward(dout, q, k, v, ak, av,
                                  query_offset=np.array(offsets), **opts)
    tol = 64 * EPS[dtype] * math.sqrt(9 * 6)
    dq = np.zeros_like(q)
    for b, off in enumerate(offsets):
        one = slice(b, b + 1)
        want = relpos.attention(q[one], k[one], v[one], ak, av,
                                query_offset=off, **opts)
        np.testing.assert_allclose(out[one], want, rtol=0, atol=tol)
        w = relpos.attention_backward(dout[one], q[one], k[one], v[one], ak,
                                      av, query_offset=off, **opts)
        np.testing.assert_allclose(g.dk[one], w.dk, rtol=0, atol=tol)
        dq[one] = w.dq
    np.testing.assert_allclose(g.dq, dq, rtol=0, atol=tol)
    assert np.all(out[2, :, 0] == 0)  # row 0 at position -1 sees no key


def test_per_row_offsets_are_validated():
    kw = dict(max_distance=1)
    (q, k, v, ak, _), _ = _inputs(np.float32, kw, ("ak",))
    with pytest.raises(ValueError, match="query_offsets|one entry per"):
        relpos.attention(q, k, v, ak, query_offset=[1, 2], **kw)
    with pytest.raises(TypeError, match="query_offset"):
        relpos.attention(q, k, v, ak, query_offset=[1.5, 2, 3], **kw)
    with pytest.raises(ValueError, match="key_starts"):
        relpos.attention(q, k, v, ak, key_starts=[1, 2, 10], **kw)
    with pytest.raises(ValueError, match="scale"):
        relpos.attention(q, k, v, ak, scale=0.0, **kw)
    with pytest.raises(TypeError, match="scale"):
        relpos.attention(q, k, v, ak, scale="1", **kw)


# --- RoPE per-row positions -------------------------------------------------


@pytest.mark.parametrize("layout", ["split_halves", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rope_per_row_offsets_equal_one_call_per_item(dtype, layout):
    x = np.random.default_rng(2).standard_normal((3, 2, 5, 8)).astype(dtype)
    offsets = [0, 11, -3]
    y = relpos.rope(x, position_offset=offsets, layout=layout)
    back = relpos.rope_backward(y, position_offset=np.array(offsets),
                                layout=layout)
    for b, off in enumerate(offsets):
        np.testing.assert_array_equal(
            y[b], relpos.rope(x[b], position_offset=off, layout=layout))
    np.testing.assert_allclose(back, x, rtol=0, atol=64 * EPS[dtype])
    with pytest.raises(ValueError, match="rank 4"):
        relpos.rope(x[0], position_offset=[0, 1])
    with pytest.raises(ValueError, match="one entry per batch item"):
        relpos.rope(x, position_offset=[0, 1])
    with pytest.raises(TypeError, match="position_offset"):
        relpos.rope(x, position_offset=[0.5, 1, 2])


# --- PyTorch ----------------------------------------------------------------


def _torch():
    return pytest.importorskip("torch", reason="PyTorch is not installed")


def test_torch_gradcheck_with_groups_offsets_and_left_padding():
    torch = _torch()
    import relpos.torch as rt
    g = torch.Generator().manual_seed(0)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64,
                           requires_grad=True)

    q, k, v = randn(2, 4, 3, 4), randn(2, 2, 6, 4), randn(2, 2, 6, 3)
    ak, av = randn(5, 4), randn(5, 3)

    def f(q, k, v, ak, av):
        return rt.attention(q, k, v, ak, av, max_distance=2, causal=True,
                            query_offset=torch.tensor([3, 1]),
                            key_starts=[1, 0], key_lengths=[6, 4],
                            scale=0.8)

    assert torch.autograd.gradcheck(f, (q, k, v, ak, av), eps=1e-6,
                                    atol=1e-7)


def test_torch_matches_numpy_and_compiles():
    torch = _torch()
    import relpos.torch as rt
    from relpos import _ops
    kw, tables = dict(buckets=relpos.T5Buckets(8, 20)), ("bias",)
    (q, k, v, _, _), extra = _inputs(np.float32, kw, tables, hkv=2, nq=3)
    opts = dict(kw, causal=True, key_starts=[2, 0, 1], key_lengths=[9, 6, 9],
                query_offset=[6, 3, 5], scale=1.0)
    want = relpos.attention(q, k, v, bias=extra["bias"], **opts)
    t = [torch.from_numpy(x) for x in (q, k, v, extra["bias"])]

    def f(q, k, v, bias):
        return rt.attention(q, k, v, bias=bias, **opts)

    np.testing.assert_array_equal(f(*t).numpy(), want)
    if not _ops.ENABLED:
        pytest.skip("torch.compile through relpos's custom ops needs "
                    "PyTorch >= 2.4")
    compiled = torch.compile(f, fullgraph=True, backend="eager")
    np.testing.assert_array_equal(compiled(*t).numpy(), want)


def test_torch_rope_per_row_and_its_gradient():
    torch = _torch()
    import relpos.torch as rt
    x = torch.randn(2, 3, 4, 6, dtype=torch.float64, requires_grad=True)
    offsets = torch.tensor([5, 0])
    y = rt.rope(x, position_offset=offsets)
    for b in range(2):
        torch.testing.assert_close(
            y[b], rt.rope(x[b], position_offset=int(offsets[b])), rtol=0,
            atol=0)
    assert torch.autograd.gradcheck(
        lambda t: rt.rope(t, position_offset=[5, 0]), (x,))


def test_gpu_path_runs_the_layouts():
    torch = _torch()
    pytest.importorskip("triton", reason="Triton is not installed")
    from relpos.triton import _problem
    if not _problem.interpreting():
        pytest.skip("needs TRITON_INTERPRET=1 (the GPU path on CPU tensors)")
    import relpos.triton as rtr
    q, k, v = (torch.randn(2, 4, 5, 8) for _ in range(3))
    k2, v2 = k[:, :2].contiguous(), v[:, :2].contiguous()
    # Grouped-query k / v, key_starts and per-row offsets run on the GPU
    # path (python/tests/test_triton.py checks them in depth) and agree
    # with the CPU (equal offsets and zero starts: the one-offset kernels).
    for args, kw in (((q, k2, v2), {}), ((q, k, v), dict(key_starts=[1, 0])),
                     ((q, k, v), dict(query_offset=[1, 0])),
                     ((q, k, v), dict(query_offset=[2, 2],
                                      key_starts=[0, 0]))):
        got = rtr.attention(*args, max_distance=0, **kw)
        want = relpos.attention(*(t.numpy() for t in args), max_distance=0,
                                **kw)
        np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-5)
    # scale and per-row RoPE are implemented: they agree with the CPU.
    ak = torch.randn(5, 8)
    got = rtr.attention(q, k, v, ak, max_distance=2, scale=0.6, causal=True)
    want = relpos.attention(q.numpy(), k.numpy(), v.numpy(), ak.numpy(),
                            max_distance=2, scale=0.6, causal=True)
    np.testing.assert_allclose(got.numpy(), want, rtol=0, atol=1e-5)
    y = rtr.rope(q, position_offset=[3, 9])
    np.testing.assert_allclose(
        y.numpy(), relpos.rope(q.numpy(), position_offset=[3, 9]), rtol=0,
        atol=1e-5)


def test_module_head_dim_scale_key_starts_and_a_shared_bias():
    torch = _torch()
    import relpos.torch as rt
    torch.manual_seed(0)
    e, h, dh = 12, 3, 5  # inner width 15 != 12, as mT5's d_kv
    first = rt.RelativeMultiheadAttention(e, h, scheme="t5", head_dim=dh,
                                          scale=1.0, bias=False,
                                          dtype=torch.float64)
    second = rt.RelativeMultiheadAttention(e, h, scheme="t5", head_dim=dh,
                                           scale=1.0, bias=False,
                                           dtype=torch.float64)
    second.t5_bias = first.t5_bias  # one table for the stack, as T5
    assert first.q_proj.weight.shape == (h * dh, e)
    assert first.out_proj.weight.shape == (e, h * dh)
    assert "head_dim=5" in repr(first) and "scale=1.0" in repr(first)
    x = torch.randn(2, 7, e, dtype=torch.float64)
    starts, lengths = [2, 0], [7, 6]
    y = second(first(x, key_starts=starts, key_lengths=lengths),
               key_starts=starts, key_lengths=lengths)
    # The same by hand: T5's unscaled scores and bias on the real keys.
    def manual(m, x):
        q, k, v = (p(x).view(2, 7, h, dh).transpose(1, 2)
                   for p in (m.q_proj, m.k_proj, m.v_proj))
        s = q @ k.transpose(-1, -2)
        r = np.arange(7)[None, :] - np.arange(7)[:, None]
        rows = relpos.t5_bucket(r, num_buckets=32, max_distance=128,
                                bidirectional=True)
        s = s + m.t5_bias[:, torch.from_numpy(rows)][None]
        j = torch.arange(7)
        mask = torch.stack([(j >= a) & (j < b)
                            for a, b in zip(starts, lengths)])
        s = s.masked_fill(~mask[:, None, None, :], float("-inf"))
        o = torch.softmax(s, -1) @ v
        return m.out_proj(o.transpose(1, 2).reshape(2, 7, h * dh))
    want = manual(second, manual(first, x))
    torch.testing.assert_close(y, want, rtol=1e-12, atol=1e-12)
    y.sum().backward()
    assert first.t5_bias.grad is not None and second.t5_bias.grad is \
        first.t5_bias.grad
    with pytest.raises(ValueError, match="xl.*head_dim"):
        rt.RelativeMultiheadAttention(e, h, scheme="xl", head_dim=dh)
    with pytest.raises(ValueError, match="scale"):
        rt.RelativeMultiheadAttention(e, h, scheme="t5", scale=-1.0)
    rope = rt.RelativeMultiheadAttention(e, h, scheme="rope")
    with pytest.raises(ValueError, match="key_starts with scheme 'rope'"):
        rope(x.float(), key_starts=starts)

"""relpos.attention / relpos.attention_backward against the numpy oracle."""

import threading
import time

import numpy as np
import pytest

import numpy_reference as ref
import relpos
from cases import CASES, CASE_IDS, Case, assert_close, tolerance

DTYPES = [np.float32, np.float64]
NAMES = ("q", "k", "v", "ak", "av")


def _visible_rows(case):
    """[B, Nq] mask of query rows that see at least one key."""
    _, lse = ref.forward(*case.inputs(np.float64), **case.kwargs())
    return np.isfinite(lse[:, 0, :])


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_matches_reference(case, dtype):
    inputs = case.inputs(dtype)
    out, lse = relpos.attention(*inputs, **case.kwargs(), return_lse=True)
    want_out, want_lse, magnitude = ref.forward(*inputs, **case.kwargs(),
                                                magnitudes=True)
    assert out.dtype == dtype and lse.dtype == dtype
    tol = tolerance(dtype, case)
    assert_close(out, want_out, magnitude, tol, "out")
    # lse: -inf exactly where a row sees no key, close elsewhere; the log of
    # a sum with relative error e is off by about e in absolute terms, on
    # top of the error of the max subtracted first (~ eps |lse|).
    finite = np.isfinite(want_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    assert np.all(lse[~finite] == -np.inf)
    assert_close(lse[finite], want_lse[finite],
                 1 + np.abs(want_lse[finite]), tol, "lse")
    # Rows that see nothing are exactly zero (docs/math.md section 1), never NaN.
    assert np.all(out[~finite] == 0)
    # Without return_lse the same output comes back alone.
    np.testing.assert_array_equal(
        relpos.attention(*inputs, **case.kwargs()), out)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_backward_matches_reference(case, dtype):
    inputs = case.inputs(dtype)
    rng = np.random.default_rng(7)
    dout = rng.standard_normal(
        (case.b, case.h, case.nq, case.dv)).astype(dtype)
    grads = relpos.attention_backward(dout, *inputs, **case.kwargs())
    want, magnitudes = ref.backward(dout, *inputs, **case.kwargs(),
                                    magnitudes=True)
    tol = tolerance(dtype, case, backward=True)
    for name, got, exp, mag, x in zip(NAMES, grads, want, magnitudes,
                                      inputs):
        if x is None:
            assert got is None, name
            continue
        assert got.dtype == dtype and got.shape == x.shape, name
        assert_close(got, exp, mag, tol, "d" + name)
    # Rows that see no key receive exactly zero gradient.
    dead = ~_visible_rows(case)
    for h in range(case.h):
        assert np.all(grads.dq[:, h][dead] == 0)


@pytest.mark.parametrize("dtype", DTYPES)
def test_backward_reuses_forward_state(dtype):
    # Passing out and lse from the forward pass must give the very same
    # gradients as letting attention_backward recompute them.
    case = Case("reuse", causal=True, key_lengths=(5, 7), per_head=True)
    inputs = case.inputs(dtype)
    out, lse = relpos.attention(*inputs, **case.kwargs(), return_lse=True)
    dout = np.random.default_rng(3).standard_normal(out.shape).astype(dtype)
    a = relpos.attention_backward(dout, *inputs, **case.kwargs())
    b = relpos.attention_backward(dout, *inputs, **case.kwargs(), out=out,
                                  lse=lse)
    for name, x, y in zip(NAMES, a, b):
        np.testing.assert_array_equal(x, y, err_msg=name)
    assert isinstance(b, relpos.AttentionGrads)
    assert b.dq is b[0] and b.dav is b[4]


@pytest.mark.parametrize("dtype", DTYPES)
def test_non_contiguous_inputs(dtype):
    # Views (transposes, strided slices) are copied to contiguous memory:
    # the results equal those of contiguous copies bit for bit.
    case = Case("strided", per_head=True, causal=True)
    q, k, v, ak, av = case.inputs(dtype)

    def strided(x):
        # Same values, but a non-contiguous layout: every other element of
        # an array twice as large, seen through a transposed copy.
        big = np.zeros(x.shape[:-1] + (2 * x.shape[-1],), dtype)
        big[..., ::2] = x
        return big[..., ::2]

    qs = np.swapaxes(np.ascontiguousarray(np.swapaxes(q, 1, 2)), 1, 2)
    views = (qs, strided(k), strided(v), strided(ak), av.T.copy().T)
    for x in views:
        assert not x.flags.c_contiguous
    kw = case.kwargs()
    np.testing.assert_array_equal(relpos.attention(*views, **kw),
                                  relpos.attention(q, k, v, ak, av, **kw))
    dout = np.ones((case.b, case.h, case.nq, case.dv), dtype)
    for x, y in zip(relpos.attention_backward(dout.T.copy().T, *views, **kw),
                    relpos.attention_backward(dout, q, k, v, ak, av, **kw)):
        np.testing.assert_array_equal(x, y)


def test_read_only_inputs():
    # Inputs are only read: arrays marked read-only are accepted as they are.
    case = Case("readonly", per_head=True)
    inputs = case.inputs(np.float32)
    want = relpos.attention(*inputs, **case.kwargs())
    for x in inputs:
        x.flags.writeable = False
    np.testing.assert_array_equal(relpos.attention(*inputs, **case.kwargs()),
                                  want)
    dout = np.ones_like(want)
    dout.flags.writeable = False
    grads = relpos.attention_backward(dout, *inputs, **case.kwargs())
    assert all(g.flags.writeable for g in grads)


def test_key_lengths_accepts_numpy_integers():
    case = Case("np_lengths", key_lengths=(6, 2))
    inputs = case.inputs(np.float64)
    kw = case.kwargs()
    want = relpos.attention(*inputs, **kw)
    kw["key_lengths"] = np.array([6, 2], dtype=np.int32)
    np.testing.assert_array_equal(relpos.attention(*inputs, **kw), want)
    kw["max_distance"] = np.int64(case.k)
    np.testing.assert_array_equal(relpos.attention(*inputs, **kw), want)


def test_releases_the_gil():
    # While relpos computes in one thread, the main thread must keep
    # running Python code. With the GIL held, the main thread would make no
    # progress at all between the call's start and end (apart from the
    # switch interval at the very start); we check that it made progress in
    # the middle half of the call.
    rng = np.random.default_rng(0)
    tables = rng.standard_normal((2, 33, 32))
    # float64 (the reference path, O(n^2) per head): grow n until one call
    # lasts long enough (>= 50 ms) to see the main thread run beside it.
    for n in (256, 512, 1024, 2048):
        q = rng.standard_normal((1, 2, n, 32))
        start = time.perf_counter()
        relpos.attention(q, q, q, tables[0], tables[1], max_distance=16)
        if time.perf_counter() - start >= 0.05:
            break
    times = {}

    def work():
        times["start"] = time.perf_counter()
        relpos.attention(q, q, q, tables[0], tables[1], max_distance=16)
        times["end"] = time.perf_counter()

    ticks = []
    thread = threading.Thread(target=work)
    thread.start()
    while thread.is_alive():
        ticks.append(time.perf_counter())
    thread.join()
    start, end = times["start"], times["end"]
    quarter = (end - start) / 4
    middle = [t for t in ticks if start + quarter < t < end - quarter]
    assert middle, (f"main thread made no progress during a "
                    f"{end - start:.3f} s call: the GIL was held")


def test_init_relative_table():
    # docs/math.md section 5: Xavier normal std = scale * sqrt(2 / ((2k+1) + d)); seeded.
    rows, d, scale = 33, 64, 0.5
    t = relpos.init_relative_table((4, rows, d), scale=scale, seed=3)
    assert t.dtype == np.float32 and t.shape == (4, rows, d)
    np.testing.assert_array_equal(
        t, relpos.init_relative_table((4, rows, d), scale=scale, seed=3))
    assert not np.array_equal(
        t, relpos.init_relative_table((4, rows, d), scale=scale, seed=4))
    std = scale * np.sqrt(2.0 / (rows + d))
    # n = 8448 samples: the sample std is within ~1/sqrt(2n) = 0.8%
    # (one sigma) of the true std; 5% is > 6 sigma.
    assert abs(t.std() / std - 1) < 0.05
    assert abs(t.mean()) < 5 * std / np.sqrt(t.size)
    u = relpos.init_relative_table((rows, d), init="xavier_uniform",
                                   scale=scale, seed=3)
    bound = scale * np.sqrt(6.0 / (rows + d))
    assert np.abs(u).max() <= bound
    assert np.abs(u).max() > 0.95 * bound  # 2112 samples reach the edge
    assert np.all(relpos.init_relative_table((3, 4), init="zeros") == 0)


# --- bad arguments: TypeError / ValueError naming the argument --------------


def _good(dtype=np.float32):
    return Case("good").inputs(dtype)


def _raises(exc, name, fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert name in str(info.value), (name, str(info.value))


def test_bad_dtypes_raise_type_error():
    q, k, v, ak, av = _good()
    _raises(TypeError, "q", relpos.attention, q.astype(np.int32), k, v,
            max_distance=2)
    _raises(TypeError, "k", relpos.attention, q, k.astype(np.float64), v,
            max_distance=2)
    _raises(TypeError, "av", relpos.attention, q, k, v, ak,
            av.astype(np.float16), max_distance=2)
    _raises(TypeError, "q", relpos.attention, None, k, v, max_distance=2)
    _raises(TypeError, "max_distance", relpos.attention, q, k, v,
            max_distance=2.0)
    _raises(TypeError, "max_distance", relpos.attention, q, k, v)
    _raises(TypeError, "causal", relpos.attention, q, k, v, max_distance=2,
            causal="yes")
    _raises(TypeError, "key_lengths", relpos.attention, q, k, v,
            max_distance=2, key_lengths=[1.5, 2.0])
    _raises(TypeError, "query_offset", relpos.attention, q, k, v,
            max_distance=2, query_offset="0")
    _raises(TypeError, "dout", relpos.attention_backward,
            np.zeros((2, 3, 7, 5)), q, k, v, max_distance=2)


def test_bad_shapes_raise_value_error():
    q, k, v, ak, av = _good()
    _raises(ValueError, "v", relpos.attention, q, k, v[0], max_distance=2)
    _raises(ValueError, "k", relpos.attention, q, k[:1], v, max_distance=2)
    _raises(ValueError, "v", relpos.attention, q, k, v[:, :, :3],
            max_distance=2)
    _raises(ValueError, "ak", relpos.attention, q, k, v, ak[:4], av,
            max_distance=2)
    _raises(ValueError, "ak", relpos.attention, q, k, v, ak, av,
            max_distance=3)
    _raises(ValueError, "ak", relpos.attention, q, k, v, ak[None], av,
            max_distance=2)
    _raises(ValueError, "ak", relpos.attention, q, k, v, ak[0], av,
            max_distance=2)
    _raises(ValueError, "max_distance", relpos.attention, q, k, v,
            max_distance=-1)
    _raises(ValueError, "key_lengths", relpos.attention, q, k, v,
            max_distance=2, key_lengths=[1])
    _raises(ValueError, "key_lengths", relpos.attention, q, k, v,
            max_distance=2, key_lengths=[1, 8])
    _raises(ValueError, "query_offset", relpos.attention, q, k, v,
            max_distance=2, query_offset=2**41)
    out, lse = relpos.attention(q, k, v, ak, av, max_distance=2,
                                return_lse=True)
    _raises(ValueError, "dout", relpos.attention_backward, out[:, :1], q, k,
            v, ak, av, max_distance=2)
    _raises(ValueError, "lse", relpos.attention_backward, out, q, k, v, ak,
            av, max_distance=2, out=out)
    _raises(ValueError, "lse", relpos.attention_backward, out, q, k, v, ak,
            av, max_distance=2, out=out, lse=lse[:, :, :2])


def test_bad_init_arguments():
    _raises(ValueError, "init", relpos.init_relative_table, (3, 4),
            init="kaiming")
    _raises(ValueError, "shape", relpos.init_relative_table, (3, 0))
    _raises(TypeError, "shape", relpos.init_relative_table, 5)
    _raises(ValueError, "scale", relpos.init_relative_table, (3, 4),
            scale=-1.0)

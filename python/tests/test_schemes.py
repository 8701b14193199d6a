"""The scheme family (docs/math.md section 8) through relpos.attention,
relpos.attention_backward and relpos.torch.attention, against the numpy
oracle (numpy_reference.py): asymmetric clip, T5 buckets with Shaw tables
(shaw-log), T5 scalar tables, ALiBi, the position query bias (XL)."""

import numpy as np
import pytest

import numpy_reference as ref
import relpos
from cases import SchemeCase, assert_close, scheme_cases, tolerance

DTYPES = [np.float32, np.float64]
CASES = scheme_cases()
IDS = [c.name for c in CASES]
NAMES = ("q", "k", "v", "ak", "av", "bias", "pb")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_forward_matches_reference(case, dtype):
    inputs, extra = case.inputs(dtype), case.extra(dtype)
    out, lse = relpos.attention(*inputs, **case.kwargs(), **extra,
                                return_lse=True)
    want, want_lse, mag = ref.forward(*inputs, **case.kwargs(), **extra,
                                      magnitudes=True)
    tol = tolerance(dtype, case)
    assert out.dtype == dtype
    assert_close(out, want, mag, tol, "out")
    finite = np.isfinite(want_lse)
    np.testing.assert_array_equal(np.isfinite(lse), finite)
    assert_close(lse[finite], want_lse[finite], 1 + np.abs(want_lse[finite]),
                 tol, "lse")


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_backward_matches_reference(case, dtype):
    inputs, extra = case.inputs(dtype), case.extra(dtype)
    dout = np.random.default_rng(7).standard_normal(
        (case.b, case.h, case.nq, case.dv)).astype(dtype)
    grads = relpos.attention_backward(dout, *inputs, **case.kwargs(),
                                      **extra)
    want, mags = ref.backward(dout, *inputs, **case.kwargs(), **extra,
                              magnitudes=True, scheme_grads=True)
    got = tuple(grads) + (grads.dbias, grads.dpb)
    given = inputs + (extra["bias"], extra["pb"])
    tol = tolerance(dtype, case, backward=True)
    for name, g, w, m, x in zip(NAMES, got, want, mags, given):
        if x is None:
            assert g is None, name
            continue
        assert g.dtype == dtype and g.shape == x.shape, name
        assert_close(g, w, m, tol, "d" + name)


def test_oracle_t5_rows_and_slopes_match_relpos():
    # The oracle's own T5 buckets and ALiBi slopes agree with relpos's
    # (themselves checked against golden files and the paper's code).
    r = np.arange(-300, 301)
    for nb, md, bi in ((8, 6, True), (6, 5, False), (32, 128, True),
                       (32, 128, False), (20, 160, True)):
        np.testing.assert_array_equal(
            ref.t5_rows(r, nb, md, bi),
            relpos.t5_bucket(r, num_buckets=nb, max_distance=md,
                             bidirectional=bi), err_msg=f"{nb} {md} {bi}")
    # The paper's repeated powers differ from relpos's exp2 by a few double
    # ulps (docs/schemes.md), not at all in float32.
    for h in range(1, 33):
        np.testing.assert_allclose(ref.alibi_slopes(h),
                                   relpos.alibi_slopes(h), rtol=1e-14)
        np.testing.assert_array_equal(
            np.float32(ref.alibi_slopes(h)),
            np.float32(relpos.alibi_slopes(h)))


def test_equal_clip_is_the_symmetric_path():
    # ClipBuckets(k, k) is the default symmetric clip (float64: both run the
    # reference, bit for bit).
    case = SchemeCase("sym", causal=True, key_lengths=(7, 3), per_head=True)
    inputs = case.inputs(np.float64)
    a = relpos.attention(*inputs, max_distance=2, causal=True,
                         key_lengths=(7, 3))
    b = relpos.attention(*inputs, buckets=relpos.ClipBuckets(2, 2),
                         causal=True, key_lengths=(7, 3))
    np.testing.assert_array_equal(a, b)


def test_zero_alibi_slopes_and_constant_t5_table_are_vanilla():
    case = SchemeCase("van", causal=True, value_term=False)
    q, k, v, _, _ = case.inputs(np.float64)
    vanilla = relpos.attention(q, k, v, max_distance=0, causal=True)
    zero = relpos.attention(q, k, v, max_distance=0, causal=True,
                            alibi=[0.0] * case.h)
    np.testing.assert_array_equal(zero, vanilla)
    const = relpos.attention(q, k, v, buckets=relpos.T5Buckets(8, 6),
                             causal=True, bias=np.full((case.h, 8), -2.5))
    np.testing.assert_allclose(const, vanilla, rtol=1e-13, atol=1e-13)
    slopes = relpos.attention(q, k, v, max_distance=0, causal=True,
                              alibi=True)
    assert np.abs(slopes - vanilla).max() > 1e-3  # the slopes do something


def _raises(exc, needle, fn, *args, **kwargs):
    with pytest.raises(exc) as info:
        fn(*args, **kwargs)
    assert needle in str(info.value), str(info.value)


def test_argument_errors():
    case = SchemeCase("bad", value_term=False)
    q, k, v, ak, _ = case.inputs(np.float64)
    bias = np.zeros((case.h, 5))
    _raises(ValueError, "at most one", relpos.attention, q, k, v, ak,
            max_distance=2, bias=bias)
    _raises(ValueError, "at most one", relpos.attention, q, k, v, ak,
            max_distance=2, alibi=True)
    _raises(ValueError, "pb", relpos.attention, q, k, v, max_distance=2,
            pb=np.zeros((case.h, case.dk)))
    _raises(ValueError, "max_distance", relpos.attention, q, k, v, ak,
            max_distance=2, buckets=relpos.ClipBuckets(2, 2))
    _raises(TypeError, "max_distance", relpos.attention, q, k, v, ak)
    _raises(TypeError, "buckets", relpos.attention, q, k, v, ak,
            buckets=(2, 2))
    _raises(TypeError, "alibi", relpos.attention, q, k, v, max_distance=2,
            alibi="yes")
    _raises(TypeError, "buckets.left", relpos.attention, q, k, v, ak,
            buckets=relpos.ClipBuckets(2.5, 1))
    # Errors of the C++ core name the argument and value too.
    _raises(ValueError, "num_buckets", relpos.attention, q, k, v,
            buckets=relpos.T5Buckets(3, 10), bias=np.zeros((case.h, 3)))
    _raises(ValueError, "bias has shape [3, 5]", relpos.attention, q, k, v,
            buckets=relpos.T5Buckets(8, 10), bias=bias)
    _raises(ValueError, "alibi_slopes", relpos.attention, q, k, v,
            max_distance=2, alibi=[0.5, 0.25])
    _raises(ValueError, "alibi_slopes[1]", relpos.attention, q, k, v,
            max_distance=2, alibi=[0.5, np.nan, 0.1])


def test_float32_auto_path_for_unsupported_schemes():
    # float32 runs whatever the fused kernel lacks on the reference, with
    # float32 accuracy (compared with the float64 oracle above); here: the
    # result does not depend on whether a scheme input is a view.
    case = SchemeCase("view", buckets=relpos.T5Buckets(8, 6), score="bias")
    inputs, extra = case.inputs(np.float32), case.extra(np.float32)
    bias_t = np.ascontiguousarray(extra["bias"].T).T
    assert not bias_t.flags.c_contiguous
    np.testing.assert_array_equal(
        relpos.attention(*inputs, **case.kwargs(), bias=bias_t),
        relpos.attention(*inputs, **case.kwargs(), **extra))

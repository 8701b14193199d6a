"""Checks of the test oracle itself (numpy_reference.py), so that agreement
with it means something: a hand-computed case and finite differences."""

import math

import numpy as np
import pytest

import numpy_reference as ref
from cases import CASES


def test_hand_computed():
    # One query, two keys, k = 1, dk = dv = 1. off = Nk - Nq = 1, so the
    # query sits at position 1; keys 0 and 1 are at distances j - (i + off)
    # = -1 and 0: table rows 0 and 1.
    q = np.array([1.0]).reshape(1, 1, 1, 1)
    k = np.array([1.0, 2.0]).reshape(1, 1, 2, 1)
    v = np.array([10.0, 20.0]).reshape(1, 1, 2, 1)
    ak = np.array([[0.5], [0.0], [-7.0]])
    av = np.array([[1.0], [2.0], [3.0]])
    out, lse = ref.forward(q, k, v, ak, av, max_distance=1)
    # Scores 1*1 + 1*0.5 = 1.5 and 1*2 + 1*0 = 2 (dk = 1: no scaling).
    e0, e1 = math.exp(1.5), math.exp(2.0)
    p0, p1 = e0 / (e0 + e1), e1 / (e0 + e1)
    assert out[0, 0, 0, 0] == pytest.approx(p0 * (10 + 1) + p1 * (20 + 2),
                                            rel=1e-14)
    assert lse[0, 0, 0] == pytest.approx(math.log(e0 + e1), rel=1e-14)


def test_far_buckets_and_causal_by_hand():
    # Three positions, k = 1, causal, zero keys: scores come from ak only.
    # Row 2 sees keys 0, 1, 2 at distances -2 (clipped to -1), -1, 0.
    q = np.ones((1, 1, 3, 1))
    k = np.zeros((1, 1, 3, 1))
    v = np.zeros((1, 1, 3, 1))
    ak = np.array([[1.0], [0.0], [5.0]])
    av = np.array([[100.0], [10.0], [1.0]])
    out, _ = ref.forward(q, k, v, ak, av, max_distance=1, causal=True)
    e = np.exp([1.0, 1.0, 0.0])
    want = (e[0] * 100 + e[1] * 100 + e[2] * 10) / e.sum()
    assert out[0, 0, 2, 0] == pytest.approx(want, rel=1e-14)
    # Row 0 sees only key 0 (distance 0, row 1): output av[1] = 10.
    assert out[0, 0, 0, 0] == pytest.approx(10.0, rel=1e-14)


@pytest.mark.parametrize(
    "case", [c for c in CASES if c.nq * c.nk <= 100], ids=lambda c: c.name)
def test_backward_matches_finite_differences(case):
    # L = sum(out * w) for a fixed random w, so dL/dout = w. Central
    # differences along a random direction u of each input: the truncation
    # error is O(h^2 L''') ~ 1e-10 and the rounding error O(eps |L| / h)
    # ~ 1e-10 for h = 1e-6, so 1e-6 relative is a safe margin that still
    # catches any wrong term (those are O(1) relative).
    inputs = list(case.inputs(np.float64, seed=1))
    kw = case.kwargs()
    rng = np.random.default_rng(2)
    out, _ = ref.forward(*inputs, **kw)
    w = rng.standard_normal(out.shape)
    grads = ref.backward(w, *inputs, **kw)
    h = 1e-6
    for idx, name in enumerate(("q", "k", "v", "ak", "av")):
        if inputs[idx] is None:
            assert grads[idx] is None
            continue
        u = rng.standard_normal(inputs[idx].shape)
        plus = list(inputs)
        minus = list(inputs)
        plus[idx] = inputs[idx] + h * u
        minus[idx] = inputs[idx] - h * u
        fd = ((ref.forward(*plus, **kw)[0] * w).sum()
              - (ref.forward(*minus, **kw)[0] * w).sum()) / (2 * h)
        analytic = (grads[idx] * u).sum()
        assert analytic == pytest.approx(fd, rel=1e-6, abs=1e-8), name

"""relpos.torch.attention with the scheme family (docs/math.md section 8):
autograd for every learned input (q, k, v, ak, av, bias, pb), checked with
torch.autograd.gradcheck in float64 and against the numpy oracle.

Skipped (and reported as skipped) when PyTorch is not installed."""

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: relpos.torch is untested "
                    "(scripts/test.sh installs PyPI's PyTorch 2)")

import numpy_reference as ref  # noqa: E402
import relpos  # noqa: E402
import relpos.torch as rt  # noqa: E402
from cases import SchemeCase, assert_close, scheme_cases, tolerance  # noqa

NAMES = ("q", "k", "v", "ak", "av", "bias", "pb")


def _tensors(case, dtype, requires_grad=False):
    arrays = list(case.inputs(dtype)) + list(case.extra(dtype).values())
    return [None if x is None else
            torch.from_numpy(x).requires_grad_(requires_grad)
            for x in arrays]


def _call(case, tensors):
    q, k, v, ak, av, bias, pb = tensors
    return rt.attention(q, k, v, ak, av, bias=bias, pb=pb, **case.kwargs())


# gradcheck runs 2 forward passes per input element: tiny shapes, one per
# scheme and learned input, with masks and offsets spread over them.
def _gradcheck_cases():
    t5 = relpos.T5Buckets(8, 6, True)
    return [
        SchemeCase("asym", b=1, h=2, nq=4, nk=5, dk=2, dv=3,
                   buckets=relpos.ClipBuckets(2, 1), causal=True),
        SchemeCase("shawlog_perhead", b=2, h=1, nq=4, nk=6, dk=2, dv=2,
                   buckets=t5, per_head=True, key_lengths=(6, 3)),
        SchemeCase("t5", b=1, h=2, nq=5, nk=5, dk=2, dv=2, buckets=t5,
                   score="bias", value_term=False),
        SchemeCase("t5causal_offset", b=1, h=2, nq=3, nk=6, dk=2, dv=2,
                   buckets=relpos.T5Buckets(6, 5, False), score="bias",
                   causal=True, query_offset=2),
        SchemeCase("alibi", b=1, h=2, nq=4, nk=4, dk=2, dv=2, score="alibi",
                   value_term=False, causal=True),
        SchemeCase("xl", b=1, h=2, nq=4, nk=4, dk=3, dv=2, k=5, pb=True,
                   value_term=False, causal=True),
        SchemeCase("xl_values_nq_gt_nk", b=1, h=2, nq=4, nk=3, dk=2, dv=2,
                   k=1, pb=True, per_head=True),
    ]


@pytest.mark.parametrize("case", _gradcheck_cases(), ids=lambda c: c.name)
def test_gradcheck_float64(case):
    tensors = _tensors(case, np.float64, requires_grad=True)
    inputs = [t for t in tensors if t is not None]
    present = [t is not None for t in tensors]

    def fn(*args):
        it = iter(args)
        return _call(case, [next(it) if p else None for p in present])

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7,
                                    rtol=1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", scheme_cases(), ids=lambda c: c.name)
def test_forward_and_backward_match_reference(case, dtype):
    tensors = _tensors(case, dtype, requires_grad=True)
    out = _call(case, tensors)
    dout = np.random.default_rng(5).standard_normal(
        tuple(out.shape)).astype(dtype)
    out.backward(torch.from_numpy(dout))
    inputs, extra = case.inputs(dtype), case.extra(dtype)
    want, _, mag = ref.forward(*inputs, **case.kwargs(), **extra,
                               magnitudes=True)
    assert_close(out.detach().numpy(), want, mag, tolerance(dtype, case),
                 "out")
    grads, mags = ref.backward(dout, *inputs, **case.kwargs(), **extra,
                               magnitudes=True, scheme_grads=True)
    tol = tolerance(dtype, case, backward=True)
    for name, t, g, m in zip(NAMES, tensors, grads, mags):
        if t is not None:
            assert_close(t.grad.numpy(), g, m, tol, "d" + name)


def test_alibi_slopes_as_tensor():
    case = SchemeCase("alibi_tensor", score="alibi", value_term=False,
                      alibi=(0.5, 0.25, 0.125))
    q, k, v, _, _, _, _ = _tensors(case, np.float64)
    want = rt.attention(q, k, v, **case.kwargs())
    kw = case.kwargs()
    kw["alibi"] = torch.tensor([0.5, 0.25, 0.125])
    torch.testing.assert_close(rt.attention(q, k, v, **kw), want, rtol=0,
                               atol=0)

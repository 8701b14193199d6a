"""relpos._checks, the package's one home for argument checks: the integer
checker every module uses (bools refused, the int64 range, bounds, the
exception for a wrong type), and the tensor checks of relpos.torch and of
the Triton path (skipped without PyTorch)."""

import numpy as np
import pytest

from relpos import _checks


def test_integer_accepts_and_refuses():
    assert _checks.integer("f", "n", 3) == 3
    assert _checks.integer("f", "n", np.int16(-4)) == -4
    assert _checks.integer("f", "n", None, allow_none=True) is None
    with pytest.raises(TypeError, match=r"^relpos\.f: n must be an integer "
                       r"\(got bool\)$"):
        _checks.integer("f", "n", True)
    with pytest.raises(TypeError, match=r"\(got float\)$"):
        _checks.integer("f", "n", 2.0)
    with pytest.raises(TypeError, match=r"\(got NoneType\)$"):
        _checks.integer("f", "n", None)
    with pytest.raises(ValueError, match=r"^relpos\.f: n out of range"):
        _checks.integer("f", "n", 2**63)


def test_integer_bounds_and_wrong_type():
    assert _checks.integer("f", "n", 1, minimum=1) == 1
    with pytest.raises(ValueError, match=r"^relpos\.f: n must be >= 1 "
                       r"\(got 0\)$"):
        _checks.integer("f", "n", 0, minimum=1)
    with pytest.raises(ValueError, match=r"^relpos\.f: n must be <= 9 "
                       r"\(got 10\)$"):
        _checks.integer("f", "n", 10, maximum=9)
    with pytest.raises(ValueError, match=r"^relpos\.f: n must be in \[1, 4\] "
                       r"\(got 5\)$"):
        _checks.integer("f", "n", 5, minimum=1, maximum=4)
    with pytest.raises(ValueError, match=r"n must be an integer \(got str\)"):
        _checks.integer("f", "n", "3", wrong_type=ValueError)


def test_integer_takes_one_element_integer_tensors():
    torch = pytest.importorskip("torch")
    assert _checks.integer("f", "n", torch.tensor(7)) == 7
    assert _checks.integer("f", "n", torch.tensor([7])) == 7
    with pytest.raises(TypeError, match=r"\(got Tensor\)"):
        _checks.integer("f", "n", torch.tensor([1, 2]))
    with pytest.raises(TypeError, match=r"\(got Tensor\)"):
        _checks.integer("f", "n", torch.tensor(1.0))


def test_torch_tensor_refusals():
    torch = pytest.importorskip("torch")
    q = torch.zeros(2)
    _checks.torch_tensor("torch.f", "q", q)
    with pytest.raises(TypeError, match=r"^relpos\.torch\.f: k must be a "
                       r"torch\.Tensor \(got ndarray\)$"):
        _checks.torch_tensor("torch.f", "k", np.zeros(2))
    with pytest.raises(TypeError, match=r"k must have dtype torch\.float32 "
                       r"or torch\.float64 \(got torch\.float16\)"):
        _checks.torch_tensor("torch.f", "k", q.half())
    with pytest.raises(ValueError, match=r"k is on meta but q is on cpu"):
        _checks.torch_tensor("torch.f", "k", q.to("meta"), like=q)
    with pytest.raises(ValueError, match=r"k is on meta; relpos runs CPU"):
        _checks.torch_tensor("torch.f", "k", q.to("meta"))


def test_gpu_tensor_refusals():
    torch = pytest.importorskip("torch")
    q = torch.zeros(2, dtype=torch.float16)
    _checks.gpu_tensor("f", "q", q, interpreting=True)
    with pytest.raises(ValueError, match=r"q is on the CPU; the Triton"):
        _checks.gpu_tensor("f", "q", q, interpreting=False)
    with pytest.raises(TypeError, match=r"k has dtype torch\.float32 but q "
                       r"has torch\.float16"):
        _checks.gpu_tensor("f", "k", q.float(), like=q)
    with pytest.raises(TypeError, match=r"k must have dtype torch\.float16, "
                       r"torch\.bfloat16, torch\.float32 or torch\.float64 "
                       r"\(got torch\.int32\)"):
        _checks.gpu_tensor("f", "k", q.int(), like=q)
    with pytest.raises(ValueError, match=r"dense \(strided\)"):
        _checks.gpu_tensor("f", "k", q.to_sparse(), like=q)

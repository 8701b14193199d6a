"""relpos.t5_bucket / clip_bucket / alibi_slopes / rope (numpy and torch).

T5 buckets and ALiBi slopes are checked against the independent script that
writes the C++ golden file (tests/golden/gen_position_schemes.py) for every
|r| <= 2^20, and, when PyTorch is installed, against the Hugging Face
formula evaluated in torch float32 as Hugging Face runs it. RoPE is checked
against a numpy rotation written here, against Hugging Face Llama's
``rotate_half`` form in torch, and for its gradient.
"""

import importlib.util
import math
import pathlib

import numpy as np
import pytest

import relpos

ROOT = pathlib.Path(__file__).resolve().parents[2]
R = 2**20


def _golden_script():
    path = ROOT / "tests" / "golden" / "gen_position_schemes.py"
    spec = importlib.util.spec_from_file_location("gen_position_schemes",
                                                  path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


GEN = _golden_script()
DISTANCES = np.arange(-R, R + 1, dtype=np.int64)


@pytest.mark.parametrize("nb,md,bidirectional", GEN.T5_CONFIGS,
                         ids=[f"{c[0]}_{c[1]}_{'bi' if c[2] else 'causal'}"
                              for c in GEN.T5_CONFIGS])
def test_t5_bucket_matches_independent_numpy(nb, md, bidirectional):
    got = relpos.t5_bucket(DISTANCES, num_buckets=nb, max_distance=md,
                           bidirectional=bidirectional)
    want = GEN.t5_buckets(DISTANCES, nb, md, bidirectional)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, (f"{bad.size} distances differ, first r = "
                           f"{DISTANCES[bad[:5]]}: {got[bad[:5]]} vs "
                           f"{want[bad[:5]]}")


def _hf_style_bucket(torch, rel, bidirectional, num_buckets, max_distance):
    """T5's bucket formula as Hugging Face evaluates it: int64 tensors,
    float32 log and products, the constant from Python's math.log."""
    buckets = torch.zeros_like(rel)
    if bidirectional:
        num_buckets //= 2
        buckets += (rel > 0).to(torch.long) * num_buckets
        rel = torch.abs(rel)
    else:
        rel = -torch.min(rel, torch.zeros_like(rel))
    max_exact = num_buckets // 2
    is_small = rel < max_exact
    large = max_exact + (
        torch.log(rel.float() / max_exact)
        / math.log(max_distance / max_exact)
        * (num_buckets - max_exact)).to(torch.long)
    large = torch.min(large, torch.full_like(large, num_buckets - 1))
    return buckets + torch.where(is_small, rel, large)


@pytest.mark.parametrize("nb,md,bidirectional", GEN.T5_CONFIGS,
                         ids=[f"{c[0]}_{c[1]}_{'bi' if c[2] else 'causal'}"
                              for c in GEN.T5_CONFIGS])
def test_t5_bucket_matches_torch_float32(nb, md, bidirectional):
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    want = _hf_style_bucket(torch, torch.from_numpy(DISTANCES),
                            bidirectional, nb, md).numpy()
    got = relpos.t5_bucket(DISTANCES, num_buckets=nb, max_distance=md,
                           bidirectional=bidirectional)
    bad = np.nonzero(got != want)[0]
    assert bad.size == 0, f"r = {DISTANCES[bad[:5]]}"


def test_t5_bucket_shapes_reach_and_errors():
    r = np.arange(-6, 6).reshape(3, 4)
    out = relpos.t5_bucket(r)
    assert out.shape == (3, 4) and out.dtype == np.int64
    reach = relpos.t5_bucket_reach()
    assert 1 <= reach <= 128
    last = relpos.t5_bucket([reach, 10**12, -reach, -10**12])
    assert last[0] == last[1] == 31 and last[2] == last[3] == 15
    with pytest.raises(ValueError, match="num_buckets.*3"):
        relpos.t5_bucket([0], num_buckets=3)
    with pytest.raises(ValueError, match="max_distance.*8"):
        relpos.t5_bucket([0], num_buckets=32, max_distance=8)
    with pytest.raises(TypeError, match="r must hold integers"):
        relpos.t5_bucket(np.array([0.5]))
    with pytest.raises(TypeError, match="bidirectional"):
        relpos.t5_bucket([0], bidirectional=1)


def test_clip_bucket():
    r = np.array([-100, -64, -63, 0, 7, 8, 9, 10**15])
    np.testing.assert_array_equal(relpos.clip_bucket(r, left=64, right=8),
                                  [0, 0, 1, 64, 71, 72, 72, 72])
    k = 3
    r = np.arange(-10, 11)
    np.testing.assert_array_equal(relpos.clip_bucket(r, left=k, right=k),
                                  np.clip(r, -k, k) + k)
    with pytest.raises(ValueError, match="left.*-1"):
        relpos.clip_bucket(r, left=-1, right=2)


def test_alibi_slopes_match_paper_code():
    for h in range(1, 65):
        got = relpos.alibi_slopes(h)
        want = np.array(GEN.get_slopes(h))
        assert got.shape == (h,)
        np.testing.assert_array_equal(got.astype(np.float32),
                                      want.astype(np.float32))
        np.testing.assert_allclose(got, want, rtol=8 * np.finfo(float).eps,
                                   atol=0)
    with pytest.raises(ValueError, match="num_heads.*0"):
        relpos.alibi_slopes(0)


# --- RoPE --------------------------------------------------------------------


def _numpy_rope(x, offset, base, layout, sign=1):
    """The rotation, written directly in float64."""
    x = np.asarray(x, np.float64)
    n, d = x.shape[-2], x.shape[-1]
    t = np.arange(d // 2)
    theta = base ** (-2.0 * t / d)
    angle = sign * (offset + np.arange(n))[:, None] * theta[None, :]
    c, s = np.cos(angle), np.sin(angle)
    if layout == "split_halves":
        a, b = x[..., : d // 2], x[..., d // 2:]
        return np.concatenate([a * c - b * s, b * c + a * s], axis=-1)
    a, b = x[..., 0::2], x[..., 1::2]
    y = np.empty_like(x)
    y[..., 0::2] = a * c - b * s
    y[..., 1::2] = b * c + a * s
    return y


SHAPES = [(2,), (1, 2), (5, 6), (3, 7, 16), (2, 3, 65, 18), (1, 1, 4, 130)]


@pytest.mark.parametrize("layout", ["split_halves", "interleaved"])
@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("shape", SHAPES, ids=[str(s) for s in SHAPES])
def test_rope_matches_numpy(shape, dtype, layout):
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = rng.standard_normal(shape).astype(dtype)
    for offset, base in ((0, 10000.0), (-7, 10000.0), (12345, 500000.0)):
        want = _numpy_rope(x.reshape((-1,) + shape[-2:]) if len(shape) > 1
                           else x[None], offset, base, layout).reshape(shape)
        got = relpos.rope(x, position_offset=offset, base=base, layout=layout)
        assert got.dtype == dtype and got.shape == shape
        eps = np.finfo(dtype).eps
        # Per-element bound: a two-term float rotation plus angle rounding.
        tol = (4 * eps + 4 * np.finfo(np.float64).eps * (abs(offset) + 200))
        scale = np.sqrt((x.astype(np.float64) ** 2).sum(-1, keepdims=True))
        assert np.all(np.abs(got - want) <= tol * scale + 1e-300)
        back = relpos.rope_backward(got, position_offset=offset, base=base,
                                    layout=layout)
        assert np.all(np.abs(back - x) <= 2 * tol * scale + 1e-300)


def test_rope_backward_is_the_adjoint():
    rng = np.random.default_rng(1)
    x = rng.standard_normal((2, 9, 8))
    w = rng.standard_normal((2, 9, 8))
    for layout in ("split_halves", "interleaved"):
        y = relpos.rope(x, position_offset=3, layout=layout)
        g = relpos.rope_backward(w, position_offset=3, layout=layout)
        # <w, R x> == <R^T w, x>
        assert abs((w * y).sum() - (g * x).sum()) < 1e-12 * x.size


def test_rope_errors_name_the_argument():
    x = np.zeros((4, 8), np.float32)
    with pytest.raises(ValueError, match=r"d .*even.*7"):
        relpos.rope(np.zeros((4, 7), np.float32))
    with pytest.raises(ValueError, match="layout.*'halves'"):
        relpos.rope(x, layout="halves")
    with pytest.raises(ValueError, match="base.*-1"):
        relpos.rope(x, base=-1)
    with pytest.raises(ValueError, match="position_offset"):
        relpos.rope(x, position_offset=2**41)
    with pytest.raises(TypeError, match="dtype"):
        relpos.rope(np.zeros((4, 8), np.int32))
    with pytest.raises(TypeError, match="position_offset"):
        relpos.rope(x, position_offset=1.5)
    with pytest.raises(ValueError, match="rank"):
        relpos.rope(np.zeros((1, 1, 1, 2, 8), np.float32))


# --- PyTorch -----------------------------------------------------------------


def test_torch_rope_matches_hugging_face_llama_form():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import relpos.torch as rt

    b, h, n, d, base = 2, 3, 11, 16, 10000.0
    q = torch.randn(b, h, n, d, dtype=torch.float64)
    # Hugging Face Llama: cos / sin of position * inv_freq, duplicated over
    # both halves, and q * cos + rotate_half(q) * sin. Here in float64.
    inv_freq = 1.0 / (base ** (torch.arange(0, d, 2, dtype=torch.float64)
                               / d))
    pos = torch.arange(n, dtype=torch.float64)
    emb = torch.cat([torch.outer(pos, inv_freq)] * 2, dim=-1)

    def rotate_half(x):
        return torch.cat([-x[..., d // 2:], x[..., : d // 2]], dim=-1)

    want = q * emb.cos() + rotate_half(q) * emb.sin()
    got = rt.rope(q, base=base)
    assert torch.allclose(got, want, rtol=0, atol=1e-13)
    got32 = rt.rope(q.float(), base=base)
    assert torch.allclose(got32.double(), want, rtol=0, atol=1e-5)


def test_torch_rope_gradcheck():
    torch = pytest.importorskip("torch", reason="PyTorch is not installed")
    import relpos.torch as rt

    x = torch.randn(2, 5, 6, dtype=torch.float64, requires_grad=True)
    for layout in ("split_halves", "interleaved"):
        assert torch.autograd.gradcheck(
            lambda t: rt.rope(t, position_offset=-2, layout=layout), (x,))
    # float32 gradients equal the float64 ones to float precision, and a
    # non-contiguous input works.
    xt = torch.randn(5, 2, 6).transpose(0, 1).requires_grad_(True)
    y = rt.rope(xt, position_offset=4)
    dy = torch.randn_like(y)
    y.backward(dy)
    want = relpos.rope_backward(dy.double().numpy(), position_offset=4)
    assert np.allclose(xt.grad.numpy(), want, rtol=0, atol=1e-5)


def test_rope_then_attention_sees_only_relative_positions():
    # RoPE on q (positions i + off) and k (positions j), then plain causal
    # attention: shifting every position by s changes nothing (up to float
    # rounding).
    rng = np.random.default_rng(3)
    q = rng.standard_normal((1, 2, 4, 8)).astype(np.float32)
    k = rng.standard_normal((1, 2, 6, 8)).astype(np.float32)
    v = rng.standard_normal((1, 2, 6, 8)).astype(np.float32)

    off = 2

    def run(q_position, k_position):
        return relpos.attention(relpos.rope(q, position_offset=q_position),
                                relpos.rope(k, position_offset=k_position),
                                v, max_distance=0, causal=True,
                                query_offset=off)

    base = run(off, 0)
    for shift in (1, -5, 1000):
        np.testing.assert_allclose(run(off + shift, shift), base, rtol=0,
                                   atol=1e-4)
    # Queries rotated as if one position later: a different result.
    assert np.abs(run(off + 1, 0) - base).max() > 1e-3

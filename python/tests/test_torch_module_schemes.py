"""relpos.torch.RelativeMultiheadAttention(scheme=...): every scheme of the
family (docs/math.md section 8) in the nn.Module. Each scheme's output is
checked against an oracle computed here in numpy from the module's weights
(numpy_reference for the table schemes, explicit formulas for RoPE and
Transformer-XL), its gradients (input and every parameter) with
torch.autograd.gradcheck in float64, float32 against float64, parameter
names and shapes, that a few optimiser steps lower a loss, and the errors.

Skipped (and reported as skipped) when PyTorch is not installed."""

import math

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: relpos.torch is untested "
                    "(scripts/test.sh installs PyPI's PyTorch 2)")

import numpy_reference as ref  # noqa: E402
import relpos  # noqa: E402
import relpos.torch as rt  # noqa: E402

try:  # torch >= 2.0
    from torch.func import functional_call
except ImportError:  # torch 1.13 (Debian 12)
    from torch.nn.utils.stateless import functional_call

# Small settings, so that short sequences reach clipped rows and T5's
# logarithmic buckets.
SMALL = dict(k_left=3, k_right=1, num_buckets=8, bucket_max_distance=5)


def _module(scheme, e=8, h=2, causal=False, **kw):
    args = dict(SMALL)
    if scheme == "shaw":
        args = dict(max_distance=2)
    args.update(kw)
    return rt.RelativeMultiheadAttention(e, h, scheme=scheme, causal=causal,
                                         **args)


def _cases():
    cases = []
    for scheme in rt.SCHEMES:
        for causal in (False, True):
            cases.append((scheme, causal, {}))
    cases += [("shaw-asym", False, dict(per_head_tables=True)),
              ("shaw-log", True, dict(value_term=False)),
              ("rope", True, dict(rope_layout="interleaved", rope_base=100.0))]
    return cases


def _id(case):
    scheme, causal, kw = case
    return "-".join([scheme, "causal" if causal else "bidir"] +
                    sorted(kw))


def _np(t):
    return None if t is None else t.detach().double().numpy()


def _rotate(x, positions, base, layout):
    """RoPE of x [B, H, N, d] with row n at positions[n] (docs/math.md
    section 8), in float64."""
    d = x.shape[-1]
    t = np.arange(d // 2)
    theta = base ** (-2.0 * t / d)
    ang = np.asarray(positions, dtype=np.float64)[:, None] * theta[None, :]
    cos, sin = np.cos(ang), np.sin(ang)
    if layout == "split_halves":
        a, c = x[..., : d // 2], x[..., d // 2:]
    else:
        a, c = x[..., 0::2], x[..., 1::2]
    ya, yc = a * cos - c * sin, a * sin + c * cos
    y = np.empty_like(x)
    if layout == "split_halves":
        y[..., : d // 2], y[..., d // 2:] = ya, yc
    else:
        y[..., 0::2], y[..., 1::2] = ya, yc
    return y


def _oracle(m, query, key_lengths, query_offset=None):
    """The module's forward in float64 numpy, self-attention."""
    x = query.detach().double().numpy()
    b, n, e = x.shape
    h, d = m.num_heads, m.head_dim

    def proj(lin):
        w, bias = _np(lin.weight), _np(lin.bias)
        return x @ w.T + (0 if bias is None else bias)

    def heads(y):
        return y.reshape(b, n, h, d).transpose(0, 2, 1, 3)

    q, k, v = heads(proj(m.q_proj)), heads(proj(m.k_proj)), \
        heads(proj(m.v_proj))
    off = 0 if query_offset is None else query_offset
    kw = dict(causal=m.causal, key_lengths=key_lengths,
              query_offset=query_offset)
    s = m.scheme
    if s in ("shaw", "shaw-asym", "shaw-log"):
        buckets = m.buckets()
        o, _ = ref.forward(q, k, v, _np(m.rel_k), _np(m.rel_v),
                           max_distance=m.max_distance if buckets is None
                           else None, buckets=buckets, **kw)
    elif s == "t5":
        o, _ = ref.forward(q, k, v, buckets=m.buckets(),
                           bias=_np(m.t5_bias), **kw)
    elif s == "alibi":
        o, _ = ref.forward(q, k, v, max_distance=0, alibi=True, **kw)
    elif s == "rope":
        qr = _rotate(q, np.arange(n) + off, m.rope_base, m.rope_layout)
        kr = _rotate(k, np.arange(n), m.rope_base, m.rope_layout)
        o, _ = ref.forward(qr, kr, v, max_distance=0, **kw)
    else:  # xl, written out: A_ij = (q_i + u) . k_j + (q_i + v) . W R_{i-j}
        w, u, vb = _np(m.xl_w), _np(m.xl_u), _np(m.xl_v)
        f = 10000.0 ** (-2.0 * np.arange(e // 2) / e)
        o = np.zeros((b, h, n, d))
        for bi in range(b):
            for hi in range(h):
                wh = w[hi * d:(hi + 1) * d]  # [d, E]
                scores = np.full((n, n), -np.inf)
                for i in range(n):
                    for j in range(n):
                        if j >= key_lengths[bi] or (m.causal and
                                                    j > i + off):
                            continue
                        dist = (i + off) - j  # XL's i - j
                        r = np.concatenate([np.sin(dist * f),
                                            np.cos(dist * f)])
                        scores[i, j] = ((q[bi, hi, i] + u[hi]) @ k[bi, hi, j]
                                        + (q[bi, hi, i] + vb[hi]) @ (wh @ r)
                                        ) / math.sqrt(d)
                for i in range(n):
                    row = scores[i]
                    if np.all(np.isinf(row)):
                        continue
                    p = np.exp(row - row.max())
                    o[bi, hi, i] = (p / p.sum()) @ v[bi, hi]
    merged = o.transpose(0, 2, 1, 3).reshape(b, n, e)
    wo, bo = _np(m.out_proj.weight), _np(m.out_proj.bias)
    return merged @ wo.T + bo


@pytest.mark.parametrize("case", _cases(), ids=_id)
def test_forward_matches_the_numpy_oracle(case):
    scheme, causal, kw = case
    torch.manual_seed(3)
    m = _module(scheme, causal=causal, **kw).double()
    x = torch.randn(2, 6, 8, dtype=torch.float64)
    lengths = [6, 4]
    y = m(x, key_lengths=lengths).detach().numpy()
    want = _oracle(m, x, lengths)
    # Valid query rows only (a padded row's output is not defined by a
    # mask on keys alone, but is finite).
    assert np.all(np.isfinite(y))
    np.testing.assert_allclose(y[0], want[0], rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(y[1, :4], want[1, :4], rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("case", _cases(), ids=_id)
def test_gradcheck_input_and_every_parameter(case):
    scheme, causal, kw = case
    torch.manual_seed(4)
    m = _module(scheme, e=4, h=2, causal=causal, **kw).double()
    names = [n for n, _ in m.named_parameters()]
    params = [p.detach().clone().requires_grad_(True)
              for _, p in m.named_parameters()]
    x = torch.randn(1, 5, 4, dtype=torch.float64, requires_grad=True)

    def f(x, *ps):
        return functional_call(m, dict(zip(names, ps)), (x,))

    assert torch.autograd.gradcheck(f, (x, *params), eps=1e-6, atol=1e-7)


@pytest.mark.parametrize("case", _cases(), ids=_id)
def test_float32_matches_float64(case):
    scheme, causal, kw = case
    torch.manual_seed(5)
    m64 = _module(scheme, e=16, h=4, causal=causal, **kw).double()
    m32 = _module(scheme, e=16, h=4, causal=causal, **kw)
    m32.load_state_dict({n: p.float() for n, p in m64.state_dict().items()})
    x = torch.randn(2, 13, 16, dtype=torch.float64)
    y64 = m64(x, key_lengths=[13, 9])
    y32 = m32(x.float(), key_lengths=[13, 9])
    scale = y64.abs().max().item()
    assert (y32.double() - y64).abs().max().item() <= 1e-5 * scale
    g64 = torch.autograd.grad(y64.square().sum(), list(m64.parameters()))
    g32 = torch.autograd.grad(y32.square().sum(), list(m32.parameters()))
    names = [n for n, _ in m64.named_parameters()]
    wk_scale = g64[names.index("k_proj.weight")].abs().max().item()
    for name, a, c in zip(names, g64, g32):
        # The key bias adds q_i . bk to every score of row i, which softmax
        # ignores: its exact gradient is 0 and float32 leaves only rounding,
        # so it is measured on the scale of the key weights' gradient.
        s = wk_scale if name == "k_proj.bias" else a.abs().max().item()
        assert (c.double() - a).abs().max().item() <= 1e-4 * s, name


def test_parameters_of_each_scheme():
    e, h, dh = 8, 2, 4
    base = {"q_proj.weight", "q_proj.bias", "k_proj.weight", "k_proj.bias",
            "v_proj.weight", "v_proj.bias", "out_proj.weight",
            "out_proj.bias"}
    want = {
        "shaw": {"rel_k": (5, dh), "rel_v": (5, dh)},
        "shaw-asym": {"rel_k": (5, dh), "rel_v": (5, dh)},
        "shaw-log": {"rel_k": (8, dh), "rel_v": (8, dh)},
        "t5": {"t5_bias": (h, 8)},
        "alibi": {},
        "rope": {},
        "xl": {"xl_w": (e, e), "xl_u": (h, dh), "xl_v": (h, dh)},
    }
    for scheme, extra in want.items():
        m = _module(scheme, e=e, h=h)
        shapes = {n: tuple(p.shape) for n, p in m.named_parameters()}
        assert set(shapes) == base | set(extra), scheme
        for n, shape in extra.items():
            assert shapes[n] == shape, (scheme, n)
    # The old call (positional max_distance, Shaw) is unchanged; shaw's
    # default k is 16.
    m = rt.RelativeMultiheadAttention(8, 2, 3)
    assert m.scheme == "shaw" and m.rel_k.shape == (7, 4)
    assert rt.RelativeMultiheadAttention(8, 2).rel_k.shape == (33, 4)
    assert "scheme='t5'" in repr(_module("t5"))


def test_initialisation_of_the_scheme_parameters():
    torch.manual_seed(0)
    m = rt.RelativeMultiheadAttention(256, 4, scheme="t5", num_buckets=256,
                                      bucket_max_distance=1024)
    # N(0, E^-1/2) (Hugging Face T5): std 1/16 over 1024 draws.
    assert abs(m.t5_bias.std().item() - 1 / 16) < 0.1 / 16
    x = rt.RelativeMultiheadAttention(256, 4, scheme="xl")
    assert abs(x.xl_w.std().item() - 1 / 16) < 0.05 / 16
    assert abs(x.xl_u.std().item() - 0.02) < 0.1 * 0.02


@pytest.mark.parametrize("scheme", rt.SCHEMES)
@pytest.mark.parametrize("causal", [False, True])
def test_every_scheme_trains(scheme, causal):
    """Adam on a fixed position-dependent target: the loss falls."""
    torch.manual_seed(6)
    m = _module(scheme, e=16, h=4, causal=causal)
    x = torch.randn(4, 10, 16)
    target = torch.roll(x, shifts=1, dims=1) * 0.5
    opt = torch.optim.Adam(m.parameters(), lr=1e-2)
    losses = []
    for _ in range(30):
        opt.zero_grad()
        loss = (m(x) - target).square().mean()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses


def test_query_offset_and_cross_attention_shapes():
    """Queries after a prefix of keys (as with a cache): every scheme runs,
    and for RoPE and XL the result equals the last rows of the full
    self-attention (both are relative, so positions line up)."""
    torch.manual_seed(7)
    for scheme in rt.SCHEMES:
        m = _module(scheme, causal=True).double()
        x = torch.randn(1, 7, 8, dtype=torch.float64)
        full = m(x)
        last = m(x[:, 4:], x, x)  # query_offset defaults to Nk - Nq = 4
        torch.testing.assert_close(last, full[:, 4:], rtol=1e-10,
                                   atol=1e-12, msg=scheme)


def test_bad_arguments_name_the_argument():
    with pytest.raises(ValueError, match="scheme.*rotary"):
        rt.RelativeMultiheadAttention(8, 2, scheme="rotary")
    with pytest.raises(ValueError, match="max_distance"):
        rt.RelativeMultiheadAttention(8, 2, 4, scheme="t5")
    with pytest.raises(ValueError, match="rope.*3"):
        rt.RelativeMultiheadAttention(6, 2, scheme="rope")
    with pytest.raises(ValueError, match="rope_layout"):
        rt.RelativeMultiheadAttention(8, 2, scheme="rope", rope_layout="x")
    with pytest.raises(ValueError, match="rope_base"):
        rt.RelativeMultiheadAttention(8, 2, scheme="rope", rope_base=0.0)
    with pytest.raises(ValueError, match="xl.*9"):
        rt.RelativeMultiheadAttention(9, 3, scheme="xl")
    with pytest.raises(ValueError, match="num_buckets.*3"):
        rt.RelativeMultiheadAttention(8, 2, scheme="t5", num_buckets=3)
    with pytest.raises(ValueError, match="bucket_max_distance"):
        rt.RelativeMultiheadAttention(8, 2, scheme="shaw-log",
                                      num_buckets=32, bucket_max_distance=8)
    with pytest.raises(ValueError, match="k_left"):
        rt.RelativeMultiheadAttention(8, 2, scheme="shaw-asym", k_left=-1)
    with pytest.raises(TypeError, match="num_buckets"):
        rt.RelativeMultiheadAttention(8, 2, scheme="t5", num_buckets=8.0)
    # The scheme's relpos call still checks the inputs.
    m = rt.RelativeMultiheadAttention(8, 2, scheme="alibi")
    with pytest.raises(ValueError, match="query"):
        m(torch.randn(1, 3, 7))
    assert relpos.T5Buckets(8, 5, True) == _module("t5").buckets()

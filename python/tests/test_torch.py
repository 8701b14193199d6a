"""relpos.torch: the autograd Function and RelativeMultiheadAttention.

Skipped (and reported as skipped) when PyTorch is not installed."""

import math

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: relpos.torch is untested "
                    "(scripts/test.sh installs PyPI's PyTorch 2)")

import numpy_reference as ref  # noqa: E402
import relpos.torch as rt  # noqa: E402
from cases import CASES, CASE_IDS, Case, assert_close, tolerance  # noqa: E402

# gradcheck runs 2 forward passes per input element: keep its cases tiny,
# but cover each option at least once.
GRADCHECK_CASES = [
    Case("shared", b=1, h=2, nq=4, nk=4, dk=3, dv=2, k=1),
    Case("perhead_causal", b=1, h=2, nq=4, nk=4, dk=2, dv=3, k=2,
         per_head=True, causal=True),
    Case("key_only_padding", b=2, h=1, nq=3, nk=4, dk=2, dv=2, k=1,
         value_term=False, key_lengths=(4, 2)),
    Case("value_only_offset", b=1, h=1, nq=3, nk=5, dk=2, dv=2, k=1,
         key_term=False, query_offset=1, causal=True),
    Case("no_tables_empty_row", b=1, h=1, nq=3, nk=3, dk=2, dv=2, k=1,
         key_term=False, value_term=False, causal=True, query_offset=-1),
    Case("k_gt_n", b=1, h=1, nq=2, nk=3, dk=2, dv=2, k=4),
]


def _tensors(case, dtype, requires_grad=False):
    return [None if x is None else
            torch.from_numpy(x).requires_grad_(requires_grad)
            for x in case.inputs(dtype)]


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("case", CASES, ids=CASE_IDS)
def test_forward_and_backward_match_reference(case, dtype):
    tensors = _tensors(case, dtype, requires_grad=True)
    out = rt.attention(*tensors, **case.kwargs())
    dout = np.random.default_rng(5).standard_normal(
        tuple(out.shape)).astype(dtype)
    out.backward(torch.from_numpy(dout))
    inputs = case.inputs(dtype)
    want, _, magnitude = ref.forward(*inputs, **case.kwargs(),
                                     magnitudes=True)
    assert out.dtype == tensors[0].dtype
    assert_close(out.detach().numpy(), want, magnitude,
                 tolerance(dtype, case), "out")
    grads, mags = ref.backward(dout, *inputs, **case.kwargs(),
                               magnitudes=True)
    tol = tolerance(dtype, case, backward=True)
    for name, t, g, m in zip("q k v ak av".split(), tensors, grads, mags):
        if t is None:
            continue
        assert_close(t.grad.numpy(), g, m, tol, "d" + name)


@pytest.mark.parametrize("case", GRADCHECK_CASES, ids=lambda c: c.name)
def test_gradcheck_float64(case):
    tensors = _tensors(case, np.float64, requires_grad=True)
    inputs = [t for t in tensors if t is not None]
    present = [t is not None for t in tensors]

    def fn(*args):
        it = iter(args)
        full = [next(it) if p else None for p in present]
        return rt.attention(*full, **case.kwargs())

    assert torch.autograd.gradcheck(fn, inputs, eps=1e-6, atol=1e-7,
                                    rtol=1e-5)


def test_non_contiguous_tensors_and_partial_grads():
    case = Case("noncontig", per_head=True, causal=True, key_lengths=(7, 4))
    q, k, v, ak, av = _tensors(case, np.float64)
    # [B, N, H, d] storage seen as [B, H, N, d]: what a model produces.
    qt = q.transpose(1, 2).contiguous().transpose(1, 2).requires_grad_()
    kt = k.transpose(1, 2).contiguous().transpose(1, 2)  # no grad wanted
    vt = v.clone().requires_grad_()
    akt = ak.transpose(0, 2).contiguous().transpose(0, 2).requires_grad_()
    assert not qt.is_contiguous() and not akt.is_contiguous()
    out = rt.attention(qt, kt, vt, akt, av, **case.kwargs())
    out.square().sum().backward()
    assert kt.grad is None and av.grad is None
    base = [t.clone().requires_grad_() for t in (q, v, ak)]
    rt.attention(base[0], k, base[1], base[2], av,
                 **case.kwargs()).square().sum().backward()
    torch.testing.assert_close(out, rt.attention(q, k, v, ak, av,
                                                 **case.kwargs()),
                               rtol=0, atol=0)
    for got, want in zip((qt, vt, akt), base):
        torch.testing.assert_close(got.grad, want.grad, rtol=0, atol=0)


def test_lazy_submodule():
    import relpos
    assert relpos.torch is rt


def test_key_lengths_tensor():
    case = Case("lengths", key_lengths=(3, 6))
    q, k, v, ak, av = _tensors(case, np.float64)
    kw = case.kwargs()
    want = rt.attention(q, k, v, ak, av, **kw)
    kw["key_lengths"] = torch.tensor([3, 6])
    torch.testing.assert_close(rt.attention(q, k, v, ak, av, **kw), want,
                               rtol=0, atol=0)


def test_bad_arguments():
    q, k, v, ak, av = _tensors(Case("bad"), np.float32)
    with pytest.raises(TypeError, match="q"):
        rt.attention(q.numpy(), k, v, max_distance=2)
    with pytest.raises(TypeError, match="k"):
        rt.attention(q, k.to(torch.float16), v, max_distance=2)
    with pytest.raises(TypeError, match="k"):
        rt.attention(q, k.double(), v, max_distance=2)
    with pytest.raises(ValueError, match="ak"):
        rt.attention(q, k, v, ak[:3], av, max_distance=2)
    with pytest.raises(ValueError, match="max_distance"):
        rt.attention(q, k, v, max_distance=-2)
    with pytest.raises(ValueError, match="divisible"):
        rt.RelativeMultiheadAttention(10, 3, 2)
    with pytest.raises(ValueError, match="table_init"):
        rt.RelativeMultiheadAttention(8, 2, 2, table_init="kaiming")
    m = rt.RelativeMultiheadAttention(8, 2, 2)
    with pytest.raises(ValueError, match="query"):
        m(torch.zeros(2, 5, 7))


# --- the module -------------------------------------------------------------


@pytest.mark.parametrize("per_head", [False, True])
def test_module_parameters_and_init(per_head):
    torch.manual_seed(0)
    e, h, k = 256, 4, 24
    m = rt.RelativeMultiheadAttention(e, h, k, per_head_tables=per_head,
                                      table_init_scale=0.5)
    d, rows = e // h, 2 * k + 1
    shape = (h, rows, d) if per_head else (rows, d)
    assert tuple(m.rel_k.shape) == shape and tuple(m.rel_v.shape) == shape
    # docs/math.md section 5: per table pair (2k+1)(dk + dv) parameters, x H if per head.
    n_tables = m.rel_k.numel() + m.rel_v.numel()
    assert n_tables == rows * 2 * d * (h if per_head else 1)
    assert sum(p.numel() for p in m.parameters()) == \
        4 * (e * e + e) + n_tables
    # Xavier normal, std = scale * sqrt(2 / ((2k+1) + d)). With n >= 3136
    # samples the sample std is within 1/sqrt(2n) <= 1.3% (one sigma).
    std = 0.5 * math.sqrt(2.0 / (rows + d))
    assert m.table_std() == pytest.approx(std)
    for t in (m.rel_k, m.rel_v):
        assert abs(t.detach().std().item() / std - 1) < 0.08
    u = rt.RelativeMultiheadAttention(e, h, k, per_head_tables=per_head,
                                      table_init="xavier_uniform",
                                      table_init_scale=0.5)
    bound = 0.5 * math.sqrt(6.0 / (rows + d))
    assert u.rel_k.abs().max().item() <= bound
    assert u.rel_k.abs().max().item() > 0.95 * bound
    # Seeded: the same seed gives the same module.
    torch.manual_seed(0)
    again = rt.RelativeMultiheadAttention(e, h, k, per_head_tables=per_head,
                                          table_init_scale=0.5)
    for a, b in zip(m.parameters(), again.parameters()):
        assert torch.equal(a, b)


@pytest.mark.parametrize("key_term,value_term", [(True, True), (True, False),
                                                 (False, True),
                                                 (False, False)])
def test_module_matches_manual_composition(key_term, value_term):
    torch.manual_seed(1)
    m = rt.RelativeMultiheadAttention(12, 3, 2, key_term=key_term,
                                      value_term=value_term, causal=True,
                                      per_head_tables=True).double()
    assert (m.rel_k is None) != key_term and (m.rel_v is None) != value_term
    x = torch.randn(2, 6, 12, dtype=torch.float64)
    lengths = [6, 4]
    y = m(x, key_lengths=lengths)

    def split(t):  # [B, N, E] -> [B, H, N, d]
        return t.reshape(2, 6, 3, 4).permute(0, 2, 1, 3).numpy()

    with torch.no_grad():
        q, k, v = (split(p(x)) for p in (m.q_proj, m.k_proj, m.v_proj))
        tables = [None if t is None else t.numpy() for t in (m.rel_k,
                                                             m.rel_v)]
        o, _ = ref.forward(q, k, v, *tables, max_distance=2, causal=True,
                           key_lengths=lengths)
        want = m.out_proj(torch.from_numpy(o).permute(0, 2, 1, 3)
                          .reshape(2, 6, 12))
    torch.testing.assert_close(y, want, rtol=1e-10, atol=1e-12)


def test_module_gradcheck_float64():
    # Gradients of everything: inputs, projections and both tables. The
    # parameters become explicit inputs through functional_call.
    try:
        from torch.func import functional_call
    except ImportError:  # PyTorch < 2.0
        from torch.nn.utils.stateless import functional_call
    torch.manual_seed(2)
    m = rt.RelativeMultiheadAttention(4, 2, 1, causal=True).double()
    x = torch.randn(1, 3, 4, dtype=torch.float64, requires_grad=True)
    mem = torch.randn(1, 4, 4, dtype=torch.float64, requires_grad=True)
    names = [name for name, _ in m.named_parameters()]
    ps = [p.detach().clone().requires_grad_() for p in m.parameters()]
    assert "rel_k" in names and "rel_v" in names

    def fn(query, memory, *values):
        return functional_call(m, dict(zip(names, values)), (query, memory))

    assert torch.autograd.gradcheck(fn, [x, mem] + ps, eps=1e-6, atol=1e-7,
                                    rtol=1e-5)


def test_module_trains():
    # A tiny task only position can solve: copy the token one step back.
    # Relative tables let the model attend to distance -1; the loss must
    # drop well below its starting value within a few dozen Adam steps.
    torch.manual_seed(3)
    vocab, e, n = 8, 16, 10
    emb = torch.nn.Embedding(vocab, e)
    attn = rt.RelativeMultiheadAttention(e, 2, 2, causal=True)
    head = torch.nn.Linear(e, vocab)
    params = [*emb.parameters(), *attn.parameters(), *head.parameters()]
    opt = torch.optim.Adam(params, lr=0.02)
    tokens = torch.randint(0, vocab, (16, n))
    losses = []
    for _ in range(60):
        logits = head(attn(emb(tokens)))
        loss = torch.nn.functional.cross_entropy(
            logits[:, 1:].reshape(-1, vocab), tokens[:, :-1].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        losses.append(loss.item())
    assert all(math.isfinite(x) for x in losses)
    assert losses[-1] < 0.5 * losses[0], losses[::10]
    assert attn.rel_k.grad is not None and attn.rel_v.grad is not None

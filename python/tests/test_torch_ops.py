"""relpos's torch.library custom ops (PyTorch >= 2.4): registration,
torch.library.opcheck, zero-copy views, torch.compile(fullgraph=True) and
torch.export through attention and RoPE.

On PyTorch < 2.4 (Debian's 1.13) the op tests skip with that reason and
the autograd-Function path is checked instead; scripts/test.sh runs them
under PyTorch 2 from PyPI."""

import numpy as np
import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: relpos.torch is untested "
                    "(scripts/test.sh installs PyPI's PyTorch 2)")

import relpos  # noqa: E402
import relpos.torch as rt  # noqa: E402
from relpos import _ops  # noqa: E402

needs_ops = pytest.mark.skipif(
    not _ops.ENABLED,
    reason=f"PyTorch {torch.__version__} < 2.4 has no torch.library."
           f"custom_op: relpos.torch uses its autograd Functions "
           f"(scripts/test.sh runs the custom-op path)")


def _qkv(b=2, h=3, nq=9, nk=9, dk=4, dv=5, dtype=torch.float64, seed=0):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(s, generator=g, dtype=dtype) for s in
            ((b, h, nq, dk), (b, h, nk, dk), (b, h, nk, dv))]


def _table(rows, d, dtype=torch.float64, seed=1, heads=None):
    g = torch.Generator().manual_seed(seed)
    shape = (rows, d) if heads is None else (heads, rows, d)
    return 0.5 * torch.randn(shape, generator=g, dtype=dtype)


def test_path_matches_torch_version():
    q, k, v = _qkv()
    q.requires_grad_(True)
    out = rt.attention(q, k, v, _table(5, 4), _table(5, 5), max_distance=2)
    name = type(out.grad_fn).__name__
    if _ops.ENABLED:
        assert hasattr(torch.ops.relpos, "attention_forward")
        assert "_AttentionFunction" not in name
    else:
        assert "_AttentionFunction" in name


def test_views_share_memory():
    x = torch.randn(2, 3, 4, dtype=torch.float32)
    view = _ops._view(x)
    assert view.__array_interface__["data"][0] == x.data_ptr()
    t = x.transpose(0, 2)  # non-contiguous: one copy
    assert np.array_equal(_ops._view(t), t.numpy())


# (name, kwargs builder) for each scheme the op carries.
SCHEMES = {
    "shaw": lambda h: dict(ak=_table(5, 4), av=_table(5, 5),
                           max_distance=2),
    "shaw_per_head_causal": lambda h: dict(
        ak=_table(3, 4, heads=h), av=_table(3, 5, heads=h), max_distance=1,
        causal=True),
    "padding_offset": lambda h: dict(ak=_table(5, 4), av=None,
                                     max_distance=2, key_lengths=[9, 4],
                                     query_offset=-1),
    "clip": lambda h: dict(ak=_table(6, 4), av=_table(6, 5),
                           buckets=relpos.ClipBuckets(3, 2)),
    "t5_bias": lambda h: dict(bias=_table(h, 8),
                              buckets=relpos.T5Buckets(8, 16, True)),
    "alibi": lambda h: dict(alibi=True, causal=True, max_distance=0),
    "xl": lambda h: dict(ak=_table(5, 4), pb=_table(h, 4), max_distance=2),
}


def _call_args(case):
    q, k, v = _qkv()
    kw = SCHEMES[case](q.shape[1])
    ak, av = kw.pop("ak", None), kw.pop("av", None)
    bias, pb = kw.pop("bias", None), kw.pop("pb", None)
    return q, k, v, ak, av, bias, pb, kw


@needs_ops
@pytest.mark.parametrize("case", list(SCHEMES))
def test_opcheck(case):
    q, k, v, ak, av, bias, pb, kw = _call_args(case)
    for t in (q, k, v, ak, av, bias, pb):
        if t is not None:
            t.requires_grad_(True)
    kind, bargs = _ops.encode_buckets("torch.attention", kw.get("buckets"))
    lengths = kw.get("key_lengths")
    args = (q, k, v, ak, av, bias, pb, kw.get("max_distance"),
            kw.get("causal", False),
            None if lengths is None else torch.tensor(lengths),
            kw.get("query_offset"), kind, bargs,
            _ops.encode_alibi(kw.get("alibi")), None, None, None)
    torch.library.opcheck(torch.ops.relpos.attention_forward.default, args)


@needs_ops
def test_opcheck_groups_per_row_offsets_key_starts_and_scale():
    g = torch.Generator().manual_seed(1)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=torch.float64,
                           requires_grad=True)

    q, k, v, ak = randn(2, 4, 3, 8), randn(2, 2, 7, 8), randn(2, 2, 7, 8), \
        randn(5, 8)
    args = (q, k, v, ak, None, None, None, 2, True, torch.tensor([7, 5]),
            None, "", [], None, torch.tensor([4, 2]), torch.tensor([1, 0]),
            0.5)
    torch.library.opcheck(torch.ops.relpos.attention_forward.default, args)


@needs_ops
def test_opcheck_rope():
    x = torch.randn(2, 3, 6, 8, dtype=torch.float64, requires_grad=True)
    torch.library.opcheck(torch.ops.relpos.rope.default,
                          (x, 3, 10000.0, "split_halves", None))
    torch.library.opcheck(torch.ops.relpos.rope_backward.default,
                          (x, 3, 10000.0, "interleaved", None))
    # Per-row positions: one offset per batch item.
    torch.library.opcheck(torch.ops.relpos.rope.default,
                          (x, 0, 10000.0, "split_halves",
                           torch.tensor([3, -2])))


@needs_ops
@pytest.mark.parametrize("case", list(SCHEMES))
def test_gradcheck_through_op(case):
    q, k, v, ak, av, bias, pb, kw = _call_args(case)
    q, k, v = (x[:1, :, :5].clone() for x in (q, k, v))
    if "key_lengths" in kw:
        kw["key_lengths"] = [4]
    inputs = [t.requires_grad_(True) if t is not None else None
              for t in (q, k, v, ak, av, bias, pb)]

    def f(*ts):
        return rt.attention(ts[0], ts[1], ts[2], ts[3], ts[4], bias=ts[5],
                            pb=ts[6], **kw)

    assert torch.autograd.gradcheck(f, inputs, eps=1e-6, atol=1e-5)


def _model(dtype=torch.float32):
    torch.manual_seed(0)

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.attn = rt.RelativeMultiheadAttention(16, 4, 3, causal=True)
            self.norm = torch.nn.LayerNorm(16)

        def forward(self, x):
            # RoPE on the input rows stands in for a rotary model's q / k.
            y = rt.rope(x.view(x.shape[0], x.shape[1], 4, 4).transpose(1, 2))
            y = y.transpose(1, 2).reshape(x.shape)
            return self.norm(x + self.attn(y))

    return Block().to(dtype)


@needs_ops
@pytest.mark.parametrize("backend", ["aot_eager", "inductor"])
def test_compile_fullgraph(backend):
    model = _model()
    x = torch.randn(2, 11, 16)
    ref = model(x)
    ref.square().sum().backward()
    ref_grads = [p.grad.clone() for p in model.parameters()]
    model.zero_grad()
    compiled = torch.compile(model, fullgraph=True, backend=backend)
    out = compiled(x)
    out.square().sum().backward()
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    for p, g in zip(model.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-5)


@needs_ops
def test_compile_dynamic_lengths():
    model = _model()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager",
                             dynamic=True)
    for n in (5, 9, 13):
        x = torch.randn(1, n, 16)
        torch.testing.assert_close(compiled(x), model(x), rtol=1e-5,
                                   atol=1e-5)


@needs_ops
def test_export():
    model = _model().eval()
    x = torch.randn(2, 11, 16)
    exported = torch.export.export(model, (x,))
    targets = {str(n.target) for n in exported.graph.nodes
               if n.op == "call_function"}
    assert "relpos.attention_forward.default" in targets
    assert "relpos.rope.default" in targets
    y = torch.randn(2, 11, 16)
    torch.testing.assert_close(exported.module()(y), model(y))


@needs_ops
def test_op_errors_name_the_argument():
    q, k, v = _qkv(dtype=torch.float32)
    with pytest.raises(TypeError, match="causal"):
        rt.attention(q, k, v, max_distance=1, causal=1)
    with pytest.raises(TypeError, match="ak"):
        rt.attention(q, k, v, torch.zeros(3, 4, dtype=torch.int32),
                     max_distance=1)
    with pytest.raises(ValueError, match="max_distance"):
        rt.attention(q, k, v, _table(3, 4, torch.float32), max_distance=-1)

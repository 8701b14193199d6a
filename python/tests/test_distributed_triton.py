"""relpos.torch.context_parallel_attention on the CUDA path, without a GPU:
two processes over gloo whose CPU tensors take the CUDA branch inside
relpos._ops.triton_on_cpu(), so every near chunk pair runs relpos.triton's
kernels under Triton's interpreter (TRITON_INTERPRET=1, 16 x 16 tiles).
Outputs and gradients (q, k, v and the tables, summed over the ranks) are
compared with single-process relpos.torch.attention in float64 on the whole
sequence; the workers count the Triton calls and refuse the CPU kernel, so
a fallback fails the test. Nothing here ran on a GPU or over NCCL.
"""

import contextlib
import os

import pytest

os.environ.setdefault("TRITON_INTERPRET", "1")
torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: relpos.torch is untested")
pytest.importorskip(
    "triton", reason="Triton is not installed (PyPI's torch brings it on "
                     "Linux): relpos.triton is untested")
import torch.distributed as dist  # noqa: E402

import relpos  # noqa: E402
import relpos.torch as rt  # noqa: E402
from test_distributed import (TABLES, _chunks, _init, _rel_err,  # noqa: E402
                              _spawn)

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason="torch.distributed with gloo is not available")

WORLD = 2
# 41 positions on two ranks: chunks of 21 and 20 (unequal), two 16-row
# tiles and a partial one per chunk.
N = 41
D = 8


def _cases(h, dtype):
    g = torch.Generator().manual_seed(7)

    def tab(*shape):
        return (0.5 * torch.randn(shape, generator=g,
                                  dtype=torch.float64)).to(dtype)

    return {
        "shaw": dict(max_distance=3, ak=tab(7, D), av=tab(7, D)),
        # k = 1: the two chunks' cross pairs take the far shortcut (torch,
        # on the tensors' device).
        "shaw_k1_per_head_causal": dict(max_distance=1, causal=True,
                                        ak=tab(h, 3, D), av=tab(h, 3, D)),
        "clip_4_1_causal_padding": dict(
            buckets=relpos.ClipBuckets(4, 1), causal=True,
            key_lengths=[N, 30], ak=tab(6, D), av=tab(6, D)),
        "t5_bias": dict(buckets=relpos.T5Buckets(8, 12, True),
                        bias=tab(h, 8)),
        "t5_bias_causal": dict(buckets=relpos.T5Buckets(6, 10, False),
                               causal=True, bias=tab(h, 6)),
        "shaw_log": dict(buckets=relpos.T5Buckets(8, 12, True),
                         ak=tab(8, D), av=tab(8, D)),
        "alibi_causal": dict(alibi=True, max_distance=0, causal=True),
        "alibi": dict(alibi=[0.5, 0.25], max_distance=0),
    }


@contextlib.contextmanager
def _cuda_path():
    """The CUDA branch on CPU tensors, with the CPU kernel refused."""
    def refused(*args, **kwargs):
        raise AssertionError("the CPU kernel ran on the CUDA path")

    real = relpos.attention, relpos.attention_backward
    relpos.attention = relpos.attention_backward = refused
    try:
        with relpos._ops.triton_on_cpu():
            yield
    finally:
        relpos.attention, relpos.attention_backward = real


def _check(rank, name, dtype, b=2, h=2):
    kw = _cases(h, dtype)[name]
    g = torch.Generator().manual_seed(3)
    q, k, v, dout = (torch.randn(b, h, N, D, generator=g,
                                 dtype=torch.float64).to(dtype)
                     for _ in range(4))
    tabs = {t: kw.pop(t) for t in TABLES if t in kw}
    # The reference: CPU float64 (relpos's C++ kernel) on the same values.
    full = [x.double().requires_grad_(True) for x in (q, k, v)]
    ref_tabs = {t: x.double().requires_grad_(True) for t, x in tabs.items()}
    ref = rt.attention(*full, ref_tabs.get("ak"), ref_tabs.get("av"),
                       bias=ref_tabs.get("bias"), **kw)
    ref.backward(dout.double())
    offsets, sizes = _chunks(N, WORLD)
    sl = slice(offsets[rank], offsets[rank] + sizes[rank])
    mine = [x[:, :, sl].clone().requires_grad_(True) for x in (q, k, v)]
    my_tabs = {t: x.clone().requires_grad_(True) for t, x in tabs.items()}
    with _cuda_path():
        out = rt.context_parallel_attention(
            *mine, my_tabs.get("ak"), my_tabs.get("av"),
            bias=my_tabs.get("bias"), **kw)
        out.backward(dout[:, :, sl])
    assert out.dtype == dtype
    errors = {"out": _rel_err(out.detach().double(), ref.detach()[:, :, sl])}
    for label, x, y in zip(("dq", "dk", "dv"), mine, full):
        assert x.grad.dtype == dtype
        errors[label] = _rel_err(x.grad.double(), y.grad[:, :, sl])
    for t, x in my_tabs.items():
        total = x.grad.double()
        dist.all_reduce(total)  # each rank holds its queries' part
        errors["d" + t] = _rel_err(total, ref_tabs[t].grad)
    return errors


def _worker(rank, world, rendezvous, dtype, names, out_dir):
    _init(rank, world, rendezvous)
    from relpos.triton import _attention as A
    A.OVERRIDE = A.Blocks(far_m=16, far_n=16, band_m=16, band_n=16, diag=16,
                          diag_programs=2)
    calls = {"forward": 0, "backward": 0}

    def counted(name):
        real = getattr(A, name)

        def call(*args, **kwargs):
            calls[name] += 1
            return real(*args, **kwargs)
        return call

    for name in calls:
        setattr(A, name, counted(name))

    results = {}
    for name in names:
        before = dict(calls)
        errors = _check(rank, name, dtype)
        errors["calls"] = {x: calls[x] - before[x] for x in calls}
        results[name] = errors
    torch.save(results, os.path.join(out_dir, f"cp{rank}.pt"))


# Normwise bounds against float64, in units u of the inputs' dtype. Seen
# (both ranks, every case): float32 at most 2.9e-7 (5 u, u = 2^-24), bfloat16
# 0.0078 (2 u, u = 2^-8: the kernels' bfloat16 operands, the stored output,
# P and dS rounded to 8 bits). The bounds allow 32 u and 4 u.
TOL = {torch.float32: 32 * 2.0 ** -24, torch.bfloat16: 4 * 2.0 ** -8}


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16],
                         ids=["f32", "bf16"])
def test_context_parallel_triton_matches_one_process(dtype, tmp_path):
    names = list(_cases(2, torch.float32))
    if dtype == torch.bfloat16:  # the interpreter is slow: a subset
        names = ["shaw", "t5_bias_causal", "alibi_causal"]
    _spawn(_worker, WORLD, dtype, names, str(tmp_path))
    bad = []
    for rank in range(WORLD):
        results = torch.load(str(tmp_path / f"cp{rank}.pt"))
        for name, errors in results.items():
            calls = errors.pop("calls")
            # Every rank has a near pair (its own chunk): at least the ring
            # forward's Triton forward, and the backward's forward and
            # backward.
            if calls["forward"] < 2 or calls["backward"] < 1:
                bad.append(f"rank {rank} {name}: Triton calls {calls}")
            for what, err in errors.items():
                if not err <= TOL[dtype]:
                    bad.append(f"rank {rank} {name} {what}: {err:.3g}")
    assert not bad, "\n".join(bad)

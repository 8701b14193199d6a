"""What relpos.triton's host side asks of a GPU per call, counted under
Triton's interpreter with bench/gpu_host_profile.py's counters: Triton
launches, torch operators, fresh allocations, fills, tensors made from
host data, and device-to-host reads. These are functional properties of
the host path (a fill or an allocation that comes back fails here), not
speed; nothing is timed.

Counts are of the second call of a configuration (the first fills the
per-device caches of relpos/triton/_problem.py: dummies, ALiBi slopes,
T5's row map)."""

import importlib.util
import os

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: relpos.triton is untested")
pytest.importorskip("triton", reason="Triton is not installed")
os.environ.setdefault("TRITON_INTERPRET", "1")

import relpos  # noqa: E402
from relpos.triton import _attention as A  # noqa: E402
from relpos.triton import _problem  # noqa: E402

_PATH = os.path.join(os.path.dirname(__file__), "..", "..", "bench",
                     "gpu_host_profile.py")
_spec = importlib.util.spec_from_file_location("gpu_host_profile", _PATH)
P = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(P)

SMALL = A.Blocks(far_m=16, far_n=16, band_m=16, band_n=16, diag=16,
                 diag_programs=2)
SHAPE = (1, 2, 35, 8)


@pytest.fixture(autouse=True)
def small_tiles(monkeypatch):
    if not _problem.interpreting():
        pytest.fail("run under Triton's interpreter: TRITON_INTERPRET=1")
    monkeypatch.setattr(A, "OVERRIDE", SMALL)


def _counts(scheme, causal=False, dtype=torch.float32, call=None):
    inputs, fn = P.make_call(torch, relpos, scheme, causal, SHAPE, dtype)
    if call is not None:
        fn = call
    P.profile(torch, fn, inputs)          # fills the caches
    fwd, bwd = P.profile(torch, fn, inputs)
    return fwd, bwd


# (scheme: forward (triton, torch, alloc, fill, upload, sync), backward)
# float32: the forward's band kernel finishes in place in out.
EXPECTED = {
    "vanilla": ((1, 0, 2, 0, 0, 0), (3, 0, 4, 0, 0, 0)),
    "alibi": ((1, 0, 2, 0, 0, 0), (3, 0, 4, 0, 0, 0)),
    "shaw": ((2, 0, 3, 0, 0, 0), (6, 23, 22, 4, 0, 0)),
    "shaw_key": ((2, 0, 3, 0, 0, 0), (6, 12, 14, 2, 0, 0)),
    "t5": ((2, 0, 3, 0, 0, 0), (6, 13, 15, 2, 0, 0)),
    "xl": ((2, 0, 3, 0, 0, 0), (6, 26, 23, 4, 0, 0)),
}


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("scheme", sorted(EXPECTED))
def test_launches_and_allocations(scheme, causal):
    fwd, bwd = _counts(scheme, causal)
    got = (tuple(fwd.row().values()), tuple(bwd.row().values()))
    assert got == EXPECTED[scheme], (fwd.detail(), bwd.detail())


def test_vanilla_allocates_only_its_results():
    """Forward: out and lse, one launch; backward: RC, dq, dk, dv and the
    prep, dQ and dK / dV launches; no fill, no upload, no host read."""
    fwd, bwd = _counts("vanilla", dtype=torch.bfloat16)
    assert dict(fwd.kernels) == {"_fwd_far": 1}
    assert fwd.row() == dict(triton=1, torch=0, alloc=2, fill=0, upload=0,
                             sync=0)
    assert dict(bwd.kernels) == {"_bwd_prep": 1, "_bwd_dq_far": 1,
                                 "_bwd_dkdv_far": 1}
    assert bwd.row() == dict(triton=3, torch=0, alloc=4, fill=0, upload=0,
                             sync=0)


def test_first_call_uploads_then_caches():
    """ALiBi's slopes and T5's row map go to the device once; a later call
    reads the cached copies."""
    for scheme in ("alibi", "t5"):
        _problem._CONSTANTS.clear()
        inputs, fn = P.make_call(torch, relpos, scheme, False, SHAPE,
                                 torch.float32)
        first, _ = P.profile(torch, fn, inputs)
        again, _ = P.profile(torch, fn, inputs)
        assert first.n["upload"] >= 1 and again.n["upload"] == 0, scheme


def test_per_call_data_is_uploaded_without_a_host_read():
    """key_lengths and key_starts given as lists: one upload each
    (_problem.to_device: non-blocking from pinned memory on CUDA; a
    query_offset list with one item is one offset, not uploaded), no
    device-to-host read."""
    import relpos.triton as rtt

    def call(q, kk, v, ak, av):  # make_call's tables: k = 16
        return rtt.attention(q, kk, v, ak, av, max_distance=16, causal=True,
                             key_lengths=[30], query_offset=[3],
                             key_starts=[2])
    fwd, bwd = _counts("shaw", call=call)
    assert fwd.n["upload"] == 2 and fwd.n["sync"] == 0
    assert bwd.n["upload"] == 0 and bwd.n["sync"] == 0


def test_the_counters_see_a_fill(monkeypatch):
    """The counts above can fail: a dummy made per call (as before the
    cache) shows as three fills and three allocations more."""
    base, _ = _counts("vanilla")
    monkeypatch.setattr(A, "_dummy", lambda dtype, device: torch.zeros(
        1, dtype=dtype, device=device))
    fwd, _ = _counts("vanilla")
    assert fwd.n["fill"] == base.n["fill"] + 3
    assert fwd.n["alloc"] == base.n["alloc"] + 3


def test_the_counters_see_a_host_read(monkeypatch):
    """A .item() in the host path is counted as a sync."""
    original = A.forward

    def forward(c, q, *args, **kwargs):
        q.sum().item()
        return original(c, q, *args, **kwargs)
    monkeypatch.setattr(A, "forward", forward)
    fwd, _ = _counts("vanilla")
    assert fwd.n["sync"] == 1 and fwd.syncs["aten._local_scalar_dense"] == 1


def test_dummies_are_one_per_device_and_dtype():
    a = A._dummy(torch.float32, torch.device("cpu"))
    assert A._dummy(torch.float32, torch.device("cpu")) is a
    assert A._dummy(torch.float64, torch.device("cpu")) is not a
    assert a.shape == (1,) and a.item() == 0


def test_compiled_module_takes_the_triton_path_in_one_graph():
    """torch.compile(fullgraph=True) of RelativeMultiheadAttention on the
    CUDA path (relpos._ops.triton_on_cpu: CPU tensors go where CUDA ones
    would): one graph, no break; the compiled forward and backward launch
    relpos.triton's kernels and equal the eager ones; eagerly, the module's
    forward and backward read nothing back from the device (what a CUDA
    graph capture, mode="reduce-overhead", needs; the capture itself needs
    a GPU and is not tested here)."""
    import relpos.torch as rt
    from relpos import _ops

    torch.manual_seed(0)
    mha = rt.RelativeMultiheadAttention(16, 4, 3, causal=True)
    x = torch.randn(2, 11, 16)
    with _ops.triton_on_cpu():
        counts = P.Counts()
        with P.counting(counts):
            ref = mha(x)
            ref.square().sum().backward()
        assert counts.n["triton"] >= 4 and counts.n["sync"] == 0, \
            counts.detail()
        ref_grads = [p.grad.clone() for p in mha.parameters()]
        mha.zero_grad()
        explained = torch._dynamo.explain(mha)(x)
        assert explained.graph_break_count == 0
        assert explained.graph_count == 1
        compiled = torch.compile(mha, fullgraph=True, backend="aot_eager")
        launches = P.Counts()
        with P.counting(launches, ops=False):
            out = compiled(x)
            out.square().sum().backward()
        assert launches.n["triton"] == counts.n["triton"], \
            (launches.detail(), counts.detail())
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-6)
    for p, g in zip(mha.parameters(), ref_grads):
        torch.testing.assert_close(p.grad, g, rtol=1e-4, atol=1e-6)

"""relpos under torch.distributed (gloo, processes on one machine):

* DistributedDataParallel: a model with RelativeMultiheadAttention on two
  processes gets the gradients of one process on the joined batch, and a
  short training run the same losses;
* relpos.torch.context_parallel_attention on 2 and 4 processes equals
  single-process relpos attention (outputs and gradients of q, k, v and the
  tables), for Shaw, asymmetric clip, T5's scalar bias and ALiBi, causal and
  bidirectional, with unequal chunks and chunk pairs on the far shortcut.

Skipped (visibly) when PyTorch or torch.distributed / gloo is missing.

Also a timing script for context parallelism (not a test):
    python python/tests/test_distributed.py bench --n 16384 --world 2
"""

import argparse
import datetime
import importlib
import math
import os
import sys
import tempfile
import time
import traceback

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: relpos.torch is untested "
                    "(scripts/test.sh installs PyPI's PyTorch 2)")
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402

import relpos  # noqa: E402
import relpos.torch as rt  # noqa: E402

pytestmark = pytest.mark.skipif(
    not (dist.is_available() and dist.is_gloo_available()),
    reason=f"torch.distributed with gloo is not available in PyTorch "
           f"{torch.__version__}")


def _init(rank, world, rendezvous):
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}",
                            rank=rank, world_size=world)


def _entry(rank, target, world, rendezvous, *args):
    # A worker ends with os._exit, after its results are written: Debian's
    # PyTorch 1.13 can deadlock while tearing down (the DDP reducer's gloo
    # group joins a thread that waits for the GIL; a thread-local destructor
    # after an error), which would hang the test instead of ending it.
    status = 0
    try:
        # target: (module, function name), so other test files spawn
        # their own workers through _spawn.
        fn = getattr(importlib.import_module(target[0]), target[1])
        keep = fn(rank, world, rendezvous, *args)  # noqa: F841
        # Leave only when every rank is done communicating (a file each),
        # so no message is cut off by an early exit.
        open(f"{rendezvous}.done{rank}", "w").close()
        deadline = time.monotonic() + 120
        while not all(os.path.exists(f"{rendezvous}.done{r}")
                      for r in range(world)):
            if time.monotonic() > deadline:
                raise TimeoutError("other ranks did not finish")
            time.sleep(0.05)
    except BaseException:
        traceback.print_exc()
        status = 1
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(status)


def _spawn(fn, world, *args):
    with tempfile.TemporaryDirectory() as tmp:
        mp.spawn(_entry, args=((fn.__module__, fn.__name__), world,
                               os.path.join(tmp, "rendezvous")) + args,
                 nprocs=world, join=True)


def _rel_err(a, b):
    """Normwise ||a - b|| / ||b||; 0 when both are zero (a rank whose keys
    are all padding gets exactly zero dK and dV)."""
    diff = float((a - b).norm())
    return 0.0 if diff == 0.0 else diff / max(float(b.norm()), 1e-300)


@pytest.fixture(autouse=True)
def _one_thread(monkeypatch):
    # Up to 4 processes share the machine: one OpenMP thread each.
    monkeypatch.setenv("OMP_NUM_THREADS", "1")


# --- data parallel -----------------------------------------------------------

# RelativeMultiheadAttention configurations under DDP. A new scheme is one
# more entry: its constructor keywords.
DDP_SCHEMES = {
    "shaw": dict(max_distance=2),
    "shaw_per_head_causal": dict(max_distance=3, per_head_tables=True,
                                 causal=True),
    "shaw_key_only": dict(max_distance=1, value_term=False),
    "shaw_asym": dict(scheme="shaw-asym", k_left=3, k_right=1),
    "shaw_log": dict(scheme="shaw-log", num_buckets=6, bucket_max_distance=12),
    "t5_causal": dict(scheme="t5", num_buckets=6, bucket_max_distance=12,
                      causal=True),
    "alibi": dict(scheme="alibi"),
    "rope": dict(scheme="rope"),
    "xl": dict(scheme="xl"),
}


def _ddp_model(kw, dtype):
    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(6, 8),
        rt.RelativeMultiheadAttention(8, 2, **kw),
        torch.nn.Linear(8, 3)).to(dtype)


def _ddp_data(dtype, steps=4, batch=4, n=9):
    g = torch.Generator().manual_seed(1)
    return [(torch.randn(batch, n, 6, generator=g, dtype=dtype),
             torch.randn(batch, n, 3, generator=g, dtype=dtype))
            for _ in range(steps)]


def _train(model, data, step_fn):
    opt = torch.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    losses, first_grads = [], None
    for x, y in data:
        opt.zero_grad()
        loss = step_fn(model, x, y)
        if first_grads is None:
            first_grads = [p.grad.detach().clone()
                           for p in model.parameters()]
        opt.step()
        losses.append(loss)
    return losses, first_grads


def _ddp_worker(rank, world, rendezvous, name, dtype, out_dir):
    _init(rank, world, rendezvous)
    from torch.nn.parallel import DistributedDataParallel as DDP
    model = DDP(_ddp_model(DDP_SCHEMES[name], dtype))
    data = _ddp_data(dtype)
    per = data[0][0].shape[0] // world

    def step(m, x, y):
        xs, ys = x[rank * per:(rank + 1) * per], y[rank * per:(rank + 1) * per]
        loss = torch.nn.functional.mse_loss(m(xs[:, :, :]), ys)
        loss.backward()
        # The joined batch's loss is the mean of the ranks' (equal) means.
        total = loss.detach().clone()
        dist.all_reduce(total)
        return float(total) / world

    losses, grads = _train(model, data, step)
    if rank == 0:
        torch.save({"losses": losses, "grads": grads},
                   os.path.join(out_dir, "ddp.pt"))
    return model  # kept alive until os._exit (see _entry)


@pytest.mark.parametrize("dtype", [torch.float64, torch.float32],
                         ids=["f64", "f32"])
@pytest.mark.parametrize("name", list(DDP_SCHEMES))
def test_ddp_matches_one_process(name, dtype, tmp_path):
    _spawn(_ddp_worker, 2, name, dtype, str(tmp_path))
    got = torch.load(str(tmp_path / "ddp.pt"))

    def step(m, x, y):
        loss = torch.nn.functional.mse_loss(m(x), y)
        loss.backward()
        return float(loss.detach())

    losses, grads = _train(_ddp_model(DDP_SCHEMES[name], dtype),
                           _ddp_data(dtype), step)
    # Gradients: one reduction order against another; float32 sums of a few
    # hundred terms stay within 1e-6 normwise: the whole gradient, and each
    # parameter's except one that is zero in exact arithmetic (k_proj's
    # bias: softmax ignores a shift shared by all keys), which is rounding
    # noise on both sides.
    assert _rel_err(torch.cat([g.flatten() for g in got["grads"]]),
                    torch.cat([r.flatten() for r in grads])) <= 1e-6
    total = math.sqrt(sum(float(r.norm()) ** 2 for r in grads))
    for g, ref in zip(got["grads"], grads):
        if float(ref.norm()) > 1e-3 * total:
            assert _rel_err(g, ref) <= 1e-6
    for a, b in zip(got["losses"], losses):
        assert abs(a - b) <= 1e-6 * abs(b)


# --- context parallel ---------------------------------------------------------

# name -> (attention keywords builder (H, dtype) -> dict, table shapes).
def _tables(g, dtype, **shapes):
    return {name: 0.5 * torch.randn(shape, generator=g, dtype=dtype)
            for name, shape in shapes.items()}


def _cp_cases(h, d, dtype):
    g = torch.Generator().manual_seed(7)
    return {
        "shaw": dict(max_distance=3, **_tables(g, dtype, ak=(7, d),
                                               av=(7, d))),
        # k = 1: on 2 ranks the neighbouring chunks already take the far
        # shortcut (every distance >= 1 or <= -1).
        "shaw_k1_per_head_causal": dict(
            max_distance=1, causal=True,
            **_tables(g, dtype, ak=(h, 3, d), av=(h, 3, d))),
        # k = 0 with a key table would give dak = 0 exactly (q . ak[0] is
        # the same for every key of a row): the value table only.
        "shaw_k0_value_only": dict(max_distance=0,
                                   **_tables(g, dtype, av=(1, d))),
        "shaw_key_only_causal": dict(max_distance=2, causal=True,
                                     **_tables(g, dtype, ak=(5, d))),
        "clip_4_1_causal": dict(buckets=relpos.ClipBuckets(4, 1), causal=True,
                                **_tables(g, dtype, ak=(6, d), av=(6, d))),
        "t5_bias": dict(buckets=relpos.T5Buckets(8, 12, True),
                        **_tables(g, dtype, bias=(h, 8))),
        # shaw-log: Shaw's vector tables under T5 buckets (the fused kernel
        # runs their backward with the ring's global statistics).
        "shaw_log": dict(buckets=relpos.T5Buckets(8, 12, True),
                         **_tables(g, dtype, ak=(8, d), av=(8, d))),
        "shaw_log_per_head_causal": dict(
            buckets=relpos.T5Buckets(6, 10, False), causal=True,
            **_tables(g, dtype, ak=(h, 6, d), av=(h, 6, d))),
        "t5_bias_causal": dict(buckets=relpos.T5Buckets(6, 10, False),
                               causal=True,
                               **_tables(g, dtype, bias=(h, 6))),
        # Padding at the end of the sequence: batch item 1 has 11 valid
        # keys (chunks past them are skipped), or none at all (zero rows).
        "shaw_padding": dict(max_distance=2, key_lengths=[29, 11],
                             **_tables(g, dtype, ak=(5, d), av=(5, d))),
        "shaw_k1_padding_causal": dict(
            max_distance=1, causal=True, key_lengths=torch.tensor([17, 0]),
            **_tables(g, dtype, ak=(3, d), av=(3, d))),
        "t5_bias_padding": dict(buckets=relpos.T5Buckets(8, 12, True),
                                key_lengths=[5, 23],
                                **_tables(g, dtype, bias=(h, 8))),
        "alibi_causal": dict(alibi=True, max_distance=0, causal=True),
        "alibi": dict(alibi=[0.5, 0.25], max_distance=0),
    }


def _chunks(n, world):
    """Unequal contiguous chunks: the first n % world get one more row."""
    base, extra = divmod(n, world)
    sizes = [base + (r < extra) for r in range(world)]
    return [sum(sizes[:r]) for r in range(world)], sizes


TABLES = ("ak", "av", "bias")


def _cp_check(rank, world, name, dtype, b=2, h=2, n=29, d=4):
    kw = _cp_cases(h, d, dtype)[name]
    g = torch.Generator().manual_seed(3)
    q, k, v, dout = (torch.randn(b, h, n, d, generator=g, dtype=dtype)
                     for _ in range(4))
    tabs = {t: kw.pop(t) for t in TABLES if t in kw}
    # Single process over the whole sequence.
    full = [x.clone().requires_grad_(True) for x in (q, k, v)]
    ref_tabs = {t: x.clone().requires_grad_(True) for t, x in tabs.items()}
    ref = rt.attention(*full, ref_tabs.get("ak"), ref_tabs.get("av"),
                       bias=ref_tabs.get("bias"), **kw)
    ref.backward(dout)
    # This rank's chunk.
    offsets, sizes = _chunks(n, world)
    sl = slice(offsets[rank], offsets[rank] + sizes[rank])
    mine = [x[:, :, sl].clone().requires_grad_(True) for x in (q, k, v)]
    my_tabs = {t: x.clone().requires_grad_(True) for t, x in tabs.items()}
    out = rt.context_parallel_attention(
        *mine, my_tabs.get("ak"), my_tabs.get("av"), bias=my_tabs.get("bias"),
        **kw)
    out.backward(dout[:, :, sl])
    errors = {"out": _rel_err(out.detach(), ref.detach()[:, :, sl])}
    for label, x, y in zip(("dq", "dk", "dv"), mine, full):
        errors[label] = _rel_err(x.grad, y.grad[:, :, sl])
    for t, x in my_tabs.items():
        total = x.grad.clone()
        dist.all_reduce(total)  # each rank holds its queries' part
        errors["d" + t] = _rel_err(total, ref_tabs[t].grad)
    return errors


def _cp_worker(rank, world, rendezvous, dtype, out_dir):
    _init(rank, world, rendezvous)
    results = {name: _cp_check(rank, world, name, dtype)
               for name in _cp_cases(2, 4, dtype)}
    torch.save(results, os.path.join(out_dir, f"cp{rank}.pt"))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64],
                         ids=["f32", "f64"])
@pytest.mark.parametrize("world", [2, 4])
def test_context_parallel_matches_one_process(world, dtype, tmp_path):
    _spawn(_cp_worker, world, dtype, str(tmp_path))
    # float32: the ring combines P partial softmaxes in another order than
    # the single-process kernel; the errors are a few float32 roundings.
    tol = 1e-5 if dtype == torch.float32 else 1e-10
    bad = []
    for rank in range(world):
        results = torch.load(str(tmp_path / f"cp{rank}.pt"))
        for name, errors in results.items():
            for what, err in errors.items():
                if not err <= tol:
                    bad.append(f"rank {rank} {name} {what}: {err:.3g}")
    assert not bad, "\n".join(bad)


class _CPModel(torch.nn.Module):
    """Projections, context-parallel (or, with group None and one process,
    plain) relpos attention with learned Shaw tables, output projection."""

    def __init__(self, e=8, h=2, k=2):
        super().__init__()
        torch.manual_seed(0)
        self.h, self.k = h, k
        self.qkv = torch.nn.Linear(e, 3 * e)
        self.out = torch.nn.Linear(e, e)
        self.ak = torch.nn.Parameter(0.5 * torch.randn(2 * k + 1, e // h))
        self.av = torch.nn.Parameter(0.5 * torch.randn(2 * k + 1, e // h))

    def forward(self, x, group=None, parallel=True):
        b, n, e = x.shape
        q, k, v = (t.view(b, n, self.h, -1).transpose(1, 2)
                   for t in self.qkv(x).chunk(3, -1))
        fn = rt.context_parallel_attention if parallel else rt.attention
        kw = dict(group=group) if parallel else {}
        o = fn(q, k, v, self.ak, self.av, max_distance=self.k, causal=True,
               **kw)
        return self.out(o.transpose(1, 2).reshape(b, n, e))


def _cp_data(n=24):
    g = torch.Generator().manual_seed(5)
    return (torch.randn(2, n, 8, generator=g),
            torch.randn(2, n, 8, generator=g))


def _cp_ddp_worker(rank, world, rendezvous, out_dir):
    _init(rank, world, rendezvous)
    from torch.nn.parallel import DistributedDataParallel as DDP
    # The ring on its own group, DDP's gradient all-reduce on the default.
    ring = dist.new_group(list(range(world)))
    model = DDP(_CPModel())
    x, y = _cp_data()
    per = x.shape[1] // world
    sl = slice(rank * per, (rank + 1) * per)
    # Each rank's loss is the mean over its (equal) chunk; DDP averages.
    loss = torch.nn.functional.mse_loss(model(x[:, sl], group=ring), y[:, sl])
    loss.backward()
    if rank == 0:
        torch.save([p.grad for p in model.parameters()],
                   os.path.join(out_dir, "cp_ddp.pt"))
    return model


@pytest.mark.parametrize("world", [2, 4])
def test_context_parallel_under_ddp(world, tmp_path):
    _spawn(_cp_ddp_worker, world, str(tmp_path))
    got = torch.load(str(tmp_path / "cp_ddp.pt"))
    model = _CPModel()
    x, y = _cp_data()
    torch.nn.functional.mse_loss(model(x, parallel=False), y).backward()
    for g, p in zip(got, model.parameters()):
        assert _rel_err(g, p.grad) <= 1e-5


def _settings(causal, **kw):
    from relpos import distributed as rd
    from relpos._call import parse
    ak, bias = kw.pop("ak", None), kw.pop("bias", None)
    args = parse(rd._FN, ak=ak, bias=bias, **kw)  # max_distance, buckets, alibi
    return rd._Settings(rd._Scheme(2, ak, None, bias, args), causal, None)


def test_pair_kind():
    from relpos.distributed import _pair_kind
    shaw = _settings(False, max_distance=3)
    # Queries 0..7 against keys 8..15: distances 1..15, not all >= 3.
    assert _pair_kind(shaw, 0, 8, 8, 8) == ("near", None)
    # Keys 10..17: distances 3..17 >= k: row 2k for every entry.
    assert _pair_kind(shaw, 0, 8, 10, 8) == ("far", 6)
    # Keys before the queries by at least k: row 0.
    assert _pair_kind(shaw, 20, 4, 10, 7) == ("far", 0)
    assert _pair_kind(shaw, 20, 4, 10, 9) == ("near", None)
    assert _pair_kind(shaw, 0, 0, 10, 8) == ("skip", None)
    causal = _settings(True, max_distance=3)
    assert _pair_kind(causal, 0, 8, 8, 8) == ("skip", None)
    assert _pair_kind(causal, 8, 8, 0, 8) == ("near", None)  # r up to 0
    assert _pair_kind(causal, 16, 8, 0, 8) == ("far", 0)
    clip = _settings(False, buckets=relpos.ClipBuckets(4, 1))
    assert _pair_kind(clip, 0, 4, 5, 4) == ("far", 5)
    assert _pair_kind(clip, 8, 4, 0, 6) == ("near", None)
    assert _pair_kind(clip, 8, 4, 0, 4) == ("far", 0)
    reach = relpos.t5_bucket_reach(num_buckets=8, max_distance=12)
    t5 = _settings(False, buckets=relpos.T5Buckets(8, 12, True))
    row = int(relpos.t5_bucket([reach], num_buckets=8, max_distance=12)[0])
    assert _pair_kind(t5, 0, 4, 3 + reach, 4) == ("far", row)
    assert _pair_kind(t5, 0, 4, 2 + reach, 4) == ("near", None)
    alibi = _settings(False, alibi=True, max_distance=0)
    assert _pair_kind(alibi, 0, 4, 1000, 4) == ("near", None)


@pytest.mark.parametrize("name", ["shaw", "clip_causal", "shaw_log",
                                  "shaw_log_per_head_causal", "t5_bias"])
def test_near_pairs_take_the_kernel_backward(name, monkeypatch):
    """A float32 near chunk pair runs relpos.attention_backward (the fused
    kernel, with the pair's out / lse as the global statistics) for every
    bucket map, Shaw's vector tables under T5 buckets included, never the
    torch chunk-pair path; and agrees with that path."""
    from relpos import distributed as rd
    from relpos._call import parse
    g = torch.Generator().manual_seed(11)
    b, h, n, d = 2, 2, 6, 4
    kw = {"shaw": dict(max_distance=2, ak=(5, d), av=(5, d)),
          "clip_causal": dict(buckets=relpos.ClipBuckets(3, 1), causal=True,
                              ak=(5, d), av=(5, d)),
          "shaw_log": dict(buckets=relpos.T5Buckets(8, 12, True), ak=(8, d),
                           av=(8, d)),
          "shaw_log_per_head_causal": dict(
              buckets=relpos.T5Buckets(6, 10, False), causal=True,
              ak=(h, 6, d), av=(h, 6, d)),
          "t5_bias": dict(buckets=relpos.T5Buckets(8, 12, True),
                          bias=(h, 8))}[name]
    causal = kw.pop("causal", False)
    tabs = _tables(g, torch.float32, **{t: kw.pop(t) for t in TABLES
                                        if t in kw})
    args = parse(rd._FN, ak=tabs.get("ak"), bias=tabs.get("bias"),
                 max_distance=kw.get("max_distance"),
                 buckets=kw.get("buckets"))
    s = rd._Settings(rd._Scheme(h, tabs.get("ak"), tabs.get("av"),
                                tabs.get("bias"), args), causal, None)
    q, k, v, dout = (torch.randn(b, h, n, d, generator=g) for _ in range(4))
    qo, ko = 3, 1  # queries 3..8, keys 1..6: distances -7 .. 3, near
    assert rd._pair_kind(s, qo, n, ko, n) == ("near", None)
    out, lse = rd._pair_forward(s, q, k, v, qo, ko)

    def accumulators():
        acc = {x: torch.zeros_like(q) for x in ("dq", "dk", "dv")}
        acc.update({"d" + t: torch.zeros_like(x) for t, x in tabs.items()})
        return acc

    torch_path = rd._torch_backward
    taken = []
    monkeypatch.setattr(rd, "_torch_backward",
                        lambda *args: taken.append(args))
    kernel = accumulators()
    rd._pair_backward(s, q, k, v, qo, ko, out, lse, dout, kernel)
    assert not taken, "the near float32 pair took the torch path"
    reference = accumulators()
    torch_path(s, q, k, v, qo, ko, None, out, lse, dout, reference)
    for key, want in reference.items():
        assert _rel_err(kernel[key], want) <= 1e-5, key


def test_merge_partial_softmaxes():
    from relpos.distributed import _merge
    g = torch.Generator().manual_seed(0)
    s = torch.randn(1, 1, 3, 10, generator=g, dtype=torch.float64)
    v = torch.randn(1, 1, 10, 2, generator=g, dtype=torch.float64)
    s[0, 0, 2, :6] = -math.inf  # row 2 sees nothing in the first part

    def part(lo, hi):
        lse = torch.logsumexp(s[..., lo:hi], -1)
        finite = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
        return torch.exp(s[..., lo:hi] - finite[..., None]) @ v[:, :, lo:hi], lse

    out, lse = _merge(*part(0, 6), *part(6, 10))
    torch.testing.assert_close(lse, torch.logsumexp(s, -1))
    torch.testing.assert_close(out, torch.softmax(s, -1) @ v)
    # Both parts empty: zero output, lse -inf (no NaN).
    empty = torch.full((1, 1, 3), -math.inf, dtype=torch.float64)
    zero = torch.zeros(1, 1, 3, 2, dtype=torch.float64)
    out, lse = _merge(zero, empty, zero, empty)
    assert torch.equal(out, zero) and torch.equal(lse, empty)


def _cp_error_worker(rank, world, rendezvous, out_dir):
    _init(rank, world, rendezvous)
    q = torch.zeros(1, 2, 4, 3)
    messages = []
    for call in (
            lambda: rt.context_parallel_attention(q, q, q.int(),
                                                  max_distance=1),
            lambda: rt.context_parallel_attention(q, q[:, :, :3], q,
                                                  max_distance=1),
            lambda: rt.context_parallel_attention(q, q, q, causal=1,
                                                  max_distance=1),
            lambda: rt.context_parallel_attention(q, q, q),
            lambda: rt.context_parallel_attention(q, q, q, torch.zeros(4, 3),
                                                  max_distance=1),
            lambda: rt.context_parallel_attention(q, q, q, max_distance=1,
                                                  key_lengths=[9])):
        try:
            call()
            messages.append("no error")
        except (TypeError, ValueError) as e:
            messages.append(str(e))
    torch.save(messages, os.path.join(out_dir, f"err{rank}.pt"))


def test_context_parallel_errors(tmp_path):
    _spawn(_cp_error_worker, 2, str(tmp_path))
    messages = torch.load(str(tmp_path / "err0.pt"))
    assert len(messages) == 6
    for text, needle in zip(messages, ("v must have dtype", "q, k, v",
                                       "causal", "max_distance", "ak",
                                       "key_lengths[0]")):
        assert needle in text, text


def _cp_mismatch_worker(rank, world, rendezvous, out_dir):
    # A short timeout: a regression that leaves a rank waiting in the ring
    # fails this test in seconds instead of hanging it for 30 minutes.
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method=f"file://{rendezvous}",
                            rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=20))
    g = torch.Generator().manual_seed(rank)

    def qkv(b=1, h=2, n=3, d=4, dtype=torch.float32):
        return [torch.randn(b, h, n, d, generator=g, dtype=dtype)
                for _ in range(3)]

    last = rank == world - 1
    ak = torch.randn(9, 4, generator=g)
    calls = {
        # Different k: each rank would get a plausible out, a wrong dk.
        "k": lambda: rt.context_parallel_attention(
            *qkv(), max_distance=4 if rank == 0 else 8),
        "clip": lambda: rt.context_parallel_attention(
            *qkv(), buckets=relpos.ClipBuckets(4, 4) if rank == 0
            else relpos.ClipBuckets(6, 2)),
        "causal": lambda: rt.context_parallel_attention(
            *qkv(), max_distance=2, causal=last),
        "key_lengths": lambda: rt.context_parallel_attention(
            *qkv(), max_distance=2, key_lengths=[5 if last else 4]),
        # These aborted a process in gloo (EnforceNotMet) before.
        "head size": lambda: rt.context_parallel_attention(
            *qkv(d=8 if last else 4), max_distance=2),
        "dtype": lambda: rt.context_parallel_attention(
            *qkv(dtype=torch.float64 if last else torch.float32),
            max_distance=2),
        "batch": lambda: rt.context_parallel_attention(
            *qkv(b=2 if last else 1), max_distance=2),
        "tables": lambda: rt.context_parallel_attention(
            *qkv(), ak if last else None, max_distance=4),
        # One rank's own arguments refused: it raised and stayed alive while
        # its peer blocked for the group's timeout before.
        "refused": lambda: rt.context_parallel_attention(
            *qkv()[:2], qkv()[2].int() if last else qkv()[2],
            max_distance=2),
    }
    results = {}
    for name, call in calls.items():
        try:
            call()
            results[name] = ("no error", "")
        except Exception as e:  # noqa: BLE001
            results[name] = (type(e).__name__, str(e))
    # The group still works: a consistent call right after.
    q, k, v = qkv()
    out = rt.context_parallel_attention(q, k, v, max_distance=2)
    results["after"] = ("ok", str(tuple(out.shape)))
    torch.save(results, os.path.join(out_dir, f"mismatch{rank}.pt"))


def test_context_parallel_ranks_that_disagree_raise_alike(tmp_path):
    _spawn(_cp_mismatch_worker, 2, str(tmp_path))
    r0 = torch.load(str(tmp_path / "mismatch0.pt"))
    r1 = torch.load(str(tmp_path / "mismatch1.pt"))
    needles = {"k": "max_distance", "clip": "buckets", "causal": "causal",
               "key_lengths": "key_lengths", "head size": "head size dk",
               "dtype": "dtype", "batch": "batch B",
               "tables": "ak (shape, dtype)", "refused": "v must have dtype"}
    for name, needle in needles.items():
        # The same exception, type and message, on every rank.
        assert r0[name] == r1[name], (name, r0[name], r1[name])
        kind, text = r0[name]
        assert kind == ("TypeError" if name == "refused" else "ValueError"), \
            (name, kind, text)
        assert needle in text, (name, text)
    assert "on rank 1" in r0["refused"][1]
    assert r0["after"] == r1["after"] == ("ok", "(1, 2, 3, 4)")


def test_context_parallel_needs_init():
    q = torch.zeros(1, 1, 2, 2)
    if dist.is_initialized():
        pytest.skip("a process group is already initialised")
    with pytest.raises(RuntimeError, match="init_process_group"):
        rt.context_parallel_attention(q, q, q, max_distance=1)


# --- timing (python test_distributed.py bench ...), not a test -------------


def _bench_worker(rank, world, rendezvous, args):
    _init(rank, world, rendezvous)
    torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    n, h, d = args.n, args.heads, args.dim
    offsets, sizes = _chunks(n, world)
    sl = slice(offsets[rank], offsets[rank] + sizes[rank])
    q, k, v = (torch.randn(1, h, n, d, generator=g)[:, :, sl].clone()
               .requires_grad_(True) for _ in range(3))
    ak, av = ((0.1 * torch.randn(2 * args.k + 1, d, generator=g))
              .requires_grad_(True) for _ in range(2))
    times = []
    for _ in range(args.repeat):
        dist.barrier()
        t0 = time.perf_counter()
        if world == 1:
            out = rt.attention(q, k, v, ak, av, max_distance=args.k,
                               causal=args.causal)
        else:
            out = rt.context_parallel_attention(
                q, k, v, ak, av, max_distance=args.k, causal=args.causal)
        out.sum().backward()
        dist.barrier()
        times.append(time.perf_counter() - t0)
    if rank == 0:
        print(f"world {world}: n {n} H {h} d {d} k {args.k} causal "
              f"{args.causal}: forward+backward min {min(times):.3f} s "
              f"(runs {', '.join(f'{t:.3f}' for t in times)})", flush=True)


def _bench(argv):
    p = argparse.ArgumentParser(description="1-vs-P process timing of "
                                "context-parallel relpos attention")
    p.add_argument("--n", type=int, default=16384)
    p.add_argument("--heads", type=int, default=2)
    p.add_argument("--dim", type=int, default=64)
    p.add_argument("--k", type=int, default=16)
    p.add_argument("--causal", action="store_true")
    p.add_argument("--world", type=int, nargs="+", default=[1, 2])
    p.add_argument("--threads", type=int, default=1,
                   help="OpenMP / torch threads per process")
    p.add_argument("--repeat", type=int, default=3)
    args = p.parse_args(argv)
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    for world in args.world:
        _spawn(_bench_worker, world, args)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "bench":
        _bench(sys.argv[2:])
    else:
        sys.exit(pytest.main([__file__, "-q", "-rs"]))

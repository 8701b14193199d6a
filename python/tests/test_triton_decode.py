"""relpos.triton's split-key forward for decoding (_decode.py) under Triton's
interpreter.

Every test here runs relpos.triton's forward with Nq in {1, 2, 4} against
a few hundred keys, checks that the split path ran (its kernel launched
with two splits or more: a test fails if the dispatch falls back to the
regular grid), and compares out, lse and, through the regular backward fed
the split path's out and lse, every gradient with the float64 C++
reference (test_triton._run: the same inputs, reference and normwise
tolerances as test_triton.py, whose docstring derives them).

Tiles: the backward's 16 x 16 (test_triton.SMALL); the split path's 16
query rows, 16-key far tiles and band steps (SPLIT; SPLIT_SUBTILES: 32-key
far tiles, 16-key band steps), and a program target that gives B H = 2
eleven or so splits of 32-48 keys, B H = 8 three or four. The cases place
the band of interior distances inside the key range (an explicit
query_offset), so that one chunk holds far tiles on both sides and band
tiles, a band crosses a split boundary, and the last tile is partial;
others mask whole splits (short key lengths, a key length 0, key_starts
past several chunks, a causal end early in the keys, a negative offset
whose first rows see no key).
"""

import dataclasses

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: relpos.triton is untested "
                    "(scripts/test.sh installs PyPI's PyTorch 2)")
pytest.importorskip(
    "triton", reason="Triton is not installed (PyPI's torch brings it on "
                     "Linux): relpos.triton is untested")

import test_triton as T  # noqa: E402  (sets TRITON_INTERPRET if unset)
import relpos.triton as rtt  # noqa: E402
from relpos.triton import _attention as A  # noqa: E402
from relpos.triton import _decode as D  # noqa: E402
from relpos.triton import _problem  # noqa: E402

SPLIT = D.SplitBlocks(block_m=16, block_n=16, band_n=16, programs=24,
                      min_tiles=2)
SPLIT_SUBTILES = D.SplitBlocks(block_m=16, block_n=32, band_n=16,
                               programs=24, min_tiles=2)


class _Launches:
    """Stands in for _decode._fwd_split: records each launch's grid and
    its partial-state buffer ST [BH, S, 4, BLOCK_M], then launches."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.grids = []
        self.states = []

    def __getitem__(self, grid):
        def launch(*args, **kw):
            self.grids.append(grid)
            self.states.append(args[-4])  # ST (then PART, TILES, S)
            return self.kernel[grid](*args, **kw)
        return launch


@pytest.fixture(autouse=True)
def split_tiles(monkeypatch):
    if not _problem.interpreting():
        pytest.fail("relpos.triton's tests run under Triton's interpreter: "
                    "set TRITON_INTERPRET=1 before Triton is imported")
    monkeypatch.setattr(A, "OVERRIDE", T.SMALL)
    monkeypatch.setattr(D, "OVERRIDE", SPLIT)
    launches = _Launches(D._fwd_split)
    monkeypatch.setattr(D, "_fwd_split", launches)
    return launches


def _case(name, **kw):
    base = dict(b=1, h=2, nq=4, nk=500, dk=8, dv=8, k=3)
    return T.SchemeCase(name, **{**base, **kw})


def _layout(name, **kw):
    base = dict(b=2, h=4, nq=4, nk=500, dk=8, dv=8, k=3)
    return T.LayoutCase(name, **{**base, **kw})


# Every scheme, at Nq 1, 2 or 4. "band" cases: query_offset puts the
# interior distances mid-keys (e.g. shaw_k20_band: keys 181-223 of 500,
# split boundaries every 48 keys, one at 192).
SCHEMES = [
    _case("vanilla_causal", nq=1, nk=333, score="none", value_term=False,
          causal=True),
    _case("alibi_band", nq=2, nk=410, score="alibi", value_term=False,
          query_offset=150),
    _case("alibi_values_causal", nq=4, nk=377, score="alibi",
          buckets=T.ASYM, query_offset=200, causal=True),
    _case("shaw_k20_band", k=20, query_offset=200),
    _case("shaw_causal", nq=1, nk=650, causal=True),
    _case("keyonly_band", nq=2, nk=300, value_term=False, query_offset=100),
    _case("valueonly_causal", nk=520, score="none", query_offset=250,
          causal=True),
    _case("shaw_perhead_k40_band", nk=460, k=40, per_head=True,
          query_offset=230),
    _case("xl_causal", nq=1, nk=600, k=40, pb=True, value_term=False,
          causal=True),
    _case("xl_values_perhead_band", nq=2, nk=350, k=24, pb=True,
          per_head=True, query_offset=120),
    _case("t5_band", nk=700, buckets=T.T5, score="bias", value_term=False,
          query_offset=300),
    _case("t5_values_causal", nq=2, nk=420, buckets=T.T5_CAUSAL,
          score="bias", causal=True),
    _case("shawlog_band", nq=1, nk=390, buckets=T.T5, query_offset=180),
    _case("asym_band", nk=310, buckets=T.ASYM, query_offset=90),
    _case("k0", nq=2, nk=330, k=0),
]
# Whole splits masked (m = -inf in their partial state).
MASKED = [
    _case("lengths_short_and_empty", b=3, h=1, nk=470, k=20,
          key_lengths=(470, 37, 0), query_offset=200),
    _case("causal_end_early", nk=500, k=20, query_offset=60, causal=True),
    _case("negative_offset_rows_unseen", nk=400, query_offset=-2,
          causal=True),
]
LAYOUTS = [
    _layout("gqa2_causal", nq=4, nk=450, hkv=2, causal=True),
    _layout("mqa_t5_values", nq=2, nk=400, hkv=1, buckets=T.T5,
            score="bias", query_offset=190),
    _layout("starts_past_chunks", nk=480, k=20, key_starts=(300, 5),
            key_lengths=(480, 200), query_offset=310, causal=True),
    _layout("row_offsets_shawlog", nq=4, nk=500, buckets=T.T5,
            per_head=True, query_offsets=(-3, 250), causal=True),
    _layout("combo_xl_values", nq=2, nk=520, hkv=2, k=24, pb=True,
            per_head=True, key_starts=(40, 0), key_lengths=(520, 333),
            query_offsets=(300, 100), causal=True),
]
DTYPES = [("shaw_k20_band", torch.bfloat16),
          ("t5_values_causal", torch.float16),
          ("xl_values_perhead_band", torch.float64),
          ("alibi_band", torch.bfloat16)]
BY_NAME = {c.name: c for c in SCHEMES + MASKED}


def _run_split(launches, case, dtype=torch.float32):
    """test_triton._run (forward, lse and every gradient against the
    float64 reference) and a check that the split kernel ran, once, with
    two splits or more; returns its partial state ST."""
    T._run(case, dtype, T.SMALL)
    assert len(launches.grids) == 1, launches.grids
    splits, h, b = launches.grids[0]
    assert splits >= 2 and (h, b) == (case.h, case.b), launches.grids
    return launches.states[0]


@pytest.mark.parametrize("case", SCHEMES + LAYOUTS, ids=lambda c: c.name)
def test_split_matches_reference(split_tiles, case):
    _run_split(split_tiles, case)


@pytest.mark.parametrize("case", MASKED, ids=lambda c: c.name)
def test_masked_splits_merge(split_tiles, case):
    st = _run_split(split_tiles, case)
    # Some split of some real row saw no key at all (so its m = -inf went
    # through the merge), while that row saw keys elsewhere.
    m = st[:, :, 0, :case.nq]
    empty = torch.isneginf(m)
    assert (empty.any(1) & ~empty.all(1)).any()


@pytest.mark.parametrize("name,dtype", DTYPES,
                         ids=[f"{n}-{str(d)[6:]}" for n, d in DTYPES])
def test_split_other_dtypes(split_tiles, name, dtype):
    _run_split(split_tiles, BY_NAME[name], dtype)


@pytest.mark.parametrize("name", ["shaw_k20_band", "shawlog_band",
                                  "alibi_values_causal"])
def test_split_band_substeps(monkeypatch, split_tiles, name):
    # Far tiles of 32 keys, band keys in steps of 16.
    monkeypatch.setattr(D, "OVERRIDE", SPLIT_SUBTILES)
    _run_split(split_tiles, BY_NAME[name])


def _forward(case, dtype=torch.float32):
    tensors, _ = T._inputs(case, dtype)
    q, k, v, ak, av, bias, pb = tensors
    call = A.prepare("triton.attention", q, k, v, ak, av, bias, pb,
                     **case.kwargs())
    return call, A.forward(call, q, k, v, ak, av, bias, pb)


def test_split_agrees_with_regular_path_and_repeats(monkeypatch,
                                                    split_tiles):
    # The same call by the split path and by the regular grid (the rule
    # turned off: programs=1 is reached by any B H): equal within the
    # forward's tolerance, and the split path repeats bit for bit (the
    # merge's order is fixed).
    case = BY_NAME["xl_values_perhead_band"]
    _, (out, lse) = _forward(case)
    _, (again, lse2) = _forward(case)
    assert len(split_tiles.grids) == 2
    assert torch.equal(out, again) and torch.equal(lse, lse2)
    monkeypatch.setattr(D, "OVERRIDE",
                        dataclasses.replace(SPLIT, programs=1))
    _, (reg, reg_lse) = _forward(case)
    assert len(split_tiles.grids) == 2  # the regular grid ran
    tol, _ = T._bounds(case, torch.float32, reg_lse.double())
    assert T._rel(out, reg) <= tol
    assert (lse - reg_lse).abs().max().item() <= tol * reg_lse.abs().max()


def test_autograd_function_takes_the_split_path(split_tiles):
    # relpos.triton.attention (the autograd Function: forward saves the
    # split path's out and lse, backward the regular kernels) gives what
    # the direct calls give.
    case = BY_NAME["shaw_k20_band"]
    tensors, dout = T._inputs(case, torch.float32)
    out, grads = T._grads_of(rtt.attention, case, tensors, dout)
    assert len(split_tiles.grids) == 1
    q, k, v, ak, av, bias, pb = tensors
    call, (o2, lse) = _forward(case)
    want = A.backward(call, dout, q, k, v, ak, av, bias, pb, o2, lse)
    assert torch.equal(out, o2)
    for g, w in zip(grads, want):
        assert (g is None and w is None) or torch.equal(g, w)


def test_the_rule(split_tiles):
    # plan() decides alone: one query tile (Nq <= block_m), fewer regular
    # programs (B H) than the target, at least two splits of min_tiles.
    def plan(blocks=SPLIT, **kw):
        case = _case("rule", **kw)
        tensors, _ = T._inputs(case, torch.float32)
        call = A.prepare("triton.attention", *tensors, **case.kwargs())
        return D.plan(call, blocks)

    assert plan(nq=1, nk=500) == (11, 3)     # 32 tiles, 12 programs / B H
    assert plan(nq=16, nk=500) == (11, 3)
    assert plan(nq=17, nk=500) is None       # two query tiles
    assert plan(nq=4, nk=48) is None         # 3 tiles: 2 splits need 4
    assert plan(nq=4, nk=49) == (2, 2)
    assert plan(b=3, h=8, nq=1, nk=500) is None   # B H = 24 = programs
    assert plan(b=1, h=8, nq=1, nk=500) == (3, 11)
    # The defaults (bfloat16 / float16): 64-key tiles, 528 programs, at
    # least 4 tiles a split.
    dflt = D.BLOCKS[torch.bfloat16]
    assert plan(dflt, nq=1, nk=448) is None  # 7 tiles
    assert plan(dflt, nq=1, nk=449) == (2, 4)
    assert plan(dflt, h=32, nq=1, nk=8192) == (16, 8)
    # A regular-shaped call runs on the regular grid: no split launch.
    _forward(_case("prefill", nq=40, nk=60))
    _forward(_case("short", nq=1, nk=40))
    assert split_tiles.grids == []

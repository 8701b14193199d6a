"""relpos._call.parse, the one parsing path of an attention call's options
that the numpy / CPU, Triton and context-parallel paths share: what it
normalises and what it refuses, with the same message on every path."""

import numpy as np
import pytest

import relpos
from relpos._call import parse


def test_normalises_the_options():
    a = parse("f", max_distance=np.int32(3))
    assert (a.bucket_kind, a.bucket_args, a.max_distance) == ("", [], 3)
    assert a.bucket_map() == relpos.ClipBuckets(3, 3)
    assert (a.score, a.alibi, a.causal, a.scale) == ("none", None, False,
                                                     None)
    assert (a.key_lengths, a.query_offset, a.query_offsets,
            a.key_starts) == ([], None, [], [])
    b = relpos.T5Buckets(16, 64, False)
    a = parse("f", buckets=b, bias=object(), causal=np.bool_(True),
              key_lengths=np.array([3, 2]), query_offset=[1, 0],
              key_starts=(0, 1), scale=1)
    assert (a.bucket_kind, a.bucket_args, a.buckets) == ("t5", [16, 64, 0],
                                                         b)
    assert (a.score, a.causal, a.scale) == ("scalar_table", True, 1.0)
    assert (a.key_lengths, a.query_offset, a.query_offsets,
            a.key_starts) == ([3, 2], None, [1, 0], [0, 1])
    assert parse("f", max_distance=0, alibi=True).alibi == []
    assert parse("f", max_distance=0, alibi=[0.5, 1]).alibi == [0.5, 1.0]
    assert parse("f", max_distance=1, ak=1, pb=1).has_pb
    assert parse("f", max_distance=1, query_offset=np.int64(-2)
                 ).query_offset == -2


@pytest.mark.parametrize("kw,error,message", [
    (dict(), TypeError, r"^relpos\.f: max_distance \(the clipping distance "
     r"k\) is required unless buckets is given$"),
    (dict(max_distance=2, buckets=relpos.ClipBuckets(1, 1)), ValueError,
     r"max_distance applies to the default symmetric clip only"),
    (dict(buckets=[1, 2]), TypeError, r"buckets must be None, "
     r"relpos\.ClipBuckets or relpos\.T5Buckets \(got list\)"),
    (dict(max_distance=1, ak=1, alibi=True), ValueError,
     r"ak, bias and alibi are alternative score terms; give at most one "
     r"\(got ak, alibi\)"),
    (dict(max_distance=1, pb=1), ValueError, r"pb \(the position query "
     r"bias\) needs the key table ak"),
    (dict(max_distance=1, alibi="yes"), TypeError, r"alibi must be True, "
     r"False, None or a sequence of one slope per head"),
    (dict(max_distance=1, causal=1), TypeError, r"causal must be a bool "
     r"\(got int\)"),
    (dict(max_distance=1, key_lengths=[1.5]), TypeError, r"key_lengths "
     r"must hold integers \(got dtype float64\)"),
    (dict(max_distance=1, key_starts=[[1]]), ValueError, r"key_starts must "
     r"be one-dimensional"),
    (dict(max_distance=1, scale=0.0), ValueError, r"scale must be finite "
     r"and > 0 \(got 0\.0\)"),
    (dict(max_distance=1, scale="1"), TypeError, r"scale must be None or a "
     r"number \(got str\)"),
    (dict(max_distance=True), TypeError, r"max_distance must be an integer "
     r"\(got bool\)"),
])
def test_refusals(kw, error, message):
    with pytest.raises(error, match=message):
        parse("f", **kw)


def test_same_refusal_on_the_numpy_and_gpu_paths():
    torch = pytest.importorskip("torch")
    from relpos.triton import _problem
    if not _problem.interpreting():
        pytest.skip("the GPU path's checks run on CPU tensors only under "
                    "TRITON_INTERPRET=1")
    q = np.zeros((1, 2, 3, 4), np.float32)
    t = torch.zeros(1, 2, 3, 4)
    for kw in (dict(max_distance=1, pb=np.zeros((2, 4), np.float32)),
               dict(max_distance=1, scale=-1.0),
               dict(buckets=relpos.ClipBuckets(1, 1), max_distance=1),
               # The C++ core's own rules, which the GPU path asks it for
               # (relpos._call.check_problem) on the tensors' shapes:
               dict(max_distance=2 ** 25),
               dict(max_distance=1, key_lengths=[9]),
               dict(max_distance=1, alibi=[1e30, 1.0]),
               dict(max_distance=1, alibi=[1.0]),
               dict(max_distance=1, query_offset=2 ** 41),
               dict(max_distance=2, ak=np.zeros((4, 4), np.float32)),
               dict(max_distance=2, av=np.zeros((2, 5, 3), np.float32)),
               dict(buckets=relpos.T5Buckets(3, 8)),
               dict(buckets=relpos.ClipBuckets(2 ** 25, 0)),
               # left padding and per-row offsets (run on the GPU path
               # too, so refused there by the same rules)
               dict(max_distance=1, key_starts=[4]),
               dict(max_distance=1, key_lengths=[2], key_starts=[3]),
               dict(max_distance=1, query_offset=[1, 2]),
               dict(max_distance=1, query_offset=[2 ** 41])):
        with pytest.raises((TypeError, ValueError)) as cpu:
            relpos.attention(q, q, q, **kw)
        gpu_kw = {k: torch.from_numpy(v) if isinstance(v, np.ndarray) else v
                  for k, v in kw.items()}
        with pytest.raises((TypeError, ValueError)) as gpu:
            _problem.prepare("attention", t, t, t, **gpu_kw)
        # The numpy path shows the C++ core's own messages as "relpos: ...",
        # the GPU path puts the function in front ("relpos.attention: ...").
        assert str(cpu.value).split(": ", 1)[1] == \
            str(gpu.value).split(": ", 1)[1], kw
        assert type(cpu.value) is type(gpu.value)
    # Grouped-query k / v whose head count does not divide H's.
    k3 = np.zeros((1, 3, 3, 4), np.float32)
    with pytest.raises(ValueError) as cpu:
        relpos.attention(q, k3, k3, max_distance=1)
    with pytest.raises(ValueError) as gpu:
        _problem.prepare("attention", t, torch.from_numpy(k3),
                         torch.from_numpy(k3), max_distance=1)
    assert str(cpu.value).split(": ", 1)[1] == \
        str(gpu.value).split(": ", 1)[1]


def test_check_problem_resolves_the_call():
    from relpos._call import check_problem
    q = np.zeros((2, 4, 3, 8), np.float32)
    kv = np.zeros((2, 2, 5, 8), np.float32)
    a = parse("f", buckets=relpos.T5Buckets(8, 20, False), alibi=None,
              key_lengths=[5, 3], query_offset=4)
    p = check_problem("f", a, q, kv, kv, np.zeros((8, 8), np.float32))
    assert (p["heads"], p["kv_heads"], p["table_rows"]) == (4, 2, 8)
    assert p["t5_reach"] == relpos.T5Buckets(8, 20, False).reach()[0]
    assert (p["key_lengths"], p["query_offsets"]) == ([5, 3], [4, 4])
    a = parse("f", max_distance=0, alibi=True)
    p = check_problem("f", a, q, kv, kv)
    np.testing.assert_array_equal(p["alibi_slopes"], relpos.alibi_slopes(4))
    with pytest.raises(ValueError, match=r"^relpos\.f: k has shape "
                       r"\[2, 3, 5, 8\] but its heads Hkv = 3 must divide "
                       r"the heads of q, H = 4$"):
        check_problem("f", a, q, np.zeros((2, 3, 5, 8)), kv)

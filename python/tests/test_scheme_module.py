"""relpos.position_schemes as the package's one scheme module: the fixed
tables (equal to the formulas the package wrote out before they had one
home), the bucket maps' own behaviour (rows, reach, bucket, the encoded
form every path uses), the registry's names, and relpos.torch's setting
keywords taken from the registry (skipped without PyTorch)."""

import math

import numpy as np
import pytest

import relpos
import relpos.position_schemes as ps


def test_public_names_and_registry_live_here():
    for name in ("ClipBuckets", "T5Buckets", "Scheme", "SchemeCall",
                 "SchemeTable", "scheme", "schemes", "t5_bucket",
                 "t5_bucket_reach", "clip_bucket", "alibi_slopes", "rope",
                 "rope_backward"):
        assert getattr(relpos, name) is getattr(ps, name), name
    assert set(ps.SETTING_DEFAULTS) >= {
        "max_distance", "k_left", "k_right", "num_buckets",
        "bucket_max_distance", "rope_base", "rope_layout", "key_term",
        "value_term", "per_head_tables", "rel_init_scale"}
    assert not hasattr(relpos, "_registry")


def _old_sinusoid(rows, d):
    # relpos.ctranslate2's table as it was written there (float32).
    return _old_sinusoid64(rows, d).astype(np.float32)


def _old_sinusoid64(rows, d):
    # The numpy formula relpos.ctranslate2 and relpos.interop used.
    pe = np.zeros((rows, d), dtype=np.float64)
    p = np.arange(rows, dtype=np.float64)[:, None]
    two_i = np.arange(0, d, 2, dtype=np.float64)
    angle = p / np.power(10000.0, two_i / d)
    pe[:, 0::2] = np.sin(angle)
    pe[:, 1::2] = np.cos(angle[:, : d // 2])
    return pe


def _old_xl(k, dim):
    # relpos.interop's numpy table (relpos.torch had the same in torch).
    x = np.arange(k, -k - 1, -1, dtype=np.float64)
    t = np.arange(dim // 2, dtype=np.float64)
    freq = np.exp(-math.log(10000.0) * 2.0 * t / dim)
    angles = x[:, None] * freq[None, :]
    return np.concatenate([np.sin(angles), np.cos(angles)], axis=1)


@pytest.mark.parametrize("rows,d", [(1, 2), (7, 6), (64, 32), (300, 10)])
def test_sinusoidal_table_is_the_former_one(rows, d):
    t = ps.sinusoidal_table(rows, d)
    assert t.shape == (rows, d) and t.dtype == np.float64
    # The same formula, now computed by the C++ library: the values may
    # differ by the rounding of the angle p / 10000^(2i/d) (a few ulps of
    # an angle up to rows - 1) and of sin / cos, so the float32 tables agree
    # within one float32 ulp and the float64 ones within that rounding.
    np.testing.assert_allclose(t.astype(np.float32), _old_sinusoid(rows, d),
                               rtol=0, atol=np.finfo(np.float32).eps)
    np.testing.assert_allclose(t, _old_sinusoid64(rows, d), rtol=0,
                               atol=4 * np.finfo(np.float64).eps * rows)
    # PE[p, 2i] = sin(p / 10000^(2i/d)), PE[p, 2i+1] = cos(...)
    assert t[0, 0] == 0.0 and t[0, 1] == 1.0


@pytest.mark.parametrize("k,dim", [(0, 2), (3, 8), (40, 64)])
def test_xl_sinusoids_are_the_former_ones(k, dim):
    r = ps.xl_sinusoids(k, dim)
    assert r.shape == (2 * k + 1, dim) and r.dtype == np.float64
    # Within the rounding of the angle x f_t (|x| <= k) and of sin / cos.
    np.testing.assert_allclose(r, _old_xl(k, dim), rtol=0,
                               atol=4 * np.finfo(np.float64).eps * (k + 1))
    # Row r + k holds R_{-r}: the middle row is distance 0, sin 0 / cos 1.
    np.testing.assert_array_equal(r[k], np.r_[np.zeros(dim // 2),
                                              np.ones(dim // 2)])


def test_xl_sinusoids_match_the_former_torch_table():
    torch = pytest.importorskip("torch")
    k, dim = 9, 16
    x = torch.arange(k, -k - 1, -1, dtype=torch.float64)
    t = torch.arange(dim // 2, dtype=torch.float64)
    freq = torch.exp(-math.log(10000.0) * 2.0 * t / dim)
    angles = x[:, None] * freq[None, :]
    old = torch.cat([torch.sin(angles), torch.cos(angles)], dim=1)
    np.testing.assert_allclose(ps.xl_sinusoids(k, dim), old.numpy(),
                               rtol=0, atol=4 * np.finfo(np.float64).eps * (k + 1))


def test_bucket_maps_behaviour():
    r = np.arange(-300, 301)
    c = relpos.ClipBuckets(5, 2)
    assert c.rows() == 8 and c.reach() == (5, 2)
    np.testing.assert_array_equal(c.bucket(r),
                                  relpos.clip_bucket(r, left=5, right=2))
    t5 = relpos.T5Buckets(32, 128, False)
    a = relpos.t5_bucket_reach(num_buckets=32, max_distance=128,
                               bidirectional=False)
    assert t5.rows() == 32 and t5.reach() == (a, a)
    np.testing.assert_array_equal(
        t5.bucket(r), relpos.t5_bucket(r, num_buckets=32, max_distance=128,
                                       bidirectional=False))
    # The symmetric clip by max_distance is ClipBuckets(k, k).
    assert ps.bucket_map(None, 4) == relpos.ClipBuckets(4, 4)
    assert ps.bucket_map(t5, None) is t5


def test_bucket_encoding_round_trips_and_refuses():
    for b in (None, relpos.ClipBuckets(3, 0), relpos.T5Buckets(),
              relpos.T5Buckets(16, 64, False)):
        kind, args = ps.encode_buckets("f", b)
        assert all(type(x) is int for x in args)
        assert ps.decode_buckets(kind, args) == b
    assert ps.encode_buckets("f", relpos.T5Buckets(8, 20, True)) == \
        ("t5", [8, 20, 1])
    with pytest.raises(TypeError, match=r"relpos\.f: buckets must be None, "
                       r"relpos\.ClipBuckets or relpos\.T5Buckets \(got "
                       r"tuple\)"):
        ps.encode_buckets("f", (3, 3))
    with pytest.raises(TypeError, match=r"relpos\.f: buckets\.left must be "
                       r"an integer \(got float\)"):
        ps.encode_buckets("f", relpos.ClipBuckets(2.5, 3))
    with pytest.raises(TypeError, match=r"buckets\.bidirectional must be a "
                       r"bool"):
        ps.encode_buckets("f", relpos.T5Buckets(8, 20, 1))
    with pytest.raises(ValueError, match="unknown bucket kind"):
        ps.decode_buckets("log", [])


def test_torch_module_keywords_are_the_registry_settings():
    pytest.importorskip("torch")
    import relpos.torch as rt
    reads = {k for s in rt.SCHEMES for k in relpos.scheme(s).settings}
    want = [rt._KEYWORD.get(k, k) for k in ps.SETTING_DEFAULTS if k in reads]
    assert list(rt._SETTINGS) == want
    assert "table_init_scale" in rt._SETTINGS and "max_len" not in want
    m = rt.RelativeMultiheadAttention(16, 2)
    for keyword, key in rt._SETTINGS.items():
        if key != "max_distance":
            assert getattr(m, keyword) == ps.SETTING_DEFAULTS[key], keyword
    m = rt.RelativeMultiheadAttention(16, 2, scheme="shaw-asym", k_left=3,
                                      k_right=1, per_head_tables=1)
    assert m.buckets() == relpos.ClipBuckets(3, 1) and m.table_rows() == 5
    assert m.per_head_tables is True and m.rel_k.shape == (2, 5, 8)
    with pytest.raises(TypeError, match=r"unexpected keyword argument "
                       r"'k_lft' \(the scheme settings: .*k_left"):
        rt.RelativeMultiheadAttention(16, 2, k_lft=3)
    with pytest.raises(TypeError, match=r"k_left must be an integer"):
        rt.RelativeMultiheadAttention(16, 2, k_left="3")

"""relpos.schemes() / relpos.scheme(name): the C++ position-scheme registry
(include/relpos/schemes.h) through the extension. Every entry by name and
alias, its settings and their defaults against docs/settings.md, its sides,
table shapes and attention call, the errors; and that
relpos.torch.RelativeMultiheadAttention's parameters are the registry's
tables (skipped without PyTorch)."""

import math
import os
import re

import pytest

import relpos

NAMES = ("none", "sinusoidal", "learned", "shaw", "shaw-asym", "shaw-log",
         "t5", "alibi", "rope", "xl")
ROOT = os.path.dirname(os.path.dirname(os.path.dirname(
    os.path.abspath(__file__))))


def test_every_entry_by_name_and_alias():
    assert tuple(s.name for s in relpos.schemes()) == NAMES
    for s in relpos.schemes():
        assert relpos.scheme(s.name) is s
        for alias in s.aliases:
            assert relpos.scheme(alias) is s
        assert s.summary
    assert relpos.scheme("relative").name == "shaw"
    assert relpos.scheme("shaw").aliases == ("relative",)
    assert repr(relpos.scheme("t5")) == "relpos.scheme('t5')"


def test_unknown_name_lists_the_accepted_ones():
    with pytest.raises(ValueError) as e:
        relpos.scheme("rotary")
    for name in NAMES + ("'rotary'", "relative"):
        assert name in str(e.value)
    with pytest.raises(TypeError, match="str"):
        relpos.scheme(3)


def _docs_defaults():
    """{key: default text} of the model table of docs/settings.md."""
    out = {}
    with open(os.path.join(ROOT, "docs", "settings.md"),
              encoding="utf-8") as f:
        for line in f:
            m = re.match(r"\| `([a-z_]+)` \|[^|]*\|[^|]*\| `([^`]*)` \|",
                         line)
            if m:
                out[m.group(1)] = m.group(2)
    return out


def _text(value):
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def test_settings_and_defaults_match_docs():
    docs = _docs_defaults()
    defaults = relpos.position_schemes.SETTING_DEFAULTS
    assert set(defaults) == {
        "max_len", "max_distance", "k_left", "k_right", "num_buckets",
        "bucket_max_distance", "rope_base", "rope_layout", "key_term",
        "value_term", "per_head_tables", "rel_init_scale"}
    for key, value in defaults.items():
        assert docs[key] == _text(value), key
    # The papers' values (docs/model.md cites them).
    assert (defaults["max_distance"], defaults["k_left"], defaults["k_right"],
            defaults["num_buckets"], defaults["bucket_max_distance"],
            defaults["rope_base"], defaults["rope_layout"]) == (
                16, 64, 8, 32, 128, 10000.0, "split_halves")
    shaw = ["per_head_tables", "key_term", "value_term", "rel_init_scale"]
    reads = {"none": [], "sinusoidal": [], "learned": ["max_len"],
             "shaw": ["max_distance"] + shaw,
             "shaw-asym": ["k_left", "k_right"] + shaw,
             "shaw-log": ["num_buckets", "bucket_max_distance"] + shaw,
             "t5": ["num_buckets", "bucket_max_distance"], "alibi": [],
             "rope": ["rope_base", "rope_layout"], "xl": []}
    for s in relpos.schemes():
        assert list(s.settings) == reads[s.name], s.name
        assert all(s.settings[k] == defaults[k] for k in s.settings)


def test_sides():
    sides = {"none": (), "sinusoidal": ("input",), "learned": ("input",),
             "shaw": ("score", "value"), "shaw-asym": ("score", "value"),
             "shaw-log": ("score", "value"), "t5": ("score",),
             "alibi": ("score",), "rope": ("rotation",),
             "xl": ("score", "query_bias")}
    for s in relpos.schemes():
        assert s.sides == sides[s.name], s.name
        assert s.inside_attention == (s.name not in (
            "none", "sinusoidal", "learned"))


def test_table_shapes():
    h, d = 3, 4
    small = dict(max_distance=2, k_left=3, k_right=1, num_buckets=8,
                 bucket_max_distance=12, max_len=20)

    def tables(name, **kw):
        return {t.name: (t.role, t.shape, t.init)
                for t in relpos.scheme(name).tables(h, d, **dict(small, **kw))}

    for name in ("none", "sinusoidal", "alibi", "rope"):
        assert tables(name) == {}
    assert tables("learned") == {
        "embed.position": ("input_table", (20, 12), "normal")}
    for name, rows in (("shaw", 5), ("shaw-asym", 5), ("shaw-log", 8)):
        assert tables(name) == {
            "rel_k": ("key_table", (rows, d), "xavier_normal"),
            "rel_v": ("value_table", (rows, d), "xavier_normal")}, name
    assert tables("shaw", per_head_tables=True, value_term=False) == {
        "rel_k": ("key_table", (h, 5, d), "xavier_normal")}
    assert tables("t5") == {"t5_bias": ("score_bias", (h, 8), "normal")}
    assert tables("xl") == {
        "xl_w": ("xl_projection", (12, 12), "normal"),
        "xl_u": ("xl_content_bias", (h, d), "normal"),
        "xl_v": ("xl_position_bias", (h, d), "normal")}
    scales = {t.name: t.scale for t in relpos.scheme("xl").tables(h, d)}
    assert scales == {"xl_w": 1 / math.sqrt(12), "xl_u": 0.02, "xl_v": 0.02}
    assert relpos.scheme("shaw").tables(h, d, rel_init_scale=0.3)[0].scale \
        == 0.3
    assert relpos.scheme("shaw").table_names == ("rel_k", "rel_v")


def test_calls():
    s = relpos.scheme
    assert s("shaw").call(2, 4).attention == dict(causal=False,
                                                  max_distance=16)
    assert s("shaw-asym").call(2, 4, causal=True).attention == dict(
        causal=True, buckets=relpos.ClipBuckets(64, 8))
    for name in ("shaw-log", "t5"):
        for causal in (False, True):
            c = s(name).call(2, 4, causal=causal)
            assert c.attention["buckets"] == relpos.T5Buckets(32, 128,
                                                              not causal)
    assert s("t5").call(2, 4).value_term is False
    assert s("alibi").call(2, 4).attention == dict(causal=False,
                                                   max_distance=0, alibi=True)
    rope = s("rope").call(2, 4, rope_layout="interleaved", rope_base=100.0)
    assert rope.rope == dict(base=100.0, layout="interleaved")
    xl = s("xl").call(2, 4, max_key_length=9)
    assert xl.xl_table and xl.per_head_tables and xl.position_query_bias
    assert xl.attention["max_distance"] == 8
    for name in ("none", "sinusoidal", "learned"):
        c = s(name).call(2, 4)
        assert not (c.key_term or c.value_term or c.rope or c.xl_table)


def test_errors_name_the_setting():
    with pytest.raises(ValueError, match="shaw-asym.*k_left.*-1"):
        relpos.scheme("shaw-asym").tables(2, 4, k_left=-1)
    with pytest.raises(ValueError, match="num_buckets.*3"):
        relpos.scheme("t5").tables(2, 4, num_buckets=3)
    relpos.scheme("t5").tables(2, 4, num_buckets=3, causal=True)  # causal: ok
    with pytest.raises(ValueError, match="rope.*even.*3"):
        relpos.scheme("rope").call(2, 3)
    with pytest.raises(ValueError, match="xl.*9"):
        relpos.scheme("xl").tables(3, 3)
    with pytest.raises(ValueError, match="rope_layout"):
        relpos.scheme("rope").call(2, 4, rope_layout="x")
    with pytest.raises(TypeError, match="num_buckets"):
        relpos.scheme("t5").tables(2, 4, num_buckets=8.0)
    with pytest.raises(TypeError, match="key_term"):
        relpos.scheme("shaw").tables(2, 4, key_term=1)
    with pytest.raises(TypeError, match="unknown scheme setting 'k'"):
        relpos.scheme("shaw").tables(2, 4, k=3)
    with pytest.raises(ValueError, match="heads"):
        relpos.scheme("shaw").tables(0, 4)
    with pytest.raises(ValueError, match="max_key_length"):
        relpos.scheme("xl").call(2, 4, max_key_length=0)


def test_torch_module_parameters_are_the_registry_tables():
    pytest.importorskip("torch")
    import relpos.torch as rt

    assert rt.SCHEMES == tuple(s.name for s in relpos.schemes()
                               if s.inside_attention)
    for name in rt.SCHEMES:
        for per_head in (False, True):
            m = rt.RelativeMultiheadAttention(8, 2, scheme=name,
                                              per_head_tables=per_head)
            want = {t.name: t.shape for t in relpos.scheme(name).tables(
                2, 4, per_head_tables=per_head)}
            got = {n: tuple(p.shape) for n, p in m.named_parameters()
                   if not n.endswith(("_proj.weight", "_proj.bias"))}
            assert got == want, name
            for other in rt._TABLE_NAMES:
                if other not in want:
                    assert getattr(m, other) is None, (name, other)
    # An alias is accepted and reads back as its scheme.
    assert rt.RelativeMultiheadAttention(8, 2, scheme="relative").scheme == \
        "shaw"
    with pytest.raises(ValueError, match="scheme must be one of"):
        rt.RelativeMultiheadAttention(8, 2, scheme="learned")

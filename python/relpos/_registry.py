"""The position-scheme registry (include/relpos/schemes.h) in Python.

    relpos.schemes()       every named scheme, in the registry's order
    relpos.scheme(name)    one, by name or alias (ValueError listing the names)

Each :class:`Scheme` says what the C++ entry says: its name and aliases,
where it acts (``sides``), the settings it reads with their defaults, its
learned tables (names, shapes for a layer, initialisation) and the attention
call a layer makes (:meth:`Scheme.call`). relpos.torch builds
RelativeMultiheadAttention from it; the C++ model, `relpos bench` and
`relpos compare` use the same entries.
"""

from __future__ import annotations

from typing import NamedTuple, Optional, Tuple

from . import _relpos_ext as _ext
from ._checks import boolean, integer, number
from .position_schemes import ClipBuckets, T5Buckets

__all__ = ["Scheme", "SchemeCall", "SchemeTable", "scheme", "schemes"]

# {key: default} of every setting (relpos::SchemeSettings, the papers'
# defaults), in its order.
SETTING_DEFAULTS = {key: getattr(_ext.SchemeSettings(), key)
                    for key in _ext.scheme_setting_keys()}


class SchemeTable(NamedTuple):
    """One learned tensor of a scheme in a layer. ``name`` is the tensor's
    name in the layer (the C++ model's checkpoint calls it
    ``blocks.L.attn.<name>``; the input table is ``embed.position``);
    ``role`` what the layer does with it ("key_table", "value_table",
    "score_bias", "xl_projection", "xl_content_bias", "xl_position_bias",
    "input_table"); ``init`` "xavier_normal" (times ``scale``, docs/math.md
    section 5) or "normal" (std ``scale``)."""

    name: str
    role: str
    shape: Tuple[int, ...]
    init: str
    scale: float


class SchemeCall(NamedTuple):
    """How a layer runs a scheme: ``attention`` holds the keywords of
    relpos.attention / relpos.torch.attention for the scheme's options
    (max_distance or buckets, alibi, causal); the other fields the options
    the tables must match, RoPE's rotation (None, or dict(base=, layout=))
    and whether the layer builds Transformer-XL's key table."""

    attention: dict
    key_term: bool
    value_term: bool
    per_head_tables: bool
    position_query_bias: bool
    rope: Optional[dict]
    xl_table: bool


def _settings(fn, given):
    """The settings given by keyword, type-checked against the defaults'
    types (values are the C++ registry's to check)."""
    out = {}
    for key, value in given.items():
        if key not in SETTING_DEFAULTS:
            raise TypeError(f"relpos.{fn}: unknown scheme setting {key!r} "
                            f"(settings: {', '.join(SETTING_DEFAULTS)})")
        default = SETTING_DEFAULTS[key]
        if isinstance(default, bool):
            out[key] = boolean(fn, key, value)
        elif isinstance(default, int):
            out[key] = integer(fn, key, value)
        elif isinstance(default, float):
            out[key] = number(fn, key, value)
        elif not isinstance(value, str):
            raise TypeError(f"relpos.{fn}: {key} must be a str (got "
                            f"{type(value).__name__})")
        else:
            out[key] = value
    return out


def _attention_keywords(a):
    kw = dict(causal=a["causal"])
    args = a["bucket_args"]
    if a["buckets"] == "clip":
        kw["buckets"] = ClipBuckets(args[0], args[1])
    elif a["buckets"] == "t5":
        kw["buckets"] = T5Buckets(args[0], args[1], bool(args[2]))
    else:
        kw["max_distance"] = a["max_distance"]
    if a["score"] == "alibi":
        kw["alibi"] = True
    return kw


class Scheme:
    """One entry of the registry (read-only attributes):

    name, aliases, summary, sides ("input", "score", "value",
    "query_bias", "rotation"), input ("none", "sinusoid", "learned_table"),
    settings ({key: default} of the settings it reads), table_names (every
    table it may have, in order) and their table_roles (SchemeTable.role),
    inside_attention.
    """

    __slots__ = ("name", "aliases", "summary", "sides", "input", "settings",
                 "table_names", "table_roles", "label")

    def __init__(self, entry):
        self.name = entry["name"]
        self.aliases = tuple(entry["aliases"])
        self.summary = entry["summary"]
        self.sides = tuple(entry["sides"])
        self.input = entry["input"]
        self.settings = {k: SETTING_DEFAULTS[k] for k in entry["settings"]}
        self.table_names = tuple(t[0] for t in entry["tables"])
        self.table_roles = tuple(t[1] for t in entry["tables"])
        self.label = entry["label"]

    @property
    def inside_attention(self):
        return any(side != "input" for side in self.sides)

    def _layer(self, fn, num_heads, head_dim, causal, settings):
        native = _ext.SchemeSettings()
        for key, value in _settings(fn, settings).items():
            setattr(native, key, value)
        return (integer(fn, "num_heads", num_heads),
                integer(fn, "head_dim", head_dim),
                boolean(fn, "causal", causal), native)

    def tables(self, num_heads, head_dim, *, causal=False, **settings):
        """The tables of a layer of num_heads heads of width head_dim
        (settings: any subset of relpos.SETTING_DEFAULTS' keys, the rest at
        their defaults); ValueError naming a setting the scheme cannot run
        with."""
        h, d, c, s = self._layer("Scheme.tables", num_heads, head_dim, causal,
                                 settings)
        return tuple(SchemeTable(name, role, tuple(shape), init, scale)
                     for name, role, shape, init, scale
                     in _ext.scheme_tables(self.name, h, d, c, s))

    def call(self, num_heads, head_dim, *, causal=False, max_key_length=1,
             **settings):
        """The attention call of such a layer over at most max_key_length
        keys (only Transformer-XL's unclipped table depends on it)."""
        fn = "Scheme.call"
        h, d, c, s = self._layer(fn, num_heads, head_dim, causal, settings)
        n = integer(fn, "max_key_length", max_key_length)
        raw = _ext.scheme_call(self.name, h, d, c, n, s)
        a = raw["attention"]
        return SchemeCall(_attention_keywords(a), a["key_term"],
                          a["value_term"], a["per_head_tables"],
                          a["position_query_bias"], raw["rope"],
                          raw["xl_table"])

    def __repr__(self):
        return f"relpos.scheme({self.name!r})"


_SCHEMES = tuple(Scheme(e) for e in _ext.scheme_entries())


def schemes():
    """Every scheme of the registry, in its order (none, sinusoidal,
    learned, shaw, shaw-asym, shaw-log, t5, alibi, rope, xl)."""
    return _SCHEMES


def scheme(name):
    """The scheme called `name` or one of its aliases ("relative" is
    "shaw"); ValueError listing the accepted names otherwise."""
    if not isinstance(name, str):
        raise TypeError(f"relpos.scheme: name must be a str (got "
                        f"{type(name).__name__})")
    canonical = _ext.scheme_name(name)  # the C++ registry's FindScheme
    return next(s for s in _SCHEMES if s.name == canonical)

"""The option matrix shared by the numpy and PyTorch tests.

The same awkward cases as the C++ tests: shared / per-head tables, key and
value terms on and off, causal, padding (including a batch item with no
valid key), Nq != Nk with the default and explicit query offsets, k = 0,
k >= n, dk != dv, n = 1, and one size off any power of two for the tiled
kernel.
"""

import dataclasses
import math
from typing import Optional, Sequence

import numpy as np


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    b: int = 2
    h: int = 3
    nq: int = 7
    nk: int = 7
    dk: int = 5
    dv: int = 5
    k: int = 2
    per_head: bool = False
    key_term: bool = True
    value_term: bool = True
    causal: bool = False
    key_lengths: Optional[Sequence[int]] = None
    query_offset: Optional[int] = None

    def kwargs(self):
        return dict(max_distance=self.k, causal=self.causal,
                    key_lengths=self.key_lengths,
                    query_offset=self.query_offset)

    def inputs(self, dtype, seed=0):
        """(q, k, v, ak, av) with unit-normal entries; tables None if off."""
        rng = np.random.default_rng(seed)

        def randn(*shape):
            return rng.standard_normal(shape).astype(dtype)

        rows = 2 * self.k + 1
        table = ((lambda d: randn(self.h, rows, d)) if self.per_head
                 else (lambda d: randn(rows, d)))
        return (randn(self.b, self.h, self.nq, self.dk),
                randn(self.b, self.h, self.nk, self.dk),
                randn(self.b, self.h, self.nk, self.dv),
                table(self.dk) if self.key_term else None,
                table(self.dv) if self.value_term else None)

    def longest_sum(self, backward=False):
        """Length of the longest reduction in the forward (or backward) pass:
        the bound on accumulated rounding grows with it. Table gradients sum
        over every (b, i, j) pair, and over h too when the table is shared.
        """
        n = max(self.nk, self.nq, self.dk, self.dv, 2 * self.k + 1)
        if backward:
            heads = 1 if self.per_head else self.h
            n = max(n, self.b * heads * self.nq * self.nk)
        return n


def _matrix():
    cases = []
    # Every combination of table layout and the two terms (Shaw's ablation).
    for per_head in (False, True):
        for key_term in (False, True):
            for value_term in (False, True):
                cases.append(Case(
                    name=f"{'perhead' if per_head else 'shared'}"
                         f"_key{int(key_term)}_value{int(value_term)}",
                    per_head=per_head, key_term=key_term,
                    value_term=value_term))
    cases += [
        Case("causal", causal=True),
        Case("causal_perhead", causal=True, per_head=True),
        Case("padding", key_lengths=(7, 3)),
        # Batch item 0 has no valid key: its rows are zero, never NaN.
        Case("padding_empty_item", key_lengths=(0, 5)),
        Case("causal_padding", causal=True, key_lengths=(4, 7)),
        # Queries are the last Nq positions (off = Nk - Nq = 5).
        Case("nq_lt_nk", nq=3, nk=8, causal=True),
        Case("nq_gt_nk", nq=6, nk=4),
        Case("explicit_offset", nq=4, nk=9, query_offset=2, causal=True),
        # Negative offset with causal: rows 0 and 1 see no key at all.
        Case("negative_offset", nq=5, nk=5, query_offset=-2, causal=True),
        Case("k0", k=0),
        Case("k_eq_n", nq=6, nk=6, k=6),
        Case("k_gt_n", nq=6, nk=6, k=10, per_head=True),
        Case("dk_ne_dv", dk=3, dv=7, causal=True),
        Case("n1", nq=1, nk=1, k=3),
        Case("decode_step", nq=1, nk=9, k=3, causal=True),
        Case("odd_size", b=1, h=2, nq=67, nk=67, dk=16, dv=8, k=4,
             causal=True, key_lengths=(61,)),
    ]
    return cases


CASES = _matrix()
CASE_IDS = [c.name for c in CASES]


def tolerance(dtype, case, backward=False, c=64.0):
    """Tolerance relative to the term magnitudes (see assert_close) for
    relpos vs the float64 oracle.

    Rounding in a sum of n terms grows like eps * sqrt(n) (random signs);
    the softmax then turns an absolute score error into a relative error of
    p of the same size, and unit-normal scores are O(sqrt(dk)) before
    scaling, i.e. O(1) after: the constant c covers that and the handful
    of chained operations (products, exp, the final division).
    """
    eps = np.finfo(dtype).eps
    return c * eps * math.sqrt(case.longest_sum(backward))


def assert_close(actual, expected, magnitude, tol, what):
    """|actual - expected| <= tol * magnitude, element by element.

    `magnitude` is the sum of the absolute values of the terms behind each
    element (numpy_reference's magnitudes=True), the classical scale of a
    sum's rounding error. Where it is zero (rows that see no key) the
    result must be exactly equal: relpos writes true zeros there.
    """
    actual = np.asarray(actual, dtype=np.float64)
    expected = np.asarray(expected, dtype=np.float64)
    assert actual.shape == expected.shape, (what, actual.shape,
                                            expected.shape)
    assert np.all(np.isfinite(actual)), f"{what}: non-finite values"
    err = np.abs(actual - expected)
    bound = tol * np.asarray(magnitude, dtype=np.float64)
    bad = err > bound
    if np.any(bad):
        idx = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{what}: {bad.sum()} of {bad.size} elements off; first at "
            f"{idx}: got {actual[idx]!r}, want {expected[idx]!r}, error "
            f"{err[idx]:.3e} > bound {bound[idx]:.3e}")


@dataclasses.dataclass(frozen=True)
class SchemeCase(Case):
    """A case of the scheme family (docs/math.md section 8).

    buckets: None (symmetric clip by k), relpos.ClipBuckets or
    relpos.T5Buckets. score: "ak" (Shaw's vector table, with pb if pb),
    "bias" (T5's scalar table), "alibi" (slopes `alibi`, None for the
    paper's) or "none". value_term as in Case (av with the bucket map).
    """

    buckets: object = None
    score: str = "ak"
    alibi: Optional[Sequence[float]] = None
    pb: bool = False

    def rows(self):
        if self.buckets is None:
            return 2 * self.k + 1
        if hasattr(self.buckets, "left"):
            return self.buckets.left + self.buckets.right + 1
        return self.buckets.num_buckets

    def kwargs(self):
        kw = dict(causal=self.causal, key_lengths=self.key_lengths,
                  query_offset=self.query_offset, buckets=self.buckets)
        if self.buckets is None:
            kw["max_distance"] = self.k
        if self.score == "alibi":
            kw["alibi"] = True if self.alibi is None else list(self.alibi)
        return kw

    def inputs(self, dtype, seed=0):
        """(q, k, v, ak, av); ak only for the "ak" score term."""
        rng = np.random.default_rng(seed)

        def randn(*shape):
            return rng.standard_normal(shape).astype(dtype)

        rows = self.rows()
        table = ((lambda d: randn(self.h, rows, d)) if self.per_head
                 else (lambda d: randn(rows, d)))
        return (randn(self.b, self.h, self.nq, self.dk),
                randn(self.b, self.h, self.nk, self.dk),
                randn(self.b, self.h, self.nk, self.dv),
                table(self.dk) if self.score == "ak" else None,
                table(self.dv) if self.value_term else None)

    def extra(self, dtype, seed=1):
        """dict(bias=..., pb=...): the scheme inputs (None when unused)."""
        rng = np.random.default_rng(seed)
        bias = (rng.standard_normal((self.h, self.rows())).astype(dtype)
                if self.score == "bias" else None)
        pb = (rng.standard_normal((self.h, self.dk)).astype(dtype)
              if self.pb else None)
        return dict(bias=bias, pb=pb)

    def longest_sum(self, backward=False):
        return max(super().longest_sum(backward), self.rows())


def _scheme_matrix():
    # Built lazily from relpos's NamedTuples so that importing cases.py does
    # not need the compiled extension.
    import relpos
    asym = relpos.ClipBuckets(3, 1)
    t5 = relpos.T5Buckets(8, 6, True)
    t5c = relpos.T5Buckets(6, 5, False)
    schemes = [
        ("asym", dict(buckets=asym)),
        ("asym_keyonly_perhead", dict(buckets=relpos.ClipBuckets(0, 2),
                                      value_term=False, per_head=True)),
        ("shawlog", dict(buckets=t5)),
        ("shawlog_perhead", dict(buckets=t5, per_head=True)),
        ("t5", dict(buckets=t5, score="bias", value_term=False)),
        ("t5causal", dict(buckets=t5c, score="bias", value_term=False)),
        ("t5_values", dict(buckets=t5, score="bias")),
        ("alibi", dict(score="alibi", value_term=False)),
        ("alibi_user", dict(score="alibi", alibi=(0.7, -0.3, 0.0),
                            value_term=False)),
        ("xl", dict(k=9, pb=True, value_term=False)),
        ("xl_values_perhead", dict(pb=True, per_head=True)),
    ]
    shapes = [
        ("plain", dict()),
        ("causal_padding", dict(causal=True, key_lengths=(0, 5))),
        ("offset", dict(nq=4, nk=9, query_offset=2, causal=True)),
        ("nq_gt_nk", dict(nq=6, nk=4)),
        ("n1", dict(nq=1, nk=1)),
        ("dk_ne_dv", dict(dk=3, dv=7, causal=True)),
    ]
    cases = []
    for sname, sargs in schemes:
        for shname, shargs in shapes:
            cases.append(SchemeCase(f"{sname}_{shname}", **{**sargs,
                                                           **shargs}))
    return cases


def scheme_cases():
    """The scheme matrix: every scheme on every awkward shape."""
    return _scheme_matrix()

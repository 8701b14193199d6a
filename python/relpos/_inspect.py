"""``relpos.inspect``: which distances a checkpoint's relative tables learned
(docs/inspect.md, docs/python.md "Inspecting a checkpoint")."""

from __future__ import annotations

import os

import numpy as np

from . import _relpos_ext as _ext

__all__ = ["inspect"]

_FLAGS = ("open_below", "open_above", "untrained")


def inspect(path, *, untrained_fraction=1e-3, share=0.99):
    """Per-row statistics of the relative tables of the checkpoint ``path``.

    Returns a dict: ``checkpoint``, ``position``, ``arch``, ``step``,
    ``train_max_tokens`` (longest training sequence), ``has_signal``,
    ``no_signal`` (a sentence when the checkpoint was written before relpos
    recorded the statistics, else None), ``first_step`` and ``steps`` (the
    updates counted) and ``tables``: one dict per table (``parameter`` such
    as ``"blocks.0.attn.rel_k"``, ``layer``, ``role``, ``heads``, ``rows``,
    ``width``, ``bucket_map``) whose per-row entries are numpy arrays of
    length ``rows``: ``distance`` (int64, the row's distance of smallest
    |r|), ``distance_min`` / ``distance_max``, ``open_below`` /
    ``open_above`` (bool), ``distance_label`` (list of str), ``row_norm``
    and ``movement`` (float64, norm of the row and of its change since
    initialisation), and with statistics ``pair_count`` (int64),
    ``signal`` (float64, summed squared gradient norms), ``signal_per_head``
    ([heads, rows] or None for a shared table), ``untrained`` (bool), plus
    ``untrained_rows``, ``threshold``, ``share_k`` and ``verdict``; without
    statistics those are None.

    A row is untrained when its signal is below ``untrained_fraction`` times
    the median signal of the rows that received any; ``share_k`` is the
    smallest k whose rows |r| <= k hold ``share`` of the signal.
    Raises ValueError for bad arguments, RuntimeError for a missing or
    damaged checkpoint (the message names the file).
    """
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError("relpos.inspect: path must be a str or os.PathLike "
                        f"(got {type(path).__name__})")
    values = {}
    for name, x in (("untrained_fraction", untrained_fraction),
                    ("share", share)):
        if isinstance(x, bool) or not isinstance(x, (int, float, np.floating,
                                                    np.integer)):
            raise TypeError(f"relpos.inspect: {name} must be a number "
                            f"(got {type(x).__name__})")
        values[name] = float(x)
    result = _ext.inspect_checkpoint(os.fspath(path),
                                     values["untrained_fraction"],
                                     values["share"])
    for table in result["tables"]:
        for key in _FLAGS:
            if table[key] is not None:
                table[key] = table[key].astype(bool)
    return result

"""``relpos.experiment``: train and compare models from Python with the
experiment runner of ``relpos demo``, ``relpos sweep`` and ``relpos compare``
(docs/training.md, "Experiments from C++ and Python").

- ``run(base, runs, lengths)``: one model per run, each the shared settings
  ``base`` with the run's own, trained, evaluated at ``lengths`` and
  inspected; the result of ``relpos demo``'s ``results.json``.
- ``sweep(base, ks=..., terms=...)``: Shaw et al.'s ablations, as ``relpos
  sweep`` runs them.
- ``demo(positions=...)``: the README's demo.
- ``compare(base, tasks, positions, seeds)``: the grid of ``relpos
  compare``; the result of its ``compare.json``.

Settings are written as in a config file: ``{"model": {"d_model": 32},
"train": {"task": "reverse", "steps": 200}}`` (docs/settings.md). Each
function returns the result as a dict (the JSON relpos writes) and, with
``out_dir``, writes it there with the checkpoints. The C++ code runs with the
GIL released. Invalid settings raise ValueError, unwritable folders and
unreadable files RuntimeError, plans that do not fit in memory MemoryError.
"""

from __future__ import annotations

import json
from typing import Any, Dict, List, Mapping, Optional, Sequence

from . import _relpos_ext as _ext
from ._checks import integer as _int

__all__ = ["compare", "demo", "run", "sweep"]


def _settings_json(fn: str, base: Optional[Mapping[str, Any]]) -> str:
    if base is None:
        return ""
    if not isinstance(base, Mapping):
        raise TypeError(f"relpos.experiment.{fn}: base must be a dict "
                        f"{{'model': {{...}}, 'train': {{...}}}} (got "
                        f"{type(base).__name__})")
    return json.dumps(dict(base))


def _text(value: Any) -> str:
    # As a config file's JSON value would read: true / false, numbers, text.
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def _run_settings(fn: str, i: int, settings: Any) -> List[tuple]:
    if not isinstance(settings, Mapping):
        raise TypeError(f"relpos.experiment.{fn}: runs[{i}]['settings'] must "
                        "be a dict {section: {key: value}}")
    out = []
    for section, values in settings.items():
        if not isinstance(values, Mapping):
            raise TypeError(f"relpos.experiment.{fn}: runs[{i}]['settings']"
                            f"[{section!r}] must be a dict {{key: value}}")
        for key, value in values.items():
            out.append((str(section), str(key), _text(value)))
    return out


def _runs(fn: str, runs: Any) -> List[tuple]:
    if isinstance(runs, (str, bytes)) or not isinstance(runs, Sequence):
        raise TypeError(f"relpos.experiment.{fn}: runs must be a list of "
                        "dicts with 'name', 'settings' and optionally "
                        "'checkpoint'")
    out = []
    for i, r in enumerate(runs):
        if not isinstance(r, Mapping) or not isinstance(r.get("name"), str):
            raise TypeError(f"relpos.experiment.{fn}: runs[{i}] must be a "
                            "dict with a str 'name'")
        checkpoint = r.get("checkpoint") or ""
        if not isinstance(checkpoint, str):
            raise TypeError(f"relpos.experiment.{fn}: runs[{i}]['checkpoint']"
                            " must be a str folder name")
        out.append((r["name"], _run_settings(fn, i, r.get("settings", {})),
                    checkpoint))
    return out


def _ints(fn: str, name: str, values: Any, minimum: int = 0) -> List[int]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence):
        raise TypeError(f"relpos.experiment.{fn}: {name} must be a list of "
                        "integers")
    return [_int(f"experiment.{fn}", f"{name}[{i}]", x, minimum=minimum)
            for i, x in enumerate(values)]


def _strs(fn: str, name: str, values: Any) -> List[str]:
    if isinstance(values, (str, bytes)) or not isinstance(values, Sequence) \
            or not all(isinstance(x, str) for x in values):
        raise TypeError(f"relpos.experiment.{fn}: {name} must be a list of "
                        "str")
    return list(values)


def _positive(fn: str, name: str, x: Any) -> int:
    return _int(f"experiment.{fn}", name, x, minimum=1)


def _folder(fn: str, out_dir: Any) -> str:
    if out_dir is None:
        return ""
    if not isinstance(out_dir, str) or not out_dir:
        raise TypeError(f"relpos.experiment.{fn}: out_dir must be a "
                        "non-empty str or None")
    return out_dir


def run(base: Optional[Mapping[str, Any]], runs: Sequence[Mapping[str, Any]],
        lengths: Sequence[int], *, sequences_per_length: int = 128,
        out_dir: Optional[str] = None,
        json_file: Optional[str] = "results.json") -> Dict[str, Any]:
    """Trains, evaluates and inspects one model per run.

    ``runs``: ``[{"name": "k=4", "settings": {"model": {"max_distance": 4}},
    "checkpoint": "k4"}, ...]`` (``checkpoint``: a folder inside
    ``out_dir`` for the run's checkpoint; optional). Every run is checked
    before the first is trained. With ``out_dir``, ``json_file`` is
    rewritten there after every run.
    """
    return json.loads(_ext.run_experiment(
        _settings_json("run", base), _runs("run", runs),
        _ints("run", "lengths", lengths, minimum=1),
        _positive("run", "sequences_per_length", sequences_per_length),
        _folder("run", out_dir), json_file or ""))


def sweep(base: Optional[Mapping[str, Any]] = None, *,
          ks: Sequence[int] = (0, 1, 2, 4, 16, 64),
          terms: Sequence[str] = ("both", "key", "value", "neither"),
          terms_k: int = 16, longer_lengths: Sequence[int] = (),
          sequences_per_length: int = 128,
          out_dir: Optional[str] = None) -> Dict[str, Any]:
    """``relpos sweep``: one relative-position run per k in ``ks`` (both
    terms), then one per term setting at ``terms_k``; defaults 400 steps, lr
    2e-3 under ``base``. ``longer_lengths`` default: hi+1 .. 3 hi."""
    return json.loads(_ext.run_sweep(
        _settings_json("sweep", base), _ints("sweep", "ks", ks),
        _strs("sweep", "terms", terms),
        _int("experiment.sweep", "terms_k", terms_k),
        _ints("sweep", "longer_lengths", longer_lengths, minimum=1),
        _positive("sweep", "sequences_per_length", sequences_per_length),
        _folder("sweep", out_dir)))


def demo(positions: Sequence[str] = ("sinusoidal", "relative"), *,
         steps: int = 1500, seed: int = 0, threads: int = 1,
         sequences: int = 256, out_dir: Optional[str] = None
         ) -> Dict[str, Any]:
    """``relpos demo``: local_difference trained on lengths 8-16, one model
    per scheme, evaluated at lengths 4, 8, ..., 64 (with ``out_dir``: the
    checkpoints and results.json, as the command writes them; no plot)."""
    return json.loads(_ext.run_demo(
        _strs("demo", "positions", positions),
        _positive("demo", "steps", steps),
        _int("experiment.demo", "seed", seed),
        _positive("demo", "threads", threads),
        _positive("demo", "sequences", sequences), _folder("demo", out_dir)))


def compare(base: Optional[Mapping[str, Any]], tasks: Sequence[str],
            positions: Sequence[str], seeds: Sequence[int] = (0,), *,
            extra_lengths: Sequence[int] = (),
            sequences_per_length: int = 128,
            out_dir: Optional[str] = None) -> Dict[str, Any]:
    """``relpos compare``'s grid of tasks x position schemes x seeds; the
    result is compare.json's (rows aggregated over the seeds, every cell).
    With ``out_dir``, a previous compare.json's matching cells are reused."""
    return json.loads(_ext.run_compare(
        _settings_json("compare", base), _strs("compare", "tasks", tasks),
        _strs("compare", "positions", positions),
        _ints("compare", "seeds", seeds),
        _ints("compare", "extra_lengths", extra_lengths, minimum=1),
        _positive("compare", "sequences_per_length", sequences_per_length),
        _folder("compare", out_dir)))

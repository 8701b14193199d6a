"""bench/gpu_bench.py: without a GPU it refuses with a clear message, and
--interpret --small runs all of its code paths (the device check against
the float64 reference, every benchmark row, the ratios and the JSON file)
on the CPU under Triton's interpreter."""

import json
import os
import subprocess
import sys

import pytest

torch = pytest.importorskip(
    "torch", reason="PyTorch is not installed: the GPU benchmark is untested "
                    "(scripts/test.sh installs PyPI's PyTorch 2)")
pytest.importorskip(
    "triton", reason="Triton is not installed (PyPI's torch brings it on "
                     "Linux): the GPU benchmark is untested")

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench",
                     "gpu_bench.py")


def _run(args, interpret, hide_gpus=False):
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    if hide_gpus:  # so that this runs (and is not skipped) on a GPU machine
        env["CUDA_VISIBLE_DEVICES"] = ""
    return subprocess.run([sys.executable, BENCH, *args], env=env,
                          capture_output=True, text=True, timeout=1800)


def test_without_a_gpu_it_says_so():
    res = _run([], interpret=False, hide_gpus=True)
    assert res.returncode == 2
    assert "no CUDA device" in res.stderr and "--interpret" in res.stderr
    res = _run(["--interpret"], interpret=False, hide_gpus=True)
    assert res.returncode == 2 and "TRITON_INTERPRET=1" in res.stderr


def test_interpret_small_runs_every_path(tmp_path):
    out = tmp_path / "bench.json"
    res = _run(["--interpret", "--small", "--repeats", "1", "--json",
                str(out)], interpret=True)
    assert res.returncode == 0, res.stderr[-4000:]
    assert "comparisons passed" in res.stdout
    data = json.loads(out.read_text())
    rows = {r["row"] for r in data["results"]}
    assert rows == {"sdpa_flash", "relpos_vanilla", "relpos_shaw",
                    "relpos_shaw_key", "relpos_t5", "relpos_alibi",
                    "flex_t5", "flex_alibi", "flex_shaw_key", "gather_shaw"}
    for r in data["results"]:
        assert isinstance(r["fwd_ms"], float), r
        if r["row"].startswith("flex"):  # no FlexAttention backward on CPU
            assert r["fwd_bwd_ms"] == "NotImplementedError", r
        else:
            assert isinstance(r["fwd_bwd_ms"], float), r
    assert data["ratios"][0]["shaw_over_sdpa"] > 0

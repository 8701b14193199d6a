"""relpos.inspect: per-row statistics of a checkpoint's relative tables.

The fixture data/inspect_checkpoint was written by
    relpos train --out python/tests/data/inspect_checkpoint --steps 10 \
      --task reverse --train-lengths 1-3 --arch decoder --d-model 8 \
      --heads 2 --layers 1 --d-ff 8 --max-distance 8 --batch-size 4 \
      --threads 1
(a causal decoder on sequences of at most 6 tokens with k = 8: the rows of
r > 0 and r < -5 never see a pair). Rerun that line to regenerate it.
"""

import json
import pathlib
import shutil

import numpy as np
import pytest

import relpos

CHECKPOINT = pathlib.Path(__file__).parent / "data" / "inspect_checkpoint"


def test_far_rows_have_no_pairs_no_signal_and_are_flagged():
    r = relpos.inspect(CHECKPOINT)
    assert r["has_signal"] and r["no_signal"] is None
    assert r["step"] == 10 and r["first_step"] == 0 and r["steps"] == 10
    assert r["train_max_tokens"] == 6
    assert [t["parameter"] for t in r["tables"]] == [
        "blocks.0.attn.rel_k", "blocks.0.attn.rel_v"]
    for t in r["tables"]:
        assert t["rows"] == 17
        np.testing.assert_array_equal(t["distance"], np.arange(-8, 9))
        assert t["distance"].dtype == np.int64
        far = (t["distance"] > 0) | (t["distance"] < -5)
        assert t["pair_count"].dtype == np.int64
        np.testing.assert_array_equal(t["pair_count"] == 0, far)
        np.testing.assert_array_equal(t["signal"] == 0, far)
        assert t["untrained"].dtype == bool
        np.testing.assert_array_equal(t["untrained"], far)
        assert t["untrained_rows"] == far.sum()
        assert t["signal_per_head"] is None  # shared tables
        assert t["open_below"][0] and t["open_above"][-1]
        assert t["distance_label"][0] == "<= -8"
        assert (t["row_norm"] > 0).all() and (t["movement"] >= 0).all()
        assert 0 <= t["share_k"] <= 5
        assert t["verdict"].startswith(t["parameter"] + ": 11 of 17 rows")
    # The share asked for moves share_k, never beyond the trained rows.
    small = relpos.inspect(CHECKPOINT, share=0.1)
    assert small["tables"][0]["share_k"] <= r["tables"][0]["share_k"]


def test_the_pair_counts_are_those_of_the_signal_file():
    signal = json.loads(next(CHECKPOINT.glob("signal-*.json")).read_text())
    r = relpos.inspect(str(CHECKPOINT))
    for t, s in zip(r["tables"], signal["tables"]):
        np.testing.assert_array_equal(t["pair_count"], s["pair_count"])
        np.testing.assert_array_equal(t["signal"], s["signal"])


def test_old_checkpoint_without_statistics(tmp_path):
    old = tmp_path / "old"
    shutil.copytree(CHECKPOINT, old)
    cfg = json.loads((old / "config.json").read_text())
    del cfg["files"]["signal"]
    (old / "config.json").write_text(json.dumps(cfg))
    r = relpos.inspect(old)
    assert not r["has_signal"]
    assert "no signal statistics" in r["no_signal"]
    t = r["tables"][0]
    assert t["pair_count"] is None and t["untrained"] is None
    assert t["movement"].shape == (17,)


def test_bad_input(tmp_path):
    with pytest.raises(RuntimeError, match="does not exist"):
        relpos.inspect(tmp_path / "missing")
    with pytest.raises(ValueError, match="share"):
        relpos.inspect(CHECKPOINT, share=0)
    with pytest.raises(ValueError, match="untrained_fraction"):
        relpos.inspect(CHECKPOINT, untrained_fraction=-1)
    with pytest.raises(TypeError, match="share"):
        relpos.inspect(CHECKPOINT, share="big")
    with pytest.raises(TypeError, match="path"):
        relpos.inspect(3)
    bad = tmp_path / "bad"
    shutil.copytree(CHECKPOINT, bad)
    signal = next(bad.glob("signal-*.json"))
    signal.write_text("{")
    with pytest.raises(RuntimeError, match=signal.name):
        relpos.inspect(bad)

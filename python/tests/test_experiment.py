"""relpos.experiment: the experiment runner of demo / sweep / compare from
Python, on tiny models (a few steps each)."""

import json
import pathlib

import pytest

from relpos import experiment

BASE = {"model": {"d_model": 16, "heads": 2, "layers": 1, "d_ff": 32},
        "train": {"task": "reverse", "train_min_length": 2,
                  "train_max_length": 4, "steps": 4, "batch_size": 4}}

RUNS = [{"name": "k=1", "settings": {"model": {"max_distance": 1}}},
        {"name": "k=3", "settings": {"model": {"max_distance": 3,
                                               "value_term": False}},
         "checkpoint": "k3"}]


def test_run_trains_each_run_and_writes_its_json(tmp_path):
    out = tmp_path / "exp"
    r = experiment.run(BASE, RUNS, [2, 4, 6], sequences_per_length=8,
                       out_dir=str(out))
    assert [x["name"] for x in r["runs"]] == ["k=1", "k=3"]
    assert r["task"] == "reverse" and r["train_lengths"] == [2, 4]
    assert r["eval_lengths"] == [2, 4, 6] and not r["interrupted"]
    k1, k3 = r["runs"]
    assert k1["max_distance"] == 1 and k3["max_distance"] == 3
    assert k3["settings"] == {"max_distance": "3", "value_term": "false"}
    assert k3["model_config"]["value_term"] is False
    # Shared tables of head width 8: k = 1 has a key and a value table of 3
    # rows, k = 3 a key table of 7 rows only.
    assert k3["parameters"] - k1["parameters"] == (7 - 2 * 3) * 8
    assert set(k1["accuracy_by_length"]) == {"2", "4", "6"}
    assert k1["checkpoint"] is None and k3["checkpoint"] == "k3"
    assert (out / "k3" / "config.json").is_file()
    on_disk = json.loads((out / "results.json").read_text())
    assert [x["final_train_loss"] for x in on_disk["runs"]] == \
        [x["final_train_loss"] for x in r["runs"]]


def test_the_same_settings_give_the_same_numbers():
    a = experiment.run(BASE, RUNS[:1], [2, 4], sequences_per_length=8)
    b = experiment.run(BASE, RUNS[:1], [2, 4], sequences_per_length=8)
    for key in ("final_train_loss", "accuracy_by_length", "loss_by_length"):
        assert a["runs"][0][key] == b["runs"][0][key]


def test_bad_runs_are_refused_before_training(tmp_path):
    out = tmp_path / "never"
    with pytest.raises(ValueError, match="twice"):
        experiment.run(BASE, [RUNS[0], RUNS[0]], [2], out_dir=str(out))
    with pytest.raises(ValueError, match="max_distance"):
        experiment.run(BASE, [RUNS[0], {"name": "bad", "settings": {
            "model": {"max_distance": -1}}}], [2], out_dir=str(out))
    with pytest.raises(ValueError, match="at least one run"):
        experiment.run(BASE, [], [2], out_dir=str(out))
    with pytest.raises(ValueError, match="lengths"):
        experiment.run(BASE, RUNS[:1], [0])
    with pytest.raises(ValueError, match="nosuch"):
        experiment.run({"train": {"task": "nosuch"}}, RUNS[:1], [2])
    with pytest.raises(TypeError, match="runs"):
        experiment.run(BASE, "k=1", [2])
    with pytest.raises(TypeError, match="base"):
        experiment.run([("model", "d_model", "16")], RUNS, [2])
    assert not out.exists()


def test_sweep_and_demo_are_the_command_lines_lists():
    s = experiment.sweep(BASE, ks=[0, 2], terms=["both", "key"], terms_k=2,
                         sequences_per_length=4)
    assert [x["name"] for x in s["runs"]] == ["k=0 both", "k=2 both",
                                             "k=2 key"]
    assert s["runs"][2]["settings"] == {"max_distance": "2", "--terms": "key"}
    # Training lengths 2-4: 2-4:1 inside, then 5-12:2 (12 included).
    assert s["eval_lengths"] == [2, 3, 4, 5, 7, 9, 11, 12]
    assert s["train_config"]["steps"] == 4  # base's, over the sweep's 400
    d = experiment.demo(steps=2, sequences=2)
    assert [x["name"] for x in d["runs"]] == ["absolute (sinusoidal)",
                                             "relative (k=16)"]
    assert d["task"] == "local_difference" and len(d["eval_lengths"]) == 16


def test_compare_returns_its_grid(tmp_path):
    r = experiment.compare(BASE, ["reverse"], ["none", "shaw"], [0, 1],
                           sequences_per_length=4, out_dir=str(tmp_path))
    assert len(r["cells"]) == 4 and len(r["rows"]) == 2
    assert (pathlib.Path(tmp_path) / "compare.json").is_file()
    with pytest.raises(ValueError, match="twice"):
        experiment.compare(BASE, ["reverse"], ["shaw", "relative"], [0])

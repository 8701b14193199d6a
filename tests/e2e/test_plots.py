"""The SVG plots of `relpos compare`, `relpos inspect --svg` and `relpos demo`,
made on tiny runs and checked by parsing and by rendering (svg_checks.py).

The rendered PNGs stay in pytest's temporary folder (printed on failure);
RELPOS_PLOT_DIR=DIR keeps a copy of every SVG and PNG there to look at.
"""
import os
import pathlib
import shutil
import subprocess

import pytest

import svg_checks

TINY_MODEL = ["--batch-size", "4", "--d-model", "16", "--heads", "2",
              "--layers", "1", "--d-ff", "32", "--train-lengths", "2-4",
              "--progress", "none"]


def run(*args, cwd):
    subprocess.run([str(a) for a in args], cwd=cwd, check=True,
                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)


@pytest.fixture(scope="module")
def plots(relpos_bin, tmp_path_factory):
    """name -> SVG path: every plot the verbs write, from tiny runs."""
    work = tmp_path_factory.mktemp("plots")
    # Every scheme (10 series per panel), two tasks (two panels).
    run(relpos_bin, "compare", "--out", "cmp", "--steps", "3", "--seeds", "1",
        "--sequences", "4", *TINY_MODEL, cwd=work)
    # A few steps: the tables move by about 0.005, the case whose movement
    # axis once read "0 0.0 0.0 0.0".
    run(relpos_bin, "train", "--task", "local_difference", "--steps", "3",
        "--out", "ck", *TINY_MODEL, cwd=work)
    run(relpos_bin, "inspect", "ck", "--svg", "inspect.svg", cwd=work)
    run(relpos_bin, "demo", "--steps", "2", "--sequences", "4", "--out", "demo",
        "--progress", "none", cwd=work)
    return {"compare": work / "cmp" / "compare.svg",
            "inspect": work / "inspect.svg",
            "demo": work / "demo" / "accuracy.svg"}


@pytest.mark.parametrize("name,panel_count,series",
                         [("compare", 2, 10), ("inspect", 4, 1),
                          ("demo", 1, 2)])
def test_plot_renders_inside_its_canvas_with_distinct_series(
        plots, name, panel_count, series, tmp_path):
    svg = plots[name].read_text()
    # The whole document renders at its declared size.
    whole = svg_checks.render(svg, tmp_path / f"{name}.png")
    root_panels = svg_checks.panels(svg)
    assert len(root_panels) == panel_count
    height = sum(svg_checks.size(p)[1] for p in root_panels)
    assert whole.shape[:2] == (height, svg_checks.size(root_panels[0])[0])
    problems = []
    for i, panel in enumerate(root_panels):
        assert len(svg_checks.legend_colours(panel)) == series
        for p in svg_checks.check_panel(panel, tmp_path / f"{name}-{i}.png"):
            problems.append(f"{name} panel {i}: {p}")
    keep = os.environ.get("RELPOS_PLOT_DIR")
    if keep:
        pathlib.Path(keep).mkdir(parents=True, exist_ok=True)
        shutil.copy(plots[name], keep)
        for png in tmp_path.glob("*.png"):
            shutil.copy(png, keep)
    assert not problems, "\n".join(problems) + f"\n(PNGs in {tmp_path})"

"""Shared fixtures of the end-to-end tests (tests/e2e): they drive the built
`relpos` binary and the installed Python package as a user would.

Run them with `bash scripts/test-e2e.sh` (after the release build and
`scripts/test-python.sh`); see docs/conventions.md, "Examples in the docs
are tests".

Environment:
  RELPOS_BIN        the relpos binary (default: build/release/bin/relpos)
  RELPOS_BUILD_DIR  the CMake build tree (default: the binary's ../..)
"""
import os
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]


def relpos_binary() -> pathlib.Path:
    return pathlib.Path(
        os.environ.get("RELPOS_BIN", ROOT / "build" / "release" / "bin" / "relpos")
    ).resolve()


def build_dir() -> pathlib.Path:
    if "RELPOS_BUILD_DIR" in os.environ:
        return pathlib.Path(os.environ["RELPOS_BUILD_DIR"]).resolve()
    return relpos_binary().parents[1]


@pytest.fixture(scope="session")
def relpos_bin() -> pathlib.Path:
    binary = relpos_binary()
    if not os.access(binary, os.X_OK):
        pytest.fail(
            f"no relpos binary at {binary}: build it first "
            "(cmake --preset release && cmake --build build/release) "
            "or set RELPOS_BIN"
        )
    return binary

#!/usr/bin/env bash
# Builds and installs the relpos Python package into .venv/ and runs its
# tests (python/tests) with pytest.
#
#   bash scripts/test-python.sh [extra pytest arguments]
#
# The virtual environment is made once from Debian's interpreter with
# --system-site-packages, so Debian's python3-numpy and python3-pytest are
# used as they are (the PyTorch tests then skip, saying so); the build
# requirements
# (scikit-build-core, nanobind) come from PyPI into the venv. The package is
# then built without build isolation into a persistent build directory, so
# a rerun recompiles only what changed. Exits non-zero if the build fails,
# any test fails, or no test is collected.
#
# Environment: RELPOS_PYTHON (default /usr/bin/python3) picks the base
# interpreter; RELPOS_VENV (default .venv) the environment's location;
# RELPOS_BUILD_DIR (default build/python) the build directory. scripts/test.sh
# runs this through scripts/test-pypi.sh (PyPI's PyTorch 2, Triton).
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${RELPOS_PYTHON:-/usr/bin/python3}
venv=${RELPOS_VENV:-$root/.venv}
build_dir=$root/${RELPOS_BUILD_DIR:-build/python}

if [[ ! -x $venv/bin/python ]]; then
  echo "== creating $venv from $python"
  "$python" -m venv --system-site-packages "$venv"
fi
py=$venv/bin/python

# Build requirements, installed once (keep in step with pyproject.toml).
if ! "$py" -c "import scikit_build_core, nanobind" 2>/dev/null; then
  echo "== installing build requirements from PyPI"
  "$py" -m pip install --quiet --disable-pip-version-check \
    "scikit-build-core>=0.10" "nanobind>=2.0,<4"
fi
if ! "$py" -c "import pytest, numpy" 2>/dev/null; then
  "$py" -m pip install --quiet --disable-pip-version-check pytest numpy
fi

echo "== building and installing relpos into $venv"
# Two build jobs: the CI machines (and dev boxes) here have two cores.
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "$py" -m pip install --quiet --disable-pip-version-check \
  --no-build-isolation --no-deps \
  --config-settings=build-dir="$build_dir" "$root"

echo "== pytest python/tests"
# Run from outside the source tree so `import relpos` finds the installed
# package, never python/relpos (which has no compiled extension).
# -rs lists skipped tests with their reason (e.g. PyTorch not installed).
# pytest exits 5 when it collects no test: that is a failure here too.
cd "$venv"
status=0
"$py" -m pytest -q -rs -p no:cacheprovider --rootdir "$root" \
  -c "$root/pyproject.toml" "$root/python/tests" "$@" || status=$?
if [[ $status -eq 5 ]]; then
  echo "test-python: no tests were collected" >&2
fi
exit "$status"

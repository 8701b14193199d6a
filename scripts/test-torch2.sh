#!/usr/bin/env bash
# Builds the relpos Python package against PyTorch 2 (from PyPI) and runs its
# PyTorch tests there: the torch.library custom ops, torch.compile(...,
# fullgraph=True) and torch.export through relpos.torch.attention / rope,
# DistributedDataParallel and context-parallel attention.
#
#   bash scripts/test-torch2.sh [extra pytest arguments]
#
# CI (a fresh machine with Debian's python3-torch 1.13 only) does not run
# this: PyTorch 2 and its CUDA libraries are several GB from PyPI. This script
# is the check for the PyTorch 2 path; run it before merging changes to
# python/relpos/torch.py, _ops.py or distributed.py.
#
# The virtual environment lives outside the repository (default
# /var/cache/relpos/torch2-venv, made once from /usr/bin/python3 without
# Debian's site packages, so its torch is PyPI's); pip's cache is
# /var/cache/relpos/pip, so a second environment costs no download. The
# package is built without build isolation into build/python-torch2 (kept,
# so a rerun recompiles only what changed).
#
# Environment: RELPOS_TORCH2_VENV picks the environment, RELPOS_PIP_CACHE the
# pip cache, RELPOS_PYTHON (default /usr/bin/python3) the base interpreter,
# RELPOS_TORCH2_SPEC (default "torch>=2.4") what pip installs.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${RELPOS_PYTHON:-/usr/bin/python3}
venv=${RELPOS_TORCH2_VENV:-/var/cache/relpos/torch2-venv}
cache=${RELPOS_PIP_CACHE:-/var/cache/relpos/pip}
spec=${RELPOS_TORCH2_SPEC:-torch>=2.4}
build_dir=$root/build/python-torch2

if [[ ! -x $venv/bin/python ]]; then
  echo "== creating $venv from $python"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi
py=$venv/bin/python
pip=("$py" -m pip --disable-pip-version-check --cache-dir "$cache")

if ! "$py" -c "import torch, sys; sys.exit(int(torch.__version__.split('.')[0]) < 2)" \
    2>/dev/null; then
  echo "== installing $spec from PyPI (several GB the first time)"
  "${pip[@]}" install --progress-bar off "$spec"
fi
if ! "$py" -c "import scikit_build_core, nanobind, numpy, pytest" 2>/dev/null; then
  "${pip[@]}" install --quiet "scikit-build-core>=0.10" "nanobind>=2.0,<4" \
    numpy pytest
fi
"$py" -c "import torch; print('== PyTorch', torch.__version__)"

echo "== building and installing relpos into $venv"
CMAKE_BUILD_PARALLEL_LEVEL=${CMAKE_BUILD_PARALLEL_LEVEL:-2} \
  "${pip[@]}" install --quiet --no-build-isolation --no-deps \
  --config-settings=build-dir="$build_dir" "$root"

echo "== pytest (PyTorch tests)"
# From outside the source tree, so `import relpos` is the installed package.
# -rs lists skipped tests with their reason.
cd "$venv"
status=0
"$py" -m pytest -q -rs -p no:cacheprovider --rootdir "$root" \
  -c "$root/pyproject.toml" \
  "$root/python/tests/test_torch.py" "$root/python/tests/test_torch_schemes.py" \
  "$root/python/tests/test_torch_ops.py" \
  "$root/python/tests/test_distributed.py" "$@" || status=$?
if [[ $status -eq 5 ]]; then
  echo "test-torch2: no tests were collected" >&2
fi
exit "$status"

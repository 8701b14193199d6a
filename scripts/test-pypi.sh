#!/usr/bin/env bash
# Builds the relpos Python package against PyPI's PyTorch 2 and runs every
# test in python/tests there (scripts/test.sh's Python stage): the numpy
# API, relpos.torch with its torch.library custom ops, torch.compile and
# torch.export, DDP and context parallelism, the Hugging Face / OpenNMT-py
# interop (transformers), the CTranslate2 export (ctranslate2, sacrebleu,
# sentencepiece), and relpos.triton's GPU kernels under Triton's
# interpreter (TRITON_INTERPRET=1: they run on CPU tensors) plus their
# compilation for sm_80 / sm_90 (no GPU needed).
# A skipped test fails the run here.
#
#   bash scripts/test-pypi.sh [extra pytest arguments]
#
# The virtual environment lives outside the repository (default
# /var/cache/relpos/pypi-venv, made once from /usr/bin/python3 without
# Debian's site packages) and gets scripts/requirements-pypi.txt from a
# wheelhouse inside pip's default cache directory, ~/.cache/pip/relpos-wheels
# (the directory CI's fresh roots share). The first run downloads the
# wheels there with `pip download` (several GB: PyTorch and its CUDA
# libraries); later runs, and new environments, install from it with
# --no-index and download nothing. pip's own HTTP cache is not relied on:
# it keeps a wheel only when the server's reply carries caching headers,
# and where a proxy strips them it keeps nothing. The package is built into
# build/python-pypi (kept, so a rerun recompiles only what changed) by
# scripts/test-python.sh.
#
# Environment: RELPOS_PYPI_VENV picks the environment, RELPOS_PYTHON (default
# /usr/bin/python3) the base interpreter, RELPOS_WHEELHOUSE the wheelhouse.
set -euo pipefail
cd "$(dirname "$0")/.."
python=${RELPOS_PYTHON:-/usr/bin/python3}
venv=${RELPOS_PYPI_VENV:-/var/cache/relpos/pypi-venv}

if [[ ! -x $venv/bin/python ]]; then
  echo "== creating $venv from $python"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv "$venv"
fi
pip=("$venv/bin/python" -m pip --disable-pip-version-check)
wheels=${RELPOS_WHEELHOUSE:-$("${pip[@]}" cache dir)/relpos-wheels}
install() {
  "${pip[@]}" install --progress-bar off --quiet --no-index \
    --find-links "$wheels" -r scripts/requirements-pypi.txt
}
echo "== installing scripts/requirements-pypi.txt into $venv from $wheels"
if ! install 2>/dev/null; then
  echo "== downloading the missing wheels into $wheels" \
    "(several GB the first time)"
  mkdir -p "$wheels"
  "${pip[@]}" download --progress-bar off --quiet --only-binary :all: \
    -d "$wheels" -r scripts/requirements-pypi.txt
  install
fi
"$venv/bin/python" -c "import torch, triton; print('== PyTorch', \
torch.__version__, '/ Triton', triton.__version__)"

# Every optional dependency is installed here: RELPOS_TEST_NO_SKIPS=1 makes
# any skipped test a failure (python/tests/conftest.py).
TRITON_INTERPRET=1 RELPOS_TEST_NO_SKIPS=1 RELPOS_VENV=$venv \
  RELPOS_BUILD_DIR=build/python-pypi exec bash scripts/test-python.sh "$@"

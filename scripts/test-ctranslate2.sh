#!/usr/bin/env bash
# Runs the CTranslate2 export tests (python/tests/test_ctranslate2.py), which
# skip themselves where the optional dependency ctranslate2 is missing (as on
# CI's fresh machine). This makes a virtual environment that has it:
#
#   bash scripts/test-ctranslate2.sh [extra pytest arguments]
#
# The environment (default build/venv-ctranslate2, under the ignored build/)
# is made once like scripts/test-python.sh's, from Debian's interpreter with
# --system-site-packages, plus `pip install ctranslate2` from PyPI; pip's
# wheel cache (~/.cache/pip) makes a re-creation quick. The relpos package is
# then built and installed by scripts/test-python.sh into that environment,
# and only the tests whose names mention ctranslate2 run.
#
# Environment: RELPOS_CT2_VENV picks the environment's location,
# RELPOS_CT2_SPEC the pip requirement (default "ctranslate2>=4,<5").
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
python=${RELPOS_PYTHON:-/usr/bin/python3}
venv=${RELPOS_CT2_VENV:-$root/build/venv-ctranslate2}
spec=${RELPOS_CT2_SPEC:-ctranslate2>=4,<5}

if [[ ! -x $venv/bin/python ]]; then
  echo "== creating $venv from $python"
  mkdir -p "$(dirname "$venv")"
  "$python" -m venv --system-site-packages "$venv"
fi
if ! "$venv/bin/python" -c "import ctranslate2" 2>/dev/null; then
  echo "== installing $spec from PyPI"
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check "$spec"
fi
"$venv/bin/python" -c \
  "import ctranslate2; print('== ctranslate2', ctranslate2.__version__)"

RELPOS_VENV=$venv exec bash scripts/test-python.sh -k ctranslate2 "$@"

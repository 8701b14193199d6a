#!/usr/bin/env bash
# End-to-end tests (tests/e2e) against the built relpos binary and the
# installed Python package, as a user meets them:
#   - test_docs.py runs every fenced sh / python / cpp block of README.md and
#     docs/*.md (docs/conventions.md, "Examples in the docs are tests");
#   - test_plots.py renders the verbs' SVG plots to PNG and checks them.
#
#   bash scripts/test-e2e.sh [extra pytest arguments]
#   bash scripts/test-e2e.sh -k python.md          # one document's blocks
#   python3 tests/e2e/doc_blocks.py                # list the blocks, run none
#
# Needs the release build (build/release/bin/relpos; RELPOS_BIN to use
# another) and the Python package installed by scripts/test-python.sh into
# RELPOS_VENV (default .venv). Skipped blocks and tests are listed with their
# reasons at the end (-rs). Exits non-zero if anything fails or nothing ran.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
venv=${RELPOS_VENV:-$root/.venv}
py=$venv/bin/python
bin=${RELPOS_BIN:-$root/build/release/bin/relpos}

if [[ ! -x $bin ]]; then
  echo "test-e2e: no relpos binary at $bin (cmake --preset release && cmake --build build/release)" >&2
  exit 2
fi
if [[ ! -x $py ]] || ! (cd / && "$py" -c "import relpos") 2>/dev/null; then
  echo "test-e2e: relpos is not installed in $venv (run scripts/test-python.sh first, same RELPOS_VENV)" >&2
  exit 2
fi
export RELPOS_BIN=$bin RELPOS_VENV=$venv

# From outside the source tree, so that `import relpos` in the doc blocks
# finds the installed package and never python/relpos.
cd "$venv"
status=0
"$py" -m pytest -q -rs -p no:cacheprovider --rootdir "$root/tests/e2e" \
  -c /dev/null "$root/tests/e2e" "$@" || status=$?
if [[ $status -eq 5 ]]; then
  echo "test-e2e: no tests were collected" >&2
fi
exit "$status"

#!/usr/bin/env bash
# Builds relpos and runs every test: the C++ unit tests (CTest) in release.
# Usage: bash scripts/test.sh      (after scripts/install-deps.sh)
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)

echo "== release build and unit tests"
cmake --preset release >/dev/null
cmake --build build/release -j "$jobs"
ctest --preset release -j "$jobs"

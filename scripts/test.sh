#!/usr/bin/env bash
# Builds relpos and runs every test:
#   1. release build, all C++ unit tests (CTest);
#   2. the Python package and its whole pytest suite against PyPI's PyTorch 2
#      (scripts/test-pypi.sh: a cached environment in /var/cache/relpos,
#      several GB downloaded the first time; Triton's kernels under its
#      interpreter);
#   3. end to end (tests/e2e, on the builds of 1 and 2): every sh / python /
#      cpp example of README.md and docs/*.md, and the verbs' SVG plots;
#   4. AddressSanitizer + UBSan build, the C++ unit tests again;
#   5. the libFuzzer targets under ASan, 30 s each (scripts/fuzz.sh's own
#      default is 60).
# Usage: bash scripts/test.sh      (after scripts/install-deps.sh)
# RELPOS_TEST_STAGES="release python e2e sanitize fuzz" selects stages (e2e
# needs the release and python stages' results);
# RELPOS_FUZZ_SECONDS sets the fuzzing time per target.
set -euo pipefail
cd "$(dirname "$0")/.."
jobs=$(nproc)
stages=${RELPOS_TEST_STAGES:-release python e2e sanitize fuzz}
start=$SECONDS

stage() { echo; echo "=== [$((SECONDS - start))s] $*"; }

for s in $stages; do
  case $s in
    release)
      stage "release build and C++ unit tests"
      cmake --preset release >/dev/null
      cmake --build build/release -j "$jobs"
      ctest --preset release -j "$jobs"
      ;;
    python)
      stage "Python package and pytest (PyPI's PyTorch 2, Triton interpreter)"
      bash scripts/test-pypi.sh
      ;;
    e2e)
      stage "end to end: the docs' examples and the plots"
      # on the Python stage's environment (scripts/test-pypi.sh)
      RELPOS_VENV=${RELPOS_PYPI_VENV:-/var/cache/relpos/pypi-venv} \
        bash scripts/test-e2e.sh
      ;;
    sanitize)
      stage "ASan + UBSan build and C++ unit tests"
      cmake --preset sanitize >/dev/null
      cmake --build build/sanitize -j "$jobs"
      # Tests that cap the address space (RLIMIT_AS, theirs or a child's) to prove a hostile
      # input costs no memory cannot run under ASan, whose shadow memory
      # needs terabytes of address space ("Failed to mmap"); the release
      # stage runs them.
      asan_excluded='^(RunCompare\.AHostileCompareJsonCostsNoMemory|JsonReader\.HostileNestingCostsNoMemory|MemoryPlan\.ACheckpointThatCannotFitIsRefusedBeforeBuilding|HostileInput\.MemoryIsPlannedBeforeAllocating)$'
      # halt_on_error: any report fails the test; OpenMP's runtime keeps
      # thread stacks alive at exit, which LeakSanitizer would flag.
      ASAN_OPTIONS=halt_on_error=1:detect_leaks=0 \
      UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
        ctest --preset sanitize -j "$jobs" -LE install -E "$asan_excluded"
      ;;
    fuzz)
      stage "fuzzing (libFuzzer, ASan + UBSan)"
      bash scripts/fuzz.sh "${RELPOS_FUZZ_SECONDS:-30}"
      ;;
    *)
      echo "test.sh: unknown stage '$s'" >&2
      exit 2
      ;;
  esac
done
stage "all test stages passed: $stages"

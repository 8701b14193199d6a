#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (ASan + UBSan) and runs each for a
# bounded time. Exits non-zero if the build fails or any fuzzer finds a crash,
# a sanitizer error, a leak or a timeout.
#
# Usage: bash scripts/fuzz.sh [SECONDS_PER_TARGET]      (default 60)
# Environment: FUZZ_BUILD_DIR (default build/fuzz), FUZZ_TARGETS (default
# "safetensors_fuzzer config_fuzzer catalog_fuzzer"), CC/CXX (default clang/clang++).
#
# Only the sources the readers need are compiled (fuzz/CMakeLists.txt as a
# standalone project). The seed corpora in fuzz/corpus/ are read, never
# written: new inputs go to a scratch corpus in the build dir, and crashing
# inputs to $FUZZ_BUILD_DIR/artifacts/ (reproduce with: <fuzzer> <file>).
set -euo pipefail
cd "$(dirname "$0")/.."

seconds="${1:-60}"
build_dir="${FUZZ_BUILD_DIR:-build/fuzz}"
targets="${FUZZ_TARGETS:-safetensors_fuzzer config_fuzzer catalog_fuzzer signal_fuzzer compare_fuzzer}"
export CC="${CC:-clang}" CXX="${CXX:-clang++}"

echo "== configuring and building fuzzers in $build_dir ($CXX)"
cmake -S fuzz -B "$build_dir" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
# shellcheck disable=SC2086
cmake --build "$build_dir" -j "$(nproc)" --target $targets

mkdir -p "$build_dir/artifacts"
status=0
for target in $targets; do
  seeds="fuzz/corpus/${target%_fuzzer}"
  work="$build_dir/corpus/$target"
  mkdir -p "$work"
  echo "== $target: ${seconds}s (seeds: $seeds)"
  # -max_total_time bounds the run; -timeout flags any single input taking
  # over 10 s; -rss_limit_mb catches runaway allocation from a lying header.
  if ! "$build_dir/$target" "$work" "$seeds" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -max_len=65536 -print_final_stats=1 \
      -artifact_prefix="$build_dir/artifacts/$target-" \
      2> "$build_dir/$target.log"; then
    echo "!! $target FAILED; last lines of $build_dir/$target.log:"
    tail -n 40 "$build_dir/$target.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|cov:" "$build_dir/$target.log" \
      | tail -n 2 || true
  fi
done
if [[ $status -ne 0 ]]; then
  echo "== fuzzing found problems (inputs in $build_dir/artifacts/)"
else
  echo "== all fuzzers ran ${seconds}s each without a crash"
fi
exit $status

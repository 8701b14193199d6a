#!/usr/bin/env bash
# Installs relpos's build and test dependencies from Debian's packages.
# Idempotent: packages that are already installed are skipped, and apt is
# not touched at all when nothing is missing. Run as root (or with sudo).
set -euo pipefail

packages=(
  build-essential cmake ninja-build pkg-config git
  libgtest-dev libgmock-dev libbenchmark-dev   # tests and benchmarks
  libhwy-dev                                   # SIMD (Highway)
  libdnnl-dev libopenblas-dev                  # GEMM (oneDNN, CBLAS)
  ocl-icd-opencl-dev                           # oneDNN's CMake config requires OpenCL;
                                               # libdnnl-dev only recommends it
  libcli11-dev nlohmann-json3-dev              # command line, JSON
  libsentencepiece-dev                         # subword vocabularies (translation)
  python3 python3-dev python3-venv python3-numpy python3-pytest  # golden files, Python package
  clang libclang-rt-14-dev                     # fuzzers and sanitizers
  librsvg2-bin                                 # rsvg-convert: the plot tests render SVG
)
if [[ -n "${RELPOS_EXTRA_PACKAGES:-}" ]]; then
  read -r -a extra <<<"${RELPOS_EXTRA_PACKAGES}"
  packages+=("${extra[@]}")
fi

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "install-deps: all ${#packages[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
SUDO=""
if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

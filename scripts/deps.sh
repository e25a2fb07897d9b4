#!/usr/bin/env bash
# Installs every Debian package spattn builds or tests with. Idempotent: does nothing
# when all are present. This is the project's only install step.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  libhwy-dev            # Google Highway: portable SIMD with runtime dispatch
  libopenblas-dev       # sgemm, the in-process peak that kernel figures are divided by
  nlohmann-json3-dev    # JSON (safetensors headers, --json, calibration files)
  libcli11-dev          # command line
  libfmt-dev
  libpng-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev      # micro-benchmarks (not in ctest)
  jq                    # benchmark scripts read spattn --json
  libpcre2-dev          # GPT-2's pre-tokenizer regex (Unicode letter/number classes)
  clang libclang-rt-14-dev  # `make fuzz`: libFuzzer targets with ASan/UBSan
)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then exit 0; fi
SUDO=""
if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
echo "deps.sh: installing ${missing[*]}" >&2
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq
$SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"

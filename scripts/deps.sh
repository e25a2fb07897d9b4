#!/usr/bin/env bash
# Installs every Debian package spattn builds or tests with. Idempotent: does nothing
# when all are present. This is the project's only install step.
set -euo pipefail
PKGS=(
  build-essential cmake pkg-config
  ccache                # compiles only what changed, across build folders and checkouts
  libhwy-dev            # Google Highway: portable SIMD with runtime dispatch
  libopenblas-openmp-dev  # sgemm, the in-process peak (the OpenMP build: CMakeLists.txt says why)
  nlohmann-json3-dev    # JSON (safetensors headers, --json, calibration files)
  libcli11-dev          # command line
  libfmt-dev
  libpng-dev
  libgtest-dev libgmock-dev
  libbenchmark-dev      # micro-benchmarks (not in ctest)
  jq                    # benchmark scripts read spattn --json
  libpcre2-dev          # GPT-2's pre-tokenizer regex (Unicode letter/number classes)
  libicu-dev            # WordPiece's normaliser (Unicode categories, lowercase, NFD)
  libcpp-httplib-dev    # `spattn serve`: HTTP server and the tests' client
  libopenmpi-dev openmpi-bin  # context-parallel runs across processes (`mpirun ... --cp P`)
  clang libclang-rt-14-dev  # `make fuzz`: libFuzzer targets with ASan/UBSan
  clang-format-14       # the C++ layout (.clang-format), checked by ctest's code_format
  # The Python package (python/), built and tested against /usr/bin/python3. python3-torch
  # is optional (its tests skip without it) and not installed here: it is large.
  python3-dev pybind11-dev python3-numpy python3-pytest python3-matplotlib
  python3-venv python3-pip python3-setuptools python3-wheel  # `pip install ./python` in a venv
  git                   # unpacks llama.cpp's source bundle (below)
)
command -v npm >/dev/null 2>&1 || PKGS+=(npm)  # fetches llama.cpp's pinned source (below)
missing=()
for p in "${PKGS[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -ne 0 ]; then
  SUDO=""
  if [ "$(id -u)" != 0 ]; then SUDO="sudo"; fi
  echo "deps.sh: installing ${missing[*]}" >&2
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}"
fi

# ggml, llama.cpp's tensor library (quantized weights, their matrix products and the
# persistent thread pool), from the llama.cpp source that npm's node-llama-cpp bundles as a
# git bundle: pinned by package version and commit, unpacked once into a cache outside the
# repository and linked as third_party/llama.cpp, which CMake builds ggml from.
LLAMA_NPM=node-llama-cpp@3.22.1
LLAMA_COMMIT=de3ff815ea7d559ee917f063901b8986f038abc6
cache="${SPATTN_DEPS_DIR:-$HOME/.cache/spattn}"
src="$cache/llama.cpp-$LLAMA_COMMIT"
if [ ! -f "$src/.spattn-complete" ]; then
  echo "deps.sh: fetching llama.cpp $LLAMA_COMMIT from $LLAMA_NPM" >&2
  tmp="$(mktemp -d)"
  trap 'rm -rf "$tmp"' EXIT
  (cd "$tmp" && npm pack --silent "$LLAMA_NPM" >/dev/null)
  tar -xzf "$tmp"/node-llama-cpp-*.tgz -C "$tmp" package/llama/gitRelease.bundle
  rm -rf "$src"
  mkdir -p "$cache"
  git clone -q "$tmp/package/llama/gitRelease.bundle" "$src" 2>/dev/null
  got="$(git -C "$src" rev-parse HEAD)"
  if [ "$got" != "$LLAMA_COMMIT" ]; then
    echo "deps.sh: $LLAMA_NPM bundles llama.cpp $got, expected $LLAMA_COMMIT" >&2
    exit 1
  fi
  touch "$src/.spattn-complete"
fi
root="$(cd "$(dirname "$0")/.." && pwd)"
mkdir -p "$root/third_party"
ln -sfn "$src" "$root/third_party/llama.cpp"

# llama.cpp's own tools from the same source, for the tests that compare spattn with llama.cpp
# (ctest label "llama": greedy text, perplexity, tokenizer ids; docs/testing.md) and for the
# benchmarks against it: only these targets, CPU only, no network code, through ccache, into
# $src/build/bin (third_party/llama.cpp/build/bin, where the tests look unless SPATTN_LLAMA_BIN
# says otherwise). Once built they stay: the folder is outside the repository, so a fresh clone
# finds them. SPATTN_SKIP_LLAMA_TOOLS=1 leaves them out (a machine that only builds spattn).
LLAMA_TOOLS=(llama-completion llama-perplexity llama-tokenize llama-quantize llama-bench
  llama-batched-bench)
if [ "${SPATTN_SKIP_LLAMA_TOOLS:-0}" != 1 ]; then
  need_tools=0
  for t in "${LLAMA_TOOLS[@]}"; do [ -x "$src/build/bin/$t" ] || need_tools=1; done
  if [ $need_tools = 1 ]; then
    echo "deps.sh: building llama.cpp's ${LLAMA_TOOLS[*]} into $src/build/bin" >&2
    cmake -S "$src" -B "$src/build" -DCMAKE_BUILD_TYPE=Release -DGGML_CCACHE=ON \
      -DGGML_CUDA=OFF -DGGML_METAL=OFF -DGGML_VULKAN=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
      -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_SERVER=OFF -DLLAMA_BUILD_EXAMPLES=OFF >/dev/null
    cmake --build "$src/build" -j "$(nproc)" --target "${LLAMA_TOOLS[@]}" >/dev/null
  fi
fi

# The official OpenAI client for Node (npm's `openai`, pinned; it has no dependencies), for
# the test that drives `spattn serve` with it (tests/serve/test_serve_openai.cpp; a missing
# asset there, tests/assets.hpp). Into the same cache, outside the repository.
OPENAI_NPM_VERSION=6.30.1
oa="$cache/openai-node-$OPENAI_NPM_VERSION"
if [ ! -f "$oa/.spattn-complete" ]; then
  echo "deps.sh: fetching npm openai@$OPENAI_NPM_VERSION" >&2
  rm -rf "$oa"
  mkdir -p "$oa"
  npm install --silent --prefix "$oa" --no-audit --no-fund --legacy-peer-deps \
    "openai@$OPENAI_NPM_VERSION" >/dev/null
  touch "$oa/.spattn-complete"
fi

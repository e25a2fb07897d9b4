#!/usr/bin/env bash
# spattn against ik_llama.cpp (ikawrakow's fork of llama.cpp, the fastest CPU engine for
# quantized prompts we know of) and, with LLAMA_BIN set, mainline llama.cpp: the comparison
# table of prefill and decode on the same files, threads and machine, each pair timed
# round-robin by scripts/vs_llama.py (medians of --reps).
#
#   IK_LLAMA_BIN=DIR [LLAMA_BIN=DIR] scripts/vs_ik_llama.sh MODEL.gguf [MODEL.gguf ...]
#
# IK_LLAMA_BIN: the folder with ik_llama.cpp's llama-bench, built by the developer from its
# public repository (CPU only, GGML_NATIVE=ON; say its commit beside the figures). This script
# fetches and builds nothing and is never part of CI. TESTS (default "pp512 tg64"), REPS
# (default 3) and THREADS (default 2) as vs_llama.py's --test, --reps and -t; SPATTN the binary
# (default build/bin/spattn); TEXT the prompt text (vs_llama.py's --text); extra arguments for
# spattn run go in SPATTN_ARGS.
set -euo pipefail

if [[ -z "${IK_LLAMA_BIN:-}" ]]; then
  echo "vs_ik_llama: set IK_LLAMA_BIN to the folder with ik_llama.cpp's llama-bench" >&2
  exit 2
fi
if [[ ! -x "$IK_LLAMA_BIN/llama-bench" ]]; then
  echo "vs_ik_llama: no llama-bench in IK_LLAMA_BIN ($IK_LLAMA_BIN)" >&2
  exit 2
fi
if [[ $# -eq 0 ]]; then
  echo "usage: IK_LLAMA_BIN=DIR [LLAMA_BIN=DIR] $0 MODEL.gguf [MODEL.gguf ...]" >&2
  exit 2
fi

here=$(cd "$(dirname "$0")" && pwd)
tests=(${TESTS:-pp512 tg64})
args=(--reps "${REPS:-3}" -t "${THREADS:-2}")
[[ -n "${SPATTN:-}" ]] && args+=(--spattn "$SPATTN")
[[ -n "${TEXT:-}" ]] && args+=(--text "$TEXT")
for a in ${SPATTN_ARGS:-}; do args+=("--spattn-arg=$a"); done
for t in "${tests[@]}"; do args+=(--test "$t"); done

for model in "$@"; do
  echo "== $(basename "$model")"
  echo "-- ik_llama.cpp ($IK_LLAMA_BIN) against spattn"
  python3 "$here/vs_llama.py" --llama-bin "$IK_LLAMA_BIN" -m "$model" "${args[@]}"
  if [[ -n "${LLAMA_BIN:-}" ]]; then
    echo "-- llama.cpp ($LLAMA_BIN) against spattn"
    python3 "$here/vs_llama.py" --llama-bin "$LLAMA_BIN" -m "$model" "${args[@]}"
  fi
done

#!/usr/bin/env bash
# Issue 27's perplexity check: code-small-32k.gguf on code-heldout.txt with --attn momo at its
# default selection and at the paper's (topk=hybrid,trim=mean, the default before issue 27),
# against dense on the same windows, whole-window prefill (-b = -ub = -c), at 16K and 32K.
# Usage: scripts/momo_real_ppl.sh [CHUNKS_16K] [CHUNKS_32K]   (default 2 and 1; BIN, MODELS)
set -euo pipefail
BIN=${BIN:-build/bin/spattn}
MODELS=${MODELS:-/work/shared/models}
for spec_c in "16384 ${1:-2}" "32768 ${2:-1}"; do
  set -- $spec_c
  for attn in momo momo:topk=hybrid,trim=mean; do
    echo "== -c $1 --attn $attn --chunks $2"
    OMP_WAIT_POLICY=passive nice "$BIN" perplexity -m "$MODELS/code-small-32k.gguf" \
      -f "$MODELS/code-heldout.txt" -c "$1" -b "$1" -ub "$1" --attn "$attn" --chunks "$2"
  done
done

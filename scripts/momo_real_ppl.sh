#!/usr/bin/env bash
# Issue 27's perplexity check: code-small-32k.gguf on code-heldout.txt with --attn momo at its
# defaults, at blend=mean_pool,pool=block (the default before blend=moments), at gamma=16 (the
# paper's fixed stride, the default before gamma=auto) and at the paper's selection too
# (gamma=16,topk=hybrid,trim=mean, the default before issue 27), against
# dense on the same windows, whole-window prefill (-b = -ub = -c), at 16K and 32K.
# Usage: scripts/momo_real_ppl.sh [CHUNKS_16K] [CHUNKS_32K]   (default 2 and 1; BIN, MODELS;
#   SIZES="16384" for one length, ATTNS="momo" for a subset of the specs)
set -euo pipefail
BIN=${BIN:-build/bin/spattn}
MODELS=${MODELS:-../shared/models}
ATTNS=${ATTNS:-"momo momo:blend=mean_pool,pool=block momo:gamma=16 momo:gamma=16,topk=hybrid,trim=mean"}
SIZES=${SIZES:-"16384 32768"}
declare -A CHUNKS=([16384]=${1:-2} [32768]=${2:-1})
for c in $SIZES; do
  set -- "$c" "${CHUNKS[$c]:-1}"
  for attn in $ATTNS; do
    echo "== -c $1 --attn $attn --chunks $2"
    OMP_WAIT_POLICY=passive nice "$BIN" perplexity -m "$MODELS/code-small-32k.gguf" \
      -f "$MODELS/code-heldout.txt" -c "$1" -b "$1" -ub "$1" --attn "$attn" --chunks "$2"
  done
done

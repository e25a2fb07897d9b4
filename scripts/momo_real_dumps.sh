#!/usr/bin/env bash
# Post-RoPE Q/K/V of every layer of the two code models on the held-out text (issue 27's data):
#   code-tiny-8k.gguf at 8,192 tokens -> $OUT/tiny8k/layerN/{q,k,v}.npy  (8 layers, ~21 MB each)
#   code-small-32k.gguf at 32,768     -> $OUT/small32k/layerN/{q,k,v}.npy (6 layers, ~128 MB each)
# One dense prefill per model (`spattn run --dump-qkv all`); dumps stay outside the repository.
# Usage: scripts/momo_real_dumps.sh [OUT [WHICH]]   (default build/dumps; WHICH: tiny8k, small32k
# or both, the default; BIN, MODELS override)
set -euo pipefail
OUT=${1:-build/dumps}
WHICH=${2:-both}
case $WHICH in tiny8k | small32k | both) ;; *) echo "WHICH must be tiny8k, small32k or both" >&2; exit 2 ;; esac
BIN=${BIN:-build/bin/spattn}
MODELS=${MODELS:-../shared/models}
TEXT=$MODELS/code-heldout.txt

dump() {  # model tokens name
  local dir=$OUT/$3
  if [ -f "$dir/done" ]; then echo "$dir: already there"; return; fi
  mkdir -p "$dir"
  echo "dumping $1 at $2 tokens into $dir"
  OMP_WAIT_POLICY=passive nice "$BIN" run -m "$MODELS/$1" -f "$TEXT" --max-prompt "$2" -c "$2" \
    -n 0 --dump-qkv all "$dir" > /dev/null
  touch "$dir/done"
}

[ "$WHICH" = small32k ] || dump code-tiny-8k.gguf 8192 tiny8k
[ "$WHICH" = tiny8k ] || dump code-small-32k.gguf 32768 small32k

#!/bin/bash
# Decode speed of spattn binaries (and llama-bench, with LLAMA_BIN set) on one GGUF file,
# alternated round by round so that a host whose speed drifts treats every side alike; prints
# each side's every run, its median and its best.
#
#   [LLAMA_BIN=DIR] [T=2] [TEXT=code-heldout.txt] scripts/ab_decode.sh MODEL NGEN DEPTH ROUNDS SPATTN...
#
# Each spattn run: `run -f TEXT --max-prompt max(DEPTH, 1) -n NGEN+1 --warmup --ignore-eos
# --json` (its decode_tok_s: NGEN steps after the first token); llama-bench: `-fa 1 -r 1 -p 0
# -n NGEN [-d DEPTH]`.
set -e
[ $# -ge 5 ] || { sed -n '2,11p' "$0"; exit 2; }
M=$1 N=$2 D=$3 R=$4
shift 4
T=${T:-2}
TEXT=${TEXT:-$(dirname "$0")/../../shared/models/code-heldout.txt}
P=$((D > 0 ? D : 1))
declare -A runs
for _ in $(seq "$R"); do
  for b in "$@"; do
    v=$("$b" run -m "$M" -f "$TEXT" --max-prompt $P -n $((N + 1)) -c $((P + N + 17)) -t "$T" \
          --warmup --ignore-eos --json 2>/dev/null |
        python3 -c "import json,sys; print(round(json.load(sys.stdin)['decode_tok_s'],1))")
    runs[$b]="${runs[$b]} $v"
  done
  if [ -n "$LLAMA_BIN" ]; then
    d=()
    [ "$D" -gt 0 ] && d=(-d "$D")
    v=$("$LLAMA_BIN/llama-bench" -m "$M" -t "$T" -fa 1 -r 1 -p 0 -n "$N" "${d[@]}" -o json |
        python3 -c "import json,sys; print(round(json.load(sys.stdin)[0]['avg_ts'],1))")
    runs[llama-bench]="${runs[llama-bench]} $v"
  fi
done
for k in "$@" ${LLAMA_BIN:+llama-bench}; do
  echo "$(basename "$M") tg$N@$D $k: median $(tr ' ' '\n' <<<"${runs[$k]}" | sed '/^$/d' | sort -n |
    awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}') best $(tr ' ' '\n' <<<"${runs[$k]}" |
    sort -n | tail -1)  runs:${runs[$k]}"
done

#!/usr/bin/env bash
# RULER's synthetic tasks (`spattn eval`, issue 24) on the project's trained models: dense and
# every prefill method at its registry default (--attn all), exact match and the likelihood
# gap per task, one JSON file per (model, length, task) under $OUT, then the tables
# (scripts/ruler_table.py) in $OUT/tables.md. Long: on 2 cores each (task, length) takes
# minutes per model, so files already written are kept (rerun to resume) and the tasks go in
# the outer loop, so a cut-short run still has every model and length for the first tasks.
# Not part of ctest. BENCHMARKS.md, "Task-level evaluation: RULER (issue 24)", has a run.
#
#   scripts/ruler_eval.sh                      # the defaults below
#   RUNS="code-small-32k:16384" TASKS="niah_single_1" scripts/ruler_eval.sh
set -euo pipefail
cd "$(dirname "$0")/.."
SPATTN=${SPATTN:-build/bin/spattn}
MODELS=${MODELS:-../shared/models}
OUT=${OUT:-build/ruler}
SAMPLES=${SAMPLES:-1}
SEED=${SEED:-42}
MAX_GEN=${MAX_GEN:-32}     # generated tokens per answer (RULER: 128 for niah, 30 vt, 120 cwe, 50 fwe)
ATTN=${ATTN:-all}
THREADS=${THREADS:-2}
TASKS=${TASKS:-"niah_single_1 niah_single_2 niah_multivalue vt fwe cwe niah_multikey_1 niah_multiquery niah_single_3 niah_multikey_2 niah_multikey_3"}
RUNS=${RUNS:-"code-tiny-8k:4096 code-small-32k:4096 code-tiny-8k:8192 code-small-32k:8192"}
# The machine may be shared: OpenMP's waiting threads sleep at once instead of spinning.
export OMP_WAIT_POLICY=${OMP_WAIT_POLICY:-passive}
mkdir -p "$OUT"
for task in $TASKS; do
  for run in $RUNS; do
    model=${run%%:*} length=${run##*:}
    f="$OUT/$model-$length-$task.json"
    [ -s "$f" ] && continue
    echo "$(date -u +%H:%M:%S) $model $length $task" >&2
    start=$(date +%s)
    "$SPATTN" eval -m "$MODELS/$model.gguf" --task "$task" --lengths "$length" \
      --samples "$SAMPLES" --seed "$SEED" --max-gen "$MAX_GEN" --attn "$ATTN" -t "$THREADS" \
      --haystack "$MODELS/code-heldout.txt" --json > "$f.tmp"
    mv "$f.tmp" "$f"
    echo "  $(( $(date +%s) - start )) s" >&2
  done
done
python3 scripts/ruler_table.py "$OUT"/*.json --long > "$OUT/tables.md"
echo "tables: $OUT/tables.md" >&2

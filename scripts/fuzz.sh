#!/usr/bin/env bash
# Runs every libFuzzer target of a SPATTN_FUZZ build for RUNS executions each, starting from
# seed corpora the build's spattn_fuzz_seeds writes. Stops at the first crash, leak or
# sanitizer report (libFuzzer exits non-zero and leaves crash-* beside the log), and prints
# executions and seconds per target. Usage: scripts/fuzz.sh BUILD_DIR RUNS [TARGET...]
set -euo pipefail
build=${1:?build dir}
runs=${2:?runs}
shift 2
targets=("$@")
[ ${#targets[@]} -eq 0 ] && targets=(gguf npy safetensors calibration tokenizer quant serve serve_http h2o_trace)
work="$build/fuzz-work"
mkdir -p "$work"
rm -rf "$work/seeds"
"$build/bin/spattn_fuzz_seeds" "$work/seeds"
# Input size caps: GGUF seeds (small models with vocabularies) are a few KB; a quant input is a
# type byte and up to a few rows of blocks (a 256-value K-quant block is at most 292 bytes).
declare -A max_len=([gguf]=16384 [npy]=4096 [safetensors]=4096 [calibration]=4096 [tokenizer]=2048
                   [quant]=4096 [serve]=4096 [serve_http]=8192 [h2o_trace]=4096)
status=0
for t in "${targets[@]}"; do
  corpus="$work/corpus-$t"
  mkdir -p "$corpus"
  log="$work/$t.log"
  start=$(date +%s.%N)
  if ASAN_OPTIONS=detect_leaks=1:allocator_may_return_null=1 UBSAN_OPTIONS=print_stacktrace=1 \
     "$build/bin/fuzz_$t" -runs="$runs" -max_len="${max_len[$t]}" -rss_limit_mb=2048 -timeout=20 \
       -print_final_stats=1 -artifact_prefix="$work/$t-" "$corpus" "$work/seeds/$t" >"$log" 2>&1; then
    end=$(date +%s.%N)
    execs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' || echo "?")
    printf 'fuzz_%-12s ok: %s executions in %.0f s, no crash/leak/sanitizer report\n' \
      "$t" "$execs" "$(awk -v a="$start" -v b="$end" 'BEGIN{print b-a}')"
  else
    echo "fuzz_$t FAILED: see $log" >&2
    grep -E "ERROR|SUMMARY|runtime error|Test unit written" "$log" | head -20 >&2 || true
    status=1
  fi
done
exit $status

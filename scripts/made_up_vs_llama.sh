# Sourced by the scripts that check a made-up model against llama.cpp (gemma3_vs_llama.sh,
# moe_vs_llama.sh, yarn_vs_llama.sh): `need_llama_tools NAME BIN` exits 77 (skipped) when
# llama.cpp's tools are not in BIN; `check MODEL [arch_vs_llama.py options]` runs one
# arch_vs_llama.py check with the script's bin and spattn and folds its exit status into
# $status (0 passed, 1 a check failed, 77 a comparison not made); end with `exit $status`.
status=0
need_llama_tools() {
  for t in llama-completion llama-perplexity llama-quantize; do
    if [ ! -x "$2/$t" ]; then echo "$1: $2/$t absent: skipped"; exit 77; fi
  done
}
check() {
  rc=0
  python3 "$(dirname "$0")/arch_vs_llama.py" --llama-bin "$bin" --spattn "$spattn" -m "$@" || rc=$?
  if [ $rc -eq 77 ] && [ $status -eq 0 ]; then status=77; elif [ $rc -ne 0 ] && [ $rc -ne 77 ]; then status=1; fi
}

# Sourced, first thing, by the scripts that check a made-up model against llama.cpp
# (gemma3_vs_llama.sh, moe_vs_llama.sh, yarn_vs_llama.sh), whose arguments are LLAMA_BIN SPATTN
# [arch_vs_llama.py options]: takes the first two into $bin and $spattn (the options stay in
# "$@"), exits 77 (skipped) when llama.cpp's tools are not in $bin, and makes a folder $dir
# removed at exit. `check MODEL [arch_vs_llama.py options]` then runs one arch_vs_llama.py check
# and folds its exit status into $status (0 passed, 1 a check failed, 77 a comparison not
# made); the script ends with `exit $status`.
bin=$1 spattn=$2
shift 2
for t in llama-completion llama-perplexity llama-quantize; do
  if [ ! -x "$bin/$t" ]; then echo "$(basename "$0" .sh): $bin/$t absent: skipped"; exit 77; fi
done
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
status=0
check() {
  rc=0
  python3 "$(dirname "$0")/arch_vs_llama.py" --llama-bin "$bin" --spattn "$spattn" -m "$@" || rc=$?
  if [ $rc -eq 77 ] && [ $status -eq 0 ]; then status=77; elif [ $rc -ne 0 ] && [ $rc -ne 77 ]; then status=1; fi
}

# Sourced, first thing, by the scripts that check a made-up model against llama.cpp
# (gemma3_vs_llama.sh, moe_vs_llama.sh, gpt_oss_vs_llama.sh, yarn_vs_llama.sh,
# seed_oss_vs_llama.sh), whose arguments are LLAMA_BIN SPATTN
# [arch_vs_llama.py options]: takes the first two into $bin and $spattn (the options stay in
# "$@"), exits 77 (skipped) when llama.cpp's tools are not in $bin, and makes a folder $dir
# removed at exit. `check MODEL [arch_vs_llama.py options]` then runs one arch_vs_llama.py check
# and folds its exit status into $status (0 passed, 1 a check failed, 77 a comparison not
# made); the script ends with `exit $status`. `check_moe ALL ROUTED QUANT [options]` runs the
# mixture-of-experts pair: greedy text (64 tokens) and perplexity on ALL (every expert used),
# perplexity only on ROUTED (greedy text not judged: moe_vs_llama.sh says why), each as
# written and through llama-quantize QUANT, perplexity within 0.5% as well as the +/-.
# `check_dsa MODEL [options]` runs a DSA file's pair (deepseek32_vs_llama.sh, glm_dsa_vs_llama.sh;
# the bars are explained in deepseek32_vs_llama.sh's header): as written (f16) and through
# llama-quantize Q8_0 (perplexity only), spattn dense and dsa against one llama.cpp run; with
# SPATTN_VS_LLAMA_LONG set (-c 8192, where the top-k selects) dsa alone is judged.
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
check_moe() {
  all=$1 routed=$2 quant=$3
  shift 3
  for m in "$all" "$routed"; do
    n=64
    if [ "$m" = "$routed" ]; then n=0; fi
    for q in "" "--quantize $quant"; do
      check "$m" -n $n --ppl-rel 0.005 $q "$@"
    done
  done
}
check_dsa() {
  m=$1
  shift
  if [ -n "$SPATTN_VS_LLAMA_LONG" ]; then
    check "$m" --spattn-attn dsa --ppl-rel 0.001 "$@"
    check "$m" --spattn-attn dsa -n 0 --ppl-rel 0.005 --quantize Q8_0 "$@"
  else
    check "$m" --spattn-attn dense --spattn-attn dsa --ppl-rel 0.0001 "$@"
    check "$m" --spattn-attn dense --spattn-attn dsa -n 0 --ppl-rel 0.005 --quantize Q8_0 "$@"
  fi
}

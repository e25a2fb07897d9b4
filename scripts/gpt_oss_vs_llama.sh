#!/bin/sh
# gpt-oss against llama.cpp on made-up models (4 layers, dim 256, 4/2 heads, head dim 64, a
# sliding window of 64 keys on layers 0 and 2, experts of FFN 128, YaRN factor 4 from 512 so
# every -c compared is past the original context, byte-level BPE vocab 2048, untied), f16 and
# MXFP4_MOE (llama-quantize: the experts in MXFP4, as gpt-oss is released), through
# scripts/arch_vs_llama.py:
#  - every expert used a token (4 of 4): greedy text, and perplexity within 0.5%;
#  - 2 of 8 used: perplexity within 0.5% (greedy text not judged: moe_vs_llama.sh says why).
# A model without its sinks, biases or clamped SwiGLU is far outside 0.5%: each moves every
# row's output by its own size.
#
#   scripts/gpt_oss_vs_llama.sh LLAMA_BIN SPATTN [arch_vs_llama.py options: -c 1024 ...]
#
# Exits 77 (skipped) when llama.cpp's tools are not in LLAMA_BIN or a comparison could not be
# made, 1 if a check fails.
set -e
. "$(dirname "$0")/made_up_vs_llama.sh"
for used in 4 2; do
  experts=$used
  if [ $used = 2 ]; then experts=8; fi
  "$spattn" make-model -o "$dir/oss$used.gguf" --arch gpt-oss --layers 4 --dim 256 --heads 4 \
    --kv-heads 2 --head-dim 64 --ffn 256 --experts $experts --experts-used $used \
    --expert-ffn 128 --sliding-window 64 --vocab 2048 --context 8192 --rope-base 150000 \
    --rope-scaling yarn --rope-factor 4 --rope-original-context 512 --type f16 --untied --seed 7
done
check_moe "$dir/oss4.gguf" "$dir/oss2.gguf" MXFP4_MOE "$@"
exit $status

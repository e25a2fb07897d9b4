#!/bin/sh
# The mixture-of-experts runner against llama.cpp on made-up qwen3moe models (4 layers, dim
# 256, 4/2 heads, head dim 64, 8 experts of FFN 128, a byte-level BPE vocabulary of 2048 as
# Qwen3's is byte-level BPE, rope base 1e6, untied), f16 and Q4_K_M (llama-quantize), through
# scripts/arch_vs_llama.py:
#  - every expert used a token (8 of 8): the experts' products, the router's softmax and the
#    weights' normalization with no choice to make, so greedy text is compared as for a dense
#    model, and perplexity within 0.5% of llama-perplexity's;
#  - 2 of 8 used: perplexity within 0.5%. Greedy text is not judged there: on random weights
#    about 8% of the router's choices are near ties (the second and third experts' scores
#    within 0.05), and the two runners' attention rounds differently (llama.cpp's flash
#    attention rounds q to f16), so a choice can flip and the texts part far from any near
#    tie of the final logits.
#
#   scripts/moe_vs_llama.sh LLAMA_BIN SPATTN [arch_vs_llama.py options: -c 1024 --chunks 3 ...]
#
# Exits 77 (skipped) when llama.cpp's tools are not in LLAMA_BIN or a comparison could not be
# made, 1 if a check fails.
set -e
. "$(dirname "$0")/made_up_vs_llama.sh"
for used in 8 2; do
  "$spattn" make-model -o "$dir/moe$used.gguf" --arch qwen3moe --layers 4 --dim 256 --heads 4 \
    --kv-heads 2 --head-dim 64 --ffn 512 --experts 8 --experts-used $used --expert-ffn 128 \
    --vocab 2048 --context 8192 --rope-base 1000000 --type f16 --untied \
    --seed 7
done
check_moe "$dir/moe8.gguf" "$dir/moe2.gguf" Q4_K_M "$@"
exit $status

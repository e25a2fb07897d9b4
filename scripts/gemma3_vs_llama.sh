#!/bin/sh
# Issue 21's gemma3 check against llama.cpp on a made-up Gemma 3 model (6 layers: five
# sliding-window layers of 128 keys and one global, dim 256, 4/2 heads, head dim 64, FFN 512,
# SentencePiece vocab 2048, rope base 1e6 with linear scaling 8 on the global layer; untied: a
# tied head of random weights repeats one token, which would test little), f16 and
# Q4_K_M (llama-quantize): greedy text and perplexity through scripts/arch_vs_llama.py.
#
#   scripts/gemma3_vs_llama.sh LLAMA_BIN SPATTN [arch_vs_llama.py options: -c 1024 --chunks 3 ...]
#
# Exits 77 (skipped) when llama.cpp's tools are not in LLAMA_BIN or a comparison could not be
# made, 1 if a check fails.
set -e
. "$(dirname "$0")/made_up_vs_llama.sh"
"$spattn" make-model -o "$dir/gemma3.gguf" --arch gemma3 --layers 6 --dim 256 --heads 4 \
  --kv-heads 2 --head-dim 64 --ffn 512 --vocab 2048 --tokenizer llama --context 8192 \
  --sliding-window 128 --rope-base 1000000 --rope-scaling linear --rope-factor 8 --type f16 \
  --untied --seed 7
for q in "" "--quantize Q4_K_M"; do
  check "$dir/gemma3.gguf" $q "$@"
done
exit $status

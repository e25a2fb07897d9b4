#!/bin/sh
# YaRN RoPE scaling against llama.cpp on a made-up qwen3 model (2 layers, dim 256, 4/2 heads,
# head dim 64, FFN 512, byte-level BPE vocab 2048, rope base 1e6, `--rope-scaling yarn
# --rope-factor 4 --rope-original-context 512`: Qwen3's 128K setting, factor 4 from 32768,
# scaled down so that every -c compared is past the original context; untied), f16 and Q4_K_M
# (llama-quantize): greedy text, and perplexity within llama-perplexity's +/- and within 0.5%
# of it (the same weights unscaled are about 1% off, inside the +/- of so short a text but not
# inside 0.5%), through scripts/arch_vs_llama.py.
#
#   scripts/yarn_vs_llama.sh LLAMA_BIN SPATTN [arch_vs_llama.py options: -c 1024 --chunks 3 ...]
#
# Exits 77 (skipped) when llama.cpp's tools are not in LLAMA_BIN or a comparison could not be
# made, 1 if a check fails.
set -e
. "$(dirname "$0")/made_up_vs_llama.sh"
"$spattn" make-model -o "$dir/yarn.gguf" --arch qwen3 --layers 2 --dim 256 --heads 4 \
  --kv-heads 2 --head-dim 64 --ffn 512 --vocab 2048 --context 8192 --rope-base 1000000 \
  --rope-scaling yarn --rope-factor 4 --rope-original-context 512 --type f16 --untied --seed 7
for q in "" "--quantize Q4_K_M"; do
  check "$dir/yarn.gguf" --ppl-rel 0.005 $q "$@"
done
exit $status

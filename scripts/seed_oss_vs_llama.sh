#!/bin/sh
# seed_oss, an architecture added as one row of the traits table (src/model/arch_table.cpp),
# against llama.cpp on a made-up model (2 layers, dim 256, 4/2 heads, head dim 64, FFN 512,
# byte-level BPE vocab 2048, rope base 1e6, q/k/v biases, the FFN norm stored as
# post_attention_norm; untied), f16 and Q4_K_M (llama-quantize): greedy text, and perplexity
# within llama-perplexity's +/- and within 0.5% of it, through scripts/arch_vs_llama.py.
#
#   scripts/seed_oss_vs_llama.sh LLAMA_BIN SPATTN [arch_vs_llama.py options: -c 1024 --chunks 3 ...]
#
# Exits 77 (skipped) when llama.cpp's tools are not in LLAMA_BIN or a comparison could not be
# made, 1 if a check fails.
set -e
. "$(dirname "$0")/made_up_vs_llama.sh"
"$spattn" make-model -o "$dir/seed_oss.gguf" --arch seed_oss --layers 2 --dim 256 --heads 4 \
  --kv-heads 2 --head-dim 64 --ffn 512 --vocab 2048 --context 8192 --rope-base 1000000 \
  --type f16 --untied --seed 7
for q in "" "--quantize Q4_K_M"; do
  check "$dir/seed_oss.gguf" --ppl-rel 0.005 $q "$@"
done
exit $status

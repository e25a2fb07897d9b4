#!/bin/sh
# deepseek2 (multi-head latent attention, DeepSeekMoE) against llama.cpp on made-up models
# from make-model --preset deepseek-v3, shrunk: 4 layers (the first dense), dim 256, 4 heads of
# k 48 (rope 16) and v 32, kv latent 64, dense FFN 512, experts of FFN 64 with one shared,
# sigmoid gating with the selection bias, weights normalized and scaled by 2.5, the preset's
# YaRN (40 from 4096, mscale_all_dim 1), byte-level BPE vocab 2048, untied; f16 and Q8_0
# (llama-quantize), through scripts/arch_vs_llama.py:
#  - V2-Lite's q (one matrix, no q latent), 8 experts all used a token, f16: greedy text, and
#    perplexity within llama-perplexity's +/- and within 0.01% of it; the same shape in the
#    absorbed layout (make-model --mla-absorbed: attn_k_b / attn_v_b and the _mla key lengths,
#    as llama.cpp's current converter writes V2/V3; both sides run it absorbed over the latent
#    cache, where the file above runs expanded), the same bars;
#  - V3's q latent (96) and routing: 16 experts in 4 groups (2 routed to), 4 a token, f16:
#    perplexity within 0.5%, as moe_vs_llama.sh's routed models. A group that flips moves a
#    token's whole set of experts: spattn's own perplexity of this model moves by 0.07% from
#    an f16 to an f32 KV cache (rounding alone), where the ungrouped model's moves by 0.006%;
#  - both through Q8_0: perplexity within 0.5%, spattn at -ub 15 for the routed one (every
#    product then on ggml's path, as llama.cpp's: spattn's own 8-bit kernel takes products of
#    16 rows or more where the CPU has AVX-512 VNNI, and its rounding of the activations differs
#    from ggml's in the last bits, which the grouped routing turns into a flipped group now and
#    then: -0.44% at -ub 16 against -0.03% at -ub 15, AMD Zen 5, 2026-12-03). Greedy
#    text is judged on f16 only: on the Q8_0 file llama.cpp's own texts with -fa on and -fa off
#    part from each other within 64 tokens.
#
# ArchVsLlamaCppLong.DeepSeek2At8192 runs the same checks at -c 8192 over one window.
#
#   scripts/deepseek2_vs_llama.sh LLAMA_BIN SPATTN [arch_vs_llama.py options: -c 1024 --chunks 3 ...]
#
# Exits 77 (skipped) when llama.cpp's tools are not in LLAMA_BIN or a comparison could not be
# made, 1 if a check fails.
set -e
. "$(dirname "$0")/made_up_vs_llama.sh"
shape="--preset deepseek-v3 --layers 4 --dense-layers 1 --dim 256 --heads 4 --kv-heads 4
  --head-dim 48 --rope-dim 16 --v-head-dim 32 --kv-lora 64 --ffn 512 --expert-ffn 64
  --shared-experts 1 --vocab 2048 --context 8192 --type f16 --untied --seed 7"
"$spattn" make-model -o "$dir/all.gguf" $shape --q-lora 0 --experts 8 --experts-used 8 \
  --expert-groups 0
"$spattn" make-model -o "$dir/routed.gguf" $shape --q-lora 96 --experts 16 --experts-used 4 \
  --expert-groups 4 --groups-used 2
check "$dir/all.gguf" --ppl-rel 0.0001 "$@"
# The absorbed layout (attn_k_b / attn_v_b, as current converters write it): both run it
# absorbed over the latent cache (llama.cpp's is_mla).
"$spattn" make-model -o "$dir/absorbed.gguf" $shape --q-lora 0 --experts 8 --experts-used 8 \
  --expert-groups 0 --mla-absorbed
check "$dir/absorbed.gguf" --ppl-rel 0.0001 "$@"
check "$dir/routed.gguf" -n 0 --ppl-rel 0.005 "$@"
check "$dir/all.gguf" -n 0 --ppl-rel 0.005 --quantize Q8_0 "$@"
check "$dir/routed.gguf" -n 0 --ppl-rel 0.005 --quantize Q8_0 --spattn-ppl-arg=-ub \
  --spattn-ppl-arg=15 "$@"
exit $status

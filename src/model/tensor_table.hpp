// The tensor list: every GGUF tensor a layer of any architecture has, with its shape, where it
// goes, and when an architecture has it (a rule over its traits row, arch.hpp), so the reader,
// the validator and the maker read one list and cannot disagree on a name. llama.cpp's names
// (LLM_TENSOR_NAMES).
#pragma once
#include <cstdint>
#include <span>
#include <vector>

#include "spattn/arch.hpp"
#include "spattn/model.hpp"

namespace spattn::model {

// The model's tensors outside the layers (every architecture's; the rope factors per scaling).
inline constexpr const char* kTokenEmbd = "token_embd.weight";
inline constexpr const char* kOutputNorm = "output_norm.weight";
inline constexpr const char* kOutput = "output.weight";         // absent: the head is tied
inline constexpr const char* kRopeFreqs = "rope_freqs.weight";  // rope_scaling::llama3
inline constexpr const char* kRopeFactorsLong = "rope_factors_long.weight";  // ::longrope
inline constexpr const char* kRopeFactorsShort = "rope_factors_short.weight";

// A dimension of a shape, from the config.
// o: the attention output's width (heads x v head); the latent attention's (deepseek2): the
// latents (q_lora, kv_lora), attn_kv_a_mqa's rows (kv_a: kv latent + rope key), attn_kv_b's
// (kv_b: heads x (k_nope + v)); the absorbed layout's head sizes (nope: k_nope, v_head: v);
// shexp: the shared experts' FFN; DSA's indexer: its heads (idx_h), their size (idx_d), both
// (idx_q).
// A table: rows grouped by hand, not one field a line.
// clang-format off
enum class Dim : uint8_t {
  one, embd, q, kv, head_dim, heads, ff, ff_exp, experts, o, q_lora, kv_lora, kv_a, kv_b, nope,
  v_head, shexp, idx_h, idx_d, idx_q
};
// clang-format on
int64_t dim(Dim d, const Config& c);

// How a tensor is stored: norms and biases as f32 values; matrices in the model's type, or in
// f32 (the router, as llama-quantize leaves it).
enum class Store : uint8_t { values, matrix, f32_matrix };

// What decides a layer's tensors besides the architecture: a MoE FFN (the file has experts
// and, for deepseek2, the layer is past the leading dense ones) and a q latent (q_lora_rank).
struct LayerKind {
  bool moe = false, q_lora = false;
  bool shared_indexer = false;  // no indexer of its own (Config::shares_indexer)
};
LayerKind layer_kind(const Config& c, int64_t layer);

struct TensorSpec {
  const char* name;        // after "blk.N."
  Dim rows, cols, planes;  // ggml's ne[1], ne[0], ne[2] (planes: experts')
  Store store;
  WeightRef LayerRefs::*ref;                 // where the reader puts it
  Model::Weight Model::Layer::*matrix;       // the model's, for a matrix;
  std::vector<float> Model::Layer::*values;  // for values; neither: read into another (the
                                             // absorbed layout's attn_k_b, attn_v_b)
  // Whether a layer of the architecture and kind has it.
  Presence (*need)(const ArchTraits& t, LayerKind k);
  // make-model's values: centre + uniform noise of sd (0: 1 / sqrt(cols), the fan-in).
  float centre, sd;
};

// A matrix stored as row blocks of others (llama.cpp's fused layouts): the reader splits it,
// and where the file has it, the parts' own tensors are not read.
struct FusedSpec {
  const char* name;
  Presence (*need)(const ArchTraits& t, LayerKind k);
  Dim cols;
  struct Part {
    WeightRef LayerRefs::*ref;
    Dim rows;
  };
  std::span<const Part> parts;
};

// The architecture's row with the latent attention's layout the file has (Config::mla_absorbed:
// a deepseek2 file in the absorbed layout reads attn_k_b / attn_v_b, not attn_kv_b): what the
// tensor list's rules read for a file of that config.
ArchTraits layout_traits(const Config& c);

// In the order make-model writes them.
std::span<const TensorSpec> layer_tensors();
std::span<const FusedSpec> fused_tensors();

// Whether a layer of the architecture has `ref` as a part of a fused matrix.
Presence fused_part_need(const ArchTraits& t, LayerKind k, WeightRef LayerRefs::*ref);
// Whether a layer of the architecture has the tensor that fills `ref` (its own or a fused one's
// part).
Presence tensor_need(const ArchTraits& t, LayerKind k, WeightRef LayerRefs::*ref);

}  // namespace spattn::model

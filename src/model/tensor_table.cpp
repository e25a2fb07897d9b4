// The tensor list (tensor_table.hpp): each layer tensor's GGUF name, shape, store and the rule
// over the traits row that says which architectures have it.
#include "model/tensor_table.hpp"

#include <algorithm>

namespace spattn::model {

int64_t dim(Dim d, const Config& c) {
  switch (d) {
    case Dim::one: return 1;
    case Dim::embd: return c.n_embd;
    case Dim::q: return c.n_head * c.head_dim;
    case Dim::kv: return c.n_head_kv * c.head_dim;
    case Dim::head_dim: return c.head_dim;
    case Dim::heads: return c.n_head;
    case Dim::ff: return c.n_ff;
    case Dim::ff_exp: return c.n_ff_exp;
    case Dim::experts: return c.n_expert;
    case Dim::o: return c.n_head * c.v_dim();
    case Dim::q_lora: return c.q_lora_rank;
    case Dim::kv_lora: return c.kv_lora_rank;
    case Dim::kv_a: return c.kv_lora_rank + c.rot();
    case Dim::kv_b: return c.n_head * (c.head_dim - c.rot() + c.v_dim());
    case Dim::nope: return c.head_dim - c.rot();
    case Dim::v_head: return c.v_dim();
    case Dim::shexp: return c.n_ff_exp * c.n_expert_shared;
    case Dim::idx_h: return c.indexer_heads;
    case Dim::idx_d: return c.indexer_dim;
    case Dim::idx_q: return c.indexer_heads * c.indexer_dim;
  }
  return 0;
}

LayerKind layer_kind(const Config& c, int64_t layer) {
  return {c.layer_moe(layer), c.q_lora_rank > 0, c.shares_indexer(layer)};
}

namespace {

using P = Presence;
using L = LayerRefs;
using M = Model::Layer;

constexpr P when(bool b) { return b ? P::required : P::absent; }

// The rules, by what decides them.
constexpr P always(const ArchTraits&, LayerKind) { return P::required; }
constexpr P qkv_bias(const ArchTraits& t, LayerKind) { return t.qkv_bias; }
constexpr P out_bias(const ArchTraits& t, LayerKind) { return t.out_bias; }
constexpr P sinks(const ArchTraits& t, LayerKind) { return when(t.sinks); }
constexpr P qk_norm(const ArchTraits& t, LayerKind) { return when(t.qk_norm); }
constexpr P post_norms(const ArchTraits& t, LayerKind) { return when(t.post_norms); }
constexpr P ffn_norm(const ArchTraits& t, LayerKind) {
  return when(!t.ffn_norm_named_post_attention);
}
constexpr P ffn_norm_post(const ArchTraits& t, LayerKind) {
  return when(t.ffn_norm_named_post_attention);
}
constexpr P experts(const ArchTraits&, LayerKind k) { return when(k.moe); }
constexpr P expert_biases(const ArchTraits& t, LayerKind k) {
  return when(k.moe && t.expert_biases);
}
constexpr P dense_gate_up(const ArchTraits& t, LayerKind k) {
  return when(!k.moe && !t.fused_gate_up);
}
constexpr P dense(const ArchTraits&, LayerKind k) { return when(!k.moe); }
constexpr P fused_qkv(const ArchTraits& t, LayerKind) { return t.fused_qkv; }
// The latent attention's (deepseek2): q from one matrix unless it has a latent; k and v from
// the kv latent, not their own matrices.
constexpr P q_full(const ArchTraits& t, LayerKind k) { return when(!t.mla || !k.q_lora); }
constexpr P kv_own(const ArchTraits& t, LayerKind) { return when(!t.mla); }
constexpr P q_latent(const ArchTraits& t, LayerKind k) { return when(t.mla && k.q_lora); }
constexpr P kv_latent(const ArchTraits& t, LayerKind) { return when(t.mla); }
// attn_kv_b, or (deepseek32) its absorbed parts attn_k_b and attn_v_b.
constexpr P kv_b_whole(const ArchTraits& t, LayerKind) { return when(t.mla && !t.mla_absorbed); }
constexpr P kv_b_absorbed(const ArchTraits& t, LayerKind) { return when(t.mla_absorbed); }
// Every layer's, but GLM-5.2's layers that reuse another's selection (llama.cpp reads them as
// optional in every layer).
constexpr P indexer(const ArchTraits& t, LayerKind k) {
  return when(t.indexer && !k.shared_indexer);
}
constexpr P shared_experts(const ArchTraits& t, LayerKind k) {
  return when(k.moe && t.deepseek_moe);
}
// llama.cpp reads it where given (DeepSeek V3 has it, V2 not).
constexpr P probs_bias(const ArchTraits& t, LayerKind k) {
  return k.moe && t.deepseek_moe ? P::optional : P::absent;
}
constexpr P fused_gate_up(const ArchTraits& t, LayerKind k) {
  return when(!k.moe && t.fused_gate_up);
}

constexpr Store V = Store::values, W = Store::matrix, R = Store::f32_matrix;
constexpr Dim one = Dim::one, D = Dim::embd, Q = Dim::q, KV = Dim::kv, HD = Dim::head_dim,
              H = Dim::heads, F = Dim::ff, FE = Dim::ff_exp, E = Dim::experts, O = Dim::o,
              QL = Dim::q_lora, KVL = Dim::kv_lora, KVA = Dim::kv_a, KVB = Dim::kv_b,
              NP = Dim::nope, VH = Dim::v_head, SH = Dim::shexp, IH = Dim::idx_h, ID = Dim::idx_d,
              IQ = Dim::idx_q;

// name, rows, cols, planes, store, refs' member, model's member (matrix, values), rule,
// make-model's centre and sd.
// A table: rows grouped by hand, not one field a line.
// clang-format off
constexpr TensorSpec kLayer[] = {
    {"attn_norm.weight", one, D, one, V, &L::attn_norm, nullptr, &M::attn_norm, always, 1, 0.1f},
    {"attn_q_a.weight", QL, D, one, W, &L::wq_a, &M::wq_a, nullptr, q_latent, 0, 0},
    {"attn_q_a_norm.weight", one, QL, one, V, &L::q_a_norm, nullptr, &M::q_a_norm, q_latent, 1,
     0.1f},
    {"attn_q_b.weight", Q, QL, one, W, &L::wq_b, &M::wq_b, nullptr, q_latent, 0, 0},
    {"attn_q.weight", Q, D, one, W, &L::wq, &M::wq, nullptr, q_full, 0, 0},
    {"attn_k.weight", KV, D, one, W, &L::wk, &M::wk, nullptr, kv_own, 0, 0},
    {"attn_v.weight", KV, D, one, W, &L::wv, &M::wv, nullptr, kv_own, 0, 0},
    {"attn_kv_a_mqa.weight", KVA, D, one, W, &L::wkv_a, &M::wkv_a, nullptr, kv_latent, 0, 0},
    {"attn_kv_a_norm.weight", one, KVL, one, V, &L::kv_a_norm, nullptr, &M::kv_a_norm,
     kv_latent, 1, 0.1f},
    {"attn_kv_b.weight", KVB, KVL, one, W, &L::wkv_b, &M::wkv_b, nullptr, kv_b_whole, 0, 0},
    // Head h's plane of attn_k_b: [kv latent rows, k_nope cols] (q_nope's product into the
    // latent); of attn_v_b: [v rows, kv latent cols].
    {"attn_k_b.weight", KVL, NP, H, W, &L::wk_b, nullptr, nullptr, kv_b_absorbed, 0, 0},
    {"attn_v_b.weight", VH, KVL, H, W, &L::wv_b, nullptr, nullptr, kv_b_absorbed, 0, 0},
    {"indexer.k_norm.weight", one, ID, one, V, &L::idx_k_norm, nullptr, &M::idx_k_norm, indexer,
     1, 0.1f},
    {"indexer.k_norm.bias", one, ID, one, V, &L::idx_k_norm_b, nullptr, &M::idx_k_norm_b,
     indexer, 0, 0.1f},
    {"indexer.proj.weight", IH, D, one, W, &L::idx_proj, &M::idx_proj, nullptr, indexer, 0, 0},
    {"indexer.attn_k.weight", ID, D, one, W, &L::idx_k, &M::idx_k, nullptr, indexer, 0, 0},
    {"indexer.attn_q_b.weight", IQ, QL, one, W, &L::idx_q_b, &M::idx_q_b, nullptr, indexer, 0,
     0},
    {"attn_q.bias", one, Q, one, V, &L::bq, nullptr, &M::bq, qkv_bias, 0, 0.1f},
    {"attn_k.bias", one, KV, one, V, &L::bk, nullptr, &M::bk, qkv_bias, 0, 0.1f},
    {"attn_v.bias", one, KV, one, V, &L::bv, nullptr, &M::bv, qkv_bias, 0, 0.1f},
    {"attn_output.weight", D, O, one, W, &L::wo, &M::wo, nullptr, always, 0, 0},
    {"attn_output.bias", one, D, one, V, &L::bo, nullptr, &M::bo, out_bias, 0, 0.1f},
    // Sink logits about as large as the scores.
    {"attn_sinks.weight", one, H, one, V, &L::sinks, nullptr, &M::sinks, sinks, 1, 1},
    {"attn_q_norm.weight", one, HD, one, V, &L::q_norm, nullptr, &M::q_norm, qk_norm, 1, 0.1f},
    {"attn_k_norm.weight", one, HD, one, V, &L::k_norm, nullptr, &M::k_norm, qk_norm, 1, 0.1f},
    {"post_attention_norm.weight", one, D, one, V, &L::attn_post_norm, nullptr,
     &M::attn_post_norm, post_norms, 1, 0.1f},
    {"ffn_norm.weight", one, D, one, V, &L::ffn_norm, nullptr, &M::ffn_norm, ffn_norm, 1, 0.1f},
    // gpt-oss's FFN norm (llama.cpp's ATTN_POST_NORM read as the FFN's input norm).
    {"post_attention_norm.weight", one, D, one, V, &L::ffn_norm, nullptr, &M::ffn_norm,
     ffn_norm_post, 1, 0.1f},
    {"ffn_gate_inp.weight", E, D, one, R, &L::router, &M::router, nullptr, experts, 0, 0},
    // A selection bias about as large as the sigmoid's spread, so that it changes choices.
    {"exp_probs_b.bias", one, E, one, V, &L::exp_probs_b, nullptr, &M::exp_probs_b, probs_bias,
     0, 0.1f},
    {"ffn_gate_exps.weight", FE, D, E, W, &L::gate_exps, &M::gate_exps, nullptr, experts, 0, 0},
    {"ffn_up_exps.weight", FE, D, E, W, &L::up_exps, &M::up_exps, nullptr, experts, 0, 0},
    {"ffn_down_exps.weight", D, FE, E, W, &L::down_exps, &M::down_exps, nullptr, experts, 0, 0},
    // One row of biases an expert.
    {"ffn_gate_inp.bias", one, E, one, V, &L::router_b, nullptr, &M::router_b, expert_biases, 0,
     0.1f},
    {"ffn_gate_exps.bias", E, FE, one, V, &L::gate_exps_b, nullptr, &M::gate_exps_b,
     expert_biases, 0, 0.1f},
    {"ffn_up_exps.bias", E, FE, one, V, &L::up_exps_b, nullptr, &M::up_exps_b, expert_biases, 0,
     0.1f},
    {"ffn_down_exps.bias", E, D, one, V, &L::down_exps_b, nullptr, &M::down_exps_b,
     expert_biases, 0, 0.1f},
    {"ffn_gate.weight", F, D, one, W, &L::gate, &M::gate, nullptr, dense_gate_up, 0, 0},
    {"ffn_up.weight", F, D, one, W, &L::up, &M::up, nullptr, dense_gate_up, 0, 0},
    {"ffn_down.weight", D, F, one, W, &L::down, &M::down, nullptr, dense, 0, 0},
    {"ffn_gate_shexp.weight", SH, D, one, W, &L::gate_shexp, &M::gate_shexp, nullptr,
     shared_experts, 0, 0},
    {"ffn_up_shexp.weight", SH, D, one, W, &L::up_shexp, &M::up_shexp, nullptr, shared_experts,
     0, 0},
    {"ffn_down_shexp.weight", D, SH, one, W, &L::down_shexp, &M::down_shexp, nullptr,
     shared_experts, 0, 0},
    {"post_ffw_norm.weight", one, D, one, V, &L::ffn_post_norm, nullptr, &M::ffn_post_norm,
     post_norms, 1, 0.1f},
};
// clang-format on

// Phi-3's (llama.cpp's build_qkv views and ggml_swiglu's halves: gate first).
constexpr FusedSpec::Part kQkv[] = {{&L::wq, Q}, {&L::wk, KV}, {&L::wv, KV}};
constexpr FusedSpec::Part kGateUp[] = {{&L::gate, F}, {&L::up, F}};
constexpr FusedSpec kFused[] = {
    {"attn_qkv.weight", fused_qkv, D, kQkv},
    {"ffn_up.weight", fused_gate_up, D, kGateUp},
};

}  // namespace

ArchTraits layout_traits(const Config& c) {
  ArchTraits t = arch_traits(c.arch);
  t.mla_absorbed = t.mla_absorbed || c.mla_absorbed;
  return t;
}

std::span<const TensorSpec> layer_tensors() { return kLayer; }
std::span<const FusedSpec> fused_tensors() { return kFused; }

Presence fused_part_need(const ArchTraits& t, LayerKind k, WeightRef LayerRefs::*ref) {
  Presence p = P::absent;
  for (const FusedSpec& f : kFused)
    for (const FusedSpec::Part& part : f.parts)
      if (part.ref == ref) p = std::max(p, f.need(t, k));
  return p;
}

Presence tensor_need(const ArchTraits& t, LayerKind k, WeightRef LayerRefs::*ref) {
  Presence p = fused_part_need(t, k, ref);
  for (const TensorSpec& s : kLayer)
    if (s.ref == ref) p = std::max(p, s.need(t, k));
  return p;
}

}  // namespace spattn::model

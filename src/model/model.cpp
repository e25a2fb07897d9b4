// Model: shapes checked against the config, every weight converted to f32 once.
#include <string>

#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/model.hpp"

namespace spattn::model {

const char* arch_name(Arch a) { return a == Arch::llama ? "llama" : "qwen2"; }

void Config::validate() const {
  auto pos = [](int64_t v, const char* name) {
    SPATTN_CHECK(v > 0, "model: ", name, " must be > 0, got ", v);
  };
  pos(n_layer, "block_count");
  pos(n_embd, "embedding_length");
  pos(n_head, "attention.head_count");
  pos(n_head_kv, "attention.head_count_kv");
  pos(head_dim, "head dim");
  pos(n_ff, "feed_forward_length");
  pos(n_vocab, "vocabulary size");
  SPATTN_CHECK(n_head % n_head_kv == 0, "model: head_count (", n_head,
               ") must be a multiple of head_count_kv (", n_head_kv, ")");
  SPATTN_CHECK(head_dim % 8 == 0 && head_dim <= 256,
               "model: head dim must be a multiple of 8 up to 256 (the kernels' layout), got ",
               head_dim);
  SPATTN_CHECK(rms_eps > 0 && rms_eps < 1, "model: layer_norm_rms_epsilon must be in (0, 1), got ",
               rms_eps);
  SPATTN_CHECK(rope_base > 1, "model: rope.freq_base must be > 1, got ", rope_base);
}

namespace {

Matrix convert(const WeightRef& w, const char* name, int64_t rows, int64_t cols,
               const Dequantize& dequant) {
  SPATTN_CHECK(w.data != nullptr, "model: tensor ", name, " is missing");
  SPATTN_CHECK(w.rows == rows && w.cols == cols, "model: tensor ", name, " has shape [", w.cols,
               ", ", w.rows, "], expected [", cols, ", ", rows, "] (ggml order)");
  Matrix m;
  m.rows = rows;
  m.cols = cols;
  m.data.resize(size_t(rows * cols));
  const int64_t n = rows * cols;
  switch (w.type) {
    case WeightType::f32: {
      const float* s = static_cast<const float*>(w.data);
      std::copy(s, s + n, m.data.begin());
      break;
    }
    case WeightType::f16:
    case WeightType::bf16: {
      const DType t = w.type == WeightType::f16 ? DType::f16 : DType::bf16;
      const auto* s = static_cast<const uint16_t*>(w.data);
      for (int64_t i = 0; i < n; ++i) m.data[size_t(i)] = load_as_f32(s + i, t);
      break;
    }
    case WeightType::q8_0:
      SPATTN_CHECK(dequant != nullptr, "model: tensor ", name, " is q8_0 but no dequantizer given");
      SPATTN_CHECK(cols % 32 == 0, "model: q8_0 tensor ", name, " needs rows of 32k values");
      dequant(w.type, w.data, m.data.data(), n);
      break;
  }
  return m;
}

}  // namespace

Model::Model(const ModelRefs& refs, const Dequantize& dequant) : cfg_(refs.cfg) {
  cfg_.validate();
  const int64_t D = cfg_.n_embd, hd = cfg_.head_dim, Hq = cfg_.n_head, Hkv = cfg_.n_head_kv;
  SPATTN_CHECK(int64_t(refs.layers.size()) == cfg_.n_layer, "model: ", refs.layers.size(),
               " layers given for block_count ", cfg_.n_layer);
  tok_embd_ = convert(refs.tok_embd, "token_embd.weight", cfg_.n_vocab, D, dequant);
  output_norm_ = convert(refs.output_norm, "output_norm.weight", 1, D, dequant);
  tied_ = refs.output.data == nullptr;
  if (!tied_) output_ = convert(refs.output, "output.weight", cfg_.n_vocab, D, dequant);
  const bool bias = cfg_.arch == Arch::qwen2;
  for (int64_t l = 0; l < cfg_.n_layer; ++l) {
    const LayerRefs& r = refs.layers[size_t(l)];
    auto name = [&](const char* t) {
      static thread_local std::string s;
      s = "blk." + std::to_string(l) + "." + t;
      return s.c_str();
    };
    Layer L;
    L.attn_norm = convert(r.attn_norm, name("attn_norm.weight"), 1, D, dequant);
    L.wq = convert(r.wq, name("attn_q.weight"), Hq * hd, D, dequant);
    L.wk = convert(r.wk, name("attn_k.weight"), Hkv * hd, D, dequant);
    L.wv = convert(r.wv, name("attn_v.weight"), Hkv * hd, D, dequant);
    L.wo = convert(r.wo, name("attn_output.weight"), D, Hq * hd, dequant);
    if (bias) {
      L.bq = convert(r.bq, name("attn_q.bias"), 1, Hq * hd, dequant);
      L.bk = convert(r.bk, name("attn_k.bias"), 1, Hkv * hd, dequant);
      L.bv = convert(r.bv, name("attn_v.bias"), 1, Hkv * hd, dequant);
    }
    L.ffn_norm = convert(r.ffn_norm, name("ffn_norm.weight"), 1, D, dequant);
    L.gate = convert(r.gate, name("ffn_gate.weight"), cfg_.n_ff, D, dequant);
    L.up = convert(r.up, name("ffn_up.weight"), cfg_.n_ff, D, dequant);
    L.down = convert(r.down, name("ffn_down.weight"), D, cfg_.n_ff, dequant);
    layers_.push_back(std::move(L));
  }
}

}  // namespace spattn::model

// Made-up llama-family models: a GGUF file of any shape with seeded random weights and a
// small made-up vocabulary, so tests need no download and benchmarks can run at realistic
// shapes (for example Llama-3.2-1B's). Tensor names, shapes and metadata keys are those
// llama.cpp writes for the `llama` and `qwen2` architectures.
#pragma once
#include <cstdint>
#include <string>

#include "spattn/gguf.hpp"

namespace spattn {

struct ModelShape {
  std::string arch = "llama";  // "llama" or "qwen2" (q/k/v biases)
  int64_t layers = 2;
  int64_t dim = 64;            // embedding length
  int64_t heads = 4;
  int64_t kv_heads = 2;
  int64_t head_dim = 0;        // 0: dim / heads
  int64_t ffn = 128;           // SwiGLU hidden size
  int64_t vocab = 512;
  int64_t context = 2048;
  gguf::GgmlType type = gguf::GgmlType::f32;  // matrices and embedding; norms/biases are f32
  bool tied = false;           // no output.weight: the head reuses token_embd.weight
  float rope_base = 10000.0f;
  float rms_eps = 1e-5f;
  std::string tokenizer;       // "gpt2" or "llama"; empty: gpt2 when vocab >= 257, else llama
  uint64_t seed = 0;

  int64_t head_dim_or_default() const { return head_dim > 0 ? head_dim : dim / heads; }
};

// Llama-3.2-1B's shape: 16 layers, dim 2048, 32 heads, 8 kv heads, head dim 64, FFN 8192,
// vocab 128256, rope base 500000, tied head, f16.
ModelShape llama_3_2_1b_shape();
// Llama-3.1-8B's shape: 32 layers, dim 4096, 32 heads, 8 kv heads, head dim 128, FFN 14336,
// vocab 128256, rope base 500000, untied head, f16 (its RoPE frequency scaling is not made).
ModelShape llama_3_1_8b_shape();
// A preset by name ("llama-3.2-1b", "llama-3.1-8b"); Error for any other.
ModelShape preset_shape(const std::string& name);

// Throws Error naming the field when the shape is not one a llama model can have.
void check_shape(const ModelShape& s);

// Number of weights (all tensors) in a model of this shape.
int64_t parameter_count(const ModelShape& s);

// Writes the model. Weights are uniform with standard deviation 1/sqrt(fan_in) (so
// activations keep their scale through the layers), norms 1 + small noise, biases small;
// each tensor row is drawn from its own seeded stream, so the file is the same on every
// machine and for any write order.
void make_model(const std::string& path, const ModelShape& s);

}  // namespace spattn

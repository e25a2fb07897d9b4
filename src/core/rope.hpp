// Rotary position embedding (RoPE). Pair p turns by angle pos * theta^(-2p/d); pair 0 fastest.
// Which dimensions form pair p is the style: rotate-half (GPT-NeoX, HF Llama, Qwen2; llama.cpp's
// "neox"): p and p + d/2; adjacent (Meta's Llama, llama2.c, llama.cpp's "normal"): 2p and 2p+1.
// Because rotations compose, (R(i) x) . (R(j) y) = x . R(j - i) y: scores depend on the
// relative position only. The model runner turns q and k by it; the workload generator builds
// its patterns on it.
#pragma once
#include <cstdint>
#include <vector>

namespace spattn {

enum class RopeStyle { neox, adjacent };

class RopeTable {
 public:
  // cos/sin for positions [0, max_pos) and dim/2 pairs, angles computed in double.
  // freq_factors (empty, or one per pair): pair p's frequency is divided by factor p, as
  // llama.cpp's ggml_rope_ext does with a model's rope_freqs (Llama 3.1's frequency scaling).
  // mscale multiplies every cos and sin (ggml_rope_ext's attn_factor: Phi-3's LongRoPE).
  RopeTable(int64_t max_pos, int64_t dim, double theta, RopeStyle style = RopeStyle::neox,
            std::vector<float> freq_factors = {}, double mscale = 1.0);
  int64_t dim() const { return dim_; }
  int64_t pairs() const { return dim_ / 2; }
  double frequency(int64_t pair) const;  // radians per token
  // dst += coef * R(pos) src, touching only pairs [pair_begin, pair_end).
  void rotate_add(float* dst, const float* src, int64_t pos, float coef, int64_t pair_begin,
                  int64_t pair_end) const;
  // x = R(pos) x over all pairs.
  void rotate_inplace(float* x, int64_t pos) const;

 private:
  int64_t max_pos_, dim_;
  double theta_;
  std::vector<float> factors_;
  // Dimensions of pair p: (p * first_, p * first_ + second_).
  int64_t first_, second_;
  std::vector<float> cos_, sin_;  // [pos][pair]
};

}  // namespace spattn

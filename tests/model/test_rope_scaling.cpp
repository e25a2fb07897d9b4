// YaRN's RoPE scaling (rope.scaling.type yarn) against ggml's own rope op, which llama.cpp runs:
// spattn's RopeTable with yarn_rope_divisors and yarn_mscale rotates vectors as ggml_rope_ext
// does with llama.cpp's arguments for a yarn file (ext_factor 1, beta_fast 32, beta_slow 1,
// freq_scale 1 / factor, attn_factor get_mscale(factor) / (1 + 0.1 ln factor)); the loader
// reads a yarn file into them; bad values are named errors.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <vector>

#include "core/thread_pool.hpp"
#include "core/rope.hpp"
#include "ggml.h"
#include "spattn/error.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

// The largest difference between ggml_rope_ext (llama.cpp's arguments for a yarn file, or an
// unscaled one at factor 0) and spattn's table over `heads` random rows at each position.
double max_diff_from_ggml(int64_t d, double base, double factor, int64_t orig, bool neox,
                          const std::vector<int32_t>& positions) {
  const int64_t heads = 3, n = int64_t(positions.size());
  std::vector<uint8_t> mem(size_t(4 * d * heads * n + n) * sizeof(float) + (size_t(1) << 20));
  ggml_init_params ip{mem.size(), mem.data(), false};
  ggml_context* ctx = ggml_init(ip);
  ggml_tensor* x = ggml_new_tensor_3d(ctx, GGML_TYPE_F32, d, heads, n);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  auto* xv = static_cast<float*>(x->data);
  for (int64_t i = 0; i < d * heads * n; ++i) xv[i] = nd(rng);
  ggml_tensor* pos = ggml_new_tensor_1d(ctx, GGML_TYPE_I32, n);
  std::memcpy(pos->data, positions.data(), positions.size() * sizeof(int32_t));
  const bool yarn = factor > 0;
  const float s = yarn ? float(factor) : 1.0f;
  // llama_context's attn_factor for yarn: get_mscale(s) divided by what ggml multiplies back.
  const float mscale = s <= 1.0f ? 1.0f : 0.1f * logf(s) + 1.0f;
  const float attn = yarn ? mscale * (1.0f / (1.0f + 0.1f * logf(s))) : 1.0f;
  ggml_tensor* y =
      ggml_rope_ext(ctx, x, pos, nullptr, int(d), neox ? GGML_ROPE_TYPE_NEOX : 0, int(orig),
                    float(base), 1.0f / s, yarn ? 1.0f : 0.0f, attn, 32.0f, 1.0f);
  ggml_cgraph* g = ggml_new_graph(ctx);
  ggml_build_forward_expand(g, y);
  ThreadPool::get().compute(g, 1);
  const RopeTable table(
      positions.back() + 1, d, base, neox ? RopeStyle::neox : RopeStyle::adjacent,
      yarn ? model::yarn_rope_divisors(d, base, factor, orig) : std::vector<float>{},
      yarn ? model::yarn_mscale(factor) : 1.0);
  double worst = 0;
  std::vector<float> row(static_cast<size_t>(d));
  for (int64_t t = 0; t < n; ++t)
    for (int64_t h = 0; h < heads; ++h) {
      const int64_t at = (t * heads + h) * d;
      std::memcpy(row.data(), xv + at, size_t(d) * sizeof(float));
      table.rotate_inplace(row.data(), positions[size_t(t)]);
      for (int64_t e = 0; e < d; ++e)
        worst = std::max(worst, std::abs(double(row[size_t(e)]) -
                                         double(static_cast<const float*>(y->data)[at + e])));
    }
  ggml_free(ctx);
  return worst;
}

// ggml computes each pair's angle in float (the previous pair's times a ratio), spattn's
// table in double: at position 4095 they differ by up to a few 1e-4 radians, so rows of sd 1
// agree within about 1e-3. A wrong ramp or a missing cos/sin factor moves them by 0.1 or more.
constexpr double kTol = 3e-3;

TEST(RopeScaling, YarnEqualsGgmlsRope) {
  const std::vector<int32_t> positions = {0, 1, 7, 100, 511, 512, 1000, 2047, 4095};
  // Unscaled first: the comparison itself agrees.
  EXPECT_LT(max_diff_from_ggml(64, 1e6, 0, 512, true, positions), kTol);
  // Qwen3's setting scaled down (factor 4 from an original 512; base 1e6, head dim 64: the
  // ramp covers pairs 3-10 of 32), a llama-style one (base 1e4, head dim 128, factor 8 from
  // 2048, adjacent pairs), and a factor below 1.
  EXPECT_LT(max_diff_from_ggml(64, 1e6, 4, 512, true, positions), kTol);
  EXPECT_LT(max_diff_from_ggml(128, 1e4, 8, 2048, false, positions), kTol);
  EXPECT_LT(max_diff_from_ggml(64, 1e4, 0.5, 1024, true, positions), kTol);
  // The scaling is visible: the unscaled table is far from ggml's yarn rope, and so is a table
  // missing its cos/sin factor (1 + 0.1 ln 4 = 1.139).
  const std::vector<float> d4 = model::yarn_rope_divisors(64, 1e6, 4, 512);
  EXPECT_FLOAT_EQ(d4.front(), 1.0f);  // the fastest pairs keep their frequency
  EXPECT_FLOAT_EQ(d4.back(), 4.0f);   // the slowest are interpolated by the factor
  EXPECT_NEAR(model::yarn_mscale(4), 1.0 + 0.1 * std::log(4.0), 1e-12);
  EXPECT_EQ(model::yarn_mscale(0.5), 1.0);
}

TEST(RopeScaling, YarnFileIsReadAndBadValuesAreNamed) {
  namespace fs = std::filesystem;
  const spattn::test::TempDir dir("spattn_rope_scaling");
  ModelShape s;
  s.arch = "qwen3";
  s.layers = 1, s.dim = 64, s.heads = 2, s.kv_heads = 1, s.ffn = 64, s.vocab = 300;
  s.rope_base = 1e6f;
  s.rope_scaling = "yarn";
  s.rope_factor = 4;
  s.rope_original_context = 512;
  const std::string p = (dir / "yarn.gguf").string();
  make_model(p, s);
  const model::Model m = model::load_model(p);
  const model::Config& c = m.config();
  EXPECT_EQ(c.rope_freq_factors, model::yarn_rope_divisors(32, 1e6, 4, 512));
  EXPECT_DOUBLE_EQ(c.rope_attn_factor, model::yarn_mscale(4));
  EXPECT_EQ(&c.rope_factors(100), &c.rope_freq_factors);  // at every context, as llama.cpp
  // The model maker refuses yarn where the loader would, and bad factors.
  ModelShape bad = s;
  bad.arch = "gemma3";
  EXPECT_THROW(check_shape(bad), Error);
  bad = s;
  bad.rope_factor = 0.5f;
  EXPECT_THROW(check_shape(bad), Error);
  EXPECT_THROW(model::yarn_rope_divisors(64, 1e6, -1, 512), Error);
  EXPECT_THROW(model::yarn_rope_divisors(64, 1e6, 4, 0), Error);
  EXPECT_THROW(model::yarn_rope_divisors(63, 1e6, 4, 512), Error);
}

}  // namespace
}  // namespace spattn

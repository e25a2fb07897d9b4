// The mixture of experts' routing (src/model/moe_routing.cpp, llama.cpp's build_moe_ffn ops)
// against a plain reference: softmax, sigmoid and gpt-oss's softmax of the chosen; DeepSeek's
// selection bias (it picks, the unbiased probabilities weigh), group-limited routing (groups
// scored by their two best, the best groups' experts only), normalized and scaled weights.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "model/moe_routing.hpp"

namespace {

using spattn::model::Config;

struct Routed {
  std::vector<int> chosen;  // best first
  std::vector<float> w;
};

// The routing of one token's logits, written from DeepSeek-V3's description (section 2.1.2) and
// llama.cpp's gating options, in double.
Routed reference(const Config& c, const std::vector<float>& logits,
                 const std::vector<float>& bias) {
  const int E = int(c.n_expert), k = int(c.n_expert_used);
  std::vector<double> p(static_cast<size_t>(E)), sel(static_cast<size_t>(E));
  const double mx = *std::max_element(logits.begin(), logits.end());
  double z = 0;
  for (int e = 0; e < E; ++e) z += std::exp(double(logits[size_t(e)]) - mx);
  for (int e = 0; e < E; ++e) {
    const double l = logits[size_t(e)];
    p[size_t(e)] = c.gating == Config::Gating::sigmoid             ? 1 / (1 + std::exp(-l))
                   : c.gating == Config::Gating::softmax_of_chosen ? l
                                                                   : std::exp(l - mx) / z;
    sel[size_t(e)] = p[size_t(e)] + (bias.empty() ? 0.0 : double(bias[size_t(e)]));
  }
  if (c.n_expert_groups > 1) {
    const int G = int(c.n_expert_groups), per = E / G;
    std::vector<double> score(static_cast<size_t>(G));
    for (int g = 0; g < G; ++g) {
      std::vector<double> v(sel.begin() + g * per, sel.begin() + (g + 1) * per);
      std::sort(v.rbegin(), v.rend());
      score[size_t(g)] = v[0] + v[1];
    }
    std::vector<int> groups(static_cast<size_t>(G));
    std::iota(groups.begin(), groups.end(), 0);
    std::sort(groups.begin(), groups.end(),
              [&](int a, int b) { return score[size_t(a)] > score[size_t(b)]; });
    for (size_t i = size_t(c.n_group_used); i < groups.size(); ++i)
      for (int e = groups[i] * per; e < (groups[i] + 1) * per; ++e) sel[size_t(e)] = -INFINITY;
  }
  std::vector<int> order(static_cast<size_t>(E));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(),
            [&](int a, int b) { return sel[size_t(a)] > sel[size_t(b)]; });
  Routed r;
  std::vector<double> w;
  for (int i = 0; i < k; ++i) {
    r.chosen.push_back(order[size_t(i)]);
    w.push_back(p[size_t(order[size_t(i)])]);
  }
  if (c.gating == Config::Gating::softmax_of_chosen) {
    const double m = *std::max_element(w.begin(), w.end());
    double s = 0;
    for (double& x : w) s += (x = std::exp(x - m));
    for (double& x : w) x /= s;
  }
  if (c.normalizes_weights()) {
    const double s = std::max(std::accumulate(w.begin(), w.end(), 0.0), 6.103515625e-5);
    for (double& x : w) x /= s;
  }
  const double scale = c.expert_weights_scale == 0 ? 1 : c.expert_weights_scale;
  for (double x : w) r.w.push_back(float(x * scale));
  return r;
}

// route_experts over n tokens' logits [n, E] on ggml's CPU backend.
std::vector<Routed> route(const Config& c, const std::vector<float>& logits, int64_t n,
                          const std::vector<float>& bias) {
  ggml_init_params ip{size_t(16) << 20, nullptr, false};
  ggml_context* ctx = ggml_init(ip);
  ggml_tensor* l = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, c.n_expert, n);
  std::copy(logits.begin(), logits.end(), static_cast<float*>(l->data));
  ggml_tensor* b = nullptr;
  if (!bias.empty()) {
    b = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, c.n_expert);
    std::copy(bias.begin(), bias.end(), static_cast<float*>(b->data));
  }
  const spattn::model::MoeRoute r =
      spattn::model::route_experts(ctx, c, l, b, [](ggml_tensor* t) { return t; });
  ggml_tensor* chosen = ggml_cont(ctx, r.chosen);
  ggml_tensor* w = ggml_cont(ctx, r.weights);
  ggml_cgraph* g = ggml_new_graph(ctx);
  ggml_build_forward_expand(g, chosen);
  ggml_build_forward_expand(g, w);
  ggml_graph_compute_with_ctx(ctx, g, 1);
  std::vector<Routed> out(static_cast<size_t>(n));
  const int64_t k = c.n_expert_used;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < k; ++i) {
      out[size_t(t)].chosen.push_back(static_cast<const int32_t*>(chosen->data)[t * k + i]);
      out[size_t(t)].w.push_back(static_cast<const float*>(w->data)[t * k + i]);
    }
  ggml_free(ctx);
  return out;
}

std::vector<float> draws(size_t n, float sd, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0, sd);
  std::vector<float> v(n);
  for (float& x : v) x = d(rng);
  return v;
}

// Every token's choice and weights equal the reference's; returns how many tokens' choices
// differ from a plain top-k of the unbiased probabilities (so a test can show that its bias or
// groups changed some).
int expect_matches(const Config& c, int64_t n, const std::vector<float>& bias, unsigned seed) {
  const std::vector<float> logits = draws(size_t(n * c.n_expert), 2.0f, seed);
  const std::vector<Routed> got = route(c, logits, n, bias);
  Config plain = c;
  plain.n_expert_groups = 0;
  int changed = 0;
  for (int64_t t = 0; t < n; ++t) {
    const std::vector<float> row(logits.begin() + t * c.n_expert,
                                 logits.begin() + (t + 1) * c.n_expert);
    const Routed want = reference(c, row, bias);
    EXPECT_EQ(got[size_t(t)].chosen, want.chosen) << "token " << t;
    for (size_t i = 0; i < want.w.size(); ++i)
      EXPECT_NEAR(got[size_t(t)].w[i], want.w[i], 1e-5f * std::max(1.0f, std::abs(want.w[i])))
          << "token " << t << " expert " << i;
    std::vector<int> a = want.chosen, b = reference(plain, row, {}).chosen;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    changed += a != b;
  }
  return changed;
}

Config moe(Config::Gating gating, int64_t experts, int64_t used) {
  Config c;
  c.n_expert = experts;
  c.n_expert_used = used;
  c.gating = gating;
  return c;
}

TEST(MoeRouting, SoftmaxNormalizedAsQwen3Moe) {
  EXPECT_EQ(expect_matches(moe(Config::Gating::softmax_normalized, 8, 2), 64, {}, 1), 0);
}

TEST(MoeRouting, SoftmaxOfChosenAsGptOss) {
  EXPECT_EQ(expect_matches(moe(Config::Gating::softmax_of_chosen, 8, 4), 64, {}, 2), 0);
}

// DeepSeek-V2's: softmax, weights neither normalized nor scaled.
TEST(MoeRouting, SoftmaxUnnormalizedAsDeepSeekV2) {
  Config c = moe(Config::Gating::softmax, 16, 6);
  EXPECT_EQ(expect_matches(c, 64, {}, 3), 0);
}

// DeepSeek-V3's: sigmoid, the bias in the choice only, group-limited, normalized, scaled 2.5.
TEST(MoeRouting, SigmoidBiasGroupsNormScaleAsDeepSeekV3) {
  Config c = moe(Config::Gating::sigmoid, 16, 4);
  c.expert_weights_norm = true;
  c.expert_weights_scale = 2.5;
  const std::vector<float> bias = draws(16, 0.3f, 4);
  // The bias alone changes some tokens' experts (so the reference's order of bias and weights
  // is tested)...
  EXPECT_GT(expect_matches(c, 128, bias, 5), 0);
  // ... and the groups: 4 groups of 4, the best 2 kept.
  c.n_expert_groups = 4;
  c.n_group_used = 2;
  const int changed = expect_matches(c, 128, {}, 6);
  EXPECT_GT(changed, 0);
  EXPECT_GT(expect_matches(c, 128, bias, 7), 0);
}

}  // namespace

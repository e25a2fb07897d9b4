// A mixture of experts' routing as ggml ops, llama.cpp's build_moe_ffn op for op (so the
// experts chosen and their weights are its bits): the router's probabilities (softmax, sigmoid,
// or the logits themselves for gpt-oss's softmax of the chosen), a selection bias added for the
// choice only (DeepSeek-V3's exp_probs_b: section 2.1.2's auxiliary-loss-free balancing),
// group-limited routing (DeepSeek-V3's node-limited routing: groups scored by their two best
// experts, the n_group_used best kept), the top n_expert_used, and their weights (normalized,
// scaled) as Config says.
#pragma once
#include <functional>

#include "spattn/model.hpp"

struct ggml_context;
struct ggml_tensor;

namespace spattn::model {

struct MoeRoute {
  ggml_tensor* chosen;   // [n_expert_used, n] i32: the experts, best first
  ggml_tensor* weights;  // [1, n_expert_used, n] f32: their weights, in the same order
};

// logits [n_expert, n] (the router's, its bias added); probs_b [n_expert] or null. `own` gives
// an op's result memory (a graph whose context allocates none) and returns it.
MoeRoute route_experts(ggml_context* ctx, const Config& c, ggml_tensor* logits,
                       ggml_tensor* probs_b, const std::function<ggml_tensor*(ggml_tensor*)>& own);

}  // namespace spattn::model

#include "model/moe_routing.hpp"

#include <cmath>

#include "ggml.h"

namespace spattn::model {

MoeRoute route_experts(ggml_context* ctx, const Config& c, ggml_tensor* logits,
                       ggml_tensor* probs_b, const std::function<ggml_tensor*(ggml_tensor*)>& own) {
  using G = Config::Gating;
  const int64_t n = logits->ne[1], k = c.n_expert_used, E = c.n_expert;
  ggml_tensor* probs = c.gating == G::sigmoid             ? own(ggml_sigmoid(ctx, logits))
                       : c.gating == G::softmax_of_chosen ? logits
                                                          : own(ggml_soft_max(ctx, logits));
  // The bias steers the choice only; the weights are the unbiased probabilities.
  ggml_tensor* select = probs_b ? own(ggml_add(ctx, probs, probs_b)) : probs;
  if (c.n_expert_groups > 1) {
    const int64_t per = E / c.n_expert_groups, groups = c.n_expert_groups;
    ggml_tensor* by_group = ggml_reshape_3d(ctx, select, per, groups, n);
    // Each group's score: the sum of its two best.
    ggml_tensor* best2 = own(ggml_argsort(ctx, by_group, GGML_SORT_ORDER_DESC));
    best2 = ggml_view_4d(ctx, best2, 2, groups, n, 1, best2->nb[1], best2->nb[2], best2->nb[3], 0);
    ggml_tensor* top = own(ggml_get_rows(ctx, ggml_reshape_4d(ctx, by_group, 1, per, groups, n),
                                         best2));  // [1, 2, groups, n]
    ggml_tensor* score = own(ggml_sum_rows(ctx, ggml_reshape_3d(ctx, top, 2, groups, n)));
    score = ggml_reshape_2d(ctx, score, groups, n);
    ggml_tensor* kept = own(ggml_argsort(ctx, score, GGML_SORT_ORDER_DESC));
    kept =
        ggml_view_4d(ctx, kept, c.n_group_used, n, 1, 1, kept->nb[1], kept->nb[2], kept->nb[3], 0);
    // The other groups' experts at -inf: never chosen.
    ggml_tensor* rows = own(ggml_get_rows(ctx, by_group, kept));  // [per, used, n]
    ggml_tensor* masked =
        own(ggml_set_rows(ctx, own(ggml_fill(ctx, by_group, -INFINITY)), rows, kept));
    select = ggml_reshape_2d(ctx, masked, E, n);
  }
  ggml_tensor* order = own(ggml_argsort(ctx, select, GGML_SORT_ORDER_DESC));
  ggml_tensor* chosen =
      ggml_view_4d(ctx, order, k, n, 1, 1, order->nb[1], order->nb[2], order->nb[3], 0);
  ggml_tensor* w = own(ggml_get_rows(ctx, ggml_reshape_3d(ctx, probs, 1, E, n), chosen));
  if (c.gating == G::softmax_of_chosen)
    w = ggml_reshape_3d(ctx, own(ggml_soft_max(ctx, ggml_reshape_2d(ctx, w, k, n))), 1, k, n);
  if (c.normalizes_weights()) {
    // The sum clamped at f16's smallest normal, as llama.cpp.
    ggml_tensor* w2 = ggml_reshape_2d(ctx, w, k, n);
    ggml_tensor* sum = own(ggml_clamp(ctx, own(ggml_sum_rows(ctx, w2)), 6.103515625e-5f, INFINITY));
    w = ggml_reshape_3d(ctx, own(ggml_div(ctx, w2, sum)), 1, k, n);
  }
  if (c.expert_weights_scale != 0 && c.expert_weights_scale != 1)
    w = own(ggml_scale(ctx, w, float(c.expert_weights_scale)));
  return {chosen, w};
}

}  // namespace spattn::model

#include "model/vector_product.hpp"

#include <cstdint>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace spattn::model {

namespace {

// Rows a claim takes: about 32 KB of weights, so a claim (one compare-and-swap on the thread's
// own cache line) costs well under 1% of the reading it hands out.
constexpr int64_t kClaimBytes = int64_t(32) << 10;

void node(ggml_tensor* dst, int ith, int nth, void* ud) {
  const ggml_tensor* w = dst->src[0];
  const ggml_tensor* x = dst->src[1];
  const ggml_type_traits_cpu* tr = ggml_get_type_traits_cpu(w->type);
  const int64_t k = w->ne[0], m = w->ne[1];
  // x in the dot product's type, as ggml's mul_mat converts it (block by block, so converting
  // the whole row on each thread gives the same bytes as ggml's split conversion).
  const void* xd = x->data;
  thread_local std::vector<uint8_t> conv;
  if (tr->vec_dot_type != GGML_TYPE_F32) {
    conv.resize(ggml_row_size(tr->vec_dot_type, k));
    ggml_get_type_traits_cpu(tr->vec_dot_type)->from_float(static_cast<const float*>(x->data),
                                                           conv.data(), k);
    xd = conv.data();
  }
  const auto* rows = static_cast<const char*>(w->data);
  const size_t nb1 = w->nb[1];
  auto* y = static_cast<float*>(dst->data);
  // (A row over 32 KB makes the piece 0: the claims take one row at a time then.)
  const int64_t piece = kClaimBytes / int64_t(nb1);
  static_cast<RangeClaims*>(ud)->run(m, piece, ith, nth, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) tr->vec_dot(int(k), y + r, 0, rows + r * nb1, 0, xd, 0, 1);
  });
}

}  // namespace

bool vector_product_applies(const Model::Weight& w, const ggml_tensor* x, int threads) {
  return !w.repacked && threads <= RangeClaims::kMaxThreads && x->type == GGML_TYPE_F32 &&
         x->ne[1] == 1 && x->ne[2] == 1 && x->ne[3] == 1 && ggml_is_contiguous(x) &&
         ggml_is_contiguous(w.t) && w.t->ne[2] == 1 && w.t->ne[3] == 1 &&
         ggml_get_type_traits_cpu(w.t->type)->nrows == 1;
}

ggml_tensor* vector_product(ggml_context* ctx, const Model::Weight& w, ggml_tensor* x,
                            std::deque<RangeClaims>& claims) {
  claims.emplace_back();
  ggml_tensor* src[] = {w.t, x};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w.t->ne[1], 1, 1, 1, src, 2, &node, GGML_N_TASKS_MAX,
                        &claims.back());
}

}  // namespace spattn::model

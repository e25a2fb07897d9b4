#include "model/vector_product.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"

namespace spattn::model {

namespace {

// Rows a claim takes: about 32 KB of weights, so a claim (one compare-and-swap on the thread's
// own cache line) costs well under 1% of the reading it hands out.
constexpr int64_t kClaimBytes = int64_t(32) << 10;

// x's rows (nx of k values) in the dot product's type, as ggml's mul_mat and mul_mat_id convert
// them (block by block, so converting whole rows on each thread gives the bytes of ggml's
// split conversion), in a buffer of the calling thread's; the row stride in *stride.
const char* converted(const ggml_type_traits_cpu* tr, const ggml_tensor* x, int64_t k, int64_t nx,
                      size_t* stride) {
  if (tr->vec_dot_type == GGML_TYPE_F32) {
    *stride = x->nb[1];
    return static_cast<const char*>(x->data);
  }
  thread_local std::vector<uint8_t> conv;
  *stride = ggml_row_size(tr->vec_dot_type, k);
  conv.resize(*stride * size_t(nx));
  for (int64_t i = 0; i < nx; ++i)
    ggml_get_type_traits_cpu(tr->vec_dot_type)
        ->from_float(reinterpret_cast<const float*>(static_cast<const char*>(x->data) +
                                                    size_t(i) * x->nb[1]),
                     conv.data() + size_t(i) * *stride, k);
  return reinterpret_cast<const char*>(conv.data());
}

// (A row over 32 KB makes the piece 0: the claims take one row at a time then.)
int64_t piece_rows(size_t row_bytes) { return kClaimBytes / int64_t(row_bytes); }

void node(ggml_tensor* dst, int ith, int nth, void* ud) {
  const ggml_tensor* w = dst->src[0];
  const ggml_tensor* x = dst->src[1];
  const ggml_type_traits_cpu* tr = ggml_get_type_traits_cpu(w->type);
  const int64_t k = w->ne[0], m = w->ne[1];
  size_t stride = 0;
  const char* xd = converted(tr, x, k, 1, &stride);
  const auto* rows = static_cast<const char*>(w->data);
  const size_t nb1 = w->nb[1];
  auto* y = static_cast<float*>(dst->data);
  static_cast<RangeClaims*>(ud)->run(m, piece_rows(nb1), ith, nth, [&](int64_t b, int64_t e) {
    for (int64_t r = b; r < e; ++r) tr->vec_dot(int(k), y + r, 0, rows + r * nb1, 0, xd, 0, 1);
  });
}

// Index i of the k chosen experts' m rows each: chosen expert s = i / m, its row i % m.
void expert_node(ggml_tensor* dst, int ith, int nth, void* ud) {
  const ggml_tensor* w = dst->src[0];
  const ggml_tensor* x = dst->src[1];
  const ggml_tensor* ids = dst->src[2];
  const ggml_type_traits_cpu* tr = ggml_get_type_traits_cpu(w->type);
  const int64_t k = w->ne[0], m = w->ne[1], chosen = ids->ne[0], nx = x->ne[1];
  size_t stride = 0;
  const char* xd = converted(tr, x, k, nx, &stride);
  const auto* planes = static_cast<const char*>(w->data);
  const auto* id = static_cast<const int32_t*>(ids->data);
  const size_t nb1 = w->nb[1], nb2 = w->nb[2];
  auto* y = static_cast<float*>(dst->data);  // [m, chosen], contiguous
  static_cast<RangeClaims*>(ud)->run(chosen * m, piece_rows(nb1), ith, nth,
                                     [&](int64_t b, int64_t e) {
    while (b < e) {
      const int64_t s = b / m, r0 = b % m, r1 = std::min(m, r0 + (e - b));
      const char* rows = planes + size_t(id[s]) * nb2;
      const char* xs = xd + size_t(nx == 1 ? 0 : s) * stride;
      for (int64_t r = r0; r < r1; ++r)
        tr->vec_dot(int(k), y + s * m + r, 0, rows + r * nb1, 0, xs, 0, 1);
      b += r1 - r0;
    }
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

namespace spattn::model {

bool expert_vector_product_applies(const Model::Weight& w, const ggml_tensor* x,
                                   const ggml_tensor* ids, int threads) {
  return w.experts && !w.repacked && threads <= RangeClaims::kMaxThreads &&
         x->type == GGML_TYPE_F32 && ids->ne[1] == 1 && ids->nb[0] == sizeof(int32_t) &&
         (x->ne[1] == 1 || x->ne[1] == ids->ne[0]) && x->ne[2] == 1 && x->ne[3] == 1 &&
         x->nb[0] == sizeof(float) && ggml_is_contiguous(w.t) &&
         ggml_get_type_traits_cpu(w.t->type)->nrows == 1;
}

ggml_tensor* expert_vector_product(ggml_context* ctx, const Model::Weight& w, ggml_tensor* x,
                                   ggml_tensor* ids, std::deque<RangeClaims>& claims) {
  claims.emplace_back();
  ggml_tensor* src[] = {w.t, x, ids};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w.t->ne[1], ids->ne[0], 1, 1, src, 3, &expert_node,
                        GGML_N_TASKS_MAX, &claims.back());
}

}  // namespace spattn::model

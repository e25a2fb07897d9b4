#include "model/vector_product.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

#include "ggml-cpu.h"
#include "ggml.h"
#include "kernels/q8_0_dot_rows.hpp"

namespace spattn::model {

namespace {

// Rows a claim takes: about 32 KB of weights, so a claim (one compare-and-swap on the thread's
// own cache line) costs well under 1% of the reading it hands out.
constexpr int64_t kClaimBytes = int64_t(32) << 10;

// x's rows (nx of k values, x_stride bytes apart) in the dot product's type, as ggml's mul_mat
// and mul_mat_id convert them (block by block, so converting whole rows on each thread gives
// the bytes of ggml's split conversion), in a buffer of the calling thread's; the row stride in
// *stride.
const char* converted(const ggml_type_traits_cpu* tr, const ggml_tensor* x, int64_t k, int64_t nx,
                      size_t x_stride, size_t* stride) {
  if (tr->vec_dot_type == GGML_TYPE_F32) {
    *stride = x_stride;
    return static_cast<const char*>(x->data);
  }
  thread_local std::vector<uint8_t> conv;
  *stride = ggml_row_size(tr->vec_dot_type, k);
  conv.resize(*stride * size_t(nx));
  for (int64_t i = 0; i < nx; ++i)
    ggml_get_type_traits_cpu(tr->vec_dot_type)
        ->from_float(reinterpret_cast<const float*>(static_cast<const char*>(x->data) +
                                                    size_t(i) * x_stride),
                     conv.data() + size_t(i) * *stride, k);
  return reinterpret_cast<const char*>(conv.data());
}

// y[s m + r] = row r of matrix `plane(s)` . x row s (every s reads row 0 when x_stride is 0),
// for s < count and r < m: the count matrices' rows are one index space split by the claims,
// so each thread streams whole matrices. (A row over 32 KB makes the piece 0: the claims take
// one row at a time then.)
template <class Plane>
void dot_rows(const ggml_tensor* w, int64_t count, Plane plane, const char* xd, size_t x_stride,
              float* y, RangeClaims& claims, int ith, int nth) {
  const ggml_type_traits_cpu* tr = ggml_get_type_traits_cpu(w->type);
  const int64_t k = w->ne[0], m = w->ne[1];
  const size_t nb1 = w->nb[1];
  // q8_0 rows go several at a time where that gives ggml's bits (kernels/q8_0_dot_rows.hpp), so
  // a claim takes a whole number of those groups, at least one (a 16384-wide row is 17 KB).
  const bool q8_0_rows = w->type == GGML_TYPE_Q8_0 && kernels::q8_0_dot_rows_ggml_bits();
  int64_t piece = kClaimBytes / int64_t(nb1);
  if (q8_0_rows)
    piece = std::max<int64_t>(1, piece / kernels::kQ8_0DotRowsAtOnce) * kernels::kQ8_0DotRowsAtOnce;
  claims.run(count * m, piece, ith, nth, [&](int64_t b, int64_t e) {
    while (b < e) {
      const int64_t s = b / m, r0 = b % m, r1 = std::min(m, r0 + (e - b));
      const char* rows = plane(s);
      const char* xs = xd + size_t(s) * x_stride;
      if (q8_0_rows)
        kernels::q8_0_dot_rows(rows + r0 * nb1, nb1, r1 - r0, xs, k, y + s * m + r0);
      else
        for (int64_t r = r0; r < r1; ++r)
          tr->vec_dot(int(k), y + s * m + r, 0, rows + r * nb1, 0, xs, 0, 1);
      b += r1 - r0;
    }
  });
}

void node(ggml_tensor* dst, int ith, int nth, void* ud) {
  const ggml_tensor* w = dst->src[0];
  size_t stride = 0;
  const char* xd =
      converted(ggml_get_type_traits_cpu(w->type), dst->src[1], w->ne[0], 1, 0, &stride);
  const auto* rows = static_cast<const char*>(w->data);
  dot_rows(
      w, 1, [&](int64_t) { return rows; }, xd, 0, static_cast<float*>(dst->data),
      *static_cast<RangeClaims*>(ud), ith, nth);
}

// The chosen experts: matrix s is plane ids[s] of w; x one row for all or one row each.
void expert_node(ggml_tensor* dst, int ith, int nth, void* ud) {
  const ggml_tensor* w = dst->src[0];
  const ggml_tensor* x = dst->src[1];
  const ggml_tensor* ids = dst->src[2];
  const int64_t nx = x->ne[1];
  size_t stride = 0;
  const char* xd = converted(ggml_get_type_traits_cpu(w->type), x, w->ne[0], nx, x->nb[1], &stride);
  const auto* planes = static_cast<const char*>(w->data);
  const auto* id = static_cast<const int32_t*>(ids->data);
  dot_rows(
      w, ids->ne[0], [&](int64_t s) { return planes + size_t(id[s]) * w->nb[2]; }, xd,
      nx == 1 ? 0 : stride, static_cast<float*>(dst->data),  // [m, chosen], contiguous
      *static_cast<RangeClaims*>(ud), ith, nth);
}

// Every plane: matrix s is plane s of w, times x's row s (x [K, 1, H], a row a plane).
void plane_node(ggml_tensor* dst, int ith, int nth, void* ud) {
  const ggml_tensor* w = dst->src[0];
  const ggml_tensor* x = dst->src[1];
  size_t stride = 0;
  const char* xd =
      converted(ggml_get_type_traits_cpu(w->type), x, w->ne[0], w->ne[2], x->nb[2], &stride);
  const auto* planes = static_cast<const char*>(w->data);
  dot_rows(
      w, w->ne[2], [&](int64_t s) { return planes + size_t(s) * w->nb[2]; }, xd, stride,
      static_cast<float*>(dst->data),  // [m, 1, planes], contiguous
      *static_cast<RangeClaims*>(ud), ith, nth);
}

// What the nodes need: w in ggml's own layout (not repacked: a repacked matrix has ggml's
// repacked vector products), contiguous, one row a dot product; f32 rows in, their values
// contiguous; `threads` within the claims' limit.
bool ggml_rows_apply(const Model::Weight& w, const ggml_tensor* x, int threads) {
  return !w.repacked && threads <= RangeClaims::kMaxThreads && x->type == GGML_TYPE_F32 &&
         x->nb[0] == sizeof(float) && x->ne[3] == 1 && ggml_is_contiguous(w.t) &&
         ggml_get_type_traits_cpu(w.t->type)->nrows == 1;
}

}  // namespace

bool vector_product_applies(const Model::Weight& w, const ggml_tensor* x, int threads) {
  return ggml_rows_apply(w, x, threads) && x->ne[1] == 1 && x->ne[2] == 1 &&
         ggml_is_contiguous(x) && w.t->ne[2] == 1 && w.t->ne[3] == 1;
}

ggml_tensor* vector_product(ggml_context* ctx, const Model::Weight& w, ggml_tensor* x,
                            std::deque<RangeClaims>& claims) {
  claims.emplace_back();
  ggml_tensor* src[] = {w.t, x};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w.t->ne[1], 1, 1, 1, src, 2, &node, GGML_N_TASKS_MAX,
                        &claims.back());
}

bool plane_vector_product_applies(const Model::Weight& w, const ggml_tensor* x, int threads) {
  return !w.experts && ggml_rows_apply(w, x, threads) && x->ne[1] == 1 && x->ne[2] == w.t->ne[2] &&
         w.t->ne[3] == 1;
}

ggml_tensor* plane_vector_product(ggml_context* ctx, const Model::Weight& w, ggml_tensor* x,
                                  std::deque<RangeClaims>& claims) {
  claims.emplace_back();
  ggml_tensor* src[] = {w.t, x};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w.t->ne[1], 1, w.t->ne[2], 1, src, 2, &plane_node,
                        GGML_N_TASKS_MAX, &claims.back());
}

bool expert_vector_product_applies(const Model::Weight& w, const ggml_tensor* x,
                                   const ggml_tensor* ids, int threads) {
  return w.experts && ggml_rows_apply(w, x, threads) && x->ne[2] == 1 && ids->ne[1] == 1 &&
         ids->nb[0] == sizeof(int32_t) && (x->ne[1] == 1 || x->ne[1] == ids->ne[0]);
}

ggml_tensor* expert_vector_product(ggml_context* ctx, const Model::Weight& w, ggml_tensor* x,
                                   ggml_tensor* ids, std::deque<RangeClaims>& claims) {
  claims.emplace_back();
  ggml_tensor* src[] = {w.t, x, ids};
  return ggml_custom_4d(ctx, GGML_TYPE_F32, w.t->ne[1], ids->ne[0], 1, 1, src, 3, &expert_node,
                        GGML_N_TASKS_MAX, &claims.back());
}

}  // namespace spattn::model

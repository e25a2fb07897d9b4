// Decode's one-row products W x as a graph node: each output is ggml's vector dot product for
// w's type (`vec_dot`) over x converted to the type's partner (`vec_dot_type`), exactly as
// ggml's mul_mat computes a one-row call, so every output has ggml's bits (q8_0 rows go eight at
// a time through kernels/q8_0_dot_rows.hpp, the same operations per output). What differs is
// how the rows are split over threads: ggml hands out 64-row pieces from one shared counter, so
// the two threads' reads interleave and each restarts its stream every 64 rows (256 KB of the
// 1B shape's f16 rows); here each thread reads one contiguous range of rows and takes the
// others' leftovers from their back ends (core/range_claims.hpp). A one-row product reads its
// whole matrix once, so its speed is the memory's: the split is what decode's speed depends on.
#pragma once
#include <deque>

#include "core/range_claims.hpp"
#include "spattn/model.hpp"

struct ggml_context;
struct ggml_tensor;

namespace spattn::model {

// Whether w x goes through vector_product: x one f32 row, w in ggml's own layout (not
// repacked: a repacked matrix has ggml's repacked vector products), `threads` within the
// claims' limit.
bool vector_product_applies(const Model::Weight& w, const ggml_tensor* x, int threads);

// The node computing w x; `claims` keeps each node's work-claiming state (stable addresses).
ggml_tensor* vector_product(ggml_context* ctx, const Model::Weight& w, ggml_tensor* x,
                            std::deque<RangeClaims>& claims);

// The same for each plane of w by its own row of x (ggml's mul_mat over a batch of matrices
// with one row each, as the absorbed latent attention's per-head Wk_b and Wv_b products of one
// token are): w [K, M, P] (not experts), x [K, 1, P], any row stride; the result [M, 1, P].
// The P matrices' rows are one index space split as above, so each thread streams whole planes;
// ggml's split hands out 16 rows of each of 16 planes a piece (for Wk_b, 2 KB from each plane,
// 69 KB apart), and runs a fifth of the memory's speed on them (BM_PlaneProduct).
bool plane_vector_product_applies(const Model::Weight& w, const ggml_tensor* x, int threads);
ggml_tensor* plane_vector_product(ggml_context* ctx, const Model::Weight& w, ggml_tensor* x,
                                  std::deque<RangeClaims>& claims);

// The same for one token's chosen experts (ggml's mul_mat_id with one token): w holds one
// matrix an expert ([K, M, E]), ids the token's k chosen experts ([k, 1] i32), x one f32 row
// [K, 1, 1] every expert reads, or one a chosen expert [K, k, 1]; the result is [M, k, 1]. The
// k matrices' rows are one index space split as above, so each thread streams whole experts.
bool expert_vector_product_applies(const Model::Weight& w, const ggml_tensor* x,
                                   const ggml_tensor* ids, int threads);
ggml_tensor* expert_vector_product(ggml_context* ctx, const Model::Weight& w, ggml_tensor* x,
                                   ggml_tensor* ids, std::deque<RangeClaims>& claims);

}  // namespace spattn::model

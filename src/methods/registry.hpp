// The list of methods `make_method` knows, and how each runs in a model runner. Each method
// file defines its factories; adding a method is one new file and one row in registry.cpp.
#pragma once
#include <memory>
#include <string>

#include "methods/layer_backend.hpp"
#include "spattn/method.hpp"

namespace spattn {

std::unique_ptr<Method> make_dense(const MethodSpec& spec);
std::unique_ptr<Method> make_a_shape(const MethodSpec& spec);
std::unique_ptr<Method> make_tri_shape(const MethodSpec& spec);
std::unique_ptr<Method> make_sf_fixed(const MethodSpec& spec);
std::unique_ptr<Method> make_sf_strided(const MethodSpec& spec);
std::unique_ptr<Method> make_vertical_slash(const MethodSpec& spec);
std::unique_ptr<Method> make_mean_pool(const MethodSpec& spec);
std::unique_ptr<Method> make_xattention(const MethodSpec& spec);
std::unique_ptr<Method> make_flexprefill(const MethodSpec& spec);
std::unique_ptr<Method> make_oracle_topk(const MethodSpec& spec);
std::unique_ptr<Method> make_blasst(const MethodSpec& spec);
std::unique_ptr<Method> make_momo(const MethodSpec& spec);
std::unique_ptr<Method> make_grid(const MethodSpec& spec);
std::unique_ptr<Method> make_mminference(const MethodSpec& spec);
std::unique_ptr<Method> make_chunked_h2o(const MethodSpec& spec);
std::unique_ptr<Method> make_sliding_window(const MethodSpec& spec);

// A layer's attention in a model runner (layer_backend.hpp), where a method has its own; a row
// without one runs its Method over the cache's rows (make_method_prefill).
using BackendFactory = std::unique_ptr<LayerBackend> (*)(const MethodSpec&, const BackendContext&);
std::unique_ptr<LayerBackend> make_dense_prefill(const MethodSpec& spec, const BackendContext& c);
std::unique_ptr<LayerBackend> make_a_shape_prefill(const MethodSpec& spec, const BackendContext& c);
std::unique_ptr<LayerBackend> make_blasst_prefill(const MethodSpec& spec, const BackendContext& c);
std::unique_ptr<LayerBackend> make_blasst_decode(const MethodSpec& spec, const BackendContext& c);
std::unique_ptr<LayerBackend> make_chunked_h2o_prefill(const MethodSpec& spec,
                                                       const BackendContext& c);
// DeepSeek's sparse attention (dsa.cpp): the model's own indexer picks each row's tokens.
std::unique_ptr<LayerBackend> make_dsa_backend(const MethodSpec& spec, const BackendContext& c);
std::unique_ptr<LayerBackend> make_quest_decode(const MethodSpec& spec, const BackendContext& c);
std::unique_ptr<LayerBackend> make_sliding_window_prefill(const MethodSpec& spec,
                                                          const BackendContext& c);
// Any Method over the cache's raw rows (method_backend.cpp); `spec` is what it reports.
std::unique_ptr<LayerBackend> make_method_prefill(std::shared_ptr<const Method> method,
                                                  const std::string& spec);

// A layer's prefill (--attn SPEC) and decode (--attn-decode SPEC) in a model runner. Throw Error
// naming the method and parameter for unknown names and bad parameters, and naming the method
// where it has no such form (a decode-only method as --attn, a method without a sparse decode
// as --attn-decode).
std::unique_ptr<LayerBackend> make_prefill_backend(const MethodSpec& spec,
                                                   const BackendContext& ctx);
std::unique_ptr<LayerBackend> make_decode_backend(const MethodSpec& spec,
                                                  const BackendContext& ctx);
// The methods whose prefill runs across ranks (MethodInfo::context_parallel), for messages:
// "dense, a_shape, ... and chunked_h2o".
std::string context_parallel_names();

}  // namespace spattn

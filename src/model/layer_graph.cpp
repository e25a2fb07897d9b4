#include "model/layer_graph.hpp"

#include <vector>

#include "core/thread_pool.hpp"
#include "ggml.h"
#include "spattn/error.hpp"

namespace spattn::model {

namespace {

constexpr int kMaxNodes = 64;

// Every tensor of the graph is placed by hand on the session's buffers (the context allocates
// nothing). A buffer is reused along the chain (h holds the normed rows, then Wo's output,
// then Wdown's): each value is read only by nodes that run before the next write, since the
// next writer depends on every reader through the chain.
struct Builder {
  ggml_context* ctx;
  ggml_tensor* rows(float* p, int64_t cols, int64_t n) {
    ggml_tensor* t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, cols, n);
    t->data = p;
    return t;
  }
  ggml_tensor* vec(const std::vector<float>& v) {
    ggml_tensor* t = ggml_new_tensor_1d(ctx, GGML_TYPE_F32, int64_t(v.size()));
    t->data = const_cast<float*>(v.data());
    return t;
  }
  static ggml_tensor* at(ggml_tensor* t, float* p) {
    t->data = p;
    return t;
  }
  // RMSNorm(x) * w into h.
  ggml_tensor* norm(ggml_tensor* x, const std::vector<float>& w, double eps, float* h) {
    ggml_tensor* n = at(ggml_rms_norm(ctx, x, float(eps)), h);
    return at(ggml_mul(ctx, n, vec(w)), h);
  }
  // RMSNorm(x) * w over each of the `heads` runs of w.size() values in every row, into y
  // (qwen3's q/k norm: rows viewed as [head_dim, heads, n]).
  ggml_tensor* head_norm(ggml_tensor* x, const std::vector<float>& w, int64_t heads, int64_t n,
                         double eps, float* y) {
    ggml_tensor* v = ggml_reshape_3d(ctx, x, int64_t(w.size()), heads, n);
    ggml_tensor* nrm = at(ggml_rms_norm(ctx, v, float(eps)), y);
    return at(ggml_mul(ctx, nrm, vec(w)), y);
  }
  // W x (+ bias) into y.
  size_t weight_bytes = 0;
  ggml_tensor* linear(const Model::Weight& w, ggml_tensor* x, const std::vector<float>& bias,
                      float* y) {
    weight_bytes += ggml_nbytes(w.t);
    ggml_tensor* t = at(ggml_mul_mat(ctx, w.t, x), y);
    return bias.empty() ? t : at(ggml_add(ctx, t, vec(bias)), y);
  }
};

}  // namespace

int threads_for_bytes(size_t bytes, int threads) {
  // Each pool call ends at a barrier (a graph at one per node); with 2 threads those cost more
  // than the split saves below about 1 MiB of data: a decode step of stories260K (0.2 MB of
  // weights a layer) ran at 14,000 tokens/s on one thread and 8,000 on two, while a layer of
  // code-tiny-8k (3.6 MB of f16) gains from the second thread.
  constexpr size_t kParallelBytes = size_t(1) << 20;
  return bytes < kParallelBytes ? 1 : threads;
}

void run_layer_graph(const Model& m, const RowBuffers& b, int64_t n, const GraphStep& step,
                     int threads) {
  const Config& c = m.config();
  const bool head = step.head >= 0 && step.head < c.n_layer;
  SPATTN_CHECK(!(head && step.logits), "internal: a layer's head and the logits in one graph");
  const int64_t D = c.n_embd, dq = c.n_head * c.head_dim;
  thread_local std::vector<uint8_t> meta(size_t(kMaxNodes) * ggml_tensor_overhead() +
                                         ggml_graph_overhead_custom(kMaxNodes, false));
  ggml_init_params ip{meta.size(), meta.data(), true};
  ggml_context* ctx = ggml_init(ip);
  SPATTN_CHECK(ctx != nullptr, "internal: ggml_init failed");
  Builder B{ctx, 0};
  ggml_cgraph* g = ggml_new_graph_custom(ctx, kMaxNodes, false);
  ggml_tensor* x = B.rows(b.x, D, n);
  if (step.tail >= 0) {
    const Model::Layer& L = m.layer(step.tail);
    ggml_tensor* o = B.linear(L.wo, B.rows(b.att, dq, n), {}, b.h);
    // gemma3: the attention's and the FFN's outputs are RMS-normed before their residual adds
    // (in place: each row is read whole before it is written).
    if (!L.attn_post_norm.empty()) o = B.norm(o, L.attn_post_norm, c.rms_eps, b.h);
    x = B.at(ggml_add(ctx, x, o), b.x);
    ggml_tensor* h = B.norm(x, L.ffn_norm, c.rms_eps, b.h);
    ggml_tensor* gate = B.linear(L.gate, h, {}, b.g);
    ggml_tensor* up = B.linear(L.up, h, {}, b.u);
    // SiLU(gate) * up; gemma3's GeGLU: GELU(gate) * up, ggml's tanh-approximated GELU, as
    // llama.cpp's build_ffn (LLM_FFN_GELU, LLM_FFN_PAR) runs it.
    ggml_tensor* act = B.at(c.arch == Arch::gemma3 ? ggml_geglu_split(ctx, gate, up)
                                                   : ggml_swiglu_split(ctx, gate, up),
                            b.g);
    ggml_tensor* down = B.linear(L.down, act, {}, b.h);
    if (!L.ffn_post_norm.empty()) down = B.norm(down, L.ffn_post_norm, c.rms_eps, b.h);
    x = B.at(ggml_add(ctx, x, down), b.x);
    ggml_build_forward_expand(g, x);
  }
  if (head) {
    const Model::Layer& L = m.layer(step.head);
    ggml_tensor* h = B.norm(x, L.attn_norm, c.rms_eps, b.h);
    ggml_tensor* q = B.linear(L.wq, h, L.bq, b.q);
    ggml_tensor* k = B.linear(L.wk, h, L.bk, b.k);
    if (!L.q_norm.empty()) {  // qwen3, gemma3: RMSNorm over each head's values, in place
      q = B.head_norm(q, L.q_norm, c.n_head, n, c.rms_eps, b.q);
      k = B.head_norm(k, L.k_norm, c.n_head_kv, n, c.rms_eps, b.k);
    }
    ggml_build_forward_expand(g, q);
    ggml_build_forward_expand(g, k);
    ggml_build_forward_expand(g, B.linear(L.wv, h, L.bv, b.v));
  }
  if (step.logits) {
    const int64_t r = n - step.logits_row0;
    SPATTN_CHECK(r >= 1, "internal: no logits rows");
    ggml_tensor* xs = ggml_view_2d(ctx, x, D, r, x->nb[1], size_t(step.logits_row0) * x->nb[1]);
    ggml_tensor* h = B.norm(xs, m.output_norm(), c.rms_eps, b.h);
    ggml_tensor* out = B.linear(m.output(), h, {}, step.logits);
    if (c.final_logit_softcap > 0) {  // cap * tanh(logits / cap), in place, as llama.cpp
      const float cap = float(c.final_logit_softcap);
      out = B.at(ggml_scale(ctx, out, 1.0f / cap), step.logits);
      out = B.at(ggml_tanh(ctx, out), step.logits);
      out = B.at(ggml_scale(ctx, out, cap), step.logits);
    }
    ggml_build_forward_expand(g, out);
  }
  threads = threads_for_bytes(B.weight_bytes * size_t(n), threads);
  try {
    ThreadPool::get().compute(g, threads);
  } catch (...) {
    ggml_free(ctx);
    throw;
  }
  ggml_free(ctx);
}

}  // namespace spattn::model

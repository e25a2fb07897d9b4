#include "model/layer_graph.hpp"

#include <cmath>
#include <deque>
#include <optional>
#include <vector>

#include "core/thread_pool.hpp"
#include "ggml.h"
#include "kernels/gemm_bf16.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/gemm_widen.hpp"
#include "model/moe_routing.hpp"
#include "model/vector_product.hpp"
#include "spattn/error.hpp"

namespace spattn::model {

namespace {

constexpr int kMaxNodes = 96;

std::optional<kernels::WeightFormat> widen_format(const Model::Weight& w);
kernels::WeightRows widened(const Model::Weight& w);
int64_t int8_product_min_rows(const Model::Weight& w);
int64_t bf16_product_min_rows(const Model::Weight& w);
int64_t widen_product_min_rows(const Model::Weight& w);

// Where in an input's buffer each kernel prepares its rows (floats from the start): the widened
// product's panels, the integer product's quantized rows after them, the bf16 product's rounded
// rows last (an input may feed more than one kernel).
int64_t int8_rows_at(int64_t n, int64_t k) { return kernels::gemm_widen_packed_floats(n, k); }
int64_t bf16_rows_at(int64_t n, int64_t k) {
  return int8_rows_at(n, k) + (kernels::gemm_int8_act_bytes(n, k) + 63) / 64 * 16;
}

// The FFN's gated activation of gate and up (ArchTraits::ffn_act), as llama.cpp's build_ffn and
// build_moe_ffn run each: SwiGLU; GeGLU with ggml's tanh-approximated GELU (LLM_FFN_GELU,
// LLM_FFN_PAR); OpenAI's clamped SwiGLU (LLM_FFN_SWIGLU_OAI_MOE: alpha and limit are its
// constants).
ggml_tensor* gated_activation(ggml_context* ctx, FfnAct act, ggml_tensor* gate, ggml_tensor* up) {
  switch (act) {
    case FfnAct::silu: return ggml_swiglu_split(ctx, gate, up);
    case FfnAct::gelu: return ggml_geglu_split(ctx, gate, up);
    case FfnAct::swiglu_oai: return ggml_swiglu_oai(ctx, gate, up, 1.702f, 7.0f);
  }
  return nullptr;
}

// A prefill product's arguments: its input rows, where its kernel prepares them, and the
// weights as the kernel reads them.
struct ProductKernel;
struct ProductArgs {
  const ProductKernel* kernel = nullptr;
  const float* x = nullptr;
  int64_t n = 0, k = 0, ldx = 0;
  float* xp = nullptr;  // the prepared rows
  kernels::WeightRows widen{};
  kernels::Int8Weights int8{};
  kernels::Bf16Weights bf16{};
};

// One of spattn's prefill product kernels as the graph runs it: the fewest rows it takes w's
// product from (0: never), where in an input's buffer it prepares the rows (floats from the
// start), the preparation (each thread its share), the weights as it reads them (checked), and
// the product.
struct ProductKernel {
  int index;
  int64_t (*min_rows)(const Model::Weight& w);
  int64_t (*offset)(int64_t n, int64_t k);
  void (*prepare)(const ProductArgs& a, int ith, int nth);
  void (*set_weights)(const Model::Weight& w, ProductArgs& a);
  void (*run)(const ProductArgs& a, float* c, int64_t ldc, int ith, int nth);
};

// Integer dot products (kernels/gemm_int8.hpp): the rows quantized to 8-bit blocks, after the
// widened product's panels. A matrix ggml repacked is read in its repacked layout
// (Model::Weight::int8_interleaved).
const ProductKernel kInt8Kernel{
    0,
    &int8_product_min_rows,
    &int8_rows_at,
    [](const ProductArgs& a, int ith, int nth) {
      kernels::gemm_int8_quantize(a.x, a.n, a.k, a.ldx, reinterpret_cast<uint8_t*>(a.xp), ith, nth);
    },
    [](const Model::Weight& w, ProductArgs& a) {
      a.int8 = {*kernels::int8_format(w.type), w.t->data, int64_t(w.t->nb[1]), w.t->ne[1],
                w.repacked ? kernels::Int8Layout::interleaved8 : kernels::Int8Layout::rows};
      kernels::gemm_int8_check(a.int8, a.k);
    },
    [](const ProductArgs& a, float* c, int64_t ldc, int ith, int nth) {
      kernels::gemm_int8_run(a.int8, reinterpret_cast<const uint8_t*>(a.xp), a.n, a.k, c, ldc, ith,
                             nth);
    }};

// The weights widened to f32 tiles (kernels/gemm_widen.hpp says why): the rows packed into
// panels at the buffer's start.
const ProductKernel kWidenKernel{1,
                                 &widen_product_min_rows,
                                 [](int64_t, int64_t) { return int64_t(0); },
                                 [](const ProductArgs& a, int ith, int nth) {
                                   kernels::gemm_widen_pack(a.x, a.n, a.k, a.ldx, a.xp, ith, nth);
                                 },
                                 [](const Model::Weight& w, ProductArgs& a) {
                                   a.widen = widened(w);
                                   kernels::gemm_widen_check(a.widen, a.k);
                                 },
                                 [](const ProductArgs& a, float* c, int64_t ldc, int ith, int nth) {
                                   kernels::gemm_widen_run(a.widen, a.xp, a.n, a.k, c, ldc, ith,
                                                           nth);
                                 }};

// bf16 weights on vdpbf16ps (kernels/gemm_bf16.hpp): the rows rounded to bf16, after the
// integer product's.
const ProductKernel kBf16Kernel{
    2,
    &bf16_product_min_rows,
    &bf16_rows_at,
    [](const ProductArgs& a, int ith, int nth) {
      kernels::gemm_bf16_round(a.x, a.n, a.k, a.ldx, reinterpret_cast<uint16_t*>(a.xp), ith, nth);
    },
    [](const Model::Weight& w, ProductArgs& a) {
      a.bf16 = {w.t->data, int64_t(w.t->nb[1]), w.t->ne[1]};
      kernels::gemm_bf16_check(a.bf16, a.k);
    },
    [](const ProductArgs& a, float* c, int64_t ldc, int ith, int nth) {
      kernels::gemm_bf16_run(a.bf16, reinterpret_cast<const uint16_t*>(a.xp), a.n, a.k, c, ldc, ith,
                             nth);
    }};

// In the order a product looks for its kernel: the integer one first (each takes its own
// weight types: no two take the same matrix).
constexpr int kProductKernels = 3;
const ProductKernel* const kKernels[kProductKernels] = {&kInt8Kernel, &kWidenKernel, &kBf16Kernel};

// Every tensor of the graph is placed by hand on the session's buffers (the context allocates
// nothing). A buffer is reused along the chain (h holds the normed rows, then Wo's output,
// then Wdown's): each value is read only by nodes that run before the next write, since the
// next writer depends on every reader through the chain.
struct Builder {
  ggml_context* ctx = nullptr;
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
    const ProductKernel* K = product_kernel(w, x);
    ggml_tensor* t = at(K                                       ? product(*K, w, x)
                        : vector_product_applies(w, x, threads) ? vector_product(ctx, w, x, claims)
                                                                : ggml_mul_mat(ctx, w.t, x),
                        y);
    return bias.empty() ? t : at(ggml_add(ctx, t, vec(bias)), y);
  }

  // Each plane of w times its own row of x ([K, n, P] against w's [K, M, P]: the latent
  // attention's per-head products), ggml's bits; one token's through plane_vector_product.
  ggml_tensor* plane_product(const Model::Weight& w, ggml_tensor* x) {
    weight_bytes += ggml_nbytes(w.t);
    return own(plane_vector_product_applies(w, x, threads) ? plane_vector_product(ctx, w, x, claims)
                                                           : ggml_mul_mat(ctx, w.t, x));
  }

  int threads = 1;                 // the most the graph runs on
  std::deque<RangeClaims> claims;  // decode's products' (vector_product.hpp), one a node

  // Memory of the graph's own for t (an op's result no session buffer holds), 64-byte aligned.
  // A view (a reshape, a view) reads its source's and keeps it.
  std::deque<std::vector<float>> scratch;
  ggml_tensor* own(ggml_tensor* t) {
    if (t->view_src) return t;
    std::vector<float>& v = scratch.emplace_back(ggml_nbytes(t) / sizeof(float) + 16);
    const uintptr_t p = reinterpret_cast<uintptr_t>(v.data());
    t->data = reinterpret_cast<void*>((p + 63) / 64 * 64);
    return t;
  }

  // A vector of `rows` rows of `cols` values (experts' biases, one row an expert).
  ggml_tensor* mat(const std::vector<float>& v, int64_t cols, int64_t rows) {
    ggml_tensor* t = ggml_new_tensor_2d(ctx, GGML_TYPE_F32, cols, rows);
    t->data = const_cast<float*>(v.data());
    return t;
  }

  // A mixture-of-experts FFN over the normed rows h [D, n] (llama.cpp's build_moe_ffn, op for
  // op, so its bits are llama.cpp's): the routing (moe_routing.hpp: which experts, their
  // weights), the chosen experts' products by ggml's mul_mat_id, weighted and summed. gpt-oss:
  // the router's logits with its bias; each product adds its expert's bias row (ggml_add_id)
  // and the activation is OpenAI's clamped SwiGLU.
  ggml_tensor* moe_ffn(const Config& c, const Model::Layer& L, ggml_tensor* h) {
    const int64_t D = h->ne[0], n = h->ne[1], k = c.n_expert_used, E = c.n_expert;
    ggml_tensor* logits = own(ggml_mul_mat(ctx, L.router.t, h));  // [n_expert, n]
    if (!L.router_b.empty()) logits = own(ggml_add(ctx, logits, vec(L.router_b)));
    const MoeRoute route =
        route_experts(ctx, c, logits, L.exp_probs_b.empty() ? nullptr : vec(L.exp_probs_b),
                      [this](ggml_tensor* t) { return own(t); });
    ggml_tensor* chosen = route.chosen;
    ggml_tensor* w = route.weights;
    ggml_tensor* x = ggml_reshape_3d(ctx, h, D, 1, n);
    weight_bytes += ggml_nbytes(L.router.t);
    for (const Model::Weight* e : {&L.up_exps, &L.gate_exps, &L.down_exps})  // the chosen ones
      weight_bytes += ggml_nbytes(e->t) / size_t(c.n_expert) * size_t(k);
    // One token (decode): the chosen experts' rows split as decode's products are
    // (vector_product.hpp), where the experts are in ggml's own layout; ggml's bits either way.
    const auto product = [&](const Model::Weight& e, ggml_tensor* in,
                             const std::vector<float>& bias) {
      ggml_tensor* y = own(n == 1 && expert_vector_product_applies(e, in, chosen, threads)
                               ? expert_vector_product(ctx, e, in, chosen, claims)
                               : ggml_mul_mat_id(ctx, e.t, in, chosen));
      return bias.empty() ? y : own(ggml_add_id(ctx, y, mat(bias, y->ne[0], E), chosen));
    };
    ggml_tensor* up = product(L.up_exps, x, L.up_exps_b);  // [F, k, n]
    ggml_tensor* gate = product(L.gate_exps, x, L.gate_exps_b);
    ggml_tensor* act = own(gated_activation(ctx, arch_traits(c.arch).ffn_act, gate, up));
    ggml_tensor* out = product(L.down_exps, act, L.down_exps_b);  // [D, k, n]
    out = own(ggml_mul(ctx, out, w));
    ggml_tensor* sum_out = ggml_view_2d(ctx, out, D, n, out->nb[2], 0);
    for (int64_t i = 1; i < k; ++i)
      sum_out = own(
          ggml_add(ctx, sum_out, ggml_view_2d(ctx, out, D, n, out->nb[2], size_t(i) * out->nb[1])));
    return k == 1 ? own(ggml_cont(ctx, sum_out)) : sum_out;
  }

  // Prefill's products on spattn's kernels (ProductKernel below): a node preparing the input's
  // rows once (packed into panels, or quantized to 8-bit blocks), shared by the products that
  // read the same input (q, k, v; gate, up), and a node per product. Where each input is
  // prepared: RowBuffers' comment.
  const RowBuffers* b = nullptr;
  std::deque<ProductArgs> product_args;  // stable addresses: the nodes point at them
  struct Prepared {                      // a kernel's last preparing node, and its input
    ggml_tensor* node = nullptr;
    const ProductArgs* args = nullptr;
    const ggml_tensor* from = nullptr;
  };
  Prepared prepared[kProductKernels];
  static bool product_input(const ggml_tensor* x, int64_t from) {
    return from > 0 && x->ne[1] >= from && x->type == GGML_TYPE_F32 && ggml_is_contiguous(x) &&
           x->ne[2] == 1 && x->ne[3] == 1;
  }
  // The kernel that takes w's product over x's rows, or none (ggml's).
  const ProductKernel* product_kernel(const Model::Weight& w, const ggml_tensor* x) const {
    if (!b->pack) return nullptr;
    for (const ProductKernel* K : kKernels)
      if (product_input(x, K->min_rows(w))) return K;
    return nullptr;
  }
  // The buffer an input of the products is prepared in (RowBuffers' comment): its first
  // gemm_widen_packed_floats(n, k) floats take the widened product's panels, the integer
  // product's quantized rows follow them (an input may feed both: q4_K's q and k, q6_K's v).
  float* pack_buffer(const ggml_tensor* x) const {
    float* dst = x->data == b->att ? b->q
                 : x->data == b->h ? b->att
                 : x->data == b->g ? b->u
                                   : nullptr;
    SPATTN_CHECK(dst != nullptr, "internal: a product input with no buffer to pack it into");
    return dst;
  }
  static void prepare_node(ggml_tensor*, int ith, int nth, void* ud) {
    const auto* a = static_cast<const ProductArgs*>(ud);
    a->kernel->prepare(*a, ith, nth);
  }
  static void product_node(ggml_tensor* dst, int ith, int nth, void* ud) {
    const auto* a = static_cast<const ProductArgs*>(ud);
    a->kernel->run(*a, static_cast<float*>(dst->data), int64_t(dst->nb[1] / sizeof(float)), ith,
                   nth);
  }
  ggml_tensor* product(const ProductKernel& K, const Model::Weight& w, ggml_tensor* x) {
    const int64_t k = x->ne[0], n = x->ne[1];
    SPATTN_CHECK(w.t->ne[0] == k, "internal: a product of ", w.t->ne[0], " columns over rows of ",
                 k);
    Prepared& p = prepared[K.index];
    if (p.from != x) {
      ProductArgs& a = product_args.emplace_back();
      a.kernel = &K;
      a.x = static_cast<const float*>(x->data);
      a.n = n;
      a.k = k;
      a.ldx = int64_t(x->nb[1] / sizeof(float));
      a.xp = pack_buffer(x) + K.offset(n, k);
      ggml_tensor* src[] = {x};
      // The node's own tensor is a token (no data): the prepared rows land in xp.
      p = {ggml_custom_4d(ctx, GGML_TYPE_F32, 1, 1, 1, 1, src, 1, &prepare_node, GGML_N_TASKS_MAX,
                          &a),
           &a, x};
    }
    ProductArgs a = *p.args;  // the prepared input's n, k and rows; this product's weights below
    K.set_weights(w, a);      // and checks them here: a throw inside the graph's threads aborts
    product_args.push_back(a);
    ggml_tensor* src[] = {w.t, p.node};
    return ggml_custom_4d(ctx, GGML_TYPE_F32, w.t->ne[1], n, 1, 1, src, 2, &product_node,
                          GGML_N_TASKS_MAX, &product_args.back());
  }
};

// w's format as the kernel reads it, or none: a matrix ggml repacked into its own interleaved
// rows (q4_0, q4_K, iq4_nl on x86), or a type without a decoder here. ggml's 8-bit products beat
// the widened tile on repacked q4_K and on iq4_xs (BENCHMARKS.md), so those stay ggml's.
std::optional<kernels::WeightFormat> widen_format(const Model::Weight& w) {
  return w.repacked ? std::nullopt : kernels::widen_format(w.type);
}

kernels::WeightRows widened(const Model::Weight& w) {
  return {*widen_format(w), w.t->data, int64_t(w.t->nb[1]), w.t->ne[1]};
}

// The integer product's rows, where it takes w: a format it reads, in ggml's own layout or in
// the repacked one the loader found it in (Model::Weight::int8_interleaved), on a CPU with its
// vector path. A repacked matrix keeps ggml's repacked products for fewer rows (decode), so a
// call picks its kernel by its row count and the weight is held once.
int64_t int8_product_min_rows(const Model::Weight& w) {
  const auto f = kernels::int8_format(w.type);
  return f && (!w.repacked || w.int8_interleaved) && !w.experts ? kernels::gemm_int8_min_rows(*f)
                                                                : 0;
}

// The bf16 product's rows: bf16 matrices in ggml's own layout (ggml repacks none on x86), on a
// CPU where it measured faster than ggml's products (kernels::gemm_bf16_min_rows).
int64_t bf16_product_min_rows(const Model::Weight& w) {
  return w.type == gguf::GgmlType::bf16 && !w.repacked && !w.experts ? kernels::gemm_bf16_min_rows()
                                                                     : 0;
}

// The widened product's rows, where the integer product does not take w.
int64_t widen_product_min_rows(const Model::Weight& w) {
  if (int8_product_min_rows(w) > 0) return 0;
  const auto f = widen_format(w);
  return f ? kernels::gemm_widen_min_rows(*f) : 0;
}

}  // namespace

int64_t spattn_product_min_rows(const Model::Weight& w) {
  for (const ProductKernel* K : kKernels)
    if (const int64_t from = K->min_rows(w); from > 0) return from;
  return 0;
}

bool spattn_product_bf16(const Model::Weight& w) { return bf16_product_min_rows(w) > 0; }

int64_t spattn_prepared_floats(int64_t n, int64_t k, bool bf16) {
  return bf16 ? bf16_rows_at(n, k) + (kernels::gemm_bf16_act_bytes(n, k) + 3) / 4
              : bf16_rows_at(n, k);
}

// A built graph and what its nodes point at: the builder's products' arguments (the custom
// nodes' userdata), a copy of the row buffers' addresses, its context's metadata memory.
struct LayerGraphCache::Entry {
  const Model* m = nullptr;
  RowBuffers b{};
  int64_t n = 0;
  GraphStep step;
  int threads_asked = 0;
  int threads = 1;  // as threads_for_bytes decided at build
  std::vector<uint8_t> meta;
  ggml_context* ctx = nullptr;
  ggml_cgraph* g = nullptr;
  Builder B;
  ~Entry() {
    if (ctx) ggml_free(ctx);
  }
  bool same(const Model& m2, const RowBuffers& b2, int64_t n2, const GraphStep& s2,
            int threads2) const {
    return g && m == &m2 && n == n2 && threads_asked == threads2 && step == s2 && b == b2;
  }
};

LayerGraphCache::LayerGraphCache() = default;
LayerGraphCache::~LayerGraphCache() = default;

namespace {

// DSA's lightning indexer over the normed rows h and the normed q latent qr (llama.cpp's
// deepseek32 and glm-dsa graphs): idx_q = qr Wiq_b; idx_k = LayerNorm(h Wik) * k_norm +
// k_norm_b (with the row's epsilon, llama.cpp's f_norm_eps: ArchTraits::indexer_norm_eps);
// idx_w = h Wproj.
void indexer_head(Builder& B, ggml_cgraph* g, const Config& c, const Model::Layer& L,
                  ggml_tensor* h, ggml_tensor* qr) {
  const RowBuffers& b = *B.b;
  ggml_build_forward_expand(g, B.linear(L.idx_q_b, qr, {}, b.idx_q));
  ggml_tensor* k = B.linear(L.idx_k, h, {}, b.idx_k);
  k = B.at(ggml_norm(B.ctx, k, arch_traits(c.arch).indexer_norm_eps), b.idx_k);
  k = B.at(ggml_mul(B.ctx, k, B.vec(L.idx_k_norm)), b.idx_k);
  k = B.at(ggml_add(B.ctx, k, B.vec(L.idx_k_norm_b)), b.idx_k);
  ggml_build_forward_expand(g, k);
  ggml_build_forward_expand(g, B.linear(L.idx_proj, h, {}, b.idx_w));
}

// The latent attention's head over the normed rows h (llama.cpp's deepseek2 graph, its
// expanded form): q = h Wq, or RMSNorm(h Wq_a) * q_a_norm Wq_b through the q latent; kv_a = h
// Wkv_a (the kv latent, then the rope key); kv_b = RMSNorm(kv latent) * kv_a_norm Wkv_b (each
// head's k_nope and v). The session assembles each head's k (k_nope, rope key) and v from kv_a
// and kv_b. Each buffer is written once its readers have run (RowBuffers).
void mla_head(Builder& B, ggml_cgraph* g, const Config& c, const Model::Layer& L, ggml_tensor* h,
              int64_t n) {
  const RowBuffers& b = *B.b;
  ggml_tensor* q = nullptr;
  ggml_tensor* kv_a = nullptr;
  if (L.wq_a.t) {
    ggml_tensor* qa = B.linear(L.wq_a, h, {}, b.g);
    kv_a = B.linear(L.wkv_a, h, {}, b.kv_a);
    ggml_build_forward_expand(g, qa);
    ggml_build_forward_expand(g, kv_a);
    ggml_tensor* qr = B.norm(qa, L.q_a_norm, c.rms_eps, b.g);
    q = B.linear(L.wq_b, qr, {}, b.latent ? b.kv_b : b.q);
    if (L.idx_q_b.t) indexer_head(B, g, c, L, h, qr);
  } else {
    q = B.linear(L.wq, h, {}, b.latent ? b.kv_b : b.q);
    kv_a = B.linear(L.wkv_a, h, {}, b.kv_a);
  }
  ggml_build_forward_expand(g, q);
  ggml_build_forward_expand(g, kv_a);
  // The latent's part of each row (a strided view, as llama.cpp norms it), normed into h, whose
  // readers (the products above) have run.
  ggml_tensor* latent = ggml_view_2d(B.ctx, kv_a, c.kv_lora_rank, n, kv_a->nb[1], 0);
  latent = B.norm(latent, L.kv_a_norm, c.rms_eps, b.h);
  if (!b.latent) {
    ggml_build_forward_expand(g, B.linear(L.wkv_b, latent, {}, b.kv_b));
    return;
  }
  ggml_build_forward_expand(g, latent);
  // The absorbed form (llama.cpp's deepseek2 graph, is_mla): each head's q_nope times its plane
  // of Wk_b, as llama.cpp's ggml_mul_mat over the permuted heads (so its rounding of q_nope to
  // Wk_b's type is llama.cpp's), then q_pe, into q's rows of kv_lora + rope a head.
  const int64_t H = c.n_head, dk = c.head_dim, rot = c.rot(), nope = dk - rot,
                lora = c.kv_lora_rank, dl = lora + rot;
  const size_t f = sizeof(float);
  ggml_tensor* q_nope = ggml_view_3d(B.ctx, q, nope, H, n, size_t(dk) * f, size_t(H * dk) * f, 0);
  ggml_tensor* q_abs = B.plane_product(L.wk_b, ggml_permute(B.ctx, q_nope, 0, 2, 1, 3));
  ggml_tensor* qd = B.rows(b.q, H * dl, n);
  ggml_tensor* q_lat = ggml_view_3d(B.ctx, qd, lora, H, n, size_t(dl) * f, size_t(H * dl) * f, 0);
  ggml_build_forward_expand(g, ggml_cpy(B.ctx, ggml_permute(B.ctx, q_abs, 0, 2, 1, 3), q_lat));
  ggml_tensor* q_pe =
      ggml_view_3d(B.ctx, q, rot, H, n, size_t(dk) * f, size_t(H * dk) * f, size_t(nope) * f);
  ggml_tensor* q_pe_to =
      ggml_view_3d(B.ctx, qd, rot, H, n, size_t(dl) * f, size_t(H * dl) * f, size_t(lora) * f);
  ggml_build_forward_expand(g, ggml_cpy(B.ctx, q_pe, q_pe_to));
}

// The absorbed form's attention output [n, Hq kv_lora] (each head's in the latent) through each
// head's plane of Wv_b (llama.cpp's v_mla product in build_attn_mha), into g as [n, Hq v].
ggml_tensor* mla_out(Builder& B, const Config& c, const Model::Layer& L, int64_t n) {
  const RowBuffers& b = *B.b;
  const int64_t H = c.n_head, lora = c.kv_lora_rank, dv = c.v_dim();
  ggml_tensor* a = ggml_reshape_3d(B.ctx, B.rows(b.att, H * lora, n), lora, H, n);
  ggml_tensor* o = B.plane_product(L.wv_b, ggml_permute(B.ctx, a, 0, 2, 1, 3));
  o = B.at(ggml_cont(B.ctx, ggml_permute(B.ctx, o, 0, 2, 1, 3)), b.g);
  return ggml_reshape_2d(B.ctx, o, H * dv, n);
}

// Builds the graph of e's step over its n rows into e.
void build_layer_graph(const Model& m, LayerGraphCache::Entry& e, int threads) {
  const Config& c = m.config();
  const RowBuffers& b = e.b;
  const GraphStep& step = e.step;
  const int64_t n = e.n;
  const bool head = step.head >= 0 && step.head < c.n_layer;
  SPATTN_CHECK(!(head && step.logits), "internal: a layer's head and the logits in one graph");
  const int64_t D = c.n_embd, dout = c.n_head * c.v_dim();
  // A MoE FFN adds about 20 nodes (gpt-oss's biases four more, group-limited routing ten,
  // shared experts eight) and two a chosen expert (its view and add); the latent attention's
  // head about ten (twenty in the absorbed form).
  const int64_t max_nodes = kMaxNodes + (c.is_moe() ? 48 + 2 * c.n_expert_used : 0) +
                            (c.is_mla() ? 32 : 0) + (c.has_indexer() ? 16 : 0);
  e.meta.resize(size_t(max_nodes) * ggml_tensor_overhead() +
                ggml_graph_overhead_custom(size_t(max_nodes), false));
  ggml_init_params ip{e.meta.size(), e.meta.data(), true};
  ggml_context* ctx = ggml_init(ip);
  SPATTN_CHECK(ctx != nullptr, "internal: ggml_init failed");
  e.ctx = ctx;
  Builder& B = e.B;
  B.ctx = ctx;
  B.b = &b;
  B.threads = threads;
  ggml_cgraph* g = ggml_new_graph_custom(ctx, size_t(max_nodes), false);
  ggml_tensor* x = B.rows(b.x, D, n);
  if (step.tail >= 0) {
    const Model::Layer& L = m.layer(step.tail);
    ggml_tensor* o =
        B.linear(L.wo, b.latent ? mla_out(B, c, L, n) : B.rows(b.att, dout, n), L.bo, b.h);
    // gemma3: the attention's and the FFN's outputs are RMS-normed before their residual adds
    // (in place: each row is read whole before it is written).
    if (!L.attn_post_norm.empty()) o = B.norm(o, L.attn_post_norm, c.rms_eps, b.h);
    x = B.at(ggml_add(ctx, x, o), b.x);
    ggml_tensor* h = B.norm(x, L.ffn_norm, c.rms_eps, b.h);
    ggml_tensor* down = nullptr;
    if (c.layer_moe(step.tail)) {
      down = B.moe_ffn(c, L, h);
      if (L.gate_shexp.t) {  // deepseek2's shared experts, added to the routed ones' sum
        ggml_tensor* gate = B.linear(L.gate_shexp, h, {}, b.g);
        ggml_tensor* up = B.linear(L.up_shexp, h, {}, b.u);
        ggml_tensor* act = B.at(gated_activation(ctx, FfnAct::silu, gate, up), b.g);
        ggml_tensor* shared = B.own(B.linear(L.down_shexp, act, {}, nullptr));
        down = B.own(ggml_add(ctx, down, shared));
      }
    } else {
      ggml_tensor* gate = B.linear(L.gate, h, {}, b.g);
      ggml_tensor* up = B.linear(L.up, h, {}, b.u);
      ggml_tensor* act = B.at(gated_activation(ctx, arch_traits(c.arch).ffn_act, gate, up), b.g);
      down = B.linear(L.down, act, {}, b.h);
    }
    if (!L.ffn_post_norm.empty()) down = B.norm(down, L.ffn_post_norm, c.rms_eps, b.h);
    x = B.at(ggml_add(ctx, x, down), b.x);
    ggml_build_forward_expand(g, x);
  }
  if (head) {
    const Model::Layer& L = m.layer(step.head);
    ggml_tensor* h = B.norm(x, L.attn_norm, c.rms_eps, b.h);
    if (c.is_mla()) {
      mla_head(B, g, c, L, h, n);
    } else {
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
  }
  if (step.logits) {
    ggml_tensor* h = B.norm(x, m.output_norm(), c.rms_eps, b.h);
    ggml_tensor* out = B.linear(m.output(), h, {}, step.logits);
    if (c.final_logit_softcap > 0) {  // cap * tanh(logits / cap), in place, as llama.cpp
      const float cap = float(c.final_logit_softcap);
      out = B.at(ggml_scale(ctx, out, 1.0f / cap), step.logits);
      out = B.at(ggml_tanh(ctx, out), step.logits);
      out = B.at(ggml_scale(ctx, out, cap), step.logits);
    }
    ggml_build_forward_expand(g, out);
  }
  e.g = g;
  e.threads = threads_for_bytes(B.weight_bytes * size_t(n), threads, kGraphParallelBytes);
}

}  // namespace

void run_layer_graph(const Model& m, const RowBuffers& b, int64_t n, const GraphStep& step,
                     int threads, LayerGraphCache& cache) {
  const size_t slot = size_t(step.tail + 1);
  if (cache.slots_.size() <= slot) cache.slots_.resize(slot + 1);
  std::unique_ptr<LayerGraphCache::Entry>& e = cache.slots_[slot];
  if (!e || !e->same(m, b, n, step, threads)) {
    e.reset();  // a build that throws leaves the slot empty
    auto fresh = std::make_unique<LayerGraphCache::Entry>();
    fresh->m = &m;
    fresh->b = b;
    fresh->n = n;
    fresh->step = step;
    fresh->threads_asked = threads;
    build_layer_graph(m, *fresh, threads);
    e = std::move(fresh);
  }
  ThreadPool::get().compute(e->g, e->threads);
}

}  // namespace spattn::model

// The model runner's forward pass against a naive double-precision forward written plainly
// here, on made-up models: llama, qwen2, qwen3, qwen3moe (and llama's experts), phi3 and
// gemma3 layouts (gemma3's sliding window shorter than the sequences), f32, f16, q8_0 and q6_K
// weights, GQA; prefill in every schedule and decode after it.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <random>

#include "kernels/gemm_bf16.hpp"
#include "kernels/gemm_int8.hpp"
#include "model/layer_graph.hpp"
#include "model/tensor_table.hpp"
#include "spattn/calibration.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "spattn/workload.hpp"
#include "temp_dir.hpp"

namespace spattn::model {
namespace {

// Made-up weights held as f32 values and, for f16 or a quantized type, their stored bytes.
struct MadeUp {
  Config cfg;
  std::vector<std::vector<float>> f32;      // every tensor's values (as stored: rounded, decoded)
  std::vector<std::vector<uint16_t>> half;  // f16 bits when stored as f16
  std::vector<std::vector<uint8_t>> quant;  // blocks when stored quantized
  std::vector<std::pair<const void*, const float*>> decoded;  // a quantized tensor's values
  ModelRefs refs;
  bool tied = true;
};

struct Dims {
  int64_t rows, cols;
};

// quant: the matrices' types in turn (quantized by ggml's quantizer, as llama-quantize writes
// them), which then need dimensions of whole blocks (n_embd, n_ff, 4 x head_dim).
// experts: {n_expert, n_expert_used, n_ff_exp} for a mixture-of-experts FFN (qwen3moe, or
// llama's), else empty.
MadeUp make_model(Arch arch, bool f16, bool tied, uint64_t seed, int64_t head_dim = 16,
                  const std::vector<WeightType>& quant = {}, int64_t n_embd = 48, int64_t n_ff = 72,
                  const std::vector<int64_t>& experts = {}) {
  MadeUp m;
  Config& c = m.cfg;
  c.arch = arch;
  c.n_layer = 2;
  c.n_embd = n_embd;
  c.n_head = 4;
  c.n_head_kv = 2;
  c.head_dim = head_dim;
  c.n_ff = n_ff;
  c.n_vocab = 61;
  c.n_ctx_train = 256;
  c.rms_eps = 1e-5;
  const ArchTraits& t = arch_traits(arch);
  c.rope_base = t.rope_neox ? 1e6 : 1e4;
  c.rope_neox = t.rope_neox;
  if (!experts.empty()) {
    c.n_expert = experts[0];
    c.n_expert_used = experts[1];
    c.n_ff_exp = experts[2];
  }
  m.tied = tied;
  std::mt19937_64 rng(seed);
  m.f32.reserve(64);
  m.half.reserve(64);
  m.quant.reserve(64);
  size_t next_quant = 0;
  auto make = [&](int64_t rows, int64_t cols, float sigma, float mean, bool matrix) {
    std::normal_distribution<float> nd(mean, sigma);
    std::vector<float> w(size_t(rows * cols));
    for (float& x : w) x = nd(rng);
    WeightRef r;
    r.rows = rows;
    r.cols = cols;
    if (!quant.empty() && matrix) {
      r.type = quant[next_quant++ % quant.size()];
      const size_t row_bytes = gguf::row_bytes(r.type, cols);
      std::vector<uint8_t> b(row_bytes * size_t(rows));
      for (int64_t i = 0; i < rows; ++i) {
        gguf::quantize_row(r.type, &w[size_t(i * cols)], &b[size_t(i) * row_bytes], cols);
        gguf::dequantize_row(r.type, &b[size_t(i) * row_bytes], &w[size_t(i * cols)], cols);
      }
      m.quant.push_back(std::move(b));
      r.data = m.quant.back().data();
      m.f32.push_back(std::move(w));
      m.decoded.emplace_back(r.data, m.f32.back().data());
      return r;
    }
    if (f16 && matrix) {
      std::vector<uint16_t> b(w.size());
      for (size_t i = 0; i < w.size(); ++i) {
        b[i] = f32_to_f16(w[i]);
        w[i] = f16_to_f32(b[i]);
      }
      m.half.push_back(std::move(b));
      r.type = WeightType::f16;
      r.data = m.half.back().data();
    } else {
      r.type = WeightType::f32;
    }
    m.f32.push_back(std::move(w));
    if (r.type == WeightType::f32) r.data = m.f32.back().data();
    return r;
  };
  const int64_t D = c.n_embd, dq = c.n_head * c.head_dim, dkv = c.n_head_kv * c.head_dim;
  const float sD = 1.0f / std::sqrt(float(D));
  m.refs.cfg = c;
  // Embeddings scaled by sqrt(D) (gemma3): rows of sd 1 / sqrt(D) start at sd 1.
  m.refs.tok_embd = make(c.n_vocab, D, t.embd_scale ? sD : 1.0f, 0.0f, true);
  // Whether the architecture's layers have a tensor (the tensor list's rule).
  const auto has = [&](WeightRef LayerRefs::*r) {
    return tensor_need(t, {c.is_moe(), false}, r) != Presence::absent;
  };
  m.refs.output_norm = make(1, D, 0.1f, 1.0f, false);
  if (!tied) m.refs.output = make(c.n_vocab, D, sD, 0.0f, true);
  for (int64_t l = 0; l < c.n_layer; ++l) {
    LayerRefs L;
    L.attn_norm = make(1, D, 0.1f, 1.0f, false);
    L.wq = make(dq, D, 2 * sD, 0, true);
    L.wk = make(dkv, D, 2 * sD, 0, true);
    L.wv = make(dkv, D, sD, 0, true);
    L.wo = make(D, dq, 1.0f / std::sqrt(float(dq)), 0, true);
    if (has(&LayerRefs::q_norm)) {
      L.q_norm = make(1, c.head_dim, 0.3f, 1.0f, false);
      L.k_norm = make(1, c.head_dim, 0.3f, 1.0f, false);
    }
    if (has(&LayerRefs::attn_post_norm)) {
      L.attn_post_norm = make(1, D, 0.3f, 1.0f, false);
      L.ffn_post_norm = make(1, D, 0.3f, 1.0f, false);
    }
    if (has(&LayerRefs::bq)) {
      L.bq = make(1, dq, 0.3f, 0, false);
      L.bk = make(1, dkv, 0.3f, 0, false);
      L.bv = make(1, dkv, 0.3f, 0, false);
    }
    if (has(&LayerRefs::sinks)) {  // Wo's bias; sink logits about as large as the scores
      L.bo = make(1, D, 0.3f, 0, false);
      L.sinks = make(1, c.n_head, 1.0f, 1.0f, false);
    }
    L.ffn_norm = make(1, D, 0.1f, 1.0f, false);
    if (c.is_moe()) {  // the router f32 (as in the files); the experts' planes one after another
      const int64_t E = c.n_expert, F = c.n_ff_exp;
      // Router scores of sd about 8 keep most rows' choices clear of near ties.
      L.router = make(E, D, 8 * sD, 0, false);
      const auto planes = [&](int64_t rows, int64_t cols, float sd) {
        WeightRef r = make(E * rows, cols, sd, 0, true);
        r.rows = rows;
        r.planes = E;
        return r;
      };
      L.gate_exps = planes(F, D, sD);
      L.up_exps = planes(F, D, sD);
      L.down_exps = planes(D, F, 1.0f / std::sqrt(float(F)));
      if (has(&LayerRefs::router_b)) {  // the router's bias, one row of biases an expert
        L.router_b = make(1, E, 0.3f, 0, false);
        // gate's mean of 2 puts some activations past the SwiGLU's limit of 7
        L.gate_exps_b = make(E, F, 2.0f, 2.0f, false);
        L.up_exps_b = make(E, F, 2.0f, 0, false);
        L.down_exps_b = make(E, D, 0.3f, 0, false);
      }
    } else {
      L.gate = make(c.n_ff, D, sD, 0, true);
      L.up = make(c.n_ff, D, sD, 0, true);
      L.down = make(D, c.n_ff, 1.0f / std::sqrt(float(c.n_ff)), 0, true);
    }
    m.refs.layers.push_back(L);
  }
  return m;
}

// ---- The plain forward: double everywhere, one token at a time, full causal attention. ----
using Vec = std::vector<double>;

double at(const WeightRef& w, int64_t r, int64_t c) {
  const int64_t i = r * w.cols + c;
  return w.type == WeightType::f16 ? double(f16_to_f32(static_cast<const uint16_t*>(w.data)[i]))
                                   : double(static_cast<const float*>(w.data)[i]);
}
// Plane e of an experts' tensor, as one matrix.
WeightRef plane(const WeightRef& w, int64_t e) {
  WeightRef r = w;
  r.planes = 1;
  const size_t elem = w.type == WeightType::f16 ? 2 : 4;
  r.data = static_cast<const uint8_t*>(w.data) + size_t(e * w.rows * w.cols) * elem;
  return r;
}
Vec matvec(const WeightRef& w, const Vec& x) {
  Vec y(size_t(w.rows), 0.0);
  for (int64_t r = 0; r < w.rows; ++r)
    for (int64_t c = 0; c < w.cols; ++c) y[size_t(r)] += at(w, r, c) * x[size_t(c)];
  return y;
}
Vec rmsnorm(const Vec& x, const WeightRef& w, double eps) {
  double ss = 0;
  for (double v : x) ss += v * v;
  const double s = 1.0 / std::sqrt(ss / double(x.size()) + eps);
  Vec y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * s * at(w, 0, int64_t(i));
  return y;
}
// factors (empty or d / 2): pair p's frequency divided by factors[p] (rope_freqs.weight,
// LongRoPE's long or short set); every cos and sin times mscale (LongRoPE's attn factor).
void rope(double* x, int64_t d, int64_t pos, double base, bool neox,
          const std::vector<float>& factors, double mscale) {
  for (int64_t p = 0; p < d / 2; ++p) {
    double a = double(pos) * std::pow(base, -2.0 * double(p) / double(d));
    if (!factors.empty()) a /= double(factors[size_t(p)]);
    const int64_t i = neox ? p : 2 * p, j = neox ? p + d / 2 : 2 * p + 1;
    const double x0 = x[i], x1 = x[j];
    const double co = mscale * std::cos(a), si = mscale * std::sin(a);
    x[i] = x0 * co - x1 * si;
    x[j] = x0 * si + x1 * co;
  }
}

// A head's K or V row as a cache of type t holds it: through f32, rounded (kv_round_row).
void round_as_cache(double* x, int64_t d, KVType t) {
  if (t == KVType::f32) return;
  std::vector<float> f(x, x + d);
  kv_round_row(t, f.data(), f.data(), d);
  std::copy(f.begin(), f.end(), x);
}

// Logits after every token of `tokens` in a context of n_ctx; K and V rows rounded as a cache
// of kt / vt holds them.
// m with its quantized matrices read as their decoded f32 values.
MadeUp decoded_view(const MadeUp& m) {
  MadeUp v = m;
  const auto fix = [&](WeightRef& r) {
    for (const auto& [bytes, values] : m.decoded)
      if (r.data == bytes) {
        r.type = WeightType::f32;
        r.data = values;
      }
  };
  fix(v.refs.tok_embd);
  fix(v.refs.output);
  for (LayerRefs& L : v.refs.layers)
    for (WeightRef* r : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down, &L.gate_exps,
                         &L.up_exps, &L.down_exps})
      fix(*r);
  return v;
}

// margins (MoE): per row, the smallest gap over the layers between the router scores of the
// last expert chosen and the first one not chosen (a near tie there is a coin toss for any
// rounding, and a flip moves the row's output by the experts' difference).
std::vector<Vec> plain_forward(const MadeUp& made, const std::vector<int32_t>& tokens,
                               int64_t n_ctx, KVType kt = KVType::f32, KVType vt = KVType::f32,
                               Vec* margins = nullptr) {
  const MadeUp m = decoded_view(made);
  const Config& c = m.cfg;
  // LongRoPE (llama.cpp): the long divisors once the context passes the original one.
  const std::vector<float>& factors = !c.rope_freq_factors.empty() ? c.rope_freq_factors
                                      : n_ctx > (c.n_ctx_orig > 0 ? c.n_ctx_orig : c.n_ctx_train)
                                          ? c.rope_factors_long
                                          : c.rope_factors_short;
  const int64_t n = int64_t(tokens.size()), D = c.n_embd, d = c.head_dim;
  const ArchTraits& t = arch_traits(c.arch);
  std::vector<Vec> x(static_cast<size_t>(n));
  if (margins) margins->assign(size_t(n), HUGE_VAL);
  for (int64_t i = 0; i < n; ++i)
    for (int64_t e = 0; e < D; ++e)
      x[size_t(i)].push_back(at(m.refs.tok_embd, tokens[size_t(i)], e) *
                             (t.embd_scale ? std::sqrt(double(D)) : 1.0));
  // gemma3's global layers divide every angle by the linear factor.
  const std::vector<float> linear(size_t(d / 2), float(c.rope_linear_factor));
  for (int64_t l = 0; l < c.n_layer; ++l) {
    const LayerRefs& L = m.refs.layers[size_t(l)];
    // A sliding-window layer (gemma3's local ones): its own rope base, unscaled, and row i sees
    // keys (i - W, i] only.
    // gpt-oss's local layers keep the global layers' scaling (swa_rope_scaled).
    const bool local = c.is_swa(l);
    const double base = local ? c.rope_base_swa : c.rope_base;
    const std::vector<float>& fac = local && !c.swa_rope_scaled   ? std::vector<float>{}
                                    : c.rope_linear_factor != 1.0 ? linear
                                                                  : factors;
    const auto add_bias = [](Vec& y, const WeightRef& b, int64_t row = 0) {
      for (size_t e = 0; e < y.size(); ++e) y[e] += at(b, row, int64_t(e));
    };
    const double scale = c.attn_scale > 0 ? c.attn_scale : 1.0 / std::sqrt(double(d));
    std::vector<Vec> q(static_cast<size_t>(n)), k(static_cast<size_t>(n)),
        v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) {
      const Vec h = rmsnorm(x[size_t(i)], L.attn_norm, c.rms_eps);
      q[size_t(i)] = matvec(L.wq, h);
      k[size_t(i)] = matvec(L.wk, h);
      v[size_t(i)] = matvec(L.wv, h);
      if (L.bq.data) {  // qwen2, gpt-oss
        add_bias(q[size_t(i)], L.bq);
        add_bias(k[size_t(i)], L.bk);
        add_bias(v[size_t(i)], L.bv);
      }
      if (t.qk_norm) {  // per-head RMSNorm
        auto head_norm = [&](Vec& x, int64_t heads, const WeightRef& w) {
          for (int64_t hh = 0; hh < heads; ++hh) {
            const Vec part(x.begin() + hh * d, x.begin() + (hh + 1) * d);
            const Vec nrm = rmsnorm(part, w, c.rms_eps);
            std::copy(nrm.begin(), nrm.end(), x.begin() + hh * d);
          }
        };
        head_norm(q[size_t(i)], c.n_head, L.q_norm);
        head_norm(k[size_t(i)], c.n_head_kv, L.k_norm);
      }
      for (int64_t hh = 0; hh < c.n_head; ++hh)
        rope(&q[size_t(i)][size_t(hh * d)], d, i, base, c.rope_neox, fac, c.rope_attn_factor);
      for (int64_t hh = 0; hh < c.n_head_kv; ++hh)
        rope(&k[size_t(i)][size_t(hh * d)], d, i, base, c.rope_neox, fac, c.rope_attn_factor);
      for (int64_t hh = 0; hh < c.n_head_kv; ++hh) {
        round_as_cache(&k[size_t(i)][size_t(hh * d)], d, kt);
        round_as_cache(&v[size_t(i)][size_t(hh * d)], d, vt);
      }
    }
    for (int64_t i = 0; i < n; ++i) {
      Vec att(size_t(c.n_head * d), 0.0);
      for (int64_t hh = 0; hh < c.n_head; ++hh) {
        const int64_t kh = hh / (c.n_head / c.n_head_kv);
        Vec s;
        double mx = -1e300;
        const int64_t j0 = local ? std::max<int64_t>(0, i - c.sliding_window + 1) : 0;
        for (int64_t j = j0; j <= i; ++j) {
          double dot = 0;
          for (int64_t e = 0; e < d; ++e)
            dot += q[size_t(i)][size_t(hh * d + e)] * k[size_t(j)][size_t(kh * d + e)];
          s.push_back(dot * scale);
          mx = std::max(mx, s.back());
        }
        double l = 0;
        for (double& w : s) l += (w = std::exp(w - mx));
        // gpt-oss: the head's sink logit in the softmax's sum, a key with a zero value
        if (L.sinks.data) l += std::exp(at(L.sinks, 0, hh) - mx);
        for (int64_t j = j0; j <= i; ++j)
          for (int64_t e = 0; e < d; ++e)
            att[size_t(hh * d + e)] += s[size_t(j - j0)] / l * v[size_t(j)][size_t(kh * d + e)];
      }
      Vec o = matvec(L.wo, att);
      if (L.bo.data) add_bias(o, L.bo);
      if (t.post_norms) o = rmsnorm(o, L.attn_post_norm, c.rms_eps);
      for (int64_t e = 0; e < D; ++e) x[size_t(i)][size_t(e)] += o[size_t(e)];
      const Vec h = rmsnorm(x[size_t(i)], L.ffn_norm, c.rms_eps);
      const bool oss = t.ffn_act == FfnAct::swiglu_oai;
      // expert: gpt-oss's expert bias rows (-1: none).
      const auto ffn = [&](const WeightRef& wg, const WeightRef& wu, const WeightRef& wd,
                           int64_t expert = -1) {
        Vec g = matvec(wg, h);
        Vec u = matvec(wu, h);
        if (expert >= 0) {
          add_bias(g, L.gate_exps_b, expert);
          add_bias(u, L.up_exps_b, expert);
        }
        for (size_t e = 0; e < g.size(); ++e) {
          const double a = g[e];
          if (oss) {  // OpenAI's SwiGLU: gate capped at 7, up clamped to +-7, alpha 1.702
            const double x = std::min(a, 7.0), y = std::clamp(u[e], -7.0, 7.0);
            g[e] = x / (1 + std::exp(-1.702 * x)) * (y + 1);
            continue;
          }
          // gemma3: GELU, tanh approximation (ggml's, llama.cpp's); else SiLU.
          g[e] = (t.ffn_act == FfnAct::gelu
                      ? 0.5 * a * (1 + std::tanh(std::sqrt(2 / M_PI) * (a + 0.044715 * a * a * a)))
                      : a / (1 + std::exp(-a))) *
                 u[e];
        }
        Vec y = matvec(wd, g);
        if (expert >= 0) add_bias(y, L.down_exps_b, expert);
        return y;
      };
      Vec dn(size_t(D), 0.0);
      if (c.is_moe()) {
        // The router's softmax, its n_expert_used most likely experts, their probabilities
        // normalized to sum 1 weighting their FFNs. gpt-oss: the router's bias first; the
        // same experts, their weights the softmax of their logits alone (the same ratios).
        Vec p = matvec(L.router, h);
        if (L.router_b.data) add_bias(p, L.router_b);
        const double mx = *std::max_element(p.begin(), p.end());
        for (double& z : p) z = std::exp(z - mx);
        std::vector<int64_t> ids(p.size());
        for (size_t e = 0; e < ids.size(); ++e) ids[e] = int64_t(e);
        std::sort(ids.begin(), ids.end(),
                  [&](int64_t a, int64_t b) { return p[size_t(a)] > p[size_t(b)]; });
        if (margins && c.n_expert_used < c.n_expert) {
          const double gap = std::log(p[size_t(ids[size_t(c.n_expert_used - 1)])] /
                                      p[size_t(ids[size_t(c.n_expert_used)])]);
          (*margins)[size_t(i)] = std::min((*margins)[size_t(i)], gap);
        }
        ids.resize(size_t(c.n_expert_used));
        double sum = 0;
        for (int64_t e : ids) sum += p[size_t(e)];
        for (int64_t e : ids) {
          const Vec y = ffn(plane(L.gate_exps, e), plane(L.up_exps, e), plane(L.down_exps, e),
                            t.expert_biases ? e : -1);
          for (int64_t j = 0; j < D; ++j) dn[size_t(j)] += p[size_t(e)] / sum * y[size_t(j)];
        }
      } else {
        dn = ffn(L.gate, L.up, L.down);
      }
      if (t.post_norms) dn = rmsnorm(dn, L.ffn_post_norm, c.rms_eps);
      for (int64_t e = 0; e < D; ++e) x[size_t(i)][size_t(e)] += dn[size_t(e)];
    }
  }
  std::vector<Vec> logits;
  const WeightRef& out = m.tied ? m.refs.tok_embd : m.refs.output;
  for (int64_t i = 0; i < n; ++i) {
    logits.push_back(matvec(out, rmsnorm(x[size_t(i)], m.refs.output_norm, c.rms_eps)));
    if (c.final_logit_softcap > 0)
      for (double& z : logits.back())
        z = c.final_logit_softcap * std::tanh(z / c.final_logit_softcap);
  }
  return logits;
}

std::vector<int32_t> some_tokens(int64_t n, int64_t vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t(rng() % uint64_t(vocab)));
  return t;
}

double max_diff(const float* got, const Vec& want) {
  double d = 0;
  for (size_t i = 0; i < want.size(); ++i) d = std::max(d, std::abs(double(got[i]) - want[i]));
  return d;
}

// The smallest gap of router scores (natural log of the probabilities' ratio) at which a MoE
// row is compared: the runner's f16 or 8-bit activations move the scores by their rounding,
// and a choice that flips moves the row by the two experts' difference, not by rounding.
constexpr double kNearTie = 0.1;

// Prefill `n_prompt` tokens in the given schedule, then decode the rest; every logit row is
// compared with the plain forward.
void expect_equals_plain(const MadeUp& mu, const SessionOptions& so, int64_t n_prompt,
                         int64_t n_decode, double tol) {  // tol < 0: relative
  const Model model(mu.refs);
  EXPECT_EQ(model.tied_output(), mu.tied);
  const auto tokens = some_tokens(n_prompt + n_decode, mu.cfg.n_vocab, 5);
  Vec margins;
  const auto want = plain_forward(mu, tokens, so.n_ctx, so.cache_type_k, so.cache_type_v, &margins);
  double scale = 0;  // the tolerance is small next to the logits themselves
  for (const Vec& r : want)
    for (double x : r) scale = std::max(scale, std::abs(x));
  EXPECT_GT(scale, 1.0);
  if (tol < 0) tol = -tol * scale;  // a negative tol is relative to the largest logit
  // A MoE row whose router nearly ties at the last expert chosen is not compared: the
  // runner's rounding (f16 or 8-bit activations) may pick the other expert there, as
  // llama.cpp's may. The other rows must match, and such rows must stay few.
  const auto compared = [&](int64_t i) { return margins[size_t(i)] >= kNearTie; };
  int64_t skipped = 0;
  for (int64_t i = 0; i < n_prompt + n_decode; ++i) skipped += !compared(i);
  EXPECT_LE(skipped * 5, n_prompt + n_decode) << skipped << " near ties";
  Session s(model, so);
  const int64_t V = mu.cfg.n_vocab;
  std::vector<float> logits(size_t(n_prompt * V));
  s.prefill(std::span(tokens).first(size_t(n_prompt)), logits.data(), 0);
  for (int64_t i = 0; i < n_prompt; ++i) {
    if (compared(i)) {
      EXPECT_LT(max_diff(&logits[size_t(i * V)], want[size_t(i)]), tol) << "row " << i;
    }
  }
  std::vector<float> one(static_cast<size_t>(V));
  for (int64_t i = n_prompt; i < n_prompt + n_decode; ++i) {
    s.decode(tokens[size_t(i)], one.data());
    if (compared(i)) {
      EXPECT_LT(max_diff(one.data(), want[size_t(i)]), tol) << "decode row " << i;
    }
  }
  EXPECT_EQ(s.n_past(), n_prompt + n_decode);
  // A reset session computes the same again; logits_from asks for the tail only.
  s.reset();
  std::vector<float> tail(size_t(3 * V));
  s.prefill(std::span(tokens).first(size_t(n_prompt)), tail.data(), n_prompt - 3);
  for (int64_t i = 0; i < 3; ++i) {
    if (compared(n_prompt - 3 + i)) {
      EXPECT_LT(max_diff(&tail[size_t(i * V)], want[size_t(n_prompt - 3 + i)]), tol);
    }
  }
}

// An f32 cache unless a test asks for another type: these tests check the forward pass itself.
SessionOptions dense_opts(int64_t batch, int64_t ubatch, KVType kv = KVType::f32) {
  SessionOptions so;
  so.cache_type_k = so.cache_type_v = kv;
  so.n_ctx = 128;
  so.n_batch = batch;
  so.n_ubatch = ubatch;
  return so;
}

TEST(ModelForward, LlamaF32EqualsPlainForward) {
  expect_equals_plain(make_model(Arch::llama, false, true, 1), dense_opts(40, 17), 70, 4, 2e-4);
}
// f16 weights: ggml's products (llama.cpp's) round the activations to f16 on some paths (the
// one-row dot products) and keep them f32 on others (tinyBLAS), so the tolerance is f16's:
// a few 1e-3 of the largest logit, where a wrong weight, position or head is off by O(1).
constexpr double kF16Tol = -4e-3;
TEST(ModelForward, LlamaF16UntiedEqualsPlainForward) {
  expect_equals_plain(make_model(Arch::llama, true, false, 2), dense_opts(64, 64), 50, 3, kF16Tol);
}
// q8_0, q6_K, q5_K and q3_K matrices (Q8_0, Q6_K, Q5_K_M, Q4_K_M and Q3_K_M files hold them),
// against the plain forward over the decoded weights. Decode's rows run on ggml's 8-bit
// products, and where the CPU has AVX-512 VNNI prefill's q8_0, q6_K and q5_K products run on
// spattn's integer products (kernels/gemm_int8.hpp): both round the activations to 8 bits, as
// llama.cpp's products do, so every row and the KV cache it leaves carry that rounding (up to
// 2.2% of the largest logit when measured; 1.2% while only decode's rows did). A wrong block,
// scale or row is off by the logits' own size.
constexpr double kQuantTol = -3e-2;
TEST(ModelForward, LlamaQuantizedEqualsPlainForward) {
  const MadeUp mu = make_model(
      Arch::llama, false, false, 3, 64,
      {WeightType::q8_0, WeightType::q6_K, WeightType::q5_K, WeightType::q3_K}, 256, 512);
  expect_equals_plain(mu, dense_opts(88, 64), 88, 3, kQuantTol);
}
// q4_K, q4_0 and iq4_nl matrices (Q4_K_M, Q4_0 and IQ4_NL files): ggml repacks them on x86
// (8 rows interleaved) and decode's rows run on its repacked products; where the CPU has AVX-512
// VNNI prefill's rows run on spattn's integer products over that same repacked copy. Every
// matrix ggml repacked into the layout the integer products read must be found in it by the
// loader (else ggml changed its layout, and prefill would fall back to ggml's products).
TEST(ModelForward, LlamaRepackedQuantizedEqualsPlainForward) {
  const MadeUp mu = make_model(Arch::llama, false, false, 4, 64,
                               {WeightType::q4_K, WeightType::q4_0, WeightType::iq4_nl}, 256, 512);
  {
    const Model model(mu.refs);
    for (int64_t l = 0; l < mu.cfg.n_layer; ++l) {
      const Model::Layer& L = model.layer(l);
      for (const Model::Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down})
        if (w->repacked) EXPECT_TRUE(w->int8_interleaved) << "layer " << l;
    }
  }
  expect_equals_plain(mu, dense_opts(88, 64), 88, 3, kQuantTol);
}
// mxfp4 and iq4_xs matrices: mxfp4 is gpt-oss's experts' format (its MXFP4_MOE files keep the
// other matrices in q8_0), here every other matrix, to run the integer products' mxfp4 tile in
// a model; ggml repacks mxfp4 on x86 (block_mxfp4x8) and prefill's integer products read that
// copy where the CPU has AVX-512 VNNI, so the loader must find it in their layout.
TEST(ModelForward, LlamaMxfp4EqualsPlainForward) {
  const MadeUp mu = make_model(Arch::llama, false, false, 5, 64,
                               {WeightType::mxfp4, WeightType::iq4_xs}, 256, 512);
  {
    const Model model(mu.refs);
    int mxfp4 = 0;
    for (int64_t l = 0; l < mu.cfg.n_layer; ++l) {
      const Model::Layer& L = model.layer(l);
      for (const Model::Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down}) {
        if (w->repacked) EXPECT_TRUE(w->int8_interleaved) << "layer " << l;
        if (w->type != WeightType::mxfp4) continue;
        ++mxfp4;
        // Prefill's 88 rows take the integer product wherever the CPU has its vector loops.
        if (kernels::gemm_int8_vnni()) EXPECT_EQ(spattn_product_min_rows(*w), 16) << "layer " << l;
      }
    }
    EXPECT_GT(mxfp4, 4);
  }
  expect_equals_plain(mu, dense_opts(88, 64), 88, 3, kQuantTol);
}
// bf16 matrices: where the CPU has AVX512_BF16 prefill's calls of 64 rows or more run on
// spattn's bf16 product (kernels/gemm_bf16.hpp), the shorter ones (88 rows in ubatches of 64:
// 64 and 24) on ggml's; both round the activations to bf16 (2^-9 relative), which every row
// and the KV cache carry: 1.0% of the largest logit when measured, within the 8-bit activations'
// rounding (kQuantTol), where a wrong row or column is off by the logits' own size.
TEST(ModelForward, LlamaBf16EqualsPlainForward) {
  const MadeUp mu = make_model(Arch::llama, false, false, 6, 64, {WeightType::bf16}, 256, 512);
  {
    const Model model(mu.refs);
    const Model::Layer& L = model.layer(0);
    for (const Model::Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down})
      EXPECT_EQ(spattn_product_min_rows(*w), kernels::gemm_bf16_dot() ? 64 : 0);
  }
  expect_equals_plain(mu, dense_opts(88, 64), 88, 3, kQuantTol);
}
// Llama 3.1's rope scaling: rope_freqs divides each pair's frequency. The factors are the
// llama3 ones for an original context of 32 (head dim 16, base 1e4: pair 0 kept, pair 1
// blended, the rest slowed 8x), so all three kinds of pair are exercised.
MadeUp with_llama3_rope(MadeUp m) {
  ModelShape s;
  s.head_dim = m.cfg.head_dim;
  s.rope_base = float(m.cfg.rope_base);
  s.rope_original_context = 32;
  m.cfg.rope_freq_factors = m.refs.cfg.rope_freq_factors = llama3_rope_factors(s);
  return m;
}
TEST(ModelForward, LlamaRopeFreqsEqualPlainForward) {
  const MadeUp mu = with_llama3_rope(make_model(Arch::llama, false, true, 11));
  const std::vector<float>& f = mu.cfg.rope_freq_factors;
  ASSERT_EQ(f.size(), 8u);
  EXPECT_EQ(f[0], 1.0f);
  EXPECT_GT(f[1], 1.0f);
  EXPECT_LT(f[1], 8.0f);
  EXPECT_EQ(f[7], 8.0f);
  expect_equals_plain(mu, dense_opts(40, 17), 70, 4, 2e-4);
  expect_equals_plain(with_llama3_rope(make_model(Arch::llama, true, false, 12)),
                      dense_opts(64, 24), 60, 3, kF16Tol);
  // The factors matter: the unscaled forward is far from the scaled one.
  MadeUp plain = mu;
  plain.cfg.rope_freq_factors.clear();
  const auto tokens = some_tokens(70, mu.cfg.n_vocab, 5);
  const auto a = plain_forward(mu, tokens, 128), b = plain_forward(plain, tokens, 128);
  double diff = 0;
  for (size_t i = 0; i < a.size(); ++i)
    for (size_t j = 0; j < a[i].size(); ++j) diff = std::max(diff, std::abs(a[i][j] - b[i][j]));
  EXPECT_GT(diff, 0.1);
}

// Qwen3: per-head RMSNorm on q and k before RoPE, no biases, rotate-half pairs; head dim 32
// so that heads x head dim (128) differs from the embedding (48).
// Phi-3's LongRoPE: rotate-half pairs, per-pair divisors (long past the original context,
// short within it) and every cos / sin scaled by the attn factor (scores by its square). The
// fused attn_qkv / ffn_up of its files are split at load (test_model_arch.cpp); here the
// forward itself.
MadeUp with_longrope(MadeUp m, int64_t n_ctx_orig) {
  ModelShape s;
  s.arch = "phi3";
  s.head_dim = m.cfg.head_dim;
  s.context = 256;
  s.rope_original_context = 32;
  for (Config* c : {&m.cfg, &m.refs.cfg}) {
    c->rope_factors_long = longrope_factors(s, true);
    c->rope_factors_short = longrope_factors(s, false);
    c->n_ctx_orig = n_ctx_orig;
    c->rope_attn_factor = longrope_attn_factor(s);
  }
  return m;
}
TEST(ModelForward, Phi3LongRopeEqualsPlainForward) {
  const MadeUp base = make_model(Arch::phi3, false, false, 17, 32);
  EXPECT_TRUE(base.cfg.rope_neox);
  // The sessions below run n_ctx = 128: past an original context of 64 (long), within 256
  // (short).
  const MadeUp lng = with_longrope(base, 64), shrt = with_longrope(base, 256);
  EXPECT_EQ(&lng.cfg.rope_factors(128), &lng.cfg.rope_factors_long);
  EXPECT_EQ(&shrt.cfg.rope_factors(128), &shrt.cfg.rope_factors_short);
  EXPECT_GT(lng.cfg.rope_attn_factor, 1.1);
  expect_equals_plain(lng, dense_opts(40, 17), 70, 4, 2e-4);
  expect_equals_plain(shrt, dense_opts(64, 24), 60, 3, 2e-4);
  expect_equals_plain(with_longrope(make_model(Arch::phi3, true, true, 18), 64), dense_opts(64, 64),
                      50, 3, kF16Tol);
  // Each part matters: the long set, the short set and the attn factor move the logits.
  const auto tokens = some_tokens(70, base.cfg.n_vocab, 5);
  auto far = [&](const MadeUp& a, const MadeUp& b) {
    const auto x = plain_forward(a, tokens, 128), y = plain_forward(b, tokens, 128);
    double diff = 0;
    for (size_t i = 0; i < x.size(); ++i)
      for (size_t j = 0; j < x[i].size(); ++j) diff = std::max(diff, std::abs(x[i][j] - y[i][j]));
    return diff;
  };
  EXPECT_GT(far(lng, shrt), 0.05);
  MadeUp unscaled = lng;
  unscaled.cfg.rope_attn_factor = 1.0;
  EXPECT_GT(far(lng, unscaled), 0.05);
}
TEST(ModelForward, Qwen3F32EqualsPlainForward) {
  expect_equals_plain(make_model(Arch::qwen3, false, false, 13, 32), dense_opts(32, 8), 45, 3,
                      2e-4);
}
TEST(ModelForward, Qwen3F16EqualsPlainForward) {
  expect_equals_plain(make_model(Arch::qwen3, true, true, 14), dense_opts(100, 30), 61, 2, kF16Tol);
}
// Mixtures of experts: qwen3moe (6 experts of 24, 2 a token) in f32, f16 and q8_0 / q6_K,
// and llama's experts (Mixtral's layout: 4 experts of the FFN's size, 2 a token); prefill in
// chunks, decode after it. A wrong expert, weight or plane moves the logits by their own size.
TEST(ModelForward, Qwen3MoeEqualsPlainForward) {
  expect_equals_plain(make_model(Arch::qwen3moe, false, false, 21, 32, {}, 48, 72, {6, 2, 24}),
                      dense_opts(32, 8), 45, 3, 2e-4);
  expect_equals_plain(make_model(Arch::qwen3moe, true, true, 22, 16, {}, 48, 72, {6, 2, 24}),
                      dense_opts(100, 30), 61, 2, kF16Tol);
  expect_equals_plain(make_model(Arch::qwen3moe, false, false, 23, 64,
                                 {WeightType::q8_0, WeightType::q6_K}, 256, 512, {4, 2, 256}),
                      dense_opts(88, 64), 88, 3, kQuantTol);
}
TEST(ModelForward, LlamaExpertsEqualPlainForward) {
  expect_equals_plain(make_model(Arch::llama, false, true, 24, 16, {}, 48, 40, {4, 2, 40}),
                      dense_opts(40, 17), 70, 4, 2e-4);
  expect_equals_plain(make_model(Arch::llama, false, false, 25, 16, {}, 48, 40, {3, 1, 40}),
                      dense_opts(40, 40), 50, 3, 2e-4);
}
// gpt-oss (2 layers: layer 0 local with a window shorter than a chunk, layer 1 global, both
// with YaRN): q/k/v and Wo biases, attention sinks, the router's bias, weights the softmax of
// the chosen logits, experts' biases and the clamped SwiGLU; f32 and f16, 2 of 6 experts and
// all 4 of 4.
MadeUp gpt_oss(bool f16, uint64_t seed, const std::vector<int64_t>& experts) {
  MadeUp m = make_model(Arch::gpt_oss, f16, false, seed, 16, {}, 48, 72, experts);
  for (Config* c : {&m.cfg, &m.refs.cfg}) {
    c->gating = Config::Gating::softmax_of_chosen;
    c->sliding_window = 9;
    c->swa_layers = {1, 0};
    c->rope_base_swa = c->rope_base;
    c->swa_rope_scaled = true;
    c->rope_freq_factors = yarn_rope_divisors(c->head_dim, c->rope_base, 4.0, 32);
    c->rope_attn_factor = yarn_mscale(4.0);
  }
  return m;
}
TEST(ModelForward, GptOssEqualsPlainForward) {
  expect_equals_plain(gpt_oss(false, 26, {6, 2, 24}), dense_opts(32, 8), 45, 3, 2e-4);
  expect_equals_plain(gpt_oss(false, 27, {4, 4, 24}), dense_opts(40, 17), 70, 4, 2e-4);
  expect_equals_plain(gpt_oss(true, 28, {6, 2, 24}), dense_opts(100, 30), 61, 2, kF16Tol);
}
// Every prefill mode and decode form passes its rows' LSE to the sinks: chunked_h2o with a
// memory that keeps every key, a dense library method, and BLASST's decode at a threshold
// that skips nothing are exact.
TEST(ModelForward, GptOssSinksInEveryMode) {
  const MadeUp mu = gpt_oss(false, 29, {6, 2, 24});
  SessionOptions h2o = dense_opts(64, 16);
  h2o.attn = "chunked_h2o";
  h2o.h2o_local = 8;
  h2o.h2o_heavy = 128;  // every earlier token stays in memory
  expect_equals_plain(mu, h2o, 50, 2, 2e-4);
  SessionOptions method = dense_opts(64, 24);
  method.attn = "a_shape";  // keeps every key here: dense through the method path
  expect_equals_plain(mu, method, 50, 2, 2e-4);
  SessionOptions blasst = dense_opts(64, 24);
  blasst.attn_decode = "blasst:lambda=1e-30";  // skips no tile of these scores
  expect_equals_plain(mu, blasst, 30, 4, 2e-4);
}

TEST(ModelForward, Qwen3MethodPrefillEqualsPlainForward) {
  SessionOptions so = dense_opts(64, 24);
  so.attn = "a_shape";  // keeps every key here: dense through the method path
  expect_equals_plain(make_model(Arch::qwen3, false, true, 15, 32), so, 50, 2, 2e-4);
}

// Gemma 3: layer 0 local (a sliding window of `window` keys, rope base 1e4 unscaled), layer 1
// global (rope base 1e6, linear scaling), embeddings times sqrt(D), q/k head norms, the post
// norms, GeGLU, an attention scale other than 1/sqrt(d) and soft-capped logits. The window is
// shorter than every sequence and than a -ub chunk, so chunks reach back into earlier ones.
MadeUp gemma3(bool f16, bool tied, uint64_t seed, int64_t window, int64_t head_dim = 16) {
  MadeUp m = make_model(Arch::gemma3, f16, tied, seed, head_dim);
  for (Config* c : {&m.cfg, &m.refs.cfg}) {
    c->sliding_window = window;
    c->swa_layers = {1, 0};
    c->rope_base_swa = 1e4;
    c->rope_linear_factor = 4.0;
    c->attn_scale = 1.0 / std::sqrt(24.0);  // the 27B rule's 1 / sqrt(n_embd / n_head)
    c->final_logit_softcap = 6.0;
  }
  return m;
}
// ggml's GELU reads a table of f16 inputs and outputs (GGML_GELU_FP16), as llama.cpp runs it:
// the activations it gives are f16-rounded, so f32 weights get f16's tolerance here.
TEST(ModelForward, Gemma3F32EqualsPlainForward) {
  const MadeUp mu = gemma3(false, true, 21, 11);
  EXPECT_TRUE(mu.cfg.is_swa(0));
  EXPECT_FALSE(mu.cfg.is_swa(1));
  expect_equals_plain(mu, dense_opts(40, 17), 70, 4, kF16Tol);
  expect_equals_plain(gemma3(false, false, 22, 3, 32), dense_opts(32, 8), 45, 3, kF16Tol);
}
TEST(ModelForward, Gemma3F16EqualsPlainForward) {
  expect_equals_plain(gemma3(true, true, 23, 20), dense_opts(64, 24), 60, 3, kF16Tol);
}
// Every prefill mode runs the band on the local layer; the global one runs the mode (a dense
// method, and chunked_h2o with a memory that keeps every key: both exact).
TEST(ModelForward, Gemma3EveryModeRunsTheBand) {
  const MadeUp mu = gemma3(false, true, 24, 9);
  SessionOptions me = dense_opts(64, 24);
  me.attn = "a_shape";  // keeps every key here: dense through the method path
  expect_equals_plain(mu, me, 50, 2, kF16Tol);
  SessionOptions h2o = dense_opts(64, 16);
  h2o.attn = "chunked_h2o";
  h2o.h2o_local = 16;
  h2o.h2o_heavy = 64;  // more than the 60 tokens: every key stays in memory
  expect_equals_plain(mu, h2o, 60, 2, kF16Tol);
  const Model model(mu.refs);
  SessionOptions q = dense_opts(64, 24);
  q.attn = "a_shape";
  q.attn_decode = "quest";
  const std::vector<LayerAttention> la = Session(model, q).layer_attention();
  ASSERT_EQ(la.size(), 2u);
  EXPECT_TRUE(la[0].sliding);
  EXPECT_EQ(la[0].window, 9);
  EXPECT_EQ(la[0].prefill, "band");
  EXPECT_EQ(la[0].decode, "band");
  EXPECT_FALSE(la[1].sliding);
  EXPECT_EQ(la[1].prefill, "a_shape");
  EXPECT_EQ(la[1].decode, "dense");  // quest's first dense_layers (2) decode densely
  // A decoded token reads only the local layer's window: 2 kv heads x 9 keys there, 2 x 41 on
  // the global layer.
  Session d(model, dense_opts(64, 24));
  const std::vector<int32_t> prompt = some_tokens(40, mu.cfg.n_vocab, 5);
  d.prefill(prompt, nullptr, 0);
  std::vector<float> one(size_t(mu.cfg.n_vocab));
  d.decode(3, one.data());
  EXPECT_EQ(d.timings().decode_keys_read, 2 * 9 + 2 * 41);
}
// Each of gemma3's parts moves the logits: the window, the local rope base, the linear
// scaling, the soft cap.
TEST(ModelForward, Gemma3PartsMatter) {
  const MadeUp mu = gemma3(false, true, 25, 11);
  const auto tokens = some_tokens(60, mu.cfg.n_vocab, 5);
  const auto base = plain_forward(mu, tokens, 128);
  // Each part must move the logits well past the tolerance the forward tests allow (kF16Tol of
  // the largest logit), so a runner that dropped one would fail them.
  double scale = 0;
  for (const Vec& r : base)
    for (double x : r) scale = std::max(scale, std::abs(x));
  const double tol = -kF16Tol * scale;
  auto far = [&](MadeUp other) {
    other.refs.cfg = other.cfg;
    const auto y = plain_forward(other, tokens, 128);
    double diff = 0;
    for (size_t i = 0; i < y.size(); ++i)
      for (size_t j = 0; j < y[i].size(); ++j)
        diff = std::max(diff, std::abs(base[i][j] - y[i][j]));
    return diff;
  };
  MadeUp a = mu;
  a.cfg.sliding_window = 0;
  EXPECT_GT(far(a), 5 * tol);
  MadeUp b = mu;
  b.cfg.rope_base_swa = b.cfg.rope_base;
  EXPECT_GT(far(b), 5 * tol);
  MadeUp c = mu;
  c.cfg.rope_linear_factor = 1.0;
  EXPECT_GT(far(c), 5 * tol);
  MadeUp e = mu;
  e.cfg.final_logit_softcap = 0;
  EXPECT_GT(far(e), 5 * tol);
}

TEST(ModelForward, Qwen2F32EqualsPlainForward) {
  expect_equals_plain(make_model(Arch::qwen2, false, false, 3), dense_opts(32, 8), 45, 3, 2e-4);
}
TEST(ModelForward, Qwen2F16EqualsPlainForward) {
  expect_equals_plain(make_model(Arch::qwen2, true, true, 4), dense_opts(100, 30), 61, 2, kF16Tol);
}
// seed_oss, one row of the traits table and nothing else: qwen2's layout (rotate-half RoPE,
// q/k/v biases) with the FFN norm stored as post_attention_norm. make_model builds its layers
// from the tensor list and the plain forward reads its traits.
TEST(ModelForward, SeedOssEqualsPlainForward) {
  const Arch seed_oss = arch_id(*find_arch("seed_oss"));  // a row with no enum name
  expect_equals_plain(make_model(seed_oss, false, false, 31), dense_opts(32, 8), 45, 3, 2e-4);
  expect_equals_plain(make_model(seed_oss, true, true, 32), dense_opts(100, 30), 61, 2, kF16Tol);
}

// Cache types (-ctk / -ctv): the session equals the plain forward over K/V rounded as the cache
// stores them. The session's K/V rows come from f32 products and the plain forward's from
// double, so a value near a rounding boundary may round to the neighbouring f16 / q8_0 step on
// one side: the tolerance is f16's, as for f16 weights. Without the rounding the plain forward
// is further off (checked for q8_0, whose steps are largest).
TEST(ModelForward, CacheTypesEqualPlainForwardOverRoundedKV) {
  expect_equals_plain(make_model(Arch::llama, false, true, 1), dense_opts(40, 17, KVType::f16), 70,
                      4, kF16Tol);
  expect_equals_plain(make_model(Arch::qwen2, false, false, 3), dense_opts(32, 8, KVType::bf16), 45,
                      3, kF16Tol);
  SessionOptions mixed = dense_opts(64, 24, KVType::q8_0);
  mixed.cache_type_v = KVType::f16;
  expect_equals_plain(make_model(Arch::llama, false, true, 8, 32), mixed, 60, 3, kF16Tol);
  SessionOptions q8 = dense_opts(64, 24, KVType::q8_0);
  q8.attn = "chunked_h2o";
  q8.h2o_local = 8;
  q8.h2o_heavy = 128;
  expect_equals_plain(make_model(Arch::qwen2, false, true, 9, 32), q8, 70, 3, kF16Tol);
  q8.attn = "a_shape";  // keeps every key here: dense through the method path
  expect_equals_plain(make_model(Arch::llama, false, true, 10, 32), q8, 50, 2, kF16Tol);
  // q8_0 matters: the unrounded forward is further from the session than the rounded one.
  const MadeUp mu = make_model(Arch::llama, false, true, 8, 32);
  const Model model(mu.refs);
  const auto tokens = some_tokens(40, mu.cfg.n_vocab, 5);
  Session s(model, dense_opts(64, 24, KVType::q8_0));
  const int64_t V = mu.cfg.n_vocab;
  std::vector<float> logits(size_t(40 * V));
  s.prefill(tokens, logits.data(), 0);
  const auto rounded = plain_forward(mu, tokens, 128, KVType::q8_0, KVType::q8_0);
  const auto exact = plain_forward(mu, tokens, 128);
  double to_rounded = 0, to_exact = 0;
  for (int64_t i = 0; i < 40; ++i) {
    to_rounded = std::max(to_rounded, max_diff(&logits[size_t(i * V)], rounded[size_t(i)]));
    to_exact = std::max(to_exact, max_diff(&logits[size_t(i * V)], exact[size_t(i)]));
  }
  EXPECT_LT(to_rounded * 4, to_exact) << to_rounded << " vs " << to_exact;
}

TEST(ModelForward, ChunkedH2OWithCoveringMemoryEqualsPlainForward) {
  SessionOptions so = dense_opts(48, 16);
  so.attn = "chunked_h2o";
  so.h2o_local = 8;
  so.h2o_heavy = 128;  // every earlier token stays in memory
  expect_equals_plain(make_model(Arch::llama, false, true, 5), so, 70, 3, 2e-4);
}

TEST(ModelForward, LibraryMethodPrefillEqualsPlainForward) {
  SessionOptions so = dense_opts(64, 24);
  so.attn = "a_shape";  // keeps every key here: dense through the method path
  expect_equals_plain(make_model(Arch::qwen2, false, true, 6), so, 60, 2, 2e-4);
}

TEST(ModelForward, SmallMemoryChangesPrefillButNotItsKVCache) {
  // With a small memory the prompt's logits move away from dense, but decode still attends
  // to the whole prompt.
  const MadeUp mu = make_model(Arch::llama, false, true, 7);
  const Model model(mu.refs);
  const auto tokens = some_tokens(90, mu.cfg.n_vocab, 9);
  SessionOptions so = dense_opts(96, 16);
  so.attn = "chunked_h2o";
  so.h2o_local = 4;
  so.h2o_heavy = 4;
  Session s(model, so);
  const int64_t V = mu.cfg.n_vocab;
  std::vector<float> logits(size_t(90 * V));
  s.prefill(tokens, logits.data(), 0);
  const auto want = plain_forward(mu, tokens, 128);
  for (int64_t i = 0; i < 16; ++i)
    EXPECT_LT(max_diff(&logits[size_t(i * V)], want[size_t(i)]), 2e-4);
  double far = 0;
  for (int64_t i = 16; i < 90; ++i)
    far = std::max(far, max_diff(&logits[size_t(i * V)], want[size_t(i)]));
  EXPECT_GT(far, 1e-3);
  EXPECT_GT(s.timings().prefill_stats.causal_entries, s.timings().prefill_stats.score_entries);
  EXPECT_EQ(s.n_past(), 90);
}

// The last layer runs only the rows whose logits are read (none in a chunk without logits), but
// appends every row's K and V: decode after a prompt that asked for no logits, for the last
// row's, or for every row's gives the same bits.
TEST(ModelForward, PrefillWithoutLogitsLeavesTheSameCache) {
  const MadeUp mu = make_model(Arch::llama, false, true, 12);
  const Model model(mu.refs);
  const auto tokens = some_tokens(75, mu.cfg.n_vocab, 13);
  const int64_t V = mu.cfg.n_vocab, n = 70;
  std::vector<std::vector<float>> decoded;
  for (int64_t from : {n, n - 1, int64_t(0)}) {
    Session s(model, dense_opts(40, 17));
    std::vector<float> logits(size_t((n - from) * V) + 1);
    s.prefill(std::span(tokens).first(size_t(n)), from == n ? nullptr : logits.data(),
              std::min(from, n - 1));
    std::vector<float> out;
    std::vector<float> one(static_cast<size_t>(V));
    for (int64_t i = n; i < 75; ++i) {
      s.decode(tokens[size_t(i)], one.data());
      out.insert(out.end(), one.begin(), one.end());
    }
    decoded.push_back(out);
  }
  EXPECT_EQ(decoded[0], decoded[1]);
  EXPECT_EQ(decoded[0], decoded[2]);
  const auto want = plain_forward(mu, tokens, 128);
  for (int64_t i = n; i < 75; ++i)
    EXPECT_LT(max_diff(&decoded[0][size_t((i - n) * V)], want[size_t(i)]), 2e-4) << "row " << i;
}

// A calibrated BLASST spec runs each layer at its own law (layer=l added per layer): a per-layer
// file without one of the model's layers is refused when the session is made, naming the layers
// it has; a spec that names its layer uses that law for every layer.
TEST(ModelForward, CalibratedBlasstTakesEachLayersOwnLaw) {
  CalibrationOptions o;
  o.order = BlasstOrder::local_first;
  o.fit_min = 0.1, o.fit_max = 0.6;
  o.gamma = 1.0;
  BlasstCalibrator cal(o);
  for (int64_t len : {512, 1024}) {
    WorkloadConfig wc;
    wc.seq = len, wc.heads = 4, wc.dim = 64, wc.seed = 3;
    const Workload w = make_workload(wc);
    cal.add(w.q, w.k, w.v, 0);
    cal.add(w.q, w.k, w.v, 3);
  }
  const test::TempDir dir("spattn_model_layers_calib");
  const std::string file = dir.file("calib.json");
  save_calibration(file, cal.fit());
  const MadeUp mu = make_model(Arch::llama, false, true, 9);
  const Model model(mu.refs);
  SessionOptions so = dense_opts(64, 24);
  so.attn = "blasst:sparsity=0.3,calib=" + file;
  std::string err;
  try {
    Session s(model, so);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("no law for layer 1 (it has layers 0, 3)"), std::string::npos) << err;
  so.attn += ",layer=3";
  EXPECT_NO_THROW(Session(model, so));
}

TEST(ModelForward, BadInputRaises) {
  MadeUp mu = make_model(Arch::llama, false, true, 8);
  {
    ModelRefs r = mu.refs;
    r.layers[1].wk.rows += 1;
    EXPECT_THROW(Model{r}, Error);
    r = mu.refs;
    r.layers[0].gate.data = nullptr;
    EXPECT_THROW(Model{r}, Error);
    r = mu.refs;
    r.cfg.n_head_kv = 3;
    EXPECT_THROW(Model{r}, Error);
    r = mu.refs;
    r.layers[0].wq.type = WeightType::q8_0;
    EXPECT_THROW(Model{r}, Error);  // rows of 48 values are not whole q8_0 blocks of 32
    r = mu.refs;
    r.layers[0].wq.type = WeightType::i32;  // a ggml type with no product
    try {
      Model bad{r};
      ADD_FAILURE() << "an i32 matrix was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("blk.0.attn_q.weight has type i32"), std::string::npos)
          << e.what();
    }
    r = mu.refs;
    r.layers[0].wq.type = WeightType(4);  // an id ggml removed (q4_2)
    EXPECT_THROW(Model{r}, Error);
    MadeUp q3 = make_model(Arch::qwen3, false, true, 16);
    r = q3.refs;
    r.layers[1].k_norm.data = nullptr;  // qwen3 without its k norm
    EXPECT_THROW(Model{r}, Error);
    r = q3.refs;
    r.layers[0].q_norm.cols = 8;  // a q norm of the wrong length
    EXPECT_THROW(Model{r}, Error);
    r = mu.refs;
    r.cfg.rope_freq_factors.assign(size_t(mu.cfg.head_dim / 2 + 1), 1.0f);  // one too many
    EXPECT_THROW(Model{r}, Error);
    r.cfg.rope_freq_factors.assign(size_t(mu.cfg.head_dim / 2), 0.0f);  // a zero divisor
    EXPECT_THROW(Model{r}, Error);
  }
  const Model model(mu.refs);
  SessionOptions so = dense_opts(32, 16);
  Session s(model, so);
  std::vector<int32_t> bad = {1, 2, 61};
  EXPECT_THROW(s.prefill(bad, nullptr, 0), Error);
  std::vector<int32_t> big(129, 1);
  EXPECT_THROW(s.prefill(big, nullptr, 0), Error);
  so.n_ubatch = 0;
  EXPECT_THROW(Session(model, so), Error);
  so = dense_opts(32, 16);
  so.attn = "chunked_h2o";
  so.h2o_local = 17;
  EXPECT_THROW(Session(model, so), Error);
  so = dense_opts(32, 16);
  so.attn = "nosuch";
  EXPECT_THROW(Session(model, so), Error);
}

}  // namespace
}  // namespace spattn::model

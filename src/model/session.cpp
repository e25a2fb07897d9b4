// Session: one prompt's prefill and decode through a Model (the forward pass is summarised in
// include/spattn/model.hpp).
//
// Prefill schedules, as llama.cpp runs them:
//   dense        the prompt in logical batches of -b, each in chunks of -ub that pass through
//                every layer in turn; a chunk's queries attend to the whole cache before them
//                (attention_dense over the layer's PackedKV with q_start).
//   chunked_h2o  the prompt in logical batches of -b; each batch passes through every layer at
//                once, and a layer's attention is ChunkedH2OLayer::prefill_batch (Phase 1 over
//                the batch's -ub chunks, then Phase 2 chunk by chunk). A prompt of one chunk,
//                or a prefill that does not start at position 0, runs dense.
//   method       chunks of -ub, each running a library method over every key before it (the
//                raw K/V rows kept for it).
// Every schedule appends every token's K and V to the layer's PackedKV, so decode (one token,
// attention_decode over the cache) always sees the full prompt.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "eval/rope.hpp"
#include "model/layer_graph.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/model.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn::model {

void SessionOptions::validate() const {
  SPATTN_CHECK(n_ctx >= 1, "-c (context) must be >= 1, got ", n_ctx);
  SPATTN_CHECK(n_batch >= 1, "-b (logical batch) must be >= 1, got ", n_batch);
  SPATTN_CHECK(n_ubatch >= 1, "-ub (chunk) must be >= 1, got ", n_ubatch);
  SPATTN_CHECK(threads >= 1, "-t (threads) must be >= 1, got ", threads);
  SPATTN_CHECK(mode != PrefillMode::method || !attn_spec.empty(), "--attn: empty method spec");
  if (mode == PrefillMode::chunked_h2o) {
    ChunkedH2OParams p;
    p.chunk = n_ubatch;
    p.batch = n_batch;
    p.local = h2o_local;
    p.heavy = h2o_heavy;
    p.validate();
  }
}

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
enum class Attn { dense, h2o, method };
}  // namespace

struct Session::Impl {
  const Model& m;
  const Config& cfg;
  SessionOptions opt;
  eval::RopeTable rope;
  std::vector<PackedKV> cache;
  std::vector<ChunkedH2OLayer> h2o;
  std::vector<std::unique_ptr<Method>> methods;  // per layer, method mode only
  std::vector<Tensor> k_raw, v_raw;  // [Hkv, n_ctx, d] per layer, method mode only
  int64_t n_past = 0;
  Timings t;
  int64_t tap_layer = -1;
  QkvTap tap;
  // Scratch for up to max_rows rows.
  int64_t max_rows;
  std::vector<float> x, h, q, k, v, att, g, u;

  Impl(const Model& model, const SessionOptions& o)
      : m(model), cfg(model.config()), opt(o),
        rope(o.n_ctx, cfg.head_dim, cfg.rope_base,
             cfg.rope_neox ? eval::RopeStyle::neox : eval::RopeStyle::adjacent) {
    opt.validate();
    for (int64_t l = 0; l < cfg.n_layer; ++l)
      cache.emplace_back(cfg.n_head_kv, cfg.head_dim, DType::f32, opt.n_ctx);
    if (opt.mode == PrefillMode::chunked_h2o) {
      ChunkedH2OParams p;
      p.chunk = opt.n_ubatch;
      p.batch = opt.n_batch;
      p.local = opt.h2o_local;
      p.heavy = opt.h2o_heavy;
      for (int64_t l = 0; l < cfg.n_layer; ++l)
        h2o.emplace_back(p, cfg.n_head, cfg.n_head_kv, cfg.head_dim, DType::f32, opt.n_ctx);
    }
    if (opt.mode == PrefillMode::method) {
      // A calibrated spec (blasst:sparsity=S,calib=FILE) runs each layer at its own law:
      // layer=l is added unless the spec names a layer itself. A file with one law serves
      // every layer; a per-layer file without this layer's law is an error naming its layers.
      const MethodSpec spec = parse_method_spec(opt.attn_spec);
      const bool per_layer = spec.params.count("calib") && !spec.params.count("layer");
      for (int64_t l = 0; l < cfg.n_layer; ++l) {
        MethodSpec s = spec;
        if (per_layer) {
          s.params["layer"] = std::to_string(l);
          s.text += ",layer=" + std::to_string(l);
        }
        methods.push_back(make_method(s));
        k_raw.emplace_back(DType::f32, cfg.n_head_kv, opt.n_ctx, cfg.head_dim);
        v_raw.emplace_back(DType::f32, cfg.n_head_kv, opt.n_ctx, cfg.head_dim);
      }
    }
    // chunked_h2o takes a whole logical batch through each layer at once; the other schedules
    // one chunk of -ub rows.
    max_rows = std::min(opt.n_ctx, opt.mode == PrefillMode::chunked_h2o
                                       ? std::max(opt.n_batch, opt.n_ubatch)
                                       : opt.n_ubatch);
    const int64_t D = cfg.n_embd, dq = cfg.n_head * cfg.head_dim,
                  dkv = cfg.n_head_kv * cfg.head_dim;
    x.resize(size_t(max_rows * D));
    h.resize(size_t(max_rows * D));
    q.resize(size_t(max_rows * dq));
    k.resize(size_t(max_rows * dkv));
    v.resize(size_t(max_rows * dkv));
    att.resize(size_t(max_rows * dq));
    g.resize(size_t(max_rows * cfg.n_ff));
    u.resize(size_t(max_rows * cfg.n_ff));
  }

  AttnOptions attn_opt(int64_t q_start) const {
    AttnOptions a;
    a.threads = opt.threads;
    a.q_start = q_start;
    return a;
  }

  // One layer's attention for n rows at pos0.
  void attention(int64_t l, int64_t n, int64_t pos0, Attn kind, bool last, Stats* stats) {
    const int64_t Hq = cfg.n_head, Hkv = cfg.n_head_kv, d = cfg.head_dim;
    const TensorView qv = TensorView::shd(q.data(), DType::f32, Hq, n, d);
    const TensorView kv = TensorView::shd(k.data(), DType::f32, Hkv, n, d);
    const TensorView vv = TensorView::shd(v.data(), DType::f32, Hkv, n, d);
    const TensorView ov = TensorView::shd(att.data(), DType::f32, Hq, n, d);
    PackedKV& c = cache[size_t(l)];
    c.append(kv, vv, {}, n > kMaxDecodeQueries ? opt.threads : 1);  // a decode row: no pool call
    switch (kind) {
      case Attn::dense:
        if (n <= kMaxDecodeQueries) {
          AttnOptions a = attn_opt(pos0);
          a.threads = threads_for_bytes(c.bytes() / size_t(c.capacity()) * size_t(c.size()),
                                        opt.threads);
          attention_decode(qv, c, ov, a, DecodeOptions{}, nullptr, stats);
        } else {
          attention_dense(qv, c, ov, attn_opt(pos0), nullptr, stats);
        }
        break;
      case Attn::h2o:
        // The prompt's first batch is all the cache holds: Phase 1 runs over it as packed.
        h2o[size_t(l)].prefill_batch(qv, kv, vv, ov, attn_opt(-1), last, nullptr, stats,
                                     c.size() == n ? &c : nullptr);
        break;
      case Attn::method: {
        Tensor& kr = k_raw[size_t(l)];
        Tensor& vr = v_raw[size_t(l)];
        copy_into(kv, kr.view().rows(pos0, n));
        copy_into(vv, vr.view().rows(pos0, n));
        const MethodReport r = methods[size_t(l)]->run(qv, kr.view().rows(0, pos0 + n),
                                           vr.view().rows(0, pos0 + n), ov, attn_opt(-1));
        if (stats) stats->add(r.stats);
        break;
      }
    }
  }

  // n tokens at positions pos0.. through every layer; logits for rows >= logits_row0 (row index
  // within this call) go to logits.
  void forward(const int32_t* tokens, int64_t n, int64_t pos0, Attn kind, bool last,
               float* logits, int64_t logits_row0, double* attn_ms, Stats* stats) {
    const int64_t D = cfg.n_embd, Hq = cfg.n_head, Hkv = cfg.n_head_kv, d = cfg.head_dim;
    SPATTN_CHECK(n >= 1 && n <= max_rows, "internal: ", n, " rows for a scratch of ", max_rows);
    const int mm = opt.threads;
    for (int64_t i = 0; i < n; ++i) {
      SPATTN_CHECK(tokens[i] >= 0 && tokens[i] < cfg.n_vocab, "token id ", tokens[i],
                   " at position ", pos0 + i, " is outside the vocabulary [0, ", cfg.n_vocab, ")");
      m.embed(tokens[i], x.data() + i * D);
    }
    const RowBuffers rb{x.data(), h.data(), q.data(), k.data(), v.data(), att.data(), g.data(),
                        u.data()};
    const bool want_logits = logits && logits_row0 < n;
    run_layer_graph(m, rb, n, GraphStep{-1, 0, nullptr, 0}, mm);
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      for (int64_t i = 0; i < n; ++i) {
        for (int64_t hh = 0; hh < Hq; ++hh) rope.rotate_inplace(&q[size_t((i * Hq + hh) * d)], pos0 + i);
        for (int64_t hh = 0; hh < Hkv; ++hh) rope.rotate_inplace(&k[size_t((i * Hkv + hh) * d)], pos0 + i);
      }
      if (tap && l == tap_layer) tap(l, pos0, n, q.data(), k.data(), v.data());
      const auto t0 = Clock::now();
      attention(l, n, pos0, kind, last, stats);
      if (attn_ms) *attn_ms += ms_since(t0);
      // This layer's tail and the next layer's head (or the logits) in one graph.
      const bool final = l + 1 == cfg.n_layer;
      run_layer_graph(m, rb, n,
                      GraphStep{l, final ? -1 : l + 1, final && want_logits ? logits : nullptr,
                                logits_row0},
                      mm);
    }
  }
};

Session::Session(const Model& model, const SessionOptions& opt)
    : p_(std::make_unique<Impl>(model, opt)) {}
Session::~Session() = default;

void Session::reset() {
  for (auto& c : p_->cache) c.clear();
  for (auto& l : p_->h2o) l.reset();
  p_->n_past = 0;
}
int64_t Session::n_past() const { return p_->n_past; }
const Timings& Session::timings() const { return p_->t; }
Session::Memory Session::memory() const {
  const Impl& s = *p_;
  Memory m;
  for (const PackedKV& c : s.cache) m.kv_cache += c.bytes();
  for (const auto* raw : {&s.k_raw, &s.v_raw})
    for (const Tensor& t : *raw) m.method_kv += t.nbytes();
  for (const auto* b : {&s.x, &s.h, &s.q, &s.k, &s.v, &s.att, &s.g, &s.u})
    m.scratch += b->capacity() * sizeof(float);
  return m;
}
void Session::reset_timings() { p_->t = Timings{}; }
void Session::set_qkv_tap(int64_t layer, QkvTap tap) {
  SPATTN_CHECK(layer >= 0 && layer < p_->cfg.n_layer, "--dump-qkv: layer ", layer,
               " outside [0, ", p_->cfg.n_layer, ")");
  p_->tap_layer = layer;
  p_->tap = std::move(tap);
}

void Session::prefill(std::span<const int32_t> tokens, float* logits, int64_t logits_from) {
  Impl& s = *p_;
  const int64_t n = int64_t(tokens.size()), V = s.cfg.n_vocab, pos0 = s.n_past;
  SPATTN_CHECK(n >= 1, "prefill: no tokens");
  SPATTN_CHECK(pos0 + n <= s.opt.n_ctx, "prompt of ", n, " tokens after ", pos0,
               " does not fit the context of ", s.opt.n_ctx, " (-c)");
  SPATTN_CHECK(logits_from >= 0 && logits_from < n, "prefill: logits_from ", logits_from,
               " outside [0, ", n, ")");
  const auto t0 = Clock::now();
  // Runs rows [r0, r1) of the prompt, writing the logits rows it holds.
  auto run = [&](int64_t r0, int64_t r1, Attn kind, bool last) {
    float* lg = nullptr;
    int64_t row0 = 0;
    if (logits && r1 > logits_from) {
      row0 = std::max<int64_t>(0, logits_from - r0);
      lg = logits + (r0 + row0 - logits_from) * V;
    }
    s.forward(tokens.data() + r0, r1 - r0, pos0 + r0, kind, last, lg, row0, &s.t.prefill_attn_ms,
              &s.t.prefill_stats);
  };
  const bool h2o = s.opt.mode == PrefillMode::chunked_h2o && pos0 == 0 && n > s.opt.n_ubatch;
  for (int64_t b0 = 0; b0 < n; b0 += s.opt.n_batch) {
    const int64_t b1 = std::min(n, b0 + s.opt.n_batch);
    if (h2o) {
      run(b0, b1, Attn::h2o, b1 == n);
      continue;
    }
    const Attn kind = s.opt.mode == PrefillMode::method ? Attn::method : Attn::dense;
    for (int64_t c0 = b0; c0 < b1; c0 += s.opt.n_ubatch)
      run(c0, std::min(b1, c0 + s.opt.n_ubatch), kind, false);
  }
  s.n_past += n;
  s.t.prefill_ms += ms_since(t0);
  s.t.prefill_tokens += n;
}

void Session::decode(int32_t token, float* logits) {
  Impl& s = *p_;
  SPATTN_CHECK(s.n_past + 1 <= s.opt.n_ctx, "decode: the context of ", s.opt.n_ctx,
               " tokens (-c) is full");
  const auto t0 = Clock::now();
  s.forward(&token, 1, s.n_past, Attn::dense, false, logits, 0, nullptr, nullptr);
  s.n_past += 1;
  s.t.decode_ms += ms_since(t0);
  s.t.decode_tokens += 1;
}

}  // namespace spattn::model

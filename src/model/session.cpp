// Session: one prompt's prefill and decode through a Model (the forward pass is summarised in
// include/spattn/model.hpp).
//
// Each layer's attention is a LayerBackend (src/methods/layer_backend.hpp) built from the method
// registry: the prefill's from --attn, the decode's from --attn-decode, and a sliding-window
// layer's band for both whatever they say. The session keeps the layer loop, the KV cache and
// the all-or-nothing commit; the backends decide which keys a layer reads. Prefill schedules,
// as llama.cpp runs them:
//   by chunk     the prompt in logical batches of -b, each in chunks of -ub that pass through
//                every layer in turn; a chunk's queries attend to the whole cache before them
//                (dense: the layer's PackedKV with q_start; a library method: over the cache's
//                raw rows, which the same appends write).
//   by batch     a stateful backend (chunked_h2o): the prompt in logical batches of -b
//                (LayerBackend::batches); each batch passes through every layer at once. A
//                prompt the backend does not run statefully (runs_from: one chunk), and a
//                prefill that starts neither at position 0 nor where the layers' state was
//                restored, runs dense by chunk.
// Every schedule, and decode, appends every token's K and V to the layer's cache (KVCache:
// packed, and raw where a backend reads f32 rows), so every later call sees every token before
// it, whichever call computed it.
//
// A stateful backend's state at chunk boundaries: at the last h2o_keep boundaries a prefill
// passes (LayerBackend::boundaries: for chunked_h2o every chunk end with the default -ub 512),
// every stateful layer's state (LayerBackend::snapshot) is kept with the position. truncate(n)
// to such a boundary restores it, and the next prefill goes on from there statefully: the same
// batches, the same state, so the same bits as the prefill that passed n computed (a server's
// prefix reuse). state_at is the position the layers can go on from (0 fresh, a restored
// boundary, -1 none: after a prompt's last batch or a decode).
//
// Context parallelism (SessionOptions::cp, spattn/context_parallel.hpp): a prefill runs the
// rank's zigzag rows through every layer at once (not in -ub chunks), attention by the pass-KV
// ring (dist/ring_attention.cpp); a decode runs the token on every rank, its K/V staged on the
// rank with the fewest tokens, attention merged over the ranks. n_past is then the group's
// token count; the rank's cache holds its own tokens at their positions.
//
// A call (prefill or decode) is all or nothing: its rows are staged in the cache layer by layer
// and committed when the call has run through every layer and chunk; on an Error anywhere the
// cache is rolled back, the stateful layers put back where the call started (reset at 0,
// restored at a kept boundary), the new kept states dropped and the timings restored, and the
// Error propagates: the session is as it was before the call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/threading.hpp"
#include "dist/ring_attention.hpp"
#include "core/rope.hpp"
#include "methods/dsa.hpp"
#include "methods/layer_backend.hpp"
#include "methods/registry.hpp"
#include "model/kv_cache.hpp"
#include "model/layer_graph.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/merge.hpp"
#include "spattn/method.hpp"
#include "spattn/model.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn::model {

namespace {
// The latent attention's cache and absorbed form (SessionOptions::mla_expanded): whether a
// session of these options keeps it, its attention as the kernels see it (one kv head of the
// kv latent then the rope key for every q head: llama.cpp's MQA over its MLA cache; DeepSeek-V2's
// paper, section 2.1.2 and appendix C on absorbing W^UK into W^UQ) and that attention's softmax
// scale, the model's (1 / sqrt(nope + rope), YaRN's mscale included), not 1 / sqrt of the
// latent's width. The file's layout decides by default (Config::mla_absorbed: attn_k_b / attn_v_b
// present, llama.cpp's is_mla).
bool latent_cache(const Config& c, const SessionOptions& o) {
  const int64_t w = c.kv_lora_rank + c.rot();
  return c.is_mla() && !o.mla_expanded && (c.mla_absorbed || o.mla_latent_legacy) && w % 8 == 0 &&
         w <= kMaxHeadDim;
}
Session::AttentionShape shape_of(const Config& c, const SessionOptions& o) {
  if (latent_cache(c, o)) return {c.n_head, 1, c.kv_lora_rank + c.rot(), true};
  return {c.n_head, c.n_head_kv, c.head_dim, false};
}
// The values' cache type: -ctv, but none of its own in the latent cache, whose values are its
// keys (llama.cpp's MLA cache holds K only; -ctv does not apply there either).
KVType value_cache_type(const SessionOptions& o, const Session::AttentionShape& a) {
  return a.latent ? o.cache_type_k : o.cache_type_v;
}
float attention_scale(const Config& c, const Session::AttentionShape& a) {
  if (a.latent && c.attn_scale == 0) return 1.0f / std::sqrt(float(c.head_dim));
  return float(c.attn_scale);  // 0: the kernels' 1 / sqrt(head dim)
}

// What a backend of layer `layer` is told: the session's sizes; model dimensions where known
// (validate() builds the backends once on placeholders, to refuse a bad spec before any model
// loads).
BackendContext backend_context(const SessionOptions& o, const Config* cfg, int64_t layer,
                               std::shared_ptr<void>* shared) {
  BackendContext c;
  c.layer = layer;
  if (cfg) {
    const Session::AttentionShape a = shape_of(*cfg, o);
    c.n_layer = cfg->n_layer;
    c.q_heads = a.q_heads;
    c.kv_heads = a.kv_heads;
    c.dim = a.dim;
    c.window = cfg->window(layer);
    c.scale = attention_scale(*cfg, a);
    c.indexer_top_k = cfg->indexer_top_k;
  } else {
    c.indexer_top_k = -1;  // not known before the model
  }
  c.n_ctx = o.n_ctx;
  c.n_batch = o.n_batch;
  c.n_ubatch = o.n_ubatch;
  c.h2o_local = o.h2o_local;
  c.h2o_heavy = o.h2o_heavy;
  c.threads = o.threads;
  c.k_type = o.cache_type_k;
  c.v_type = cfg ? value_cache_type(o, shape_of(*cfg, o)) : o.cache_type_v;
  c.cp = bool(o.cp);
  c.shared = shared;
  return c;
}
}  // namespace

std::string model_attention(const std::string& spec, const Config& cfg) {
  if (spec != kModelAttention) return spec;
  // A model's own attention: DSA's selection where the model has a lightning indexer, else
  // dense.
  return cfg.has_indexer() ? "dsa" : "dense";
}

namespace {
// Before a model is read (validate()), kModelAttention takes dense's checks.
MethodSpec model_spec(const std::string& spec, const Config* cfg, const SessionOptions& o) {
  if (!cfg) return parse_method_spec(spec == kModelAttention ? "dense" : spec);
  return parse_method_spec(model_attention(spec, *cfg));
}
}  // namespace

void SessionOptions::validate() const {
  SPATTN_CHECK(n_ctx >= 1, "-c (context) must be >= 1, got ", n_ctx);
  SPATTN_CHECK(n_batch >= 1, "-b (logical batch) must be >= 1, got ", n_batch);
  SPATTN_CHECK(n_ubatch >= 1, "-ub (chunk) must be >= 1, got ", n_ubatch);
  SPATTN_CHECK(threads >= 1, "-t (threads) must be >= 1, got ", threads);
  SPATTN_CHECK(h2o_keep >= 0, "h2o_keep (kept chunked_h2o states) must be >= 0, got ", h2o_keep);
  SPATTN_CHECK(!attn.empty(), "--attn: empty method spec");
  for (KVType t : {cache_type_k, cache_type_v})
    SPATTN_CHECK(is_kv_type(t), "-ctk / -ctv: unknown KV cache type ", int(t));
  // Every check a backend makes of its spec and of these options (context parallelism's among
  // them), on a placeholder layer.
  std::shared_ptr<void> shared;
  const BackendContext ctx = backend_context(*this, nullptr, 0, &shared);
  const auto prefill = make_prefill_backend(model_spec(attn, nullptr, *this), ctx);
  make_decode_backend(model_spec(attn_decode, nullptr, *this), ctx);
  SPATTN_CHECK(!cp || !cp_gather || prefill->capabilities().ring_gather,
               "--cp-gather runs the dense prefill (not --attn ", attn, ")");
}

namespace {
using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}
// What a group's counters gained since `before`.
dist::CommStats delta(const dist::CommStats& now, const dist::CommStats& before) {
  dist::CommStats d;
  d.bytes_sent = now.bytes_sent - before.bytes_sent;
  d.bytes_recv = now.bytes_recv - before.bytes_recv;
  d.messages = now.messages - before.messages;
  d.comm_ms = now.comm_ms - before.comm_ms;
  d.ring_bytes_sent = now.ring_bytes_sent - before.ring_bytes_sent;
  d.ring_layers = now.ring_layers - before.ring_layers;
  d.ring_comm_ms = now.ring_comm_ms - before.ring_comm_ms;
  d.logits_bytes_recv = now.logits_bytes_recv - before.logits_bytes_recv;
  d.blasst_seed_bytes_recv = now.blasst_seed_bytes_recv - before.blasst_seed_bytes_recv;
  return d;
}
// What a forward pass's attention runs: the layers' prefill backends; dense where a stateful
// backend's prompt does not run statefully; decode's backends; context parallelism's prefill
// and decode.
enum class Pass { prefill, dense, decode, ring, cp_decode };
const SessionOptions& validated(const SessionOptions& o) {
  o.validate();
  return o;
}
RopeStyle rope_style(const Config& c) {
  return c.rope_neox ? RopeStyle::neox : RopeStyle::adjacent;
}
// The global layers' per-pair divisors: gemma3's linear scaling divides every angle by its
// factor (llama.cpp's freq_scale = 1 / factor), else the file's rope factors for this context.
std::vector<float> global_rope_factors(const Config& c, int64_t n_ctx) {
  if (c.rope_linear_factor != 1.0)
    return std::vector<float>(size_t(c.rot() / 2), float(c.rope_linear_factor));
  return c.rope_factors(n_ctx);
}
// Sliding-window layers turn by their own base: gemma3's unscaled, gpt-oss's with the global
// layers' scaling (Config::swa_rope_scaled); none: null.
std::shared_ptr<const RopeTable> swa_rope(const Config& c, int64_t n_ctx) {
  if (c.sliding_window <= 0) return nullptr;
  return std::make_shared<const RopeTable>(
      n_ctx, c.rot(), c.rope_base_swa, rope_style(c),
      c.swa_rope_scaled ? global_rope_factors(c, n_ctx) : std::vector<float>{}, c.rope_attn_factor);
}
// Every layer's backends (src/methods/layer_backend.hpp) and what they need of the session.
struct Backends {
  std::shared_ptr<void> shared;  // one object the layers share (BackendContext::shared)
  std::vector<std::shared_ptr<LayerBackend>> prefill, decode;
  std::vector<BackendCaps> prefill_caps, decode_caps;
  std::shared_ptr<LayerBackend> dense;  // a stateful backend's prompt that runs dense
  // The first stateful prefill backend: its batches and boundaries are every layer's (null:
  // none keeps state).
  LayerBackend* sched = nullptr;
  bool raw_keys = false;         // some layer reads the cache's rows as f32
  bool rows_independent = true;  // every layer's rows are its queries' own (a prefix reused)
  int64_t quest_page = 0;        // Quest's page summaries (0: none)
  QuestSums quest_sums = QuestSums::cache;
  std::vector<bool> pages;  // the layers that keep them
  int64_t ring_grid = 0;    // BackendCaps::ring_grid, the widest

  void add(std::shared_ptr<LayerBackend> p, std::shared_ptr<LayerBackend> d) {
    prefill_caps.push_back(p->capabilities());
    decode_caps.push_back(d->capabilities());
    const BackendCaps &pc = prefill_caps.back(), &dc = decode_caps.back();
    if (pc.stateful && !sched) sched = p.get();
    raw_keys = raw_keys || pc.raw_keys;
    rows_independent = rows_independent && pc.rows_independent;
    if (dc.quest_page > 0) quest_page = dc.quest_page, quest_sums = dc.quest_sums;
    ring_grid = std::max(ring_grid, pc.ring_grid);
    prefill.push_back(std::move(p));
    decode.push_back(std::move(d));
  }
  // The layers that keep Quest's page summaries: those its decode reads them in (past its dense
  // layers, no sliding window), or every layer where the options ask (a recall measure of the
  // dense ones).
  void mark_pages(bool every_layer) {
    for (const BackendCaps& c : decode_caps) pages.push_back(every_layer || c.reads_pages);
  }
};

// A sliding-window layer runs its band whatever the specs say (a window is already sparse);
// the others what --attn and --attn-decode say.
Backends make_backends(const Config& cfg, const SessionOptions& o) {
  Backends b;
  const MethodSpec prefill = model_spec(o.attn, &cfg, o),
                   decode = model_spec(o.attn_decode, &cfg, o);
  b.dense = make_dense_backend();
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const BackendContext ctx = backend_context(o, &cfg, l, &b.shared);
    if (cfg.is_swa(l)) {
      std::shared_ptr<LayerBackend> band = make_band_backend(ctx);
      b.add(band, band);
    } else {
      b.add(make_prefill_backend(prefill, ctx), make_decode_backend(decode, ctx));
    }
  }
  b.mark_pages(o.quest_pages_every_layer);
  return b;
}

// A fork's backends: stateless ones shared, stateful ones fresh (the fork restores their state).
Backends fork_backends(const Backends& src, const Config& cfg, const SessionOptions& o) {
  Backends b;
  b.dense = src.dense;
  for (int64_t l = 0; l < cfg.n_layer; ++l) {
    const BackendContext ctx = backend_context(o, &cfg, l, &b.shared);
    const auto& p = src.prefill[size_t(l)];
    const auto& d = src.decode[size_t(l)];
    std::shared_ptr<LayerBackend> fp = p->fork(p, ctx);
    std::shared_ptr<LayerBackend> fd = d == p ? fp : d->fork(d, ctx);  // a band serves both
    b.add(std::move(fp), std::move(fd));
  }
  b.pages = src.pages;
  return b;
}

// A rank's cache: its share of the context. The zigzag gives it at most 2 ceil(n / 2P) <=
// n / P + 2 prompt tokens and decode the next token to the emptiest rank. A split on a grid
// of S tokens (chunked_h2o: -ub; dense and BLASST: the 64-token tiles) gives a rank whole
// chunks: at most ceil(ceil(c / S) / P) of S tokens (1/P of the context when it holds many
// chunks per rank).
int64_t cache_capacity(const SessionOptions& o, const Backends& b) {
  if (!o.cp) return o.n_ctx;
  const int64_t P = o.cp->size();
  const auto grid = [&](int64_t S) { return ((o.n_ctx + S - 1) / S + P - 1) / P * S; };
  int64_t share = (o.n_ctx + P - 1) / P + 2;
  if (b.ring_grid > 0) {
    share = std::max(share, grid(b.ring_grid) + 2);
  } else {
    // Dense and BLASST split on the 64-token tiles. Decode gives a token to the emptiest
    // rank only, which then holds at most ceil(c / P) + 1: a rank at the grid's share needs
    // no more room.
    share = std::max(share, grid(kKeyBlock));
  }
  return std::min(o.n_ctx, share);
}
}  // namespace

struct Session::Impl {
  const Model& m;
  const Config& cfg;
  SessionOptions opt;
  // The attention's heads and head dim as the cache holds them (shape_of: the latent
  // attention's absorbed form, or the model's heads).
  Session::AttentionShape shape;
  RopeTable rope;
  std::shared_ptr<const RopeTable> rope_swa;  // sliding-window layers' table, or null
  // Every layer's attention: built before the cache, which keeps what they read.
  Backends b;
  // Every token's K/V per layer; its committed size is the session's n_past. f32 rows given,
  // stored as opt.cache_type_k / cache_type_v.
  KVCache cache;
  // The stateful layers' states at kept boundaries (ascending positions, at most
  // opt.h2o_keep; null for a stateless layer), and where the layers can go on from.
  struct Kept {
    int64_t pos;
    std::vector<std::shared_ptr<const BackendState>> layers;
  };
  std::vector<Kept> kept;
  int64_t state_at = 0;
  Timings t;
  // Context parallelism: the group, the tokens it holds in all and per rank (committed), the
  // zigzag of the prefill running and how its backends lay it, the ring's buffers, and
  // cp_rows: decode's gathered (O, LSE), a prefill's gathered indexer keys.
  dist::Group* grp = nullptr;
  int64_t cp_n = 0;
  std::vector<int64_t> cp_counts;
  dist::Zigzag zz;
  RingPlan cp_plan;
  int cp_owner = -1;     // the rank a decoded token's K/V goes to
  int32_t cp_token = 0;  // the token decoding, which every rank checks it shares
  dist::RingScratch ring;
  std::vector<unsigned char> h2o_wire;  // chunked_h2o's memory set between ranks
  std::vector<float> cp_rows;
  int64_t tap_layer = -1;
  QkvTap tap;
  // Row buffers for up to max_rows rows: the residual stream x, the normed rows h, q, k, v, the
  // attention's output att, the FFN's gate and up rows (layer_graph.hpp: RowBuffers).
  int64_t max_rows;
  std::vector<float> x, h, q, k, v, att, gate, up;
  std::vector<float> kv_a, kv_b;  // the latent attention's rows (RowBuffers), else empty
  // DSA's lightning indexer (Config::has_indexer): its rows (RowBuffers), the RoPE of its
  // queries and keys (on the first rot() values, in the pairs of ArchTraits::indexer_rope_neox),
  // and every layer's keys, kept for whichever backend reads them (each call cuts them to its
  // first position, then appends).
  std::vector<float> idx_q, idx_k, idx_w;
  std::shared_ptr<const RopeTable> idx_rope;
  std::vector<IndexerKeys> idx_keys;
  DsaCarry dsa_carry;                 // the last full indexer layer's selection, within a call
  std::vector<float> lse;             // the attention rows' LSE [Hq, rows] where a layer has sinks
  bool pack = false;                  // products on spattn's kernel (RowBuffers::pack)
  LayerGraphCache graphs;             // the last graph of each layer step, for the next call alike
  std::string prefill_ran = "dense";  // what the last prefill's global layers ran

  // The prefill backend of the first layer without a sliding window (else the first layer's).
  const LayerBackend& global_prefill() const {
    for (int64_t l = 0; l < cfg.n_layer; ++l)
      if (!cfg.is_swa(l)) return *b.prefill[size_t(l)];
    return *b.prefill.front();
  }

  Impl(const Model& model, const SessionOptions& o)
      : m(model),
        cfg(model.config()),
        opt(validated(o)),
        shape(shape_of(cfg, opt)),
        rope(o.n_ctx, cfg.rot(), cfg.rope_base, rope_style(cfg), global_rope_factors(cfg, o.n_ctx),
             cfg.rope_attn_factor),
        rope_swa(swa_rope(cfg, o.n_ctx)),
        b(make_backends(cfg, opt)),
        cache(cfg.n_layer, shape.kv_heads, shape.dim, cache_capacity(o, b), DType::f32,
              /*raw=*/b.raw_keys && !o.cp, o.cache_type_k, value_cache_type(o, shape), b.quest_page,
              b.quest_sums, b.pages, /*v_is_k=*/shape.latent) {
    if (opt.cp) {
      for (int64_t l = 0; l < cfg.n_layer; ++l) {
        SPATTN_CHECK(!cfg.is_swa(l),
                     "context parallelism (--cp) does not split a model with "
                     "sliding-window layers (",
                     arch_name(cfg.arch), ") across ranks yet");
        SPATTN_CHECK(m.layer(l).sinks.empty(),
                     "context parallelism (--cp) does not run "
                     "attention sinks (",
                     arch_name(cfg.arch), ") yet");
      }
      grp = opt.cp.get();
      cp_counts.assign(size_t(grp->size()), 0);
    }
    if (cfg.has_indexer()) {
      idx_rope = std::make_shared<const RopeTable>(
          o.n_ctx, cfg.rot(), cfg.rope_base,
          arch_traits(cfg.arch).indexer_rope_neox ? RopeStyle::neox : RopeStyle::adjacent,
          global_rope_factors(cfg, o.n_ctx), cfg.rope_attn_factor);
      // Room for the context's keys in the layers with an indexer of their own (GLM-5.2's
      // sharing layers read another layer's selection and hold none).
      for (int64_t l = 0; l < cfg.n_layer; ++l)
        idx_keys.emplace_back(cfg.indexer_dim, cfg.shares_indexer(l) ? 0 : o.n_ctx);
    }
    // The latent attention's weights of this session's form (made now if the file holds the
    // other's), before make_scratch asks what the products read.
    m.use_mla_form(shape.latent);
    make_scratch();
  }

  // A fork: src's options, backends and tap, a copy of its first n committed tokens.
  Impl(const Impl& src, int64_t n)
      : m(src.m),
        cfg(src.cfg),
        opt(src.opt),
        shape(src.shape),
        rope(src.rope),
        rope_swa(src.rope_swa),
        b(fork_backends(src.b, src.cfg, src.opt)),
        cache(src.cache.fork(n)),
        tap_layer(src.tap_layer),
        tap(src.tap) {
    for (const Kept& k : src.kept)
      if (k.pos <= n) kept.push_back(k);
    states_to(n);
    idx_rope = src.idx_rope;
    idx_keys = src.idx_keys;  // the keys past n are cut at the fork's first call
    make_scratch();
  }

  // The stateful layers as truncate(n) leaves them (the cache already holds n tokens).
  void states_to(int64_t n) {
    while (!kept.empty() && kept.back().pos > n) kept.pop_back();
    if (!b.sched) return;
    if (n == 0) {
      for (auto& p : b.prefill) p->reset();
      state_at = 0;
    } else if (!kept.empty() && kept.back().pos == n) {
      for (size_t l = 0; l < b.prefill.size(); ++l)
        if (kept.back().layers[l]) b.prefill[l]->restore(*kept.back().layers[l]);
      state_at = n;
    } else {
      state_at = -1;
    }
  }

  // Has each stateful layer keep its state at the boundaries the prefill whose batches are
  // given passes, into `pending`, in ascending order. The hooks capture `pending`: unhook()
  // before it goes.
  void hook(int64_t pos0, const std::vector<std::pair<int64_t, int64_t>>& batches,
            std::vector<Kept>& pending) {
    if (opt.h2o_keep <= 0) return;
    for (int64_t e : b.sched->boundaries(pos0, batches, opt.h2o_keep))
      pending.push_back(
          Kept{e, std::vector<std::shared_ptr<const BackendState>>(b.prefill.size())});
    for (size_t l = 0; l < b.prefill.size(); ++l)
      if (b.prefill_caps[l].stateful)
        b.prefill[l]->set_on_boundary([this, l, &pending](int64_t end) {
          for (Kept& k : pending)
            if (k.pos == end) k.layers[l] = b.prefill[l]->snapshot();
        });
  }
  void unhook() {
    for (size_t l = 0; l < b.prefill.size(); ++l)
      if (b.prefill_caps[l].stateful) b.prefill[l]->set_on_boundary({});
  }

  void make_scratch() {
    // A stateful backend takes a whole logical batch through each layer at once; the other
    // schedules one chunk of -ub rows.
    max_rows = std::min(opt.n_ctx, b.sched ? std::max(opt.n_batch, opt.n_ubatch) : opt.n_ubatch);
    // A context-parallel prefill takes the rank's rows through each layer at once.
    if (grp) max_rows = cache_capacity(opt, b);
    const int64_t D = cfg.n_embd, dq = shape.q_heads * shape.dim, dkv = shape.kv_heads * shape.dim;
    // The latent attention's q latent goes through the FFN's g rows, its normed kv latent
    // through h (RowBuffers).
    const int64_t hd = std::max(D, cfg.kv_lora_rank);
    x.resize(size_t(max_rows * D));
    h.resize(size_t(max_rows * hd));
    q.resize(size_t(max_rows * dq));
    k.resize(size_t(max_rows * dkv));
    v.resize(shape.latent ? 0 : size_t(max_rows * dkv));  // the latent's values are k (v_rows)
    att.resize(size_t(max_rows * dq));
    if (cfg.is_mla()) {
      kv_a.resize(size_t(max_rows * (cfg.kv_lora_rank + cfg.rot())));
      // Each head's k_nope and v (expanded), or its q before absorption (latent).
      kv_b.resize(size_t(max_rows * cfg.n_head *
                         (shape.latent ? cfg.head_dim : cfg.head_dim - cfg.rot() + cfg.v_dim())));
    }
    bool sinks = false;
    for (int64_t l = 0; l < cfg.n_layer; ++l) sinks = sinks || !m.layer(l).sinks.empty();
    lse.resize(sinks ? size_t(max_rows * cfg.n_head) : 0);
    if (cfg.has_indexer()) {
      idx_q.resize(size_t(max_rows * cfg.indexer_heads * cfg.indexer_dim));
      idx_k.resize(size_t(max_rows * cfg.indexer_dim));
      idx_w.resize(size_t(max_rows * cfg.indexer_heads));
    }
    // A MoE layer's FFN keeps its rows in its graph's own memory (layer_graph.cpp), but for
    // shared experts'; deepseek2's leading layers are dense.
    int64_t ff = 0;
    for (int64_t l = 0; l < cfg.n_layer; ++l)
      if (!cfg.layer_moe(l)) ff = cfg.n_ff;
    ff = std::max({ff, cfg.n_ff_exp * cfg.n_expert_shared, cfg.q_lora_rank});
    if (shape.latent) ff = std::max(ff, cfg.n_head * cfg.v_dim());  // Wv_b's output, Wo's input
    gate.resize(size_t(max_rows * ff));
    up.resize(size_t(max_rows * ff));
    pack = has_spattn_products(max_rows);
    if (pack) {
      // Their packed inputs go into q, att and up (layer_graph.hpp: RowBuffers), rows padded to
      // whole panels.
      // The integer product's quantized rows follow the widened product's panels, and the
      // bf16 product's rounded rows those, where some matrix takes it.
      const bool bf16 = any_product([](const Model::Weight& w) { return spattn_product_bf16(w); });
      const auto packed = [&](int64_t cols) {
        return size_t(spattn_prepared_floats(max_rows, cols, bf16));
      };
      q.resize(std::max(q.size(), packed(dq)));
      att.resize(std::max(att.size(), packed(std::max(hd, dq))));
      up.resize(std::max(up.size(), packed(ff)));
    }
  }

  // Whether a call of max_rows rows would run some product on spattn's kernel.
  bool has_spattn_products(int64_t max_rows) const {
    return any_product([&](const Model::Weight& w) {
      const int64_t from = spattn_product_min_rows(w);
      return from > 0 && from <= max_rows;
    });
  }

  // Whether pred holds for the output head or a layer's dense matrix.
  template <class Pred>
  bool any_product(Pred pred) const {
    if (pred(m.output())) return true;
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      const Model::Layer& L = m.layer(l);
      // (wkv_b: the expanded form's only; another session may be making it meanwhile.)
      for (const Model::Weight* w :
           {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down, &L.wq_a, &L.wq_b, &L.wkv_a,
            shape.latent ? nullptr : &L.wkv_b, &L.gate_shexp, &L.up_shexp, &L.down_shexp})
        if (w && w->t && pred(*w)) return true;  // a MoE layer has no gate, up, down
    }
    return false;
  }

  // body(r0, r1) over rows [0, n) in chunks of 32, on the pool for a prefill's rows (RoPE and
  // the cache's rounding ran on the calling thread alone, the pool's other threads idle; an
  // A/B on the 1B shape's pp512, -t 2: f16 +1.3%, Q8_0 and Q4_K_M within noise), inline for a
  // few rows (decode).
  template <class Body>
  void for_row_chunks(int64_t n, Body&& body) const {
    constexpr int64_t kRows = 32;
    if (n < 2 * kRows) {
      body(int64_t(0), n);
      return;
    }
    parallel_for((n + kRows - 1) / kRows, opt.threads,
                 [&](int64_t c, int) { body(c * kRows, std::min(n, (c + 1) * kRows)); });
  }

  AttnOptions attn_opt(int64_t q_start) const {
    AttnOptions a;
    a.threads = opt.threads;
    a.q_start = q_start;
    a.scale = attention_scale(cfg, shape);  // 0: 1 / sqrt(head dim)
    return a;
  }

  // Layer l's attention over n new rows at pos0.. (their K and V appended to the cache). Rows
  // before `read_from` have outputs nobody reads (the last layer's rows without logits): the
  // dense backend skips them, exactly, since a row's output does not depend on the other
  // queries; a method's or chunked_h2o's selection does, so they run every row.
  void attention(int64_t l, int64_t n, int64_t pos0, Pass pass, bool last, int64_t read_from,
                 Stats* stats) {
    const int64_t Hq = shape.q_heads, Hkv = shape.kv_heads, d = shape.dim;
    const TensorView qv = TensorView::shd(q.data(), DType::f32, Hq, n, d);
    const TensorView kv = TensorView::shd(k.data(), DType::f32, Hkv, n, d);
    const TensorView vv = TensorView::shd(v_rows(), DType::f32, Hkv, n, d);
    const TensorView ov = TensorView::shd(att.data(), DType::f32, Hq, n, d);
    const KVType vt = value_cache_type(opt, shape);
    SPATTN_CHECK(grp || cache.layer_size(l) == pos0, "internal: layer ", l, " holds ",
                 cache.layer_size(l), " tokens, rows start at ", pos0);
    // The rows as the cache stores them (-ctk / -ctv), for every reader: the packed cache
    // rounds them the same way (idempotently), chunked_h2o's memory sets and the methods'
    // raw rows take them from here.
    if (opt.cache_type_k != KVType::f32 || vt != KVType::f32)
      for_row_chunks(n, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * Hkv; i < r1 * Hkv; ++i) {
          if (opt.cache_type_k != KVType::f32)
            kv_round_row(opt.cache_type_k, &k[size_t(i * d)], &k[size_t(i * d)], d);
          if (vt != KVType::f32 && !shape.latent)
            kv_round_row(vt, &v[size_t(i * d)], &v[size_t(i * d)], d);
        }
      });
    if (pass == Pass::ring) {
      cache.append(l, kv, vv, opt.threads, zz.positions(grp->rank()));
      // Every position's indexer keys on every rank (each rank made its own rows'): a row's
      // selection reads them all.
      DsaCall dsa;
      if (cfg.has_indexer()) {
        if (!cfg.shares_indexer(l))
          dist::gather_rows(*grp, zz, idx_k.data(), cfg.indexer_dim, cp_rows);
        dsa = dsa_call(l, 0, zz.n, cp_rows.data());
      }
      const RingCall rc{*grp,
                        zz,
                        ring,
                        h2o_wire,
                        q.data(),
                        k.data(),
                        v_rows(),
                        att.data(),
                        &cache.packed(l),
                        Hq,
                        Hkv,
                        d,
                        opt.cache_type_k,
                        vt,
                        attn_opt(-1),
                        stats,
                        cfg.has_indexer() ? &dsa : nullptr};
      b.prefill[size_t(l)]->ring_prefill(rc, cp_plan);
      return;
    }
    if (pass == Pass::cp_decode) {
      // The token's K/V to the rank that keeps it; every rank ran the token, so every rank
      // extends its indexer keys by it (below).
      const int64_t at[1] = {pos0};
      if (cp_owner == grp->rank()) cache.append(l, kv, vv, 1, at);
    } else {
      // Staged until the call commits; a decode row makes no pool call.
      cache.append(l, kv, vv, n > kMaxDecodeQueries ? opt.threads : 1);
    }
    LayerCall c;
    c.layer = l;
    c.q = qv, c.k = kv, c.v = vv, c.out = ov;
    c.pos0 = pos0;
    c.read_from = read_from;
    c.last = last;
    c.packed = &cache.packed(l);
    if (cache.has_raw()) c.raw_k = cache.raw_k(l), c.raw_v = cache.raw_v(l);
    if (cache.has_pages(l)) c.pages = &cache.pages(l);
    c.opt = attn_opt(-1);
    DsaCall dsa;
    if (cfg.has_indexer()) {
      dsa = dsa_call(l, pos0, n, idx_k.data());
      c.dsa = &dsa;
    }
    // Attention sinks (gpt-oss): every backend also gives its rows' LSE, and the sinks join
    // them afterwards (merge_sinks), whichever keys it read.
    const std::vector<float>& sinks = m.layer(l).sinks;
    c.lse = sinks.empty() ? nullptr : lse.data();
    TensorView done = ov;  // the rows computed
    if (pass == Pass::decode || pass == Pass::cp_decode) {
      DecodeReads reads;
      c.stats = &t.decode_stats;
      if (pass == Pass::decode)
        b.decode[size_t(l)]->decode(c, reads);
      else
        b.decode[size_t(l)]->ring_decode(c, *grp, cp_token, cp_rows, reads);
      t.decode_keys_read += reads.keys_read;
      t.decode_keys_total += reads.keys_total;
      t.decode_pages_read += reads.pages_read;
      t.decode_pages_total += reads.pages_total;
      t.decode_select_ms += reads.select_ms;
    } else {
      c.stats = stats;
      const bool dense = pass == Pass::dense && b.prefill_caps[size_t(l)].stateful;
      done = (dense ? *b.dense : *b.prefill[size_t(l)]).prefill(c);
    }
    if (c.lse && done.seq > 0) merge_sinks(done, c.lse, sinks.data());
  }

  // The layer's indexer keys cut to pos0 and extended by n rows of keys, and the call's indexer
  // rows (methods/dsa.hpp).
  DsaCall dsa_call(int64_t l, int64_t pos0, int64_t n, const float* keys_from) {
    DsaCall dsa;
    dsa.top_k = cfg.indexer_top_k;
    // GLM-5.2's layers of one call pass a full layer's selection on to those sharing it.
    if (!cfg.indexer_shared.empty()) dsa.carry = &dsa_carry;
    if (cfg.shares_indexer(l)) {
      dsa.shared = true;
      return dsa;
    }
    IndexerKeys& keys = idx_keys[size_t(l)];
    SPATTN_CHECK(keys.size() >= pos0, "internal: layer ", l, "'s indexer holds ", keys.size(),
                 " keys, rows start at ", pos0);
    keys.truncate(pos0);
    keys.append(keys_from, n);
    dsa.rows = {idx_q.data(), idx_k.data(), idx_w.data(), cfg.indexer_heads, cfg.indexer_dim};
    dsa.keys = &keys;
    return dsa;
  }

  // Runs one call's forward passes as one change of the session: committed when `body`
  // returns, undone when it throws (see the top of this file).
  template <class Body>
  void all_or_nothing(Body&& body) {
    const int64_t pos0 = cache.size();
    // The timings as they were, but for the per-token lists: a long generation would copy its
    // whole history at every token. A step appends to them last (count_decoded), so a failed
    // call cuts them back to the restored count.
    std::vector<double> ms, attn;
    ms.swap(t.decode_token_ms), attn.swap(t.decode_token_attn_ms);
    const Timings saved = t;
    ms.swap(t.decode_token_ms), attn.swap(t.decode_token_attn_ms);
    try {
      body();
      cache.commit();
    } catch (...) {
      cache.rollback();
      if (state_at == pos0) states_to(pos0);  // the layers as they were (reset or restored)
      ms.swap(t.decode_token_ms), attn.swap(t.decode_token_attn_ms);
      t = saved;
      ms.resize(size_t(t.decode_tokens)), attn.resize(size_t(t.decode_tokens));
      ms.swap(t.decode_token_ms), attn.swap(t.decode_token_attn_ms);
      throw;
    }
  }

  void cp_prefill(std::span<const int32_t> tokens, float* logits, int64_t logits_from,
                  const PrefillProgress& progress);

  // The latent attention's k and v heads of rows [r0, r1) from the graph's kv_a and kv_b
  // (llama.cpp's expanded form): head h's k is its k_nope then the token's rope key (one for
  // every head, turned by RoPE with them), its v its v values then zeros up to the key length
  // (every kernel reads one head size; the zeros add nothing to the output, whose first v
  // values compact_attention keeps).
  void assemble_kv(int64_t r0, int64_t r1) {
    const int64_t H = cfg.n_head, d = cfg.head_dim, rot = cfg.rot(), nope = d - rot,
                  dv = cfg.v_dim(), kva = cfg.kv_lora_rank + rot, kvb = nope + dv;
    for (int64_t i = r0; i < r1; ++i) {
      const float* pe = &kv_a[size_t(i * kva + cfg.kv_lora_rank)];
      for (int64_t hh = 0; hh < H; ++hh) {
        const float* src = &kv_b[size_t((i * H + hh) * kvb)];
        float* kd = &k[size_t((i * H + hh) * d)];
        float* vd = &v[size_t((i * H + hh) * d)];
        std::copy_n(src, nope, kd);
        std::copy_n(pe, rot, kd + nope);
        std::copy_n(src + nope, dv, vd);
        std::fill(vd + dv, vd + d, 0.0f);
      }
    }
  }

  // The latent cache's rows [r0, r1) (llama.cpp's absorbed form, deepseek2.cpp's is_mla branch):
  // the one kv head's k is the normed kv latent (h) then the token's rope key (kv_a's tail,
  // turned by RoPE with the q heads). Its v is k itself (v_rows; the cache stores it once,
  // KVCache's v_is_k), as llama.cpp's v is a view of the cached k's first kv_lora_rank values:
  // the kernels read one head size, and the outputs past the kv_lora_rank that
  // compact_attention keeps (the rope key's weighted sum) are dropped.
  void assemble_latent(int64_t r0, int64_t r1) {
    const int64_t lora = cfg.kv_lora_rank, rot = cfg.rot(), d = lora + rot, kva = lora + rot;
    for (int64_t i = r0; i < r1; ++i) {
      float* kd = &k[size_t(i * d)];
      std::copy_n(&h[size_t(i * lora)], lora, kd);
      std::copy_n(&kv_a[size_t(i * kva + lora)], rot, kd + lora);
    }
  }
  // The attention's value rows: v, or k where the values are the keys (the latent cache).
  float* v_rows() { return shape.latent ? k.data() : v.data(); }

  // The lightning indexer's rows [r0, r1) as llama.cpp's deepseek32 and glm-dsa graphs turn
  // them: RoPE on the first rot() values of each query head and of the key (idx_rope), the
  // Hadamard rotation of each; the key rounded as the cache type rounds it (llama.cpp keeps it
  // in a cache of -ctk's type); the weights times 1 / sqrt(dim x heads). The queries stay f32:
  // llama.cpp's scores come from its fused ggml_lightning_indexer (cparams.fused_lid, always
  // on), which widens each cached key to f32 and takes f32 dot products with them (the unfused
  // graph's ggml_mul_mat would round the queries to the cache type first).
  template <class RowPos>
  void indexer_rows(int64_t r0, int64_t r1, const RowPos& row_pos) {
    const int64_t H = cfg.indexer_heads, D = cfg.indexer_dim;
    const float wscale = 1.0f / std::sqrt(float(D * H));
    const KVType kt = opt.cache_type_k;
    for (int64_t i = r0; i < r1; ++i) {
      const int64_t pos = row_pos(i);
      for (int64_t hh = 0; hh < H; ++hh) {
        float* qh = &idx_q[size_t((i * H + hh) * D)];
        idx_rope->rotate_inplace(qh, pos);
        hadamard_rotate(qh, D);
      }
      float* kr = &idx_k[size_t(i * D)];
      idx_rope->rotate_inplace(kr, pos);
      hadamard_rotate(kr, D);
      if (kt != KVType::f32) kv_round_row(kt, kr, kr, D);
      for (int64_t hh = 0; hh < H; ++hh) idx_w[size_t(i * H + hh)] *= wscale;
    }
  }

  // The values of a head's attention output the layer's tail reads: v_dim(), or in the absorbed
  // form kv_lora_rank (the latent, which Wv_b takes to v_dim()).
  int64_t out_dim() const { return shape.latent ? cfg.kv_lora_rank : cfg.v_dim(); }
  // Each head's first out_dim() outputs of n rows, packed: the tail's input [n, Hq out_dim()].
  void compact_attention(int64_t n) {
    const int64_t H = shape.q_heads, d = shape.dim, dv = out_dim();
    for (int64_t r = 0; r < n * H; ++r)  // forward: each run moves down, over read ones only
      std::memmove(&att[size_t(r * dv)], &att[size_t(r * d)], size_t(dv) * sizeof(float));
  }

  // One decoded token's time in the timings: its whole step and its attention's part.
  void count_decoded(double ms, double attn_ms) {
    t.decode_ms += ms;
    t.decode_tokens += 1;
    t.decode_token_ms.push_back(ms);
    t.decode_token_attn_ms.push_back(attn_ms);
  }

  // n tokens at positions pos0.. through every layer; logits for rows >= logits_row0 (row index
  // within this call) go to logits.
  void forward(const int32_t* tokens, int64_t n, int64_t pos0, Pass pass, bool last, float* logits,
               int64_t logits_row0, double* attn_ms, Stats* stats,
               const std::function<void(int64_t layers_done)>& after_layer = {}) {
    const int64_t D = cfg.n_embd, Hq = shape.q_heads, Hkv = shape.kv_heads, d = shape.dim;
    SPATTN_CHECK(n >= 1 && n <= max_rows, "internal: ", n, " rows for a scratch of ", max_rows);
    // Row i's position: pos0 + i, or the rank's zigzag rows in a context-parallel prefill.
    const dist::Zigzag::Run run_a =
        pass == Pass::ring ? zz.first(grp->rank()) : dist::Zigzag::Run{pos0, n};
    const auto row_pos = [&](int64_t i) {
      return i < run_a.len ? run_a.pos + i : zz.second(grp->rank()).pos + (i - run_a.len);
    };
    for (int64_t i = 0; i < n; ++i) {
      SPATTN_CHECK(tokens[i] >= 0 && tokens[i] < cfg.n_vocab, "token id ", tokens[i],
                   " at position ", row_pos(i), " is outside the vocabulary [0, ", cfg.n_vocab,
                   ")");
      m.embed(tokens[i], x.data() + i * D);
    }
    // gemma3 scales the embeddings by sqrt(n_embd) (llama.cpp: ggml_scale by sqrtf(n_embd)).
    if (arch_traits(cfg.arch).embd_scale) {
      const float e = std::sqrt(float(D));
      for (int64_t i = 0; i < n * D; ++i) x[size_t(i)] *= e;
    }
    const RowBuffers rb{x.data(),
                        h.data(),
                        q.data(),
                        k.data(),
                        v.data(),
                        att.data(),
                        gate.data(),
                        up.data(),
                        kv_a.empty() ? nullptr : kv_a.data(),
                        kv_b.empty() ? nullptr : kv_b.data(),
                        idx_q.empty() ? nullptr : idx_q.data(),
                        idx_k.empty() ? nullptr : idx_k.data(),
                        idx_w.empty() ? nullptr : idx_w.data(),
                        pack,
                        shape.latent};
    const bool want_logits = logits && logits_row0 < n;
    run_layer_graph(m, rb, n, GraphStep{-1, 0, nullptr}, opt.threads, graphs);
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      const RopeTable& rt = cfg.is_swa(l) ? *rope_swa : rope;
      // RoPE turns the last rot() values of each head (all of them but in the latent
      // attention, whose heads are assembled first: the rope key after k_nope, or after the
      // kv latent in the absorbed form).
      const int64_t rot0 = d - cfg.rot();
      for_row_chunks(n, [&](int64_t r0, int64_t r1) {
        if (shape.latent)
          assemble_latent(r0, r1);
        else if (cfg.is_mla())
          assemble_kv(r0, r1);
        if (cfg.has_indexer() && !cfg.shares_indexer(l)) indexer_rows(r0, r1, row_pos);
        for (int64_t i = r0; i < r1; ++i) {
          const int64_t pos = row_pos(i);
          for (int64_t hh = 0; hh < Hq; ++hh)
            rt.rotate_inplace(&q[size_t((i * Hq + hh) * d + rot0)], pos);
          for (int64_t hh = 0; hh < Hkv; ++hh)
            rt.rotate_inplace(&k[size_t((i * Hkv + hh) * d + rot0)], pos);
        }
      });
      if (tap && (tap_layer == kTapAllLayers || l == tap_layer)) {
        if (pass == Pass::ring) {  // the rank's two runs, each contiguous
          const dist::Zigzag::Run a = zz.first(grp->rank()), b = zz.second(grp->rank());
          tap(l, a.pos, a.len, q.data(), k.data(), v_rows());
          tap(l, b.pos, b.len, q.data() + a.len * Hq * d, k.data() + a.len * Hkv * d,
              v_rows() + a.len * Hkv * d);
        } else {
          tap(l, pos0, n, q.data(), k.data(), v_rows());
        }
      }
      const auto t0 = Clock::now();
      const bool final = l + 1 == cfg.n_layer;
      attention(l, n, pos0, pass, last, final ? (want_logits ? logits_row0 : n) : 0, stats);
      if (out_dim() < d) compact_attention(n);
      if (attn_ms) {
        const double ms = ms_since(t0);
        *attn_ms += ms;
        std::vector<double>& per_layer = pass == Pass::decode || pass == Pass::cp_decode
                                             ? t.decode_layer_attn_ms
                                             : t.prefill_layer_attn_ms;
        per_layer.resize(size_t(cfg.n_layer));
        per_layer[size_t(l)] += ms;
      }
      // This layer's tail and the next layer's head (or the logits) in one graph. The last
      // layer's tail feeds nothing but the logits, so it runs over their rows only, and not
      // at all in a chunk without logits (llama.cpp's inp_out_ids does the same after Wo):
      // 1/n_layer of the FFN's and Wo's work on every chunk of a prompt.
      if (!final) {
        run_layer_graph(m, rb, n, GraphStep{l, l + 1, nullptr}, opt.threads, graphs);
      } else if (want_logits) {
        // Those rows moved to the front, so the scratch buffers' sizing (packed panels from
        // row 0) holds as for any call of fewer rows.
        const int64_t r = n - logits_row0, dq = Hq * out_dim();
        if (logits_row0 > 0) {
          std::memmove(x.data(), x.data() + logits_row0 * D, size_t(r * D) * sizeof(float));
          std::memmove(att.data(), att.data() + logits_row0 * dq, size_t(r * dq) * sizeof(float));
        }
        run_layer_graph(m, rb, r, GraphStep{l, -1, logits}, opt.threads, graphs);
      }
      if (after_layer) after_layer(l + 1);
    }
  }
};

Session::Session(const Model& model, const SessionOptions& opt)
    : p_(std::make_unique<Impl>(model, opt)) {}
Session::Session(std::unique_ptr<Impl> impl) : p_(std::move(impl)) {}
Session::Session(Session&&) noexcept = default;
Session& Session::operator=(Session&&) noexcept = default;
Session::~Session() = default;

void Session::reset() { truncate(0); }

void Session::truncate(int64_t n) {
  Impl& s = *p_;
  if (s.grp) {
    // The ranks' caches hold the zigzag of one prompt: only all of it or none is a prefix.
    SPATTN_CHECK(n == 0 || n == s.cp_n, "--cp: truncate keeps all ", s.cp_n,
                 " tokens or none, not ", n);
    if (n == 0) {
      s.cache.truncate(0);
      s.cp_n = 0;
      std::fill(s.cp_counts.begin(), s.cp_counts.end(), 0);
    }
    return;
  }
  SPATTN_CHECK(n >= 0 && n <= s.cache.size(), "truncate: ", n, " tokens, outside [0, ",
               s.cache.size(), "]");
  s.cache.truncate(n);
  s.states_to(n);
}

int64_t Session::reuse_point(int64_t n) const {
  const Impl& s = *p_;
  SPATTN_CHECK(n >= 0 && n <= s.cache.size(), "reuse_point: ", n, " tokens, outside [0, ",
               s.cache.size(), "]");
  if (s.grp) return 0;  // a context-parallel prefill starts at position 0
  if (s.b.sched) {
    for (auto k = s.kept.rbegin(); k != s.kept.rend(); ++k)
      if (k->pos <= n) return k->pos;
    return 0;
  }
  return s.b.rows_independent ? n : 0;
}

Session Session::fork(int64_t n) const {
  const Impl& s = *p_;
  SPATTN_CHECK(!s.grp, "--cp: a context-parallel session cannot be forked");
  if (n < 0) n = s.cache.size();
  SPATTN_CHECK(n <= s.cache.size(), "fork: ", n, " tokens, outside [0, ", s.cache.size(), "]");
  return Session(std::make_unique<Impl>(s, n));
}

int64_t Session::n_past() const { return p_->grp ? p_->cp_n : p_->cache.size(); }
const KVCache& Session::cache() const { return p_->cache; }
Session::AttentionShape Session::attention_shape() const { return p_->shape; }
const Timings& Session::timings() const { return p_->t; }
Session::Memory Session::memory() const {
  const Impl& s = *p_;
  Memory m;
  m.kv_cache = s.cache.packed_bytes();
  m.kv_cache_per_token = s.cache.bytes_per_token();
  m.method_kv = s.cache.raw_bytes();
  m.decode_pages = s.cache.pages_bytes();
  for (const auto* b : {&s.x, &s.h, &s.q, &s.k, &s.v, &s.att, &s.gate, &s.up, &s.kv_a, &s.kv_b})
    m.scratch += b->capacity() * sizeof(float);
  for (const auto& l : s.b.prefill) m.h2o_state += l->state_bytes();
  for (const auto& k : s.kept)
    for (const auto& l : k.layers)
      if (l) m.h2o_state += l->bytes();
  if (s.b.sched) m.h2o_scratch = s.b.sched->scratch_bytes();
  m.attention_staging =
      size_t(std::max(s.t.prefill_stats.staged_bytes, s.t.decode_stats.staged_bytes));
  m.cp_ring = s.ring.bytes() + s.h2o_wire.capacity();  // the ring's buffers or the chain's
  for (const IndexerKeys& k : s.idx_keys) m.indexer_keys += k.bytes();
  return m;
}
void Session::reset_timings() { p_->t = Timings{}; }

std::vector<LayerAttention> Session::layer_attention() const {
  const Impl& s = *p_;
  std::vector<LayerAttention> out;
  for (int64_t l = 0; l < s.cfg.n_layer; ++l) {
    LayerAttention a;
    a.sliding = s.cfg.is_swa(l);
    a.window = s.cfg.window(l);
    a.prefill = s.b.prefill[size_t(l)]->name();
    a.decode = s.b.decode[size_t(l)]->name();
    out.push_back(std::move(a));
  }
  return out;
}

std::string Session::prefill_ran() const { return p_->prefill_ran; }

void Session::set_h2o_traces(std::vector<ChunkedH2OTrace>* traces) {
  Impl& s = *p_;
  SPATTN_CHECK(s.b.sched, "a heavy-hitter trace needs --attn chunked_h2o");
  if (traces) traces->resize(s.b.prefill.size());
  for (size_t l = 0; l < s.b.prefill.size(); ++l)
    if (s.b.prefill_caps[l].stateful) s.b.prefill[l]->set_trace(traces ? &(*traces)[l] : nullptr);
}

void Session::set_qkv_tap(int64_t layer, QkvTap tap) {
  SPATTN_CHECK(layer == kTapAllLayers || (layer >= 0 && layer < p_->cfg.n_layer),
               "--dump-qkv: layer ", layer, " outside [0, ", p_->cfg.n_layer, ")");
  p_->tap_layer = layer;
  p_->tap = std::move(tap);
}

void Session::prefill(std::span<const int32_t> tokens, float* logits, int64_t logits_from,
                      const PrefillProgress& progress) {
  Impl& s = *p_;
  if (s.grp) return s.cp_prefill(tokens, logits, logits_from, progress);
  const int64_t n = int64_t(tokens.size()), V = s.cfg.n_vocab, pos0 = s.cache.size();
  SPATTN_CHECK(n >= 1, "prefill: no tokens");
  SPATTN_CHECK(pos0 + n <= s.opt.n_ctx, "prompt of ", n, " tokens after ", pos0,
               " does not fit the context of ", s.opt.n_ctx, " (-c)");
  SPATTN_CHECK(logits_from >= 0 && logits_from < n, "prefill: logits_from ", logits_from,
               " outside [0, ", n, ")");
  std::vector<Impl::Kept> pending;  // the boundaries this call passes, kept if it succeeds
  s.all_or_nothing([&] {
    const auto t0 = Clock::now();
    // Runs rows [r0, r1) of the prompt, writing the logits rows it holds.
    auto run = [&](int64_t r0, int64_t r1, Pass pass, bool last) {
      float* lg = nullptr;
      int64_t row0 = 0;
      if (logits && r1 > logits_from) {
        row0 = std::max<int64_t>(0, logits_from - r0);
        lg = logits + (r0 + row0 - logits_from) * V;
      }
      const int64_t L = s.cfg.n_layer;
      s.forward(tokens.data() + r0, r1 - r0, pos0 + r0, pass, last, lg, row0, &s.t.prefill_attn_ms,
                &s.t.prefill_stats, [&](int64_t layers) {
                  if (progress) progress(r0 + (r1 - r0) * layers / L, n);
                });
    };
    // A stateful backend from position 0, or on from a restored boundary, in the batches one
    // prefill of the whole prompt has there; else by chunk.
    const bool stateful = s.b.sched && pos0 == s.state_at && s.b.sched->runs_from(pos0, n);
    if (stateful) {
      const auto batches = s.b.sched->batches(pos0, n);
      struct Unhook {
        Impl& s;
        ~Unhook() { s.unhook(); }
      } unhook{s};
      s.hook(pos0, batches, pending);
      for (auto [b0, b1] : batches) run(b0, b1, Pass::prefill, b1 == n);
    } else {
      const Pass pass = s.b.sched ? Pass::dense : Pass::prefill;
      for (int64_t b0 = 0; b0 < n; b0 += s.opt.n_batch) {
        const int64_t b1 = std::min(n, b0 + s.opt.n_batch);
        for (int64_t c0 = b0; c0 < b1; c0 += s.opt.n_ubatch)
          run(c0, std::min(b1, c0 + s.opt.n_ubatch), pass, false);
      }
    }
    s.prefill_ran = stateful || !s.b.sched ? s.global_prefill().name() : "dense";
    s.t.prefill_ms += ms_since(t0);
    s.t.prefill_tokens += n;
  });
  // The layers now hold the prompt's end, which built no memory set: no prefill goes on from it.
  if (s.b.sched) {
    s.state_at = -1;
    for (auto& k : pending) s.kept.push_back(std::move(k));
    if (int64_t(s.kept.size()) > s.opt.h2o_keep)
      s.kept.erase(s.kept.begin(), s.kept.end() - std::max<int64_t>(0, s.opt.h2o_keep));
  }
}

void Session::decode(int32_t token, float* logits) {
  Impl& s = *p_;
  if (s.grp) {
    SPATTN_CHECK(s.cp_n >= 1, "--cp: decode needs a prefill first");
    SPATTN_CHECK(s.cp_n + 1 <= s.opt.n_ctx, "decode: the context of ", s.opt.n_ctx,
                 " tokens (-c) is full");
    // The emptiest rank (the lowest of equals) holds the new token's K/V.
    s.cp_token = token;
    s.cp_owner =
        int(std::min_element(s.cp_counts.begin(), s.cp_counts.end()) - s.cp_counts.begin());
    const dist::CommStats c0 = s.grp->stats();
    s.all_or_nothing([&] {
      const auto t0 = Clock::now();
      const double attn0 = s.t.decode_attn_ms;
      s.forward(&token, 1, s.cp_n, Pass::cp_decode, false, logits, 0, &s.t.decode_attn_ms, nullptr);
      s.count_decoded(ms_since(t0), s.t.decode_attn_ms - attn0);
    });
    s.t.decode_comm.add(delta(s.grp->stats(), c0));
    s.cp_counts[size_t(s.cp_owner)] += 1;
    s.cp_n += 1;
    return;
  }
  SPATTN_CHECK(s.cache.size() + 1 <= s.opt.n_ctx, "decode: the context of ", s.opt.n_ctx,
               " tokens (-c) is full");
  s.all_or_nothing([&] {
    const auto t0 = Clock::now();
    const double attn0 = s.t.decode_attn_ms;
    s.forward(&token, 1, s.cache.size(), Pass::decode, false, logits, 0, &s.t.decode_attn_ms,
              nullptr);
    s.count_decoded(ms_since(t0), s.t.decode_attn_ms - attn0);
  });
  s.state_at = -1;  // decoded rows are not in a stateful backend's state
}

}  // namespace spattn::model

namespace spattn::model {

// A context-parallel prefill (see the top of this file): the ranks first agree that they were
// given the same call and that it can run, then take their zigzag rows through every layer;
// the logits rows asked for are gathered to every rank.
void Session::Impl::cp_prefill(std::span<const int32_t> tokens, float* logits, int64_t logits_from,
                               const PrefillProgress& progress) {
  Impl& s = *this;
  dist::Group& g = *s.grp;
  const int P = g.size(), r = g.rank();
  const int64_t n = int64_t(tokens.size()), V = s.cfg.n_vocab;
  const dist::CommStats c0 = g.stats();
  // What every rank was asked: the call's shape and a fingerprint of its tokens.
  struct Ask {
    int64_t n, logits_from, with_logits, n_past;
    uint64_t tokens;
  };
  const Ask mine{n, logits_from, logits ? 1 : 0, s.cp_n,
                 dist::fingerprint(tokens.data(), tokens.size_bytes())};
  std::vector<Ask> all(static_cast<size_t>(P));
  g.allgather(&mine, sizeof mine, all.data());
  dist::agree(g, "prefill", [&] {
    for (int q = 1; q < P; ++q)
      SPATTN_CHECK(std::memcmp(&all[size_t(q)], &all[0], sizeof(Ask)) == 0, "rank ", q,
                   " was given another prompt or call than rank 0 (", all[size_t(q)].n,
                   " tokens against ", all[0].n, ")");
    SPATTN_CHECK(s.cp_n == 0,
                 "--cp: a prefill starts at position 0 (reset the session); this "
                 "one holds ",
                 s.cp_n, " tokens");
    SPATTN_CHECK(n >= 2 * int64_t(P), "--cp ", P, ": the prompt's ", n,
                 " tokens are fewer than "
                 "the ",
                 2 * P, " chunks the zigzag split needs (one token each at least)");
    // How the layers' backend splits the prompt (chunked_h2o: whole -ub chunks per rank;
    // BLASST: whole 64-token tiles).
    s.b.prefill.front()->ring_check(n, P);
    SPATTN_CHECK(n <= s.opt.n_ctx, "prompt of ", n, " tokens does not fit the context of ",
                 s.opt.n_ctx, " (-c)");
    SPATTN_CHECK(logits_from >= 0 && logits_from < n, "prefill: logits_from ", logits_from,
                 " outside [0, ", n, ")");
    for (int64_t i = 0; i < n; ++i)
      SPATTN_CHECK(tokens[size_t(i)] >= 0 && tokens[size_t(i)] < s.cfg.n_vocab, "token id ",
                   tokens[size_t(i)], " at position ", i, " is outside the vocabulary [0, ",
                   s.cfg.n_vocab, ")");
  });
  // The zigzag's grid and whether the layers gather every rank's K/V: the backend's plan
  // (chunked_h2o on the -ub grid, a prompt of one chunk dense as in one process; dense on the
  // tiles' 64-token grid in position order, one process's bits, or the whole K/V gathered when
  // asked or for a prompt of fewer than 2P tiles; BLASST on the tiles' grid; a_shape token by
  // token).
  s.cp_plan = s.b.prefill.front()->ring_plan(n, P, s.opt.cp_gather);
  s.zz = dist::Zigzag{n, P, s.cp_plan.grid};
  const std::vector<int64_t> own = s.zz.positions(r);
  const int64_t rows = int64_t(own.size());
  std::vector<int32_t> own_tokens(own.size());
  for (size_t i = 0; i < own.size(); ++i) own_tokens[i] = tokens[size_t(own[i])];
  // This rank's logits rows: its positions >= logits_from, a suffix of its rows.
  const auto rows_from = [&](int rank) {
    const std::vector<int64_t> p = s.zz.positions(rank);
    return int64_t(std::lower_bound(p.begin(), p.end(), logits_from) - p.begin());
  };
  const int64_t lrow0 = rows_from(r);
  std::vector<float> mine_logits(logits ? size_t((rows - lrow0) * V) : 0);
  s.all_or_nothing([&] {
    const auto t0 = Clock::now();
    s.forward(own_tokens.data(), rows, 0, Pass::ring, false,
              logits && lrow0 < rows ? mine_logits.data() : nullptr, lrow0, &s.t.prefill_attn_ms,
              &s.t.prefill_stats);
    if (logits) {
      std::vector<size_t> counts(static_cast<size_t>(P));
      for (int q = 0; q < P; ++q)
        counts[size_t(q)] = size_t((s.zz.rows(q) - rows_from(q)) * V) * sizeof(float);
      std::vector<float> gathered(size_t((n - logits_from) * V));
      const int64_t before = g.stats().bytes_recv;
      g.allgatherv(mine_logits.data(), mine_logits.size() * sizeof(float), gathered.data(), counts);
      g.stats().logits_bytes_recv += g.stats().bytes_recv - before;
      const float* src = gathered.data();
      for (int q = 0; q < P; ++q) {
        const std::vector<int64_t> p = s.zz.positions(q);
        for (size_t i = size_t(rows_from(q)); i < p.size(); ++i, src += V)
          std::copy_n(src, V, logits + (p[i] - logits_from) * V);
      }
    }
    s.t.prefill_ms += ms_since(t0);
    s.t.prefill_tokens += n;
  });
  for (int q = 0; q < P; ++q) s.cp_counts[size_t(q)] = s.zz.rows(q);
  s.cp_n = n;
  s.t.prefill_comm.add(delta(g.stats(), c0));
  if (progress) progress(n, n);
}

}  // namespace spattn::model

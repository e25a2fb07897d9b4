// Session: one prompt's prefill and decode through a Model (the forward pass is summarised in
// include/spattn/model.hpp).
//
// Prefill schedules, as llama.cpp runs them:
//   dense        the prompt in logical batches of -b, each in chunks of -ub that pass through
//                every layer in turn; a chunk's queries attend to the whole cache before them
//                (attention_dense over the layer's PackedKV with q_start).
//   chunked_h2o  the prompt in logical batches of -b; each batch passes through every layer at
//                once, and a layer's attention is ChunkedH2OLayer::prefill_batch (Phase 1 over
//                the batch's -ub chunks, then Phase 2 chunk by chunk). A prompt of one chunk
//                runs dense, and so does a prefill that starts neither at position 0 nor
//                where the layers' state was restored (see below).
//   method       chunks of -ub, each running a library method over every key before it (the
//                cache's raw rows, which the same appends write).
// Every schedule, and decode, appends every token's K and V to the layer's cache (KVCache:
// packed, and raw in method mode), so every later call sees every token before it, whichever
// call computed it.
//
// chunked_h2o's state at chunk boundaries: at the last h2o_keep ends of -ub chunks that built
// a memory set (every chunk but a prompt's last) and fall on Phase 1's key tiles (a batch's
// end, or a multiple of 64 tokens into it: every chunk end with the default -ub 512), every
// layer's state (ChunkedH2OSnapshot) is kept with the position. truncate(n) to such a boundary restores it, and the next prefill
// goes on from there with chunked_h2o: the same chunk grid (its first batch ends where the
// whole prompt's would), the same state, so the same bits as the prefill that passed n
// computed (a server's prefix reuse). h2o_at is the position the layers can go on from (0
// fresh, a restored boundary, -1 none: after a prompt's last batch or a decode).
//
// Context parallelism (SessionOptions::cp, spattn/context_parallel.hpp): a prefill runs the
// rank's zigzag rows through every layer at once (not in -ub chunks), attention by the pass-KV
// ring (dist/ring_attention.cpp); a decode runs the token on every rank, its K/V staged on the
// rank with the fewest tokens, attention merged over the ranks. n_past is then the group's
// token count; the rank's cache holds its own tokens at their positions.
//
// A call (prefill or decode) is all or nothing: its rows are staged in the cache layer by layer
// and committed when the call has run through every layer and chunk; on an Error anywhere the
// cache is rolled back, chunked_h2o's layer state put back where the call started (reset at 0,
// restored at a kept boundary), its new kept states dropped and the timings restored, and the
// Error propagates: the session is as it was before the call.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>

#include "core/threading.hpp"
#include "dist/h2o_chain.hpp"
#include "dist/ring_attention.hpp"
#include "eval/rope.hpp"
#include "kernels/gemm_widen.hpp"
#include "model/kv_cache.hpp"
#include "methods/a_shape.hpp"
#include "methods/blasst.hpp"
#include "model/layer_graph.hpp"
#include "spattn/decode.hpp"
#include "spattn/decode_spec.hpp"
#include "spattn/error.hpp"
#include "spattn/merge.hpp"
#include "spattn/method.hpp"
#include "spattn/model.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn::model {

void SessionOptions::validate() const {
  SPATTN_CHECK(n_ctx >= 1, "-c (context) must be >= 1, got ", n_ctx);
  SPATTN_CHECK(n_batch >= 1, "-b (logical batch) must be >= 1, got ", n_batch);
  SPATTN_CHECK(n_ubatch >= 1, "-ub (chunk) must be >= 1, got ", n_ubatch);
  SPATTN_CHECK(threads >= 1, "-t (threads) must be >= 1, got ", threads);
  SPATTN_CHECK(h2o_keep >= 0, "h2o_keep (kept chunked_h2o states) must be >= 0, got ", h2o_keep);
  SPATTN_CHECK(mode != PrefillMode::method || !attn_spec.empty(), "--attn: empty method spec");
  for (KVType t : {cache_type_k, cache_type_v})
    SPATTN_CHECK(is_kv_type(t), "-ctk / -ctv: unknown KV cache type ", int(t));
  parse_decode_spec(attn_decode);
  if (cp) {
    if (mode == PrefillMode::method) {
      const MethodSpec spec = parse_method_spec(attn_spec);
      SPATTN_CHECK(spec.name == "a_shape" || spec.name == "blasst", "--cp: --attn ", attn_spec,
                   " is not context-parallel (dense, chunked_h2o, a_shape and blasst are)");
      // One process lays query tiles (a_shape's blocks, BLASST's 64-row tiles) from each -ub
      // chunk's start; across ranks they lie from position 0: the same tiles when -ub is a
      // multiple of their height.
      if (spec.name == "a_shape") {
        const AShapeParams a = a_shape_params(spec);
        SPATTN_CHECK(n_ubatch % a.block_q == 0, "--cp with a_shape needs -ub (", n_ubatch,
                     ") a multiple of block_q (", a.block_q, ")");
      } else {
        blasst_cp_lambda(spec);
        SPATTN_CHECK(n_ubatch % kKeyBlock == 0, "--cp with blasst needs -ub (", n_ubatch,
                     ") a multiple of ", kKeyBlock, " (its tiles)");
      }
    }
    // chunked_h2o's chunks restart at each logical batch: on the -ub grid only when -b is a
    // multiple of -ub, the grid the ranks' split is laid on.
    SPATTN_CHECK(mode != PrefillMode::chunked_h2o || n_batch % n_ubatch == 0,
                 "--cp with chunked_h2o needs -b (", n_batch, ") a multiple of -ub (", n_ubatch,
                 ")");
    SPATTN_CHECK(!cp_gather || mode == PrefillMode::dense, "--cp-gather runs the dense "
                 "prefill (not --attn ", mode == PrefillMode::method ? attn_spec : "chunked_h2o",
                 ")");
    SPATTN_CHECK(attn_decode == "dense", "--cp: only dense decode is context-parallel so far "
                 "(--attn-decode dense), got '", attn_decode, "'");
  }
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
// ring and cp_decode: context parallelism's prefill and decode.
enum class Attn { dense, h2o, method, decode, ring, cp_decode };
const SessionOptions& validated(const SessionOptions& o) {
  o.validate();
  return o;
}
eval::RopeStyle rope_style(const Config& c) {
  return c.rope_neox ? eval::RopeStyle::neox : eval::RopeStyle::adjacent;
}
// The global layers' per-pair divisors: gemma3's linear scaling divides every angle by its
// factor (llama.cpp's freq_scale = 1 / factor), else the file's rope factors for this context.
std::vector<float> global_rope_factors(const Config& c, int64_t n_ctx) {
  if (c.rope_linear_factor != 1.0)
    return std::vector<float>(size_t(c.head_dim / 2), float(c.rope_linear_factor));
  return c.rope_factors(n_ctx);
}
// Sliding-window layers turn by their own base: gemma3's unscaled, gpt-oss's with the global
// layers' scaling (Config::swa_rope_scaled); none: null.
std::shared_ptr<const eval::RopeTable> swa_rope(const Config& c, int64_t n_ctx) {
  if (c.sliding_window <= 0) return nullptr;
  return std::make_shared<const eval::RopeTable>(
      n_ctx, c.head_dim, c.rope_base_swa, rope_style(c),
      c.swa_rope_scaled ? global_rope_factors(c, n_ctx) : std::vector<float>{},
      c.rope_attn_factor);
}
// A rank's cache: its share of the context. The zigzag gives it at most 2 ceil(n / 2P) <=
// n / P + 2 prompt tokens and decode the next token to the emptiest rank. A split on a grid
// of S tokens (chunked_h2o: -ub; dense and BLASST: the 64-token tiles) gives a rank whole
// chunks: at most ceil(ceil(c / S) / P) of S tokens (1/P of the context when it holds many
// chunks per rank).
// The layers that keep Quest's page summaries: those Quest decodes (past its dense layers, no
// sliding window), or every layer where the options ask (a recall measure of the dense ones).
std::vector<bool> quest_layers(const Config& cfg, const DecodeSpec& dec, const SessionOptions& o) {
  std::vector<bool> keep(size_t(cfg.n_layer), o.quest_pages_every_layer);
  if (dec.kind == DecodeKind::quest)
    for (int64_t l = dec.quest.dense_layers; l < cfg.n_layer; ++l)
      keep[size_t(l)] = keep[size_t(l)] || !cfg.is_swa(l);
  return keep;
}

int64_t cache_capacity(const SessionOptions& o) {
  if (!o.cp) return o.n_ctx;
  const int64_t P = o.cp->size();
  const auto grid = [&](int64_t S) { return ((o.n_ctx + S - 1) / S + P - 1) / P * S; };
  int64_t share = (o.n_ctx + P - 1) / P + 2;
  if (o.mode == PrefillMode::chunked_h2o) {
    share = std::max(share, grid(o.n_ubatch) + 2);
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
  DecodeSpec dec;
  eval::RopeTable rope;
  std::shared_ptr<const eval::RopeTable> rope_swa;  // sliding-window layers' table, or null
  // Every token's K/V per layer; its committed size is the session's n_past. f32 rows given,
  // stored as opt.cache_type_k / cache_type_v.
  KVCache cache;
  std::vector<ChunkedH2OLayer> h2o;
  struct Kept {
    int64_t pos;
    std::vector<ChunkedH2OSnapshot> layers;
  };
  std::vector<Kept> h2o_kept;  // ascending positions, at most opt.h2o_keep
  int64_t h2o_at = 0;
  // Per layer, method mode only. A Method's run is const and keeps nothing, so forks share them.
  std::vector<std::shared_ptr<const Method>> methods;
  Timings t;
  // Context parallelism: the group, the tokens it holds in all and per rank (committed), the
  // zigzag of the prefill running, the ring's buffers and decode's gathered (O, LSE).
  dist::Group* grp = nullptr;
  int64_t cp_n = 0;
  std::vector<int64_t> cp_counts;
  dist::Zigzag zz;
  int cp_owner = -1;     // the rank a decoded token's K/V goes to
  int32_t cp_token = 0;  // the token decoding, which every rank checks it shares
  dist::RingScratch ring;
  std::vector<unsigned char> h2o_wire;  // chunked_h2o's memory set between ranks
  bool cp_h2o = false;  // the prefill running is chunked_h2o's chain (else the dense ring)
  std::unique_ptr<dist::RingPattern> cp_pattern;  // a_shape across ranks, else null
  std::unique_ptr<dist::RingBlasst> cp_blasst;    // blasst across ranks, else null
  std::vector<float> cp_gather;
  bool cp_whole = false;  // the dense prefill running gathers the whole K/V (RingLayer::gather)
  int64_t tap_layer = -1;
  QkvTap tap;
  // Scratch for up to max_rows rows.
  int64_t max_rows;
  std::vector<float> x, h, q, k, v, att, g, u;
  std::vector<float> lse;  // the attention rows' LSE [Hq, rows] where a layer has sinks
  bool pack = false;  // products on spattn's kernel (RowBuffers::pack)
  LayerGraphCache graphs;  // the last graph of each layer step, for the next call alike

  Impl(const Model& model, const SessionOptions& o)
      : m(model), cfg(model.config()), opt(validated(o)), dec(parse_decode_spec(o.attn_decode)),
        rope(o.n_ctx, cfg.head_dim, cfg.rope_base, rope_style(cfg),
             global_rope_factors(cfg, o.n_ctx), cfg.rope_attn_factor),
        rope_swa(swa_rope(cfg, o.n_ctx)),
        cache(cfg.n_layer, cfg.n_head_kv, cfg.head_dim, cache_capacity(o), DType::f32,
              /*raw=*/o.mode == PrefillMode::method && !o.cp, o.cache_type_k, o.cache_type_v,
              dec.kind == DecodeKind::quest ? dec.quest.page : 0, dec.quest.sums,
              quest_layers(cfg, dec, o)) {
    make_h2o();
    // A calibrated decode (blasst:sparsity=S,calib=FILE) needs every layer's law: a per-layer
    // file without one is an error naming its layers now, not at the first decoded token.
    if (dec.blasst_calib)
      for (int64_t l = 0; l < cfg.n_layer; ++l) dec.blasst_calib->for_layer(l);
    if (opt.cp) {
      for (int64_t l = 0; l < cfg.n_layer; ++l) {
        SPATTN_CHECK(!cfg.is_swa(l), "context parallelism (--cp) does not split a model with "
                     "sliding-window layers (", arch_name(cfg.arch), ") across ranks yet");
        SPATTN_CHECK(m.layer(l).sinks.empty(), "context parallelism (--cp) does not run "
                     "attention sinks (", arch_name(cfg.arch), ") yet");
      }
      grp = opt.cp.get();
      cp_counts.assign(size_t(grp->size()), 0);
    }
    if (opt.mode == PrefillMode::method && opt.cp) {
      // The ring runs a_shape's pattern or BLASST's rule itself (validate() let no other
      // method through).
      const MethodSpec spec = parse_method_spec(opt.attn_spec);
      if (spec.name == "blasst") {
        cp_blasst = std::make_unique<dist::RingBlasst>(dist::RingBlasst{blasst_cp_lambda(spec)});
      } else {
        const AShapeParams a = a_shape_params(spec);
        cp_pattern = std::make_unique<dist::RingPattern>(
            dist::RingPattern{a.sink, a.local, a.block_q, a.block_k});
      }
    } else if (opt.mode == PrefillMode::method) {
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
      }
    }
    make_scratch();
  }

  // A fork: src's options, methods and tap, a copy of its first n committed tokens.
  Impl(const Impl& src, int64_t n)
      : m(src.m), cfg(src.cfg), opt(src.opt), dec(src.dec), rope(src.rope),
        rope_swa(src.rope_swa), cache(src.cache.fork(n)),
        methods(src.methods), tap_layer(src.tap_layer), tap(src.tap) {
    make_h2o();
    for (const Kept& k : src.h2o_kept)
      if (k.pos <= n) h2o_kept.push_back(k);
    h2o_to(n);
    make_scratch();
  }

  // chunked_h2o's layers as truncate(n) leaves them (the cache already holds n tokens).
  void h2o_to(int64_t n) {
    while (!h2o_kept.empty() && h2o_kept.back().pos > n) h2o_kept.pop_back();
    if (h2o.empty()) return;
    if (n == 0) {
      for (auto& l : h2o) l.reset();
      h2o_at = 0;
    } else if (!h2o_kept.empty() && h2o_kept.back().pos == n) {
      for (size_t l = 0; l < h2o.size(); ++l) h2o[l].restore(h2o_kept.back().layers[l]);
      h2o_at = n;
    } else {
      h2o_at = -1;
    }
  }

  // chunked_h2o's logical batches for a prefill of n tokens from pos0, as [begin, end) rows of
  // the call: on the grid a prefill from position 0 lays (multiples of -b), so a prefill that
  // goes on from a kept chunk boundary inside a batch first finishes that batch.
  std::vector<std::pair<int64_t, int64_t>> h2o_batches(int64_t pos0, int64_t n) const {
    std::vector<std::pair<int64_t, int64_t>> b;
    for (int64_t b0 = 0; b0 < n;) {
      const int64_t b1 = std::min(n, b0 + opt.n_batch - (pos0 + b0) % opt.n_batch);
      b.emplace_back(b0, b1);
      b0 = b1;
    }
    return b;
  }

  // Has each layer keep its state at the last h2o_keep chunk boundaries (positions where a
  // chunk built its memory set) of the prefill whose batches are given, into `pending`, in
  // ascending order. The hooks capture `pending`: h2o_unhook() before it goes.
  void h2o_hook(int64_t pos0, const std::vector<std::pair<int64_t, int64_t>>& batches,
                std::vector<Kept>& pending) {
    if (opt.h2o_keep <= 0) return;
    // Every chunk end but the prompt's own, where going on computes what the whole batch did:
    // a batch's end, or a chunk end a multiple of kKeyBlock keys into its batch (Phase 1 packs
    // the batch's keys in tiles of kKeyBlock from its start, so only there do the chunks after
    // it fall on the same tiles; with the default -ub 512 every chunk end).
    std::vector<int64_t> ends;
    for (auto [b0, b1] : batches)
      for (int64_t c1 = std::min(b1, b0 + opt.n_ubatch);; c1 = std::min(b1, c1 + opt.n_ubatch)) {
        if (c1 == batches.back().second) break;
        const int64_t batch_start = (pos0 + b0) / opt.n_batch * opt.n_batch;
        if (c1 == b1 || (pos0 + c1 - batch_start) % kKeyBlock == 0) ends.push_back(pos0 + c1);
        if (c1 == b1) break;
      }
    if (int64_t(ends.size()) > opt.h2o_keep) ends.erase(ends.begin(), ends.end() - opt.h2o_keep);
    // A sliding-window layer runs its band, never chunked_h2o: its (fresh) state is kept as is.
    for (int64_t e : ends) {
      Kept k{e, std::vector<ChunkedH2OSnapshot>(h2o.size())};
      for (size_t l = 0; l < h2o.size(); ++l)
        if (cfg.is_swa(int64_t(l))) k.layers[l] = h2o[l].snapshot();
      pending.push_back(std::move(k));
    }
    for (size_t l = 0; l < h2o.size(); ++l)
      h2o[l].set_on_memory([this, l, &pending](int64_t end) {
        for (Kept& k : pending)
          if (k.pos == end) k.layers[l] = h2o[l].snapshot();
      });
  }
  void h2o_unhook() {
    for (auto& l : h2o) l.set_on_memory({});
  }

  // chunked_h2o's per-layer state, fresh (position 0).
  void make_h2o() {
    if (opt.mode != PrefillMode::chunked_h2o) return;
    ChunkedH2OParams p;
    p.chunk = opt.n_ubatch;
    p.batch = opt.n_batch;
    p.local = opt.h2o_local;
    p.heavy = opt.h2o_heavy;
    // One batch scratch for every layer: layers run one after another.
    for (int64_t l = 0; l < cfg.n_layer; ++l)
      h2o.emplace_back(p, cfg.n_head, cfg.n_head_kv, cfg.head_dim, DType::f32, opt.n_ctx, true,
                       h2o.empty() ? nullptr : h2o.front().scratch());
  }

  void make_scratch() {
    // chunked_h2o takes a whole logical batch through each layer at once; the other schedules
    // one chunk of -ub rows.
    max_rows = std::min(opt.n_ctx, opt.mode == PrefillMode::chunked_h2o
                                       ? std::max(opt.n_batch, opt.n_ubatch)
                                       : opt.n_ubatch);
    // A context-parallel prefill takes the rank's rows through each layer at once.
    if (grp) max_rows = cache_capacity(opt);
    const int64_t D = cfg.n_embd, dq = cfg.n_head * cfg.head_dim,
                  dkv = cfg.n_head_kv * cfg.head_dim;
    x.resize(size_t(max_rows * D));
    h.resize(size_t(max_rows * D));
    q.resize(size_t(max_rows * dq));
    k.resize(size_t(max_rows * dkv));
    v.resize(size_t(max_rows * dkv));
    att.resize(size_t(max_rows * dq));
    bool sinks = false;
    for (int64_t l = 0; l < cfg.n_layer; ++l) sinks = sinks || !m.layer(l).sinks.empty();
    lse.resize(sinks ? size_t(max_rows * cfg.n_head) : 0);
    // A MoE layer's FFN keeps its rows in its graph's own memory (layer_graph.cpp).
    const int64_t ff = cfg.is_moe() ? 0 : cfg.n_ff;
    g.resize(size_t(max_rows * ff));
    u.resize(size_t(max_rows * ff));
    pack = has_spattn_products(max_rows);
    if (pack) {
      // Their packed inputs go into q, att and u (layer_graph.hpp: RowBuffers), rows padded to
      // whole panels.
      const auto packed = [&](int64_t cols) {
        return size_t(kernels::gemm_widen_packed_floats(max_rows, cols));
      };
      q.resize(std::max(q.size(), packed(dq)));
      att.resize(std::max(att.size(), packed(std::max(D, dq))));
      u.resize(std::max(u.size(), packed(ff)));
    }
  }

  // Whether a call of max_rows rows would run some product on spattn's kernel.
  bool has_spattn_products(int64_t max_rows) const {
    const auto ours = [&](const Model::Weight& w) {
      const int64_t from = spattn_product_min_rows(w);
      return from > 0 && from <= max_rows;
    };
    if (ours(m.output())) return true;
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      const Model::Layer& L = m.layer(l);
      for (const Model::Weight* w : {&L.wq, &L.wk, &L.wv, &L.wo, &L.gate, &L.up, &L.down})
        if (w->t && ours(*w)) return true;  // a MoE layer has no gate, up, down
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
    parallel_for((n + kRows - 1) / kRows, opt.threads, [&](int64_t c, int) {
      body(c * kRows, std::min(n, (c + 1) * kRows));
    });
  }

  AttnOptions attn_opt(int64_t q_start) const {
    AttnOptions a;
    a.threads = opt.threads;
    a.q_start = q_start;
    a.scale = float(cfg.attn_scale);  // 0: 1 / sqrt(head dim)
    return a;
  }

  // A few queries' attention over the cache, reading n_keys of its keys (all of them by
  // default): as many threads as the bytes it reads pay for (a pool call costs more than a
  // short cache's whole read).
  AttnOptions decode_opt(int64_t pos0, const PackedKV& c, int64_t n_keys = -1) const {
    AttnOptions a = attn_opt(pos0);
    a.threads = threads_for_bytes(c.bytes() / size_t(c.capacity()) *
                                      size_t(n_keys < 0 ? c.size() : n_keys),
                                  opt.threads, kAttentionParallelBytes);
    return a;
  }

  // A sliding-window layer's attention for n rows at pos0, whatever the mode: the band over
  // the cache. One decoded row reads only the window's keys (attention_decode_ranges); more
  // rows run the dense kernel with the window, which visits only the key tiles in the rows'
  // bands.
  void band_attention(int64_t l, const TensorView& qv, const TensorView& ov, int64_t n,
                      int64_t pos0, float* lse, Stats* stats) {
    const PackedKV& c = cache.packed(l);
    const int64_t W = cfg.window(l);
    if (n == 1) {
      const int64_t lo = window_start(pos0, W);
      const std::vector<std::vector<KeyRange>> ranges(size_t(cfg.n_head), {KeyRange{lo, pos0 + 1}});
      attention_decode_ranges(qv, c, ov, ranges, decode_opt(pos0, c, pos0 + 1 - lo), lse,
                              stats);
      return;
    }
    AttnOptions a = attn_opt(pos0);
    a.window = W;
    attention_dense(qv, c, ov, a, lse, stats);
  }

  // Layer l's attention over n new rows at pos0.. (their K and V appended to the cache). Rows
  // before `read_from` have outputs nobody reads (the last layer's rows without logits): dense
  // attention skips them, exactly, since a row's output does not depend on the other queries.
  // The methods' and chunked_h2o's selections do, so they run every row.
  void attention(int64_t l, int64_t n, int64_t pos0, Attn kind, bool last, int64_t read_from,
                 Stats* stats) {
    const int64_t Hq = cfg.n_head, Hkv = cfg.n_head_kv, d = cfg.head_dim;
    const TensorView qv = TensorView::shd(q.data(), DType::f32, Hq, n, d);
    const TensorView kv = TensorView::shd(k.data(), DType::f32, Hkv, n, d);
    const TensorView vv = TensorView::shd(v.data(), DType::f32, Hkv, n, d);
    const TensorView ov = TensorView::shd(att.data(), DType::f32, Hq, n, d);
    SPATTN_CHECK(grp || cache.layer_size(l) == pos0, "internal: layer ", l, " holds ",
                 cache.layer_size(l), " tokens, rows start at ", pos0);
    // The rows as the cache stores them (-ctk / -ctv), for every reader: the packed cache
    // rounds them the same way (idempotently), chunked_h2o's memory sets and the methods'
    // raw rows take them from here.
    if (opt.cache_type_k != KVType::f32 || opt.cache_type_v != KVType::f32)
      for_row_chunks(n, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0 * Hkv; i < r1 * Hkv; ++i) {
          if (opt.cache_type_k != KVType::f32)
            kv_round_row(opt.cache_type_k, &k[size_t(i * d)], &k[size_t(i * d)], d);
          if (opt.cache_type_v != KVType::f32)
            kv_round_row(opt.cache_type_v, &v[size_t(i * d)], &v[size_t(i * d)], d);
        }
      });
    if (kind == Attn::ring) {
      cache.append(l, kv, vv, opt.threads, zz.positions(grp->rank()));
      if (cp_h2o) {  // chunked_h2o's chain instead of the pass-KV ring
        const dist::H2OChainLayer hl{q.data(), k.data(), v.data(), att.data(), Hq, Hkv, d,
                                     opt.n_ubatch, opt.h2o_local + opt.h2o_heavy,
                                     opt.cache_type_k, opt.cache_type_v, attn_opt(-1)};
        dist::h2o_chain_prefill(*grp, zz, hl, h2o[size_t(l)], h2o_wire, stats);
        return;
      }
      const dist::RingLayer rl{q.data(), k.data(), v.data(), &cache.packed(l), Hq, Hkv, d,
                               opt.cache_type_k, opt.cache_type_v, attn_opt(-1), att.data(),
                               cp_pattern.get(), cp_blasst.get(), cp_whole};
      dist::ring_prefill(*grp, zz, rl, ring, stats);
      return;
    }
    if (kind == Attn::cp_decode) {
      const int64_t at[1] = {pos0};
      if (cp_owner == grp->rank()) cache.append(l, kv, vv, 1, at);
      const PackedKV& c = cache.packed(l);
      dist::decode_merge(*grp, qv, c, ov, decode_opt(pos0, c), cp_token, &t.decode_stats,
                         cp_gather);
      t.decode_keys_read += c.kv_heads() * c.size();
      t.decode_keys_total += c.kv_heads() * c.size();
      return;
    }
    // Staged until the call commits; a decode row makes no pool call.
    cache.append(l, kv, vv, n > kMaxDecodeQueries ? opt.threads : 1);
    const PackedKV& c = cache.packed(l);
    // Attention sinks (gpt-oss): every form below also gives its rows' LSE, and the sinks
    // join them afterwards (merge_sinks), whichever keys the form read.
    const std::vector<float>& sinks = m.layer(l).sinks;
    float* L = sinks.empty() ? nullptr : lse.data();
    TensorView done = ov;  // the rows computed
    if (cfg.is_swa(l)) {
      // A sliding window is already sparse: the band runs in every mode (layer_attention()).
      if (kind == Attn::decode) {
        const int64_t lo = window_start(pos0, cfg.window(l));
        band_attention(l, qv, ov, n, pos0, L, &t.decode_stats);
        t.decode_keys_read += c.kv_heads() * (pos0 + 1 - lo);
        t.decode_keys_total += c.kv_heads() * (pos0 + 1 - lo);
      } else {
        band_attention(l, qv, ov, n, pos0, L, stats);
      }
    } else {
      switch (kind) {
        case Attn::dense: {
          // The kernel as n says, whatever rows are skipped, so a row's bits stay the same.
          const int64_t r = n - read_from;
          if (r == 0) {
            done.seq = 0;
            break;
          }
          const TensorView qr = qv.rows(read_from, r);
          done = ov.rows(read_from, r);
          if (n <= kMaxDecodeQueries) {
            attention_decode(qr, c, done, decode_opt(pos0 + read_from, c), DecodeOptions{}, L,
                             stats);
          } else {
            attention_dense(qr, c, done, attn_opt(pos0 + read_from), L, stats);
          }
          break;
        }
        case Attn::decode:
          decode_attention(l, qv, ov, pos0, L);
          break;
        case Attn::ring:
        case Attn::cp_decode:
          break;  // above
        case Attn::h2o:
          // The prompt's first batch is all the cache holds: Phase 1 runs over it as packed.
          h2o[size_t(l)].prefill_batch(qv, kv, vv, ov, attn_opt(-1), last, L, stats,
                                       c.size() == n ? &c : nullptr);
          break;
        case Attn::method: {
          // Every key before and in the chunk, as the cache holds them (decode's rows included).
          const MethodReport r =
              methods[size_t(l)]->run(qv, cache.raw_k(l), cache.raw_v(l), ov, attn_opt(-1), L);
          if (stats) stats->add(r.stats);
          break;
        }
      }
    }
    if (L && done.seq > 0) merge_sinks(done, L, sinks.data());
  }

  // One decoded token's attention in layer l, as --attn-decode says (lse: its rows' LSE, when
  // non-null).
  void decode_attention(int64_t l, const TensorView& qv, const TensorView& ov, int64_t pos0,
                        float* lse) {
    const PackedKV& c = cache.packed(l);
    const AttnOptions a = decode_opt(pos0, c);
    Stats& st = t.decode_stats;
    if (dec.kind == DecodeKind::quest && l >= dec.quest.dense_layers) {
      QuestDecodeStats qs;
      quest_decode(qv, c, cache.pages(l), dec.quest, ov, a, lse, &st, &qs);
      t.decode_keys_read += qs.keys_read;
      t.decode_keys_total += qs.keys_total;
      t.decode_pages_read += qs.pages_read;
      t.decode_pages_total += qs.pages_total;
      t.decode_select_ms += qs.select_ms;
      return;
    }
    attention_decode(qv, c, ov, a,
                     dec.kind == DecodeKind::blasst ? dec.blasst_step(l, c.size()) : DecodeOptions{},
                     lse, &st);
    t.decode_keys_read += c.kv_heads() * c.size();
    t.decode_keys_total += c.kv_heads() * c.size();
  }

  // Runs one call's forward passes as one change of the session: committed when `body`
  // returns, undone when it throws (see the top of this file).
  template <class Body>
  void all_or_nothing(Body&& body) {
    const int64_t pos0 = cache.size();
    const Timings saved = t;
    try {
      body();
      cache.commit();
    } catch (...) {
      cache.rollback();
      if (h2o_at == pos0) h2o_to(pos0);  // the layers as they were (reset or restored)
      t = saved;
      throw;
    }
  }

  void cp_prefill(std::span<const int32_t> tokens, float* logits, int64_t logits_from,
                  const PrefillProgress& progress);

  // n tokens at positions pos0.. through every layer; logits for rows >= logits_row0 (row index
  // within this call) go to logits.
  void forward(const int32_t* tokens, int64_t n, int64_t pos0, Attn kind, bool last,
               float* logits, int64_t logits_row0, double* attn_ms, Stats* stats,
               const std::function<void(int64_t layers_done)>& after_layer = {}) {
    const int64_t D = cfg.n_embd, Hq = cfg.n_head, Hkv = cfg.n_head_kv, d = cfg.head_dim;
    SPATTN_CHECK(n >= 1 && n <= max_rows, "internal: ", n, " rows for a scratch of ", max_rows);
    const int mm = opt.threads;
    // Row i's position: pos0 + i, or the rank's zigzag rows in a context-parallel prefill.
    const dist::Zigzag::Run run_a = kind == Attn::ring ? zz.first(grp->rank()) : dist::Zigzag::Run{pos0, n};
    const auto row_pos = [&](int64_t i) {
      return i < run_a.len ? run_a.pos + i : zz.second(grp->rank()).pos + (i - run_a.len);
    };
    for (int64_t i = 0; i < n; ++i) {
      SPATTN_CHECK(tokens[i] >= 0 && tokens[i] < cfg.n_vocab, "token id ", tokens[i],
                   " at position ", row_pos(i), " is outside the vocabulary [0, ", cfg.n_vocab, ")");
      m.embed(tokens[i], x.data() + i * D);
    }
    // gemma3 scales the embeddings by sqrt(n_embd) (llama.cpp: ggml_scale by sqrtf(n_embd)).
    if (cfg.arch == Arch::gemma3) {
      const float e = std::sqrt(float(D));
      for (int64_t i = 0; i < n * D; ++i) x[size_t(i)] *= e;
    }
    const RowBuffers rb{x.data(), h.data(),   q.data(), k.data(),
                        v.data(), att.data(), g.data(), u.data(),
                        pack};
    const bool want_logits = logits && logits_row0 < n;
    run_layer_graph(m, rb, n, GraphStep{-1, 0, nullptr}, mm, graphs);
    for (int64_t l = 0; l < cfg.n_layer; ++l) {
      const eval::RopeTable& rt = cfg.is_swa(l) ? *rope_swa : rope;
      for_row_chunks(n, [&](int64_t r0, int64_t r1) {
        for (int64_t i = r0; i < r1; ++i) {
          const int64_t pos = row_pos(i);
          for (int64_t hh = 0; hh < Hq; ++hh) rt.rotate_inplace(&q[size_t((i * Hq + hh) * d)], pos);
          for (int64_t hh = 0; hh < Hkv; ++hh) rt.rotate_inplace(&k[size_t((i * Hkv + hh) * d)], pos);
        }
      });
      if (tap && (tap_layer == kTapAllLayers || l == tap_layer)) {
        if (kind == Attn::ring) {  // the rank's two runs, each contiguous
          const dist::Zigzag::Run a = zz.first(grp->rank()), b = zz.second(grp->rank());
          tap(l, a.pos, a.len, q.data(), k.data(), v.data());
          tap(l, b.pos, b.len, q.data() + a.len * Hq * d, k.data() + a.len * Hkv * d,
              v.data() + a.len * Hkv * d);
        } else {
          tap(l, pos0, n, q.data(), k.data(), v.data());
        }
      }
      const auto t0 = Clock::now();
      const bool final = l + 1 == cfg.n_layer;
      attention(l, n, pos0, kind, last, final ? (want_logits ? logits_row0 : n) : 0, stats);
      if (attn_ms) {
        const double ms = ms_since(t0);
        *attn_ms += ms;
        std::vector<double>& per_layer =
            kind == Attn::decode || kind == Attn::cp_decode ? t.decode_layer_attn_ms
                                                            : t.prefill_layer_attn_ms;
        per_layer.resize(size_t(cfg.n_layer));
        per_layer[size_t(l)] += ms;
      }
      // This layer's tail and the next layer's head (or the logits) in one graph. The last
      // layer's tail feeds nothing but the logits, so it runs over their rows only, and not
      // at all in a chunk without logits (llama.cpp's inp_out_ids does the same after Wo):
      // 1/n_layer of the FFN's and Wo's work on every chunk of a prompt.
      if (!final) {
        run_layer_graph(m, rb, n, GraphStep{l, l + 1, nullptr}, mm, graphs);
      } else if (want_logits) {
        // Those rows moved to the front, so the scratch buffers' sizing (packed panels from
        // row 0) holds as for any call of fewer rows.
        const int64_t r = n - logits_row0, dq = Hq * d;
        if (logits_row0 > 0) {
          std::memmove(x.data(), x.data() + logits_row0 * D, size_t(r * D) * sizeof(float));
          std::memmove(att.data(), att.data() + logits_row0 * dq, size_t(r * dq) * sizeof(float));
        }
        run_layer_graph(m, rb, r, GraphStep{l, -1, logits}, mm, graphs);
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
  s.h2o_to(n);
}

int64_t Session::reuse_point(int64_t n) const {
  const Impl& s = *p_;
  SPATTN_CHECK(n >= 0 && n <= s.cache.size(), "reuse_point: ", n, " tokens, outside [0, ",
               s.cache.size(), "]");
  if (s.grp) return 0;  // a context-parallel prefill starts at position 0
  switch (s.opt.mode) {
    case PrefillMode::dense: return n;
    case PrefillMode::method: return 0;
    case PrefillMode::chunked_h2o:
      for (auto k = s.h2o_kept.rbegin(); k != s.h2o_kept.rend(); ++k)
        if (k->pos <= n) return k->pos;
      return 0;
  }
  return 0;
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
const Timings& Session::timings() const { return p_->t; }
Session::Memory Session::memory() const {
  const Impl& s = *p_;
  Memory m;
  m.kv_cache = s.cache.packed_bytes();
  m.method_kv = s.cache.raw_bytes();
  m.decode_pages = s.cache.pages_bytes();
  for (const auto* b : {&s.x, &s.h, &s.q, &s.k, &s.v, &s.att, &s.g, &s.u})
    m.scratch += b->capacity() * sizeof(float);
  for (const ChunkedH2OLayer& l : s.h2o) m.h2o_state += l.state_bytes();
  for (const auto& k : s.h2o_kept)
    for (const ChunkedH2OSnapshot& l : k.layers) m.h2o_state += l.bytes();
  if (!s.h2o.empty()) m.h2o_scratch = s.h2o.front().scratch_bytes();
  m.cp_ring = s.ring.bytes() + s.h2o_wire.capacity();  // the ring's buffers or the chain's
  return m;
}
void Session::reset_timings() { p_->t = Timings{}; }

std::vector<LayerAttention> Session::layer_attention() const {
  const Impl& s = *p_;
  std::vector<LayerAttention> out;
  for (int64_t l = 0; l < s.cfg.n_layer; ++l) {
    LayerAttention a;
    if (s.cfg.is_swa(l)) {
      a.sliding = true;
      a.window = s.cfg.window(l);
      a.prefill = a.decode = "band";
    } else {
      a.prefill = s.opt.mode == PrefillMode::dense         ? "dense"
                  : s.opt.mode == PrefillMode::chunked_h2o ? "chunked_h2o"
                                                           : s.opt.attn_spec;
      a.decode = s.dec.kind == DecodeKind::quest && l < s.dec.quest.dense_layers ? "dense"
                                                                                 : s.opt.attn_decode;
    }
    out.push_back(std::move(a));
  }
  return out;
}
void Session::set_h2o_traces(std::vector<ChunkedH2OTrace>* traces) {
  SPATTN_CHECK(p_->opt.mode == PrefillMode::chunked_h2o,
               "a heavy-hitter trace needs --attn chunked_h2o");
  if (traces) traces->resize(p_->h2o.size());
  for (size_t l = 0; l < p_->h2o.size(); ++l) p_->h2o[l].set_trace(traces ? &(*traces)[l] : nullptr);
}

void Session::set_qkv_tap(int64_t layer, QkvTap tap) {
  SPATTN_CHECK(layer == kTapAllLayers || (layer >= 0 && layer < p_->cfg.n_layer), "--dump-qkv: layer ",
               layer, " outside [0, ", p_->cfg.n_layer, ")");
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
    auto run = [&](int64_t r0, int64_t r1, Attn kind, bool last) {
      float* lg = nullptr;
      int64_t row0 = 0;
      if (logits && r1 > logits_from) {
        row0 = std::max<int64_t>(0, logits_from - r0);
        lg = logits + (r0 + row0 - logits_from) * V;
      }
      const int64_t L = s.cfg.n_layer;
      s.forward(tokens.data() + r0, r1 - r0, pos0 + r0, kind, last, lg, row0,
                &s.t.prefill_attn_ms, &s.t.prefill_stats, [&](int64_t layers) {
                  if (progress) progress(r0 + (r1 - r0) * layers / L, n);
                });
    };
    // chunked_h2o from position 0, or on from a restored chunk boundary, in the batches and
    // chunks one prefill of the whole prompt has there.
    const bool h2o = s.opt.mode == PrefillMode::chunked_h2o && pos0 == s.h2o_at &&
                     pos0 + n > s.opt.n_ubatch;
    if (h2o) {
      const auto batches = s.h2o_batches(pos0, n);
      struct Unhook {
        Impl& s;
        ~Unhook() { s.h2o_unhook(); }
      } unhook{s};
      s.h2o_hook(pos0, batches, pending);
      for (auto [b0, b1] : batches) run(b0, b1, Attn::h2o, b1 == n);
    } else {
      const Attn kind = s.opt.mode == PrefillMode::method ? Attn::method : Attn::dense;
      for (int64_t b0 = 0; b0 < n; b0 += s.opt.n_batch) {
        const int64_t b1 = std::min(n, b0 + s.opt.n_batch);
        for (int64_t c0 = b0; c0 < b1; c0 += s.opt.n_ubatch)
          run(c0, std::min(b1, c0 + s.opt.n_ubatch), kind, false);
      }
    }
    s.t.prefill_ms += ms_since(t0);
    s.t.prefill_tokens += n;
  });
  // The layers now hold the prompt's end, which built no memory set: no prefill goes on from it.
  if (s.opt.mode == PrefillMode::chunked_h2o) {
    s.h2o_at = -1;
    for (auto& k : pending) s.h2o_kept.push_back(std::move(k));
    if (int64_t(s.h2o_kept.size()) > s.opt.h2o_keep)
      s.h2o_kept.erase(s.h2o_kept.begin(),
                       s.h2o_kept.end() - std::max<int64_t>(0, s.opt.h2o_keep));
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
    s.cp_owner = int(std::min_element(s.cp_counts.begin(), s.cp_counts.end()) -
                     s.cp_counts.begin());
    const dist::CommStats c0 = s.grp->stats();
    s.all_or_nothing([&] {
      const auto t0 = Clock::now();
      s.forward(&token, 1, s.cp_n, Attn::cp_decode, false, logits, 0, &s.t.decode_attn_ms,
                nullptr);
      s.t.decode_ms += ms_since(t0);
      s.t.decode_tokens += 1;
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
    s.forward(&token, 1, s.cache.size(), Attn::decode, false, logits, 0, &s.t.decode_attn_ms,
              nullptr);
    s.t.decode_ms += ms_since(t0);
    s.t.decode_tokens += 1;
  });
  s.h2o_at = -1;  // decoded rows are not in chunked_h2o's state
}

}  // namespace spattn::model

namespace spattn::model {

// A context-parallel prefill (see the top of this file): the ranks first agree that they were
// given the same call and that it can run, then take their zigzag rows through every layer;
// the logits rows asked for are gathered to every rank.
void Session::Impl::cp_prefill(std::span<const int32_t> tokens, float* logits,
                               int64_t logits_from, const PrefillProgress& progress) {
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
    SPATTN_CHECK(s.cp_n == 0, "--cp: a prefill starts at position 0 (reset the session); this "
                 "one holds ", s.cp_n, " tokens");
    SPATTN_CHECK(n >= 2 * int64_t(P), "--cp ", P, ": the prompt's ", n, " tokens are fewer than "
                 "the ", 2 * P, " chunks the zigzag split needs (one token each at least)");
    const dist::Zigzag on_grid{n, P, s.opt.n_ubatch};
    // BLASST's tiles: two runs of whole 64-token chunks per rank.
    SPATTN_CHECK(!s.cp_blasst || (n + kKeyBlock - 1) / kKeyBlock >= 2 * int64_t(P), "--cp ", P,
                 " with blasst: the prompt's ", n, " tokens make fewer than the ", 2 * P,
                 " chunks of ", kKeyBlock, " tokens (its tiles) the split needs");
    if (s.opt.mode == PrefillMode::chunked_h2o && n > s.opt.n_ubatch)
      SPATTN_CHECK(!on_grid.empty_rank(), "--cp ", P, " with chunked_h2o: the prompt's ", n,
                   " tokens make fewer than the ", P, " chunks of -ub ", s.opt.n_ubatch,
                   " the split needs (one per rank)");
    SPATTN_CHECK(n <= s.opt.n_ctx, "prompt of ", n, " tokens does not fit the context of ",
                 s.opt.n_ctx, " (-c)");
    SPATTN_CHECK(logits_from >= 0 && logits_from < n, "prefill: logits_from ", logits_from,
                 " outside [0, ", n, ")");
    for (int64_t i = 0; i < n; ++i)
      SPATTN_CHECK(tokens[size_t(i)] >= 0 && tokens[size_t(i)] < s.cfg.n_vocab, "token id ",
                   tokens[size_t(i)], " at position ", i, " is outside the vocabulary [0, ",
                   s.cfg.n_vocab, ")");
  });
  // chunked_h2o on the -ub grid; a prompt of one chunk runs dense, as in one process.
  s.cp_h2o = s.opt.mode == PrefillMode::chunked_h2o && n > s.opt.n_ubatch;
  // Dense: the chunks in position order on the tiles' 64-token grid (one process's bits), or,
  // for a prompt of fewer than 2P tiles (runs would be empty), the whole K/V gathered: at most
  // 2P - 1 tiles, and one process's bits too. BLASST on the same grid (so every query and key
  // tile is one process's).
  const bool dense = !s.cp_h2o && !s.cp_pattern && !s.cp_blasst;
  s.cp_whole = dense && (s.opt.cp_gather || (n + kKeyBlock - 1) / kKeyBlock < 2 * int64_t(P));
  s.zz = dist::Zigzag{n, P, s.cp_h2o ? s.opt.n_ubatch
                            : s.cp_blasst || (dense && !s.cp_whole) ? kKeyBlock : 1};
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
    s.forward(own_tokens.data(), rows, 0, Attn::ring, false,
              logits && lrow0 < rows ? mine_logits.data() : nullptr, lrow0, &s.t.prefill_attn_ms,
              &s.t.prefill_stats);
    if (logits) {
      std::vector<size_t> counts(static_cast<size_t>(P));
      for (int q = 0; q < P; ++q)
        counts[size_t(q)] = size_t((s.zz.rows(q) - rows_from(q)) * V) * sizeof(float);
      std::vector<float> gathered(size_t((n - logits_from) * V));
      const int64_t before = g.stats().bytes_recv;
      g.allgatherv(mine_logits.data(), mine_logits.size() * sizeof(float), gathered.data(),
                   counts);
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

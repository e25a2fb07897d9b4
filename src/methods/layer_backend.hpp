// One layer's attention in a model runner: the interface every way of attending implements
// (dense, a layer's sliding window, chunked H2O, any library method's prefill, Quest's and
// BLASST's decode, and each of those across ranks), built from the method registry
// (registry.hpp: make_prefill_backend, make_decode_backend). The session (src/model/session.cpp)
// keeps the layer loop, the KV cache and the all-or-nothing commit; which keys a layer reads,
// what it keeps between calls and what it can do come from here.
#pragma once
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/context_parallel.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/quest.hpp"

namespace spattn {
namespace dist {
struct RingScratch;
struct RingPattern;
struct RingBlasst;
}  // namespace dist
struct ChunkedH2OTrace;
struct DsaCall;
struct TokenSelection;

// What a session tells a layer's backend when it builds it.
struct BackendContext {
  int64_t layer = 0, n_layer = 1;
  int64_t q_heads = 1, kv_heads = 1, dim = 64;
  int64_t n_ctx = 0, n_batch = 2048, n_ubatch = 512;  // -c, -b, -ub
  int64_t h2o_local = 256, h2o_heavy = 256;           // --h2o-local, --h2o-heavy
  int64_t window = 0;  // the layer's own sliding window (gemma3's local layers), 0: none
  int threads = 1;
  float scale = 0;  // softmax scale, 0: 1 / sqrt(dim)
  KVType k_type = KVType::f32, v_type = KVType::f32;
  bool cp = false;  // the session is one rank of a context-parallel group (--cp)
  // The model's lightning indexer (DeepSeek V3.2's DSA): its top-k, 0 where it has none, -1
  // before a model is read (SessionOptions::validate's placeholders).
  int64_t indexer_top_k = 0;
  // One object the layers of a session share, made by the first layer that asks (chunked_h2o's
  // batch scratch: layers run one after another).
  std::shared_ptr<void>* shared = nullptr;
};

// What a backend can do and what it needs from the session.
struct BackendCaps {
  bool sparse_decode = false;  // decode() reads fewer keys than the layer holds
  bool ring_gather = false;    // across ranks (MethodInfo::context_parallel), can gather
                               // every rank's K/V instead of the ring (--cp-gather)
  bool gpu = false;            // has a CUDA path in the runner (none yet)
  bool stateful = false;       // keeps state between calls (snapshot / restore / reset)
  bool raw_keys = false;       // reads the layer's keys as f32 rows (LayerCall::raw_k, raw_v)
  // Each row's output is its own query's alone (dense, a band): a prefill may go on from any
  // prefix a cache holds (Session::reuse_point). Else the keys chosen depend on the other
  // queries of the call, and a prompt reused from the middle would not compute the same.
  bool rows_independent = false;
  // Quest's page summaries: the page size and sums a session's cache keeps them in (0: none),
  // and whether decode() reads them at this layer (Quest's dense layers do not).
  int64_t quest_page = 0;
  QuestSums quest_sums = QuestSums::cache;
  bool reads_pages = false;
  // Across ranks: the widest zigzag grid ring_plan lays, which sizes a rank's cache (0: the
  // 64-token tiles).
  int64_t ring_grid = 0;
};

// One call's rows at one layer: their K and V are already appended to the layer's cache.
struct LayerCall {
  int64_t layer = 0;
  TensorView q, k, v, out;  // q, out [Hq, n, d]; k, v [Hkv, n, d] (as the cache rounded them)
  int64_t pos0 = 0;         // the first row's position
  int64_t read_from = 0;    // rows before it have outputs nobody reads
  bool last = false;        // the prompt's last logical batch
  const PackedKV* packed = nullptr;   // every key the layer holds, as stored
  TensorView raw_k, raw_v;            // the same keys as f32 rows (BackendCaps::raw_keys)
  const QuestPages* pages = nullptr;  // (BackendCaps::quest_page)
  AttnOptions opt;                    // threads and scale (q_start is the backend's to set)
  float* lse = nullptr;  // [Hq, n] when non-null: the rows' LSE, for the attention sinks' merge
  Stats* stats = nullptr;
  const DsaCall* dsa = nullptr;  // the indexer's rows and keys (methods/dsa.hpp), where the
                                 // model has a lightning indexer
};

// What one decoded token's attention read, summed over layers and kv heads (Timings).
struct DecodeReads {
  int64_t keys_read = 0, keys_total = 0, pages_read = 0, pages_total = 0;
  double select_ms = 0;
};

// A context-parallel prefill of one layer (spattn/context_parallel.hpp): the rank's rows in
// the zigzag, its cache holding exactly them at their positions.
struct RingCall {
  dist::Group& group;
  const dist::Zigzag& zigzag;
  dist::RingScratch& scratch;
  std::vector<unsigned char>& wire;  // chunked_h2o's memory set between ranks
  const float *q, *k, *v;            // [rows, H, d], the session's row layout
  float* out;
  const PackedKV* own;
  int64_t q_heads, kv_heads, dim;
  KVType k_type, v_type;
  AttnOptions opt;
  Stats* stats;
  // The rank's indexer rows (its two runs, in order) and every position's indexer keys
  // (gathered from every rank), where the model has a lightning indexer.
  const DsaCall* dsa = nullptr;
};
// How a backend lays a prompt of n tokens over P ranks: the zigzag's grid, and whether the
// layers gather every rank's K/V instead of passing them round the ring.
struct RingPlan {
  int64_t grid = 1;
  bool gather = false;
};

// State a stateful backend keeps at a chunk boundary (chunked_h2o's scores and memory set).
struct BackendState {
  virtual ~BackendState() = default;
  virtual size_t bytes() const = 0;
};

class LayerBackend {
 public:
  virtual ~LayerBackend() = default;
  // What `spattn run --json`'s "layers" reports: "dense", "band", a spec as given.
  virtual std::string name() const = 0;
  virtual BackendCaps capabilities() const = 0;

  // Attention of the call's rows over every key before and among them; returns the rows it
  // computed (a view of c.out: all of them, or those from c.read_from on).
  virtual TensorView prefill(const LayerCall& c) = 0;
  // One decoded row (or a few) over the layer's keys. Default: dense over the packed cache.
  virtual void decode(const LayerCall& c, DecodeReads& reads);

  // Context parallelism (MethodInfo::context_parallel). Default: Error naming the backend.
  virtual RingPlan ring_plan(int64_t n, int ranks, bool gather_asked) const;
  // Throws Error when a prompt of n tokens cannot be split over the ranks as ring_plan lays it.
  virtual void ring_check(int64_t n, int ranks) const;
  virtual void ring_prefill(const RingCall& c, const RingPlan& plan);
  // A context-parallel decode of c's one row (MethodInfo::decode_context_parallel): c.packed
  // holds this rank's tokens at their positions, c.dsa every position's indexer keys; the
  // ranks' partial results merged (dist::decode_merge, `token` checked the same on every
  // rank, `scratch` its buffer). Default: dense over the rank's tokens.
  virtual void ring_decode(const LayerCall& c, dist::Group& g, int32_t token,
                           std::vector<float>& scratch, DecodeReads& reads);

  // Stateful backends (BackendCaps::stateful): the prefill schedule they keep state over, and
  // their state. A stateful prefill goes on only from position 0 or a restored boundary (the
  // session keeps the states at the boundaries it asks for); elsewhere the session runs dense.
  // The -b batches of a prefill of n tokens from pos0, as [begin, end) rows of the call.
  virtual std::vector<std::pair<int64_t, int64_t>> batches(int64_t pos0, int64_t n) const;
  // The positions among those batches where going on from the state reproduces the whole
  // prompt's prefill (at most keep of them, the last ones).
  virtual std::vector<int64_t> boundaries(int64_t pos0,
                                          const std::vector<std::pair<int64_t, int64_t>>& b,
                                          int64_t keep) const;
  // Whether a prefill of n tokens from a state at pos0 runs statefully (else dense).
  virtual bool runs_from(int64_t pos0, int64_t n) const;
  virtual std::shared_ptr<const BackendState> snapshot() const;
  virtual void restore(const BackendState& s);
  virtual void reset() {}
  // Called with a position when the layer's state there is final (a boundary passed).
  virtual void set_on_boundary(std::function<void(int64_t)> f);
  virtual size_t state_bytes() const { return 0; }
  virtual size_t scratch_bytes() const { return 0; }  // BackendContext::shared's
  virtual void set_trace(ChunkedH2OTrace* trace);     // chunked_h2o's heavy-hitter trace

  // A backend for a fork of the session: stateless ones are shared, stateful ones copied
  // fresh (the session restores their state). Default: this one, shared.
  virtual std::shared_ptr<LayerBackend> fork(const std::shared_ptr<LayerBackend>& self,
                                             const BackendContext& ctx) const;
};

// A few queries' attention options over `keys` keys of a cache: as many threads as the bytes it
// reads pay for (a pool call costs more than a short cache's whole read).
AttnOptions decode_options(const AttnOptions& base, int64_t q_start, const PackedKV& kv,
                           int64_t keys = -1);
// Dense attention of a call's rows over its packed keys, skipping rows before read_from; the
// decode kernel for a few rows. The rows computed (a view of c.out; seq 0 when none).
TensorView dense_prefill(const LayerCall& c);
// A decode step's dense attention over every key the layer holds.
void dense_decode(const LayerCall& c, DecodeReads& reads);
// Dense attention across ranks (dense.cpp): the chunks in position order on the tiles' grid, or
// the whole K/V gathered (asked, or for a prompt of fewer than 2P tiles).
RingPlan dense_ring_plan(int64_t n, int ranks, bool gather_asked);
void dense_ring_prefill(const RingCall& c, const RingPlan& plan);
// The ring over a call (dist::ring_prefill): dense, or a static pattern's blocks, or BLASST's
// skip rule (at most one of the two), the K/V passed round or gathered; or each run's own
// tokens of the gathered K/V (selection: dist::RingLayer::selection). Every ring backend's one
// way in.
void ring_attention(const RingCall& c, const dist::RingPattern* pattern,
                    const dist::RingBlasst* blasst, bool gather,
                    const TokenSelection* selection = nullptr);

// The dense backend (dense.cpp), and the band of a layer's own sliding window (band.cpp).
std::unique_ptr<LayerBackend> make_dense_backend();
std::unique_ptr<LayerBackend> make_band_backend(const BackendContext& ctx);

class Method;
// Any library method's prefill (method_backend.cpp): the method over every key before and in
// the call's rows, read as the cache's f32 rows. A method with a form across ranks derives
// from it. `spec` is the name it reports.
class MethodPrefill : public LayerBackend {
 public:
  MethodPrefill(std::shared_ptr<const Method> method, std::string spec);
  std::string name() const override { return spec_; }
  BackendCaps capabilities() const override;
  TensorView prefill(const LayerCall& c) override;

 private:
  std::shared_ptr<const Method> method_;
  std::string spec_;
};

}  // namespace spattn

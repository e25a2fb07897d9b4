// LayerBackend's defaults and the dense pieces every backend may fall back on.
#include "methods/layer_backend.hpp"

#include "core/threading.hpp"
#include "dist/ring_attention.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"

namespace spattn {

AttnOptions decode_options(const AttnOptions& base, int64_t q_start, const PackedKV& kv,
                           int64_t keys) {
  AttnOptions a = base;
  a.q_start = q_start;
  a.threads =
      threads_for_bytes(kv.bytes() / size_t(kv.capacity()) * size_t(keys < 0 ? kv.size() : keys),
                        base.threads, kAttentionParallelBytes);
  return a;
}

TensorView dense_prefill(const LayerCall& c) {
  // The kernel as the call's row count says, whatever rows are skipped, so a row's bits stay
  // the same: a row's output does not depend on the other queries.
  const int64_t n = c.q.seq, r = n - c.read_from;
  TensorView done = c.out;
  if (r == 0) {
    done.seq = 0;
    return done;
  }
  const TensorView q = c.q.rows(c.read_from, r);
  done = c.out.rows(c.read_from, r);
  const int64_t at = c.pos0 + c.read_from;
  if (n <= kMaxDecodeQueries) {
    attention_decode(q, *c.packed, done, decode_options(c.opt, at, *c.packed), DecodeOptions{},
                     c.lse, c.stats);
  } else {
    AttnOptions a = c.opt;
    a.q_start = at;
    attention_dense(q, *c.packed, done, a, c.lse, c.stats);
  }
  return done;
}

void dense_decode(const LayerCall& c, DecodeReads& reads) {
  const PackedKV& kv = *c.packed;
  attention_decode(c.q, kv, c.out, decode_options(c.opt, c.pos0, kv), DecodeOptions{}, c.lse,
                   c.stats);
  reads.keys_read += kv.kv_heads() * kv.size();
  reads.keys_total += kv.kv_heads() * kv.size();
}

void LayerBackend::decode(const LayerCall& c, DecodeReads& reads) { dense_decode(c, reads); }

RingPlan LayerBackend::ring_plan(int64_t, int, bool) const {
  detail::fail("--cp: --attn ", name(), " is not context-parallel");
}
void LayerBackend::ring_check(int64_t, int) const {}
void ring_attention(const RingCall& c, const dist::RingPattern* pattern,
                    const dist::RingBlasst* blasst, bool gather, const TokenSelection* selection) {
  const dist::RingLayer rl{
      c.q,      c.k,   c.v,   c.own,   c.q_heads, c.kv_heads, c.dim,     c.k_type,
      c.v_type, c.opt, c.out, pattern, blasst,    gather,     selection, c.own && c.own->v_is_k()};
  dist::ring_prefill(c.group, c.zigzag, rl, c.scratch, c.stats);
}
void LayerBackend::ring_decode(const LayerCall& c, dist::Group& g, int32_t token,
                               std::vector<float>& scratch, DecodeReads& reads) {
  const PackedKV& kv = *c.packed;
  dist::decode_merge(g, c.q, kv, c.out, decode_options(c.opt, c.pos0, kv), token, c.stats, scratch);
  reads.keys_read += kv.kv_heads() * kv.size();
  reads.keys_total += kv.kv_heads() * kv.size();
}
void LayerBackend::ring_prefill(const RingCall&, const RingPlan&) {
  detail::fail("--cp: --attn ", name(), " is not context-parallel");
}

std::vector<std::pair<int64_t, int64_t>> LayerBackend::batches(int64_t, int64_t) const {
  detail::fail("internal: ", name(), " keeps no state between batches");
}
std::vector<int64_t> LayerBackend::boundaries(int64_t,
                                              const std::vector<std::pair<int64_t, int64_t>>&,
                                              int64_t) const {
  return {};
}
bool LayerBackend::runs_from(int64_t, int64_t) const { return false; }
std::shared_ptr<const BackendState> LayerBackend::snapshot() const { return nullptr; }
void LayerBackend::restore(const BackendState&) {
  detail::fail("internal: ", name(), " keeps no state");
}
void LayerBackend::set_on_boundary(std::function<void(int64_t)>) {}
void LayerBackend::set_trace(ChunkedH2OTrace*) {
  detail::fail("a heavy-hitter trace needs --attn chunked_h2o (got ", name(), ")");
}
std::shared_ptr<LayerBackend> LayerBackend::fork(const std::shared_ptr<LayerBackend>& self,
                                                 const BackendContext&) const {
  return self;
}

}  // namespace spattn

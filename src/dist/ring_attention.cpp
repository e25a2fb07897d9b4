// The pass-KV ring and the decode merge (see ring_attention.hpp and
// spattn/context_parallel.hpp). Ring step s on rank r holds the shard of rank (r - s) mod P:
// it starts forwarding that shard to rank r + 1 and receiving rank (r - s - 1)'s from r - 1,
// computes its queries against the shard in hand meanwhile, then waits. Every partial result
// over a disjoint key set merges exactly by (O, LSE) (merge_attention).
#include "dist/ring_attention.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <limits>
#include <span>

#include "spattn/blasst.hpp"
#include "spattn/decode.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/merge.hpp"

namespace spattn::dist {

DType wire_dtype(KVType k_type, KVType v_type) {
  if (k_type == v_type) return dtype_holding(k_type);
  return DType::f32;
}

size_t RingScratch::bytes() const {
  size_t b = buf[0].capacity() + buf[1].capacity() + sink_buf.capacity() +
             (k.capacity() + v.capacity() + tmp_out.capacity() + tmp_lse.capacity() +
              lse.capacity() + sink_k.capacity() + carry.capacity()) *
                 sizeof(float);
  if (shard) b += shard->bytes();
  if (sink) b += sink->bytes();
  if (whole) b += whole->bytes();
  b += gathered.capacity() + own_wire.capacity();
  for (const AttnState& st : state)
    b += (st.m.capacity() + st.l.capacity() + st.o.capacity()) * sizeof(float);
  return b;
}

namespace {

// n f32 values (exactly representable in `t`) into `t`'s bytes at dst, and back.
void to_wire(const float* src, int64_t n, DType t, unsigned char* dst) {
  if (t == DType::f32) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) store_from_f32(dst + i * 2, t, src[i]);
}
void from_wire(const unsigned char* src, int64_t n, DType t, float* dst) {
  if (t == DType::f32) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
    return;
  }
  for (int64_t i = 0; i < n; ++i) dst[i] = load_as_f32(src + i * 2, t);
}

// A shard of m positions on the wire: its K rows, then its V rows unless the values are the
// keys (RingLayer::v_is_k: the latent cache, whose rows would otherwise travel twice). put
// writes n rows from k and v as rows [i, i + n) of it, get reads them back into k and v (v
// neither read nor written, and may be null, when the values are the keys).
struct WireShard {
  const RingLayer& L;
  DType type;
  int64_t row;  // values a K (or V) row
  size_t es;    // bytes a value on the wire
  size_t bytes(int64_t m) const { return size_t(m * row) * es * (L.v_is_k ? 1 : 2); }
  void put(const float* k, const float* v, int64_t i, int64_t n, int64_t m,
           unsigned char* dst) const {
    to_wire(k, n * row, type, dst + size_t(i * row) * es);
    if (!L.v_is_k) to_wire(v, n * row, type, dst + size_t((m + i) * row) * es);
  }
  void get(const unsigned char* src, int64_t i, int64_t n, int64_t m, float* k, float* v) const {
    from_wire(src + size_t(i * row) * es, n * row, type, k);
    if (!L.v_is_k) from_wire(src + size_t((m + i) * row) * es, n * row, type, v);
  }
  // Room for n received rows in s.k and s.v (none in s.v where the values are the keys).
  void fit(RingScratch& s, int64_t n) const {
    s.k.resize(size_t(n * row));
    s.v.resize(L.v_is_k ? 0 : size_t(n * row));
  }
  // The n rows of s.k and s.v appended to `into` at `pos` (empty: from position 0).
  void pack(const RingScratch& s, int64_t n, PackedKV& into, std::span<const int64_t> pos) const {
    const auto view = [&](const std::vector<float>& x) {
      return TensorView::shd(const_cast<float*>(x.data()), DType::f32, L.kv_heads, n, L.dim);
    };
    into.append(view(s.k), view(L.v_is_k ? s.k : s.v), pos, L.opt.threads);
  }
};

WireShard wire_shard(const RingLayer& L) {
  const DType t = wire_dtype(L.k_type, L.v_type);
  return {L, t, L.kv_heads * L.dim, dtype_size(t)};
}

}  // namespace

std::vector<char> pattern_needed(const Zigzag& z, const RingPattern& pt) {
  const int P = z.ranks;
  const int64_t n = z.n;
  std::vector<int> owner(static_cast<size_t>(n));
  for (int64_t c = 0; c < 2 * int64_t(P); ++c)
    for (int64_t j = z.begin(c); j < z.begin(c + 1); ++j) owner[size_t(j)] = z.owner(c);
  std::vector<char> need(static_cast<size_t>(n), 0);
  std::vector<int64_t> diff(size_t(n) + 1);
  for (int q = 0; q < P; ++q) {
    std::fill(diff.begin(), diff.end(), 0);
    // Every query block with rows on rank q: its key ranges up to its last row there.
    for (const Zigzag::Run run : {z.first(q), z.second(q)})
      for (int64_t b = run.pos / pt.block_q * pt.block_q; b < run.pos + run.len; b += pt.block_q) {
        const int64_t last = std::min(run.pos + run.len, b + pt.block_q) - 1;
        for (const KeyRange& k : a_shape_block_keys(b, std::min(b + pt.block_q, n) - 1, pt.sink,
                                                    pt.local, pt.block_k)) {
          const int64_t lo = k.begin, hi = std::min(k.end, last + 1);
          if (lo >= hi) continue;
          diff[size_t(lo)] += 1;
          diff[size_t(hi)] -= 1;
        }
      }
    int64_t seen = 0;
    for (int64_t j = 0; j < n; ++j) {
      seen += diff[size_t(j)];
      if (seen > 0 && owner[size_t(j)] != q) need[size_t(j)] = 1;
    }
  }
  return need;
}

namespace {

// A packed f32 buffer for `rows` keys of the layer's kv heads, cache types and operand path:
// the scratch one kept from the layer before when it fits, else a new one.
PackedKV& fit_packed(std::unique_ptr<PackedKV>& p, const RingLayer& L, int64_t rows,
                     bool bf16_dot) {
  if (!p || p->capacity() < rows || p->k_type() != L.k_type || p->v_type() != L.v_type ||
      p->kv_heads() != L.kv_heads || p->bf16_operands() != bf16_dot || p->v_is_k() != L.v_is_k)
    p = std::make_unique<PackedKV>(L.kv_heads, L.dim, DType::f32, rows, bf16_dot, L.k_type,
                                   L.v_type, L.v_is_k);
  return *p;
}

// The sparse ring (RingLayer::pattern): as the dense one, but a shard carries only the rows
// pattern_needed marks, and each query block of the rank's runs attends, piece by piece, to
// the keys of its ranges the shard in hand holds. Every row's partials merge by (O, LSE) into
// out (started empty: LSE -inf).
// The pass-KV ring's double buffer, shared by the dense and the pattern prefill: at each step
// the shard in hand (from rank source(step)) goes on to the next rank while the next step's
// shard arrives from the previous one; finish() waits for both and swaps the buffers; done()
// counts the layer and its communication time. shard_bytes(rank): the bytes rank's shard takes
// on the wire.
template <class Bytes>
class RingExchange {
 public:
  RingExchange(Group& g, RingScratch& s, Bytes shard_bytes)
      : g_(g), s_(s), bytes_(shard_bytes), P_(g.size()), r_(g.rank()), comm0_(g.stats().comm_ms) {}
  int source(int step) const { return (r_ - step + P_) % P_; }
  void start(int step) {
    if (step + 1 >= P_) return;
    const int src = source(step), next = source(step + 1);
    g_.start_exchange(s_.buf[cur_].data(), bytes_(src), (r_ + 1) % P_, s_.buf[1 - cur_].data(),
                      bytes_(next), (r_ - 1 + P_) % P_);
    g_.stats().ring_bytes_sent += int64_t(bytes_(src));
  }
  const unsigned char* in_hand() const { return s_.buf[cur_].data(); }
  void finish(int step) {
    if (step + 1 >= P_) return;
    g_.finish_exchange();
    cur_ = 1 - cur_;
  }
  void done() {
    g_.stats().ring_layers += 1;
    g_.stats().ring_comm_ms += g_.stats().comm_ms - comm0_;
  }

 private:
  Group& g_;
  RingScratch& s_;
  Bytes bytes_;
  const int P_, r_;
  const double comm0_;
  int cur_ = 0;
};

void ring_pattern(Group& g, const Zigzag& z, const RingLayer& L, RingScratch& s, Stats* stats) {
  const RingPattern& pt = *L.pattern;
  const int P = g.size(), r = g.rank();
  const int64_t Hq = L.q_heads, Hkv = L.kv_heads, d = L.dim, n = z.n;
  const WireShard wire = wire_shard(L);
  const int64_t row = wire.row;
  const std::vector<char> need = pattern_needed(z, pt);
  // Per rank: the positions its shard carries on the wire.
  std::vector<std::vector<int64_t>> sent(static_cast<size_t>(P));
  size_t most = 1;
  for (int q = 0; q < P; ++q) {
    for (int64_t p : z.positions(q))
      if (need[size_t(p)]) sent[size_t(q)].push_back(p);
    most = std::max(most, sent[size_t(q)].size());
  }
  const auto shard_bytes = [&](int q) { return wire.bytes(int64_t(sent[size_t(q)].size())); };
  for (auto& b : s.buf) b.resize(wire.bytes(int64_t(most)));
  {  // the rank's own rows that others see
    const std::vector<int64_t> own = z.positions(r);
    const auto m = int64_t(sent[size_t(r)].size());
    int64_t i = 0;
    for (size_t j = 0; j < own.size(); ++j) {
      if (!need[size_t(own[j])]) continue;
      wire.put(L.k + int64_t(j) * row, L.v + int64_t(j) * row, i++, 1, m, s.buf[0].data());
    }
  }
  const int64_t rows = z.rows(r);
  std::fill(L.out, L.out + rows * Hq * d, 0.0f);
  s.lse.assign(size_t(rows * Hq), -std::numeric_limits<float>::infinity());  // [row][Hq]
  const Zigzag::Run runs[2] = {z.first(r), z.second(r)};
  RingExchange ring(g, s, shard_bytes);
  for (int step = 0; step < P; ++step) {
    const int src = ring.source(step);
    ring.start(step);
    // The shard in hand as f32 rows with their positions: the rank's own rows whole at step 0.
    const float *kk = L.k, *vv = L.v;
    std::vector<int64_t> pos;
    if (step == 0) {
      pos = z.positions(r);
    } else {
      pos = sent[size_t(src)];
      const int64_t m = int64_t(pos.size());
      wire.fit(s, m);
      wire.get(ring.in_hand(), 0, m, m, s.k.data(), s.v.data());
      kk = s.k.data();
      vv = L.v_is_k ? kk : s.v.data();
      g.progress();
    }
    // Rows [at, at + cnt) of the rank against the shard's rows [k0, k0 + nk), merged into out.
    const auto partial = [&](int64_t at, int64_t cnt, int64_t k0, int64_t nk, bool causal) {
      if (cnt <= 0) return;
      AttnOptions o = L.opt;
      o.causal = causal;
      o.q_start = -1;
      s.tmp_out.resize(size_t(cnt * Hq * d));
      s.tmp_lse.resize(size_t(cnt * Hq));
      attention_dense(
          TensorView::shd(const_cast<float*>(L.q) + at * Hq * d, DType::f32, Hq, cnt, d),
          TensorView::shd(const_cast<float*>(kk) + k0 * row, DType::f32, Hkv, nk, d),
          TensorView::shd(const_cast<float*>(vv) + k0 * row, DType::f32, Hkv, nk, d),
          TensorView::shd(s.tmp_out.data(), DType::f32, Hq, cnt, d), o, s.tmp_lse.data(), stats);
      for (int64_t x = 0; x < cnt; ++x)
        for (int64_t h = 0; h < Hq; ++h)
          merge_row(L.out + ((at + x) * Hq + h) * d, s.lse[size_t((at + x) * Hq + h)],
                    s.tmp_out.data() + (x * Hq + h) * d, s.tmp_lse[size_t(h * cnt + x)], d);
    };
    // Its stretches of consecutive positions: {first position, first row, length}.
    std::vector<std::array<int64_t, 3>> st;
    for (size_t i = 0; i < pos.size(); ++i)
      if (i > 0 && pos[i] == pos[i - 1] + 1)
        ++st.back()[2];
      else
        st.push_back({pos[i], int64_t(i), 1});
    int64_t row0 = 0;
    for (const Zigzag::Run& run : runs) {
      for (int64_t b = run.pos / pt.block_q * pt.block_q; b < run.pos + run.len; b += pt.block_q) {
        const int64_t rs = std::max(run.pos, b), re = std::min(run.pos + run.len, b + pt.block_q);
        for (const KeyRange& kr : a_shape_block_keys(b, std::min(b + pt.block_q, n) - 1, pt.sink,
                                                     pt.local, pt.block_k)) {
          // Each stretch that meets the range, from the first that ends after its start.
          auto it = std::lower_bound(st.begin(), st.end(), kr.begin,
                                     [](const auto& x, int64_t p) { return x[0] + x[2] <= p; });
          for (; it != st.end() && (*it)[0] < std::min(kr.end, re); ++it) {
            const int64_t a = std::max(kr.begin, (*it)[0]),
                          end = std::min({kr.end, (*it)[0] + (*it)[2], re});
            // Rows [max(rs, a), end) see keys [a, their own position] (causal, bottom-right);
            // rows from end on see all of [a, end) (no mask). Rows before a see none of them.
            if (a < end) {
              const int64_t k0 = (*it)[1] + (a - (*it)[0]);
              partial(row0 + (std::max(rs, a) - run.pos), end - std::max(rs, a), k0, end - a, true);
              const int64_t r1 = std::max(rs, end);
              partial(row0 + (r1 - run.pos), re - r1, k0, end - a, false);
            }
          }
        }
        g.progress();
      }
      row0 += run.len;
    }
    ring.finish(step);
  }
  ring.done();
}

// BLASST's seed (RingBlasst): rank 0's first kTileKeys rows of K (the sink tile) to every
// rank, then each run's running max over its diagonal tile and the sink tile, into s.carry.
void blasst_seed(Group& g, const Zigzag& z, const RingLayer& L, RingScratch& s) {
  const int r = g.rank();
  const int64_t Hq = L.q_heads, Hkv = L.kv_heads, d = L.dim, row = Hkv * d;
  const DType wire = wire_dtype(L.k_type, L.v_type);
  const size_t es = dtype_size(wire);
  const int64_t m = std::min<int64_t>(kKeyBlock, z.first(0).len);  // rank 0's first run
  const size_t bytes = size_t(m * row) * es;
  s.sink_buf.resize(bytes);
  if (r == 0) to_wire(L.k, m * row, wire, s.sink_buf.data());
  std::vector<size_t> counts(static_cast<size_t>(g.size()), 0);
  counts[0] = bytes;
  std::vector<unsigned char> mine(r == 0 ? bytes : 0);
  if (r == 0) mine = s.sink_buf;
  const int64_t before = g.stats().bytes_recv;
  g.allgatherv(mine.data(), mine.size(), s.sink_buf.data(), counts);
  g.stats().blasst_seed_bytes_recv += g.stats().bytes_recv - before;
  s.sink_k.resize(size_t(m * row));
  from_wire(s.sink_buf.data(), m * row, wire, s.sink_k.data());
  fit_packed(s.sink, L, kKeyBlock, /*bf16_dot=*/false);  // m <= kKeyBlock
  std::vector<int64_t> pos(static_cast<size_t>(m));
  for (int64_t i = 0; i < m; ++i) pos[size_t(i)] = i;
  s.sink->clear();
  // Only K enters the seed: V rides along as K (never read).
  const TensorView kv = TensorView::shd(s.sink_k.data(), DType::f32, Hkv, m, d);
  s.sink->append(kv, kv, pos, 1);
  s.carry.assign(size_t(z.rows(r) * Hq), -std::numeric_limits<float>::infinity());
  int64_t row0 = 0;
  for (const Zigzag::Run& run : {z.first(r), z.second(r)}) {
    AttnOptions a = L.opt;
    a.q_start = run.pos;
    const TensorView qv =
        TensorView::shd(const_cast<float*>(L.q) + row0 * Hq * d, DType::f32, Hq, run.len, d);
    float* carry = s.carry.data() + row0 * Hq;
    blasst_seed_max(qv, *L.own, /*diagonal_only=*/true, carry, a);
    blasst_seed_max(qv, *s.sink, /*diagonal_only=*/false, carry, a);
    row0 += run.len;
  }
}

// RingLayer::gather: every rank's shard to every rank, then the one-process kernel over the
// whole K/V in position order.
void gather_prefill(Group& g, const Zigzag& z, const RingLayer& L, RingScratch& s, Stats* stats) {
  const int P = g.size(), r = g.rank();
  const int64_t Hq = L.q_heads, Hkv = L.kv_heads, d = L.dim, row = Hkv * d, n = z.n;
  const WireShard wire = wire_shard(L);
  const auto shard_bytes = [&](int q) { return wire.bytes(z.rows(q)); };
  const int64_t rows = z.rows(r);
  std::vector<size_t> counts(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) counts[size_t(q)] = shard_bytes(q);
  s.buf[0].resize(shard_bytes(r));
  wire.put(L.k, L.v, 0, rows, rows, s.buf[0].data());
  s.gathered.resize(wire.bytes(n));
  const double comm0 = g.stats().comm_ms;
  g.allgatherv(s.buf[0].data(), shard_bytes(r), s.gathered.data(), counts);
  g.stats().ring_bytes_sent += int64_t(shard_bytes(r)) * (P - 1);
  g.stats().ring_layers += 1;
  g.stats().ring_comm_ms += g.stats().comm_ms - comm0;
  // K and V of every position, as f32 rows in position order.
  wire.fit(s, n);
  const unsigned char* at = s.gathered.data();
  for (int q = 0; q < P; ++q) {
    const int64_t m = z.rows(q);
    int64_t i = 0;
    for (const Zigzag::Run run : {z.first(q), z.second(q)}) {
      wire.get(at, i, run.len, m, s.k.data() + run.pos * row,
               L.v_is_k ? nullptr : s.v.data() + run.pos * row);
      i += run.len;
    }
    at += shard_bytes(q);
  }
  // Packed as the rank's cache packs its rows (its format), so as one process's cache.
  fit_packed(s.whole, L, n, L.own->bf16_operands());
  s.whole->clear();
  wire.pack(s, n, *s.whole, {});
  int64_t row0 = 0;
  const Zigzag::Run runs[2] = {z.first(r), z.second(r)};
  for (int i = 0; i < 2; ++i) {
    const Zigzag::Run& run = runs[i];
    if (run.len == 0) continue;
    AttnOptions a = L.opt;
    a.q_start = run.pos;
    const TensorView qv =
        TensorView::shd(const_cast<float*>(L.q) + row0 * Hq * d, DType::f32, Hq, run.len, d);
    const TensorView ov = TensorView::shd(L.out + row0 * Hq * d, DType::f32, Hq, run.len, d);
    if (L.selection)
      attention_token_sparse(qv, *s.whole, ov, L.selection[i], a, nullptr, stats);
    else
      attention_dense(qv, *s.whole, ov, a, nullptr, stats);
    row0 += run.len;
  }
}

// The dense prefill in position order (ring_prefill's comment): rank r steps through chunks
// c = 0 .. 2P-1-r (its late run's own); at step c it takes chunk c (its own cache's run, or
// the chunk received), posts the receive of chunk c + 1 so it moves during the compute, and
// continues the early run's state over chunk c when c <= r and the late run's always. A rank
// waits only for its own receive; its sends, posted at the start, are waited for at the
// layer's end (each run's wire rows are sent from one buffer that stays).
void ordered_prefill(Group& g, const Zigzag& z, const RingLayer& L, RingScratch& s, Stats* stats) {
  const int P = g.size(), r = g.rank();
  const int64_t Hq = L.q_heads, Hkv = L.kv_heads, d = L.dim, row = Hkv * d;
  const WireShard wire = wire_shard(L);
  const int64_t C = 2 * int64_t(P);
  const Zigzag::Run runs[2] = {z.first(r), z.second(r)};
  SPATTN_CHECK(z.grid % kKeyBlock == 0 && runs[0].len > 0 && runs[1].len > 0,
               "internal: the dense prefill in position order needs the zigzag on the ", kKeyBlock,
               "-token grid with two runs per rank");
  SPATTN_CHECK(L.own && L.own->size() == runs[0].len + runs[1].len,
               "internal: the rank's "
               "cache holds ",
               L.own ? L.own->size() : 0, " rows, its shard ", runs[0].len + runs[1].len);
  const auto len = [&](int64_t c) { return z.begin(c + 1) - z.begin(c); };
  const auto chunk_bytes = [&](int64_t c) { return wire.bytes(len(c)); };
  // Rank q reads chunk c when its late run (chunk C-1-q, after its early one) lies at or after c.
  const auto reads = [&](int q, int64_t c) { return c <= C - 1 - q; };
  // The rank's runs on the wire, each K rows then V rows (the layout a chunk travels in).
  s.own_wire.resize(chunk_bytes(r) + chunk_bytes(C - 1 - r));
  unsigned char* run_wire[2] = {s.own_wire.data(), s.own_wire.data() + chunk_bytes(r)};
  for (int i = 0, at = 0; i < 2; at += int(runs[i].len), ++i)
    wire.put(L.k + at * row, L.v + at * row, 0, runs[i].len, runs[i].len, run_wire[i]);
  size_t most = 0;
  for (int64_t c = 0; c < C; ++c)
    if (z.owner(c) != r && reads(r, c)) most = std::max(most, chunk_bytes(c));
  for (auto& b : s.buf) b.resize(most);
  int64_t most_rows = 0;
  for (int64_t c = 0; c < C; ++c) most_rows = std::max(most_rows, len(c));
  fit_packed(s.shard, L, most_rows, L.own->bf16_operands());
  const double comm0 = g.stats().comm_ms;
  // The rank's two chunks go to every other reader at once, at the layer's start: they are its
  // own rows, so this holds no more memory, and a reader is never kept waiting for its owner
  // to reach a step (MPI moves a large message once the reader posts its receive). Were they
  // posted one step ahead instead, the ranks' steps would be coupled: the last rank computes
  // both runs against each early chunk while the first computes one, and the first would wait.
  for (const int64_t c : {int64_t(r), C - 1 - r})
    for (int q = 0; q < P; ++q)
      if (q != r && reads(q, c)) {
        g.post_send(run_wire[c < P ? 0 : 1], chunk_bytes(c), q);
        g.stats().ring_bytes_sent += int64_t(chunk_bytes(c));
      }
  // A reader receives chunk c into buffer c % 2, posted one chunk ahead.
  const auto post = [&](int64_t c) {
    if (c < C && z.owner(c) != r && reads(r, c))
      g.post_recv(s.buf[c % 2].data(), chunk_bytes(c), z.owner(c));
  };
  for (int i = 0; i < 2; ++i) s.state[i].reset(Hq, runs[i].len, d);
  post(0);
  for (int64_t c = 0; c < C && reads(r, c); ++c) {
    const int o = z.owner(c);
    // The chunk's keys: a run of the rank's own cache, or the chunk received, packed with its
    // positions in the cache's format.
    const PackedKV* kv = L.own;
    KeyRange keys{0, len(c)};
    if (o == r) {
      if (c != r) keys = {runs[0].len, runs[0].len + runs[1].len};
    } else {
      g.wait_recv();
    }
    post(c + 1);
    if (o != r) {
      const int64_t n = len(c);
      wire.fit(s, n);
      wire.get(s.buf[c % 2].data(), 0, n, n, s.k.data(), s.v.data());
      std::vector<int64_t> pos(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) pos[size_t(i)] = z.begin(c) + i;
      s.shard->clear();
      wire.pack(s, n, *s.shard, pos);
      kv = s.shard.get();
      g.progress();
    }
    int64_t row0 = 0;
    for (int i = 0; i < 2; row0 += runs[i].len, ++i) {
      if (i == 0 && c > r) continue;  // the early run's keys end at its own chunk
      AttnOptions a = L.opt;
      a.q_start = runs[i].pos;
      attention_dense_continue(
          TensorView::shd(const_cast<float*>(L.q) + row0 * Hq * d, DType::f32, Hq, runs[i].len, d),
          *kv, keys, s.state[i], a, stats);
      g.progress();
    }
  }
  g.wait_sends();
  g.stats().ring_layers += 1;
  g.stats().ring_comm_ms += g.stats().comm_ms - comm0;
  int64_t row0 = 0;
  for (int i = 0; i < 2; row0 += runs[i].len, ++i)
    attention_state_finish(s.state[i],
                           TensorView::shd(L.out + row0 * Hq * d, DType::f32, Hq, runs[i].len, d));
}

}  // namespace

void gather_rows(Group& g, const Zigzag& z, const float* rows, int64_t width,
                 std::vector<float>& out) {
  const int P = g.size(), r = g.rank();
  const size_t row_bytes = size_t(width) * sizeof(float);
  std::vector<size_t> counts(static_cast<size_t>(P));
  for (int q = 0; q < P; ++q) counts[size_t(q)] = size_t(z.rows(q)) * row_bytes;
  std::vector<float> by_rank(size_t(z.n * width));
  const double comm0 = g.stats().comm_ms;
  g.allgatherv(rows, counts[size_t(r)], by_rank.data(), counts);
  g.stats().ring_bytes_sent += int64_t(counts[size_t(r)]) * (P - 1);
  g.stats().ring_comm_ms += g.stats().comm_ms - comm0;
  out.resize(size_t(z.n * width));
  const float* at = by_rank.data();
  for (int q = 0; q < P; ++q)
    for (const Zigzag::Run run : {z.first(q), z.second(q)}) {
      std::copy_n(at, run.len * width, out.data() + run.pos * width);
      at += run.len * width;
    }
}

void ring_prefill(Group& g, const Zigzag& z, const RingLayer& L, RingScratch& s, Stats* stats) {
  if (L.pattern) return ring_pattern(g, z, L, s, stats);
  SPATTN_CHECK(!L.selection || L.gather, "internal: a token selection across ranks is gathered");
  if (L.gather) return gather_prefill(g, z, L, s, stats);
  if (!L.blasst) return ordered_prefill(g, z, L, s, stats);
  const int P = g.size(), r = g.rank();
  const int64_t Hq = L.q_heads, d = L.dim;
  const WireShard wire = wire_shard(L);
  const auto shard_bytes = [&](int rank) { return wire.bytes(z.rows(rank)); };
  int64_t max_rows = 0;
  for (int q = 0; q < P; ++q) max_rows = std::max(max_rows, z.rows(q));
  const int64_t rows = z.rows(r);
  SPATTN_CHECK(L.own && L.own->size() == rows, "internal: the rank's cache holds ",
               L.own ? L.own->size() : 0, " rows, its shard ", rows);
  for (auto& b : s.buf) b.resize(wire.bytes(max_rows));
  wire.put(L.k, L.v, 0, rows, rows, s.buf[0].data());
  if (P > 1) fit_packed(s.shard, L, max_rows, /*bf16_dot=*/false);
  s.lse.resize(size_t(Hq * rows));
  const Zigzag::Run runs[2] = {z.first(r), z.second(r)};
  const double lambda = L.blasst ? L.blasst->lambda : 0.0;
  if (L.blasst) {
    SPATTN_CHECK(z.grid == kKeyBlock && runs[0].len > 0 && runs[1].len > 0,
                 "internal: BLASST's ring needs the zigzag on the ", kKeyBlock,
                 "-token grid with two runs per rank");
    if (lambda > 0) {
      blasst_seed(g, z, L, s);
    } else {  // nothing is skipped: no seed, the tiles in order (the dense ring's sums)
      s.carry.assign(size_t(rows * Hq), -std::numeric_limits<float>::infinity());
    }
  }
  // The rows' attention over the shard kv, into o and lse: dense, or BLASST against the
  // running max the run's rows carry.
  const auto attend = [&](const TensorView& qv, const PackedKV& kv, const TensorView& o,
                          const AttnOptions& a, float* l, int64_t row0) {
    if (L.blasst)
      attention_blasst_piece(qv, kv, o, lambda, s.carry.data() + row0 * Hq, a, l, stats);
    else
      attention_dense(qv, kv, o, a, l, stats);
  };
  RingExchange ring(g, s, shard_bytes);
  for (int step = 0; step < P; ++step) {
    const int src = ring.source(step);
    ring.start(step);
    const PackedKV* kv = L.own;
    if (step > 0) {
      // The shard in hand, packed with its owner's positions.
      const int64_t n = z.rows(src);
      wire.fit(s, n);
      wire.get(ring.in_hand(), 0, n, n, s.k.data(), s.v.data());
      s.shard->clear();
      wire.pack(s, n, *s.shard, z.positions(src));
      kv = s.shard.get();
      g.progress();
    }
    const int64_t first_key = z.first(src).pos;
    int64_t row0 = 0;
    for (const Zigzag::Run& run : runs) {
      AttnOptions a = L.opt;
      a.q_start = run.pos;
      const TensorView qv =
          TensorView::shd(const_cast<float*>(L.q) + row0 * Hq * d, DType::f32, Hq, run.len, d);
      const TensorView ov = TensorView::shd(L.out + row0 * Hq * d, DType::f32, Hq, run.len, d);
      float* lse = s.lse.data() + row0 * Hq;  // [Hq, run.len] for this run
      // Step 0 is the rank's own shard, which both runs see (its first run is its diagonal).
      if (step == 0) {
        attend(qv, *kv, ov, a, lse, row0);
      } else if (run.pos + run.len - 1 >= first_key) {  // else no key of the shard is visible
        s.tmp_out.resize(size_t(run.len * Hq * d));
        s.tmp_lse.resize(size_t(run.len * Hq));
        const TensorView tv = TensorView::shd(s.tmp_out.data(), DType::f32, Hq, run.len, d);
        attend(qv, *kv, tv, a, s.tmp_lse.data(), row0);
        merge_attention(ov, lse, tv, s.tmp_lse.data(), ov, lse);
      }
      row0 += run.len;
      g.progress();
    }
    ring.finish(step);
  }
  ring.done();
}

void decode_merge(Group& g, const TensorView& q, const PackedKV& local, const TensorView& out,
                  const AttnOptions& opt, int32_t token, Stats* stats, std::vector<float>& scratch,
                  const TokenSelection* keys) {
  const int P = g.size();
  const int64_t Hq = q.heads, d = q.dim;
  SPATTN_CHECK(q.seq == 1 && out.seq == 1, "internal: decode_merge takes one query row");
  // This rank's slot: O [Hq, d], LSE [Hq], then the token's id (as int32 bytes).
  const size_t slot = size_t(Hq * (d + 1) + 1);
  scratch.resize(slot * size_t(P + 1));
  float* mine = scratch.data() + slot * size_t(P);
  const TensorView mo = TensorView::shd(mine, DType::f32, Hq, 1, d);
  SPATTN_CHECK(!keys || keys->rows() == 1, "internal: decode_merge takes one row's keys");
  if (keys && local.size() > 0 && (keys->all[0] || keys->count(0) > 0)) {
    attention_token_sparse(q, local, mo, *keys, opt, mine + Hq * d, stats);
  } else if (!keys && local.size() > 0) {
    attention_decode(q, local, mo, opt, DecodeOptions{}, mine + Hq * d, stats);
  } else {
    std::fill(mine, mine + Hq * d, 0.0f);
    std::fill(mine + Hq * d, mine + Hq * (d + 1), -std::numeric_limits<float>::infinity());
  }
  std::memcpy(mine + slot - 1, &token, sizeof token);
  g.allgather(mine, slot * sizeof(float), scratch.data());
  for (int rank = 0; rank < P; ++rank) {
    int32_t t = 0;
    std::memcpy(&t, scratch.data() + slot * size_t(rank + 1) - 1, sizeof t);
    if (t != token) {
      g.set_failed_together();
      detail::fail("--cp: rank ", rank, " decodes token ", t, " where rank ", g.rank(), " decodes ",
                   token, ": the ranks are out of step");
    }
  }
  std::vector<float> o(static_cast<size_t>(d));
  for (int64_t h = 0; h < Hq; ++h) {
    std::copy_n(scratch.begin() + h * d, d, o.begin());
    float lse = scratch[size_t(Hq * d + h)];
    for (int rank = 1; rank < P; ++rank) {
      const float* part = scratch.data() + slot * size_t(rank);
      merge_row(o.data(), lse, part + h * d, part[Hq * d + h], d);
    }
    for (int64_t c = 0; c < d; ++c) out.set(h, 0, c, o[size_t(c)]);
  }
}

}  // namespace spattn::dist

// chunked_h2o across ranks (see h2o_chain.hpp). The method's memory set M_c is defined by a
// chain over the prompt's chunks in position order (M_c from M_{c-1}, chunk c's scores and
// rows), so across ranks the chain passes from rank to rank: the zigzag split is laid on the
// -ub grid (Zigzag::grid), every chunk lies on one rank, and the rank holding chunk c runs it
// (ChunkedH2OLayer::prefill_batch: intra, inter against M_{c-1}, the scores, M_c) on exactly
// the operands one process gives it. Between two ranks' runs the layer's state at the chunk
// boundary (ChunkedH2OSnapshot: M per q head, its scores and K/V rows) goes to the next owner,
// which restores it. The selection rule, scores and rows are therefore the one-process ones.
//
// Wire form of a snapshot: int64 header {pos, chunks, updates, have_mem, m, hq}, then per q
// head m int64 positions and m double scores, then the K rows and the V rows ([hq][m][d]) in
// the ring's wire type (wire_dtype: f16 / bf16 when the cache stores both so, which holds the
// rows' values exactly, since the layer takes them as the cache rounded them; else f32).
#include "dist/h2o_chain.hpp"

#include <cstring>

#include "dist/ring_attention.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

namespace spattn::dist {

namespace {

constexpr size_t kHeader = 6 * sizeof(int64_t);

void put(std::vector<unsigned char>& w, size_t& at, const void* p, size_t n) {
  if (n) std::memcpy(w.data() + at, p, n);
  at += n;
}
void get(const std::vector<unsigned char>& w, size_t& at, size_t size, void* p, size_t n) {
  SPATTN_CHECK(at + n <= size, "--cp chunked_h2o: a memory-set message of ", size,
               " bytes is cut short");
  if (n) std::memcpy(p, w.data() + at, n);
  at += n;
}

// f32 rows (bytes) into `t` at w[at..], and back.
void put_rows(std::vector<unsigned char>& w, size_t& at, const std::vector<char>& rows, DType t) {
  const size_t n = rows.size() / sizeof(float);
  const float* f = reinterpret_cast<const float*>(rows.data());
  if (t == DType::f32) return put(w, at, f, n * sizeof(float));
  for (size_t i = 0; i < n; ++i) store_from_f32(w.data() + at + i * 2, t, f[i]);
  at += n * 2;
}
void get_rows(const std::vector<unsigned char>& w, size_t& at, size_t size, std::vector<char>& rows,
              DType t) {
  const size_t n = rows.size() / sizeof(float);
  float* f = reinterpret_cast<float*>(rows.data());
  if (t == DType::f32) return get(w, at, size, f, n * sizeof(float));
  SPATTN_CHECK(at + n * 2 <= size, "--cp chunked_h2o: a memory-set message of ", size,
               " bytes is cut short");
  for (size_t i = 0; i < n; ++i) f[i] = load_as_f32(w.data() + at + i * 2, t);
  at += n * 2;
}

size_t encode(const ChunkedH2OSnapshot& s, DType t, std::vector<unsigned char>& w) {
  const int64_t hq = int64_t(s.mem.size()), m = hq ? int64_t(s.mem[0].size()) : 0;
  const size_t bytes = kHeader + size_t(hq * m) * (sizeof(int64_t) + sizeof(double)) +
                       (s.mem_k.size() + s.mem_v.size()) / sizeof(float) * dtype_size(t);
  if (w.size() < bytes) w.resize(bytes);
  size_t at = 0;
  const int64_t head[6] = {s.pos, s.chunks, s.updates, s.have_mem ? 1 : 0, m, hq};
  put(w, at, head, kHeader);
  for (int64_t h = 0; h < hq; ++h) {
    put(w, at, s.mem[size_t(h)].data(), size_t(m) * sizeof(int64_t));
    put(w, at, s.mem_scores[size_t(h)].data(), size_t(m) * sizeof(double));
  }
  put_rows(w, at, s.mem_k, t);
  put_rows(w, at, s.mem_v, t);
  return at;
}

ChunkedH2OSnapshot decode(const std::vector<unsigned char>& w, size_t size, size_t row_bytes,
                          DType t) {
  ChunkedH2OSnapshot s;
  size_t at = 0;
  int64_t head[6];
  get(w, at, size, head, kHeader);
  const int64_t m = head[4], hq = head[5];
  SPATTN_CHECK(m >= 0 && hq >= 1 && size_t(hq * m) <= size,
               "--cp chunked_h2o: a memory-set message with ", hq, " heads of ", m, " tokens");
  s.pos = head[0];
  s.chunks = head[1];
  s.updates = head[2];
  s.have_mem = head[3] != 0;
  s.mem.resize(size_t(hq));
  s.mem_scores.resize(size_t(hq));
  for (int64_t h = 0; h < hq; ++h) {
    s.mem[size_t(h)].resize(size_t(m));
    s.mem_scores[size_t(h)].resize(size_t(m));
    get(w, at, size, s.mem[size_t(h)].data(), size_t(m) * sizeof(int64_t));
    get(w, at, size, s.mem_scores[size_t(h)].data(), size_t(m) * sizeof(double));
  }
  s.mem_k.resize(size_t(hq * m) * row_bytes);
  s.mem_v.resize(s.mem_k.size());
  get_rows(w, at, size, s.mem_k, t);
  get_rows(w, at, size, s.mem_v, t);
  SPATTN_CHECK(at == size, "--cp chunked_h2o: a memory-set message of ", size, " bytes holds ", at);
  return s;
}

}  // namespace

void h2o_chain_prefill(Group& g, const Zigzag& z, const H2OChainLayer& L, ChunkedH2OLayer& layer,
                       std::vector<unsigned char>& wire, Stats* stats) {
  const int P = g.size(), r = g.rank();
  const int64_t Hq = L.q_heads, Hkv = L.kv_heads, d = L.dim, S = L.chunk;
  const int64_t row_bytes = d * int64_t(sizeof(float));
  const DType t = wire_dtype(L.k_type, L.v_type);
  // The largest message: every head's whole memory set.
  const size_t most =
      kHeader + size_t(Hq * L.memory) * (sizeof(int64_t) + sizeof(double) + 2 * size_t(row_bytes));
  if (wire.size() < most) wire.resize(most);
  const double comm0 = g.stats().comm_ms;
  const int64_t sent0 = g.stats().bytes_sent;
  const int64_t first_len = z.first(r).len;
  int prev = -1;  // the owner of the last non-empty zigzag chunk
  for (int64_t zc = 0; zc < 2 * int64_t(P); ++zc) {
    const int64_t b = z.begin(zc), e = z.begin(zc + 1);
    if (e <= b) continue;
    const int owner = z.owner(zc);
    if (prev >= 0 && prev != owner) {
      // The state at position b moves from the last owner to this one.
      if (r == prev) {
        const size_t bytes = encode(layer.snapshot(), t, wire);
        g.send(wire.data(), bytes, owner);
      } else if (r == owner) {
        const size_t got = g.recv(wire.data(), wire.size(), prev);
        layer.restore(decode(wire, got, size_t(row_bytes), t));
        SPATTN_CHECK(layer.position() == b, "--cp chunked_h2o: the memory set arrived at ",
                     layer.position(), ", the chunk starts at ", b);
      }
    }
    if (prev < 0 && r == owner) layer.reset();
    prev = owner;
    if (r != owner) continue;
    // This rank's rows of zigzag chunk zc: its first run or, after it, its second.
    const int64_t row0 = zc < P ? 0 : first_len;
    for (int64_t c0 = b; c0 < e; c0 += S) {
      const int64_t len = std::min(S, e - c0), i0 = row0 + (c0 - b);
      auto rows = [&](const float* p, int64_t heads) {
        return TensorView::shd(const_cast<float*>(p) + i0 * heads * d, DType::f32, heads, len, d);
      };
      layer.prefill_batch(rows(L.q, Hq), rows(L.k, Hkv), rows(L.v, Hkv), rows(L.out, Hq), L.opt,
                          c0 + len == z.n, nullptr, stats);
    }
  }
  g.stats().ring_bytes_sent += g.stats().bytes_sent - sent0;
  g.stats().ring_layers += 1;
  g.stats().ring_comm_ms += g.stats().comm_ms - comm0;
}

}  // namespace spattn::dist

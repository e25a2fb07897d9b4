// chunked_h2o: "Chunked Sparse Attention for Prefill Optimization" (two-phase chunked prefill
// with an H2O memory set; the algorithm is summarised in include/spattn/chunked_h2o.hpp).
//
//   chunked_h2o:chunk=1024,batch=2048,local=256,heavy=256
//
//   chunk  S, tokens per chunk (llama.cpp's -ub)
//   batch  B, tokens per logical batch (llama.cpp's -b); chunks restart at each batch's start
//   local  L, tail tokens of a chunk always kept in its memory set
//   heavy  H, tokens kept by accumulated attention score
//   carry  1: the memory set carries across logical batches (the paper's formula); 0: each
//          logical batch starts without memory (the accounting of the paper's 4.6x and 9.1x)
//
// Every attention pass is a library kernel over a PackedKV that also returns the column sums
// of its normalised weights (attention_with_column_sums: one pass, no S x S matrix, no entry
// computed twice): Phase 1 packs the logical batch once and runs every chunk's diagonal block
// in one call (the block-diagonal causal mask; over the caller's packed K/V when it has them,
// as the model runner's KV cache does), giving the intra (O, LSE) and the intra column
// sums; Phase 2 packs the memory set gathered per q head (one packed "kv head" per q head, so
// every head runs in one call), runs it without a mask (the inter column sums come with it),
// and merges (O, LSE) exactly with the cached intra state (merge.hpp), in place in out.
// The paper's (m, l, o) is kept as (o / l, m + ln l): the same state.
//
// As a method of the registry (spattn bench) a run is one layer's prompt: q [Hq, N, d] and
// k, v [Hkv, N, d], causal. Decode-sized queries (q_len <= 16) run dense decode, as the paper
// prescribes for decode. Coverage: per row, its memory set and the intra keys.
#include "spattn/chunked_h2o.hpp"

#include <algorithm>
#include <cstring>
#include <functional>
#include <memory>

#include "dist/h2o_chain.hpp"
#include "methods/kernel_path.hpp"
#include "methods/layer_backend.hpp"
#include "methods/registry.hpp"
#include "spattn/coverage.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/merge.hpp"
#include "spattn/weight_sums.hpp"

namespace spattn {

void ChunkedH2OParams::validate() const {
  SPATTN_CHECK(chunk >= 1, "chunked_h2o: chunk (S, -ub) must be >= 1, got ", chunk);
  SPATTN_CHECK(batch >= 1, "chunked_h2o: batch (B, -b) must be >= 1, got ", batch);
  SPATTN_CHECK(local >= 0 && local <= chunk,
               "chunked_h2o: local (L) must be in [0, chunk = ", chunk, "], got ", local);
  SPATTN_CHECK(heavy >= 0, "chunked_h2o: heavy (H) must be >= 0, got ", heavy);
  SPATTN_CHECK(local + heavy >= 1, "chunked_h2o: local + heavy (the memory size M) must be >= 1");
}

std::vector<int64_t> h2o_local_window(int64_t chunk_begin, int64_t chunk_end, int64_t local) {
  std::vector<int64_t> w;
  for (int64_t j = std::max(chunk_begin, chunk_end - local); j < chunk_end; ++j) w.push_back(j);
  return w;
}

std::vector<int64_t> h2o_build_memory(std::span<const int64_t> prev, int64_t chunk_begin,
                                      int64_t chunk_end, std::span<const double> scores,
                                      int64_t local, int64_t heavy) {
  SPATTN_CHECK(chunk_begin >= 0 && chunk_end > chunk_begin && chunk_end <= int64_t(scores.size()),
               "h2o_build_memory: chunk [", chunk_begin, ", ", chunk_end,
               ") must be non-empty and lie within the ", scores.size(), " scores");
  SPATTN_CHECK(local >= 0 && heavy >= 0, "h2o_build_memory: local and heavy must be >= 0");
  const int64_t local_begin = std::max(chunk_begin, chunk_end - local);  // Local_c
  std::vector<int64_t> cand(prev.begin(), prev.end());
  for (size_t i = 0; i < cand.size(); ++i)
    SPATTN_CHECK(cand[i] >= 0 && cand[i] < chunk_begin && (i == 0 || cand[i - 1] < cand[i]),
                 "h2o_build_memory: the previous memory set must be sorted, distinct and lie "
                 "before the chunk (entry ",
                 i, " is ", cand[i], ")");
  for (int64_t j = chunk_begin; j < local_begin; ++j) cand.push_back(j);  // C_c \ Local_c
  // Heavy_c: top-H by score, ties to the earlier position (deterministic).
  auto better = [&](int64_t a, int64_t b) {
    const double sa = scores[size_t(a)], sb = scores[size_t(b)];
    return sa != sb ? sa > sb : a < b;
  };
  const size_t h = size_t(std::min<int64_t>(heavy, int64_t(cand.size())));
  std::nth_element(cand.begin(), cand.begin() + h, cand.end(), better);
  cand.resize(h);
  for (int64_t j = local_begin; j < chunk_end; ++j) cand.push_back(j);
  std::sort(cand.begin(), cand.end());  // sorted for an in-order gather (Task 4.4)
  return cand;
}

int64_t chunked_h2o_entries(int64_t n, const ChunkedH2OParams& p) {
  p.validate();
  int64_t total = 0, mem = 0;
  bool have_mem = false;
  for (int64_t b0 = 0; b0 < n; b0 += p.batch) {
    const int64_t b1 = std::min(n, b0 + p.batch);
    if (!p.carry) have_mem = false;
    for (int64_t c0 = b0; c0 < b1; c0 += p.chunk) {
      const int64_t len = std::min(p.chunk, b1 - c0);
      total += len * (len + 1) / 2;
      if (have_mem) total += len * mem;
      // |M_c| = min(L, |C_c|) + min(H, |M_{c-1}| + |C_c| - min(L, |C_c|))
      const int64_t loc = std::min(p.local, len);
      mem = loc + std::min(p.heavy, (have_mem ? mem : 0) + len - loc);
      have_mem = true;
    }
  }
  return total;
}

namespace {

// Row s of head h of a view, as bytes (rows are contiguous along dim in every layout we take).
const char* row_bytes(const TensorView& t, int64_t h, int64_t s) {
  return static_cast<const char*>(t.ptr(h, s));
}

}  // namespace

// What one logical batch needs only while it runs through a layer: the same for every layer
// of a model, so a session's layers share one (ChunkedH2OLayer::scratch), and a model of L
// layers holds it once instead of L times.
struct ChunkedH2OScratch {
  int64_t hq, hkv, dim, cap, mem_cap, batch, chunk;
  DType dtype;
  bool bf16_dot;
  std::vector<char> next_k, next_v;  // [Hq][mem_cap][d]: M_c's raw rows while they are gathered
  PackedKV intra_kv, mem_kv;         // the batch's K/V; M_{c-1}, one "kv head" per q head
  Tensor o_inter;                    // [Hq, S, d] inter O
  Tensor o_intra;  // [Hq, B, d] intra O when out is not f32 (an f32 out holds it itself)
  std::vector<float> lse_intra;           // [Hq][n]: the batch's intra LSE
  std::vector<float> lse_inter, lse_out;  // [Hq][|C_c|]: one chunk's
  WeightSums ws;

  ChunkedH2OScratch(const ChunkedH2OParams& p, int64_t hq_, int64_t hkv_, int64_t d, DType t,
                    int64_t c, bool bf16)
      : hq(hq_),
        hkv(hkv_),
        dim(d),
        cap(c),
        mem_cap(std::min(p.local + p.heavy, c)),
        batch(p.batch),
        chunk(p.chunk),
        dtype(t),
        bf16_dot(bf16),
        intra_kv(hkv_, d, t, std::min(p.batch, c), bf16),
        mem_kv(hq_, d, t, std::max<int64_t>(1, std::min(p.local + p.heavy, c)), bf16),
        o_inter(DType::f32, hq_, std::min(p.chunk, c), d) {
    ws.want_columns = true;
    ws.want_blocks = false;
    const size_t mem_bytes = size_t(hq) * size_t(mem_cap) * size_t(d) * dtype_size(t);
    next_k.resize(mem_bytes);
    next_v.resize(mem_bytes);
    lse_intra.resize(size_t(hq * std::min(p.batch, cap)));
    lse_inter.resize(size_t(hq * std::min(p.chunk, cap)));
    lse_out.resize(size_t(hq * std::min(p.chunk, cap)));
  }

  bool fits(const ChunkedH2OParams& p, int64_t hq_, int64_t hkv_, int64_t d, DType t, int64_t c,
            bool bf16) const {
    return hq == hq_ && hkv == hkv_ && dim == d && dtype == t && cap == c && bf16_dot == bf16 &&
           mem_cap == std::min(p.local + p.heavy, c) && batch == p.batch && chunk == p.chunk;
  }

  size_t bytes() const {
    return next_k.capacity() + next_v.capacity() + intra_kv.bytes() + mem_kv.bytes() +
           o_inter.numel() * sizeof(float) + o_intra.numel() * sizeof(float) +
           (lse_intra.capacity() + lse_inter.capacity() + lse_out.capacity()) * sizeof(float) +
           (ws.column.capacity() + ws.block.capacity()) * sizeof(double);
  }
};

struct ChunkedH2OLayer::State {
  ChunkedH2OParams p;
  int64_t hq, hkv, dim, cap, mem_cap;
  DType dtype;
  size_t row_size;
  int64_t pos = 0, chunks = 0, updates = 0;
  bool have_mem = false;
  // Kept from batch to batch (the layer's own):
  std::vector<std::vector<double>> scores;  // [Hq][cap]: score(j)
  std::vector<std::vector<int64_t>> mem;    // [Hq]: M_{c-1}, sorted positions
  std::vector<char> mem_k, mem_v;           // [Hq][mem_cap][d] raw rows of M_{c-1}
  std::shared_ptr<ChunkedH2OScratch> scratch;
  ChunkedH2OTrace* trace = nullptr;
  std::function<void(int64_t)> on_memory;

  State(const ChunkedH2OParams& p_, int64_t hq_, int64_t hkv_, int64_t d, DType t, int64_t c,
        std::shared_ptr<ChunkedH2OScratch> shared)
      : p(p_),
        hq(hq_),
        hkv(hkv_),
        dim(d),
        cap(c),
        mem_cap(std::min(p_.local + p_.heavy, c)),
        dtype(t),
        row_size(size_t(d) * dtype_size(t)),
        scores(size_t(hq_)),
        mem(size_t(hq_)),
        scratch(std::move(shared)) {
    for (auto& s : scores) s.assign(size_t(cap), 0.0);
    const size_t mem_bytes = size_t(hq) * size_t(mem_cap) * row_size;
    mem_k.resize(mem_bytes);
    mem_v.resize(mem_bytes);
  }

  size_t bytes() const {
    size_t b = mem_k.capacity() + mem_v.capacity();
    for (const auto& s : scores) b += s.capacity() * sizeof(double);
    for (const auto& m : mem) b += m.capacity() * sizeof(int64_t);
    return b;
  }

  TensorView mem_view(std::vector<char>& buf, int64_t m) {
    TensorView t;
    t.data = buf.data();
    t.dtype = dtype;
    t.heads = hq;
    t.seq = m;
    t.dim = dim;
    t.stride_head = mem_cap * dim;
    t.stride_seq = dim;
    t.stride_dim = 1;
    return t;
  }

  // M_c per q head from M_{c-1} and chunk [c0, c1) (rows r0.. of this batch's k, v), and its
  // raw K/V rows gathered from the previous memory rows or the chunk.
  void build_memory(const TensorView& k, const TensorView& v, int64_t c0, int64_t c1,
                    int64_t batch_pos) {
    const int64_t group = hq / hkv;
    for (int64_t h = 0; h < hq; ++h) {
      std::vector<int64_t> next =
          h2o_build_memory(mem[size_t(h)], c0, c1, scores[size_t(h)], p.local, p.heavy);
      size_t i_prev = 0;
      for (size_t i = 0; i < next.size(); ++i) {
        const int64_t j = next[i];
        const char *src_k, *src_v;
        if (j >= c0) {
          src_k = row_bytes(k, h / group, j - batch_pos);
          src_v = row_bytes(v, h / group, j - batch_pos);
        } else {  // a survivor of M_{c-1}: both lists are sorted
          while (mem[size_t(h)][i_prev] != j) ++i_prev;
          const size_t off = (size_t(h) * size_t(mem_cap) + i_prev) * row_size;
          src_k = mem_k.data() + off;
          src_v = mem_v.data() + off;
        }
        const size_t dst = (size_t(h) * size_t(mem_cap) + i) * row_size;
        std::memcpy(scratch->next_k.data() + dst, src_k, row_size);
        std::memcpy(scratch->next_v.data() + dst, src_v, row_size);
      }
      mem[size_t(h)] = std::move(next);
    }
    // The gathered rows become the layer's; its old rows, now garbage, the scratch's.
    std::swap(mem_k, scratch->next_k);
    std::swap(mem_v, scratch->next_v);
    have_mem = true;
  }
};

ChunkedH2OLayer::ChunkedH2OLayer(const ChunkedH2OParams& p, int64_t q_heads, int64_t kv_heads,
                                 int64_t dim, DType dtype, int64_t capacity, bool bf16_dot,
                                 std::shared_ptr<ChunkedH2OScratch> scratch) {
  p.validate();
  SPATTN_CHECK(q_heads >= 1 && kv_heads >= 1 && q_heads % kv_heads == 0, "chunked_h2o: q heads (",
               q_heads, ") must be a positive multiple of kv heads (", kv_heads, ")");
  SPATTN_CHECK(capacity >= 1, "chunked_h2o: capacity must be >= 1, got ", capacity);
  if (scratch)
    SPATTN_CHECK(scratch->fits(p, q_heads, kv_heads, dim, dtype, capacity, bf16_dot),
                 "chunked_h2o: a shared scratch must come from a layer of the same shape and "
                 "parameters");
  else
    scratch =
        std::make_shared<ChunkedH2OScratch>(p, q_heads, kv_heads, dim, dtype, capacity, bf16_dot);
  s_ = std::make_unique<State>(p, q_heads, kv_heads, dim, dtype, capacity, std::move(scratch));
}
ChunkedH2OLayer::ChunkedH2OLayer(ChunkedH2OLayer&&) noexcept = default;
ChunkedH2OLayer::~ChunkedH2OLayer() = default;

void ChunkedH2OLayer::reset() {
  State& s = *s_;
  s.pos = s.chunks = s.updates = 0;
  s.have_mem = false;
  for (auto& sc : s.scores) std::fill(sc.begin(), sc.end(), 0.0);
  for (auto& m : s.mem) m.clear();
}

size_t ChunkedH2OSnapshot::bytes() const {
  size_t b = mem_k.capacity() + mem_v.capacity();
  for (const auto& m : mem) b += m.capacity() * sizeof(int64_t);
  for (const auto& m : mem_scores) b += m.capacity() * sizeof(double);
  return b;
}

ChunkedH2OSnapshot ChunkedH2OLayer::snapshot() const {
  const State& s = *s_;
  ChunkedH2OSnapshot snap;
  snap.pos = s.pos;
  snap.chunks = s.chunks;
  snap.updates = s.updates;
  snap.have_mem = s.have_mem;
  snap.mem = s.mem;
  snap.mem_scores.resize(size_t(s.hq));
  const size_t m = s.mem.empty() ? 0 : s.mem[0].size();  // every head keeps |M| tokens
  snap.mem_k.resize(size_t(s.hq) * m * s.row_size);
  snap.mem_v.resize(snap.mem_k.size());
  for (int64_t h = 0; h < s.hq; ++h) {
    for (int64_t j : s.mem[size_t(h)])
      snap.mem_scores[size_t(h)].push_back(s.scores[size_t(h)][size_t(j)]);
    // The layer's rows of head h start at h * mem_cap; the snapshot's at h * m.
    const size_t from = size_t(h) * size_t(s.mem_cap) * s.row_size, to = size_t(h) * m * s.row_size;
    if (m == 0) continue;  // a fresh layer (or one that never ran): no rows, no null memcpy
    std::memcpy(snap.mem_k.data() + to, s.mem_k.data() + from, m * s.row_size);
    std::memcpy(snap.mem_v.data() + to, s.mem_v.data() + from, m * s.row_size);
  }
  return snap;
}

void ChunkedH2OLayer::restore(const ChunkedH2OSnapshot& snap) {
  State& s = *s_;
  const size_t m = snap.mem.empty() ? 0 : snap.mem[0].size();
  SPATTN_CHECK(int64_t(snap.mem.size()) == s.hq && int64_t(snap.mem_scores.size()) == s.hq &&
                   int64_t(m) <= s.mem_cap && snap.pos >= 0 && snap.pos <= s.cap &&
                   snap.mem_k.size() == size_t(s.hq) * m * s.row_size &&
                   snap.mem_v.size() == snap.mem_k.size(),
               "chunked_h2o: a snapshot from a layer of another shape");
  reset();
  s.pos = snap.pos;
  s.chunks = snap.chunks;
  s.updates = snap.updates;
  s.have_mem = snap.have_mem;
  for (int64_t h = 0; h < s.hq; ++h) {
    const auto& mem = snap.mem[size_t(h)];
    SPATTN_CHECK(mem.size() == m && snap.mem_scores[size_t(h)].size() == m,
                 "chunked_h2o: a snapshot with memory sets of different sizes");
    for (size_t i = 0; i < m; ++i) {
      SPATTN_CHECK(mem[i] >= 0 && mem[i] < snap.pos, "chunked_h2o: a snapshot's memory token ",
                   mem[i], " lies outside [0, ", snap.pos, ")");
      s.scores[size_t(h)][size_t(mem[i])] = snap.mem_scores[size_t(h)][i];
    }
    s.mem[size_t(h)] = mem;
    const size_t to = size_t(h) * size_t(s.mem_cap) * s.row_size, from = size_t(h) * m * s.row_size;
    if (m == 0) continue;
    std::memcpy(s.mem_k.data() + to, snap.mem_k.data() + from, m * s.row_size);
    std::memcpy(s.mem_v.data() + to, snap.mem_v.data() + from, m * s.row_size);
  }
}

int64_t ChunkedH2OLayer::position() const { return s_->pos; }
int64_t ChunkedH2OLayer::chunks_done() const { return s_->chunks; }
int64_t ChunkedH2OLayer::score_updates() const { return s_->updates; }
std::span<const int64_t> ChunkedH2OLayer::memory(int64_t h) const {
  SPATTN_CHECK(h >= 0 && h < s_->hq, "chunked_h2o: q head ", h, " out of range");
  return s_->mem[size_t(h)];
}
std::span<const double> ChunkedH2OLayer::scores(int64_t h) const {
  SPATTN_CHECK(h >= 0 && h < s_->hq, "chunked_h2o: q head ", h, " out of range");
  return std::span<const double>(s_->scores[size_t(h)]).first(size_t(s_->pos));
}
void ChunkedH2OLayer::set_trace(ChunkedH2OTrace* trace) { s_->trace = trace; }
void ChunkedH2OLayer::set_on_memory(std::function<void(int64_t)> f) {
  s_->on_memory = std::move(f);
}
std::shared_ptr<ChunkedH2OScratch> ChunkedH2OLayer::scratch() const { return s_->scratch; }
size_t ChunkedH2OLayer::state_bytes() const { return s_->bytes(); }
size_t ChunkedH2OLayer::scratch_bytes() const { return s_->scratch->bytes(); }

void ChunkedH2OLayer::prefill_batch(const TensorView& q, const TensorView& k, const TensorView& v,
                                    const TensorView& out, const AttnOptions& opt, bool last,
                                    float* lse, Stats* stats, const PackedKV* packed) {
  State& s = *s_;
  const int64_t n = q.seq, pos0 = s.pos;
  SPATTN_CHECK(opt.causal, "chunked_h2o: defined for causal attention only");
  SPATTN_CHECK(n >= 1 && n <= s.p.batch, "chunked_h2o: a logical batch holds 1..", s.p.batch,
               " rows, got ", n);
  SPATTN_CHECK(pos0 + n <= s.cap, "chunked_h2o: prompt of ", pos0 + n,
               " tokens exceeds the capacity ", s.cap);
  SPATTN_CHECK(q.heads == s.hq && k.heads == s.hkv && v.heads == s.hkv && out.heads == s.hq,
               "chunked_h2o: heads must be q/out ", s.hq, " and k/v ", s.hkv, " (got q ",
               q.shape_str(), ", k ", k.shape_str(), ", v ", v.shape_str(), ")");
  SPATTN_CHECK(k.seq == n && v.seq == n && out.seq == n,
               "chunked_h2o: q, k, v and out must hold the same rows (q ", q.shape_str(), ", k ",
               k.shape_str(), ", v ", v.shape_str(), ", out ", out.shape_str(), ")");
  SPATTN_CHECK(q.dim == s.dim && k.dim == s.dim && v.dim == s.dim && out.dim == s.dim,
               "chunked_h2o: head dim must be ", s.dim);
  SPATTN_CHECK(k.dtype == s.dtype && v.dtype == s.dtype && k.stride_dim == 1 && v.stride_dim == 1,
               "chunked_h2o: k and v must be ", dtype_name(s.dtype), " with contiguous rows");

  if (packed)
    SPATTN_CHECK(packed->size() == n && packed->kv_heads() == s.hkv && packed->dim() == s.dim &&
                     packed->dtype() == s.dtype && packed->max_position() == n - 1,
                 "chunked_h2o: packed must hold exactly the batch's ", n, " rows (", s.hkv,
                 " kv heads, dim ", s.dim, ", ", dtype_name(s.dtype), ") at positions 0 .. ", n - 1,
                 "; it holds ", packed->size(), " keys");
  if (!s.p.carry) {
    s.have_mem = false;
    for (auto& m : s.mem) m.clear();
  }
  ChunkedH2OScratch& x = *s.scratch;
  Stats st;
  AttnOptions intra_opt = opt;
  intra_opt.q_start = -1;  // bottom-right against the chunk's own keys
  AttnOptions inter_opt = opt;
  inter_opt.causal = false;  // every memory token precedes the chunk (no mask)
  inter_opt.q_start = -1;
  inter_opt.check_finite = false;  // rows already checked by the intra pass

  // Phase 1: every chunk's diagonal block in one call (the block-diagonal causal mask), written
  // straight into out with its LSE (the cached intra state), scores initialised from the same
  // pass's column sums: score(j) = sum_{i in C_c, i >= j} A_intra(i, j).
  // An f32 out holds the intra O until the merge; other dtypes would round it first.
  if (out.dtype != DType::f32 && x.o_intra.numel() == 0)
    x.o_intra = Tensor(DType::f32, s.hq, std::min(s.p.batch, s.cap), s.dim);
  const TensorView intra_all = out.dtype == DType::f32 ? out : x.o_intra.view().rows(0, n);
  if (!packed) {
    x.intra_kv.clear();
    x.intra_kv.append(k, v, {}, opt.threads);
  }
  attention_with_column_sums(q, packed ? *packed : x.intra_kv, intra_all, x.lse_intra.data(), x.ws,
                             intra_opt, &st, s.p.chunk);
  for (int64_t h = 0; h < s.hq; ++h)
    std::copy_n(x.ws.column.data() + h * n, n, s.scores[size_t(h)].data() + pos0);

  // Phase 2: chunk by chunk.
  for (int64_t b0 = 0; b0 < n; b0 += s.p.chunk) {
    const int64_t len = std::min(s.p.chunk, n - b0), c0 = pos0 + b0, c1 = c0 + len;
    const TensorView qc = q.rows(b0, len), oc = out.rows(b0, len);
    const TensorView intra = intra_all.rows(b0, len);
    if (s.have_mem) {
      const int64_t m = int64_t(s.mem[0].size());
      x.mem_kv.clear();
      x.mem_kv.append(s.mem_view(s.mem_k, m), s.mem_view(s.mem_v, m), {}, opt.threads);
      const TensorView inter = x.o_inter.view().rows(0, len);
      // Steps 1 and 2 in one pass: inter-attention of C_c against M_{c-1}, and
      // score(j) += sum_{i in C_c} A_inter(i, j) for j in M_{c-1} from its column sums.
      attention_with_column_sums(qc, x.mem_kv, inter, x.lse_inter.data(), x.ws, inter_opt, &st);
      for (int64_t h = 0; h < s.hq; ++h) {
        const double* col = x.ws.column.data() + h * m;
        double* sc = s.scores[size_t(h)].data();
        const int64_t* mem = s.mem[size_t(h)].data();
        for (int64_t j = 0; j < m; ++j) sc[mem[j]] += col[j];
      }
      ++s.updates;
      // Step 3: exact fusion with the cached intra state (in place when out holds it).
      for (int64_t h = 0; h < s.hq; ++h)
        std::copy_n(x.lse_intra.data() + h * n + b0, len, x.lse_out.data() + h * len);
      merge_attention(intra, x.lse_out.data(), inter, x.lse_inter.data(), oc, x.lse_out.data());
      if (lse)
        for (int64_t h = 0; h < s.hq; ++h)
          std::copy_n(x.lse_out.data() + h * len, len, lse + h * n + b0);
    } else {  // no history: the intra result is the output
      if (intra.data != oc.data) copy_into(intra, oc);
      if (lse)
        for (int64_t h = 0; h < s.hq; ++h)
          std::copy_n(x.lse_intra.data() + h * n + b0, len, lse + h * n + b0);
    }
    if (s.trace) {  // before Step 4 changes have_mem
      s.trace->chunk_begin.push_back(c0);
      s.trace->inter.push_back(s.have_mem);
      s.trace->memory.emplace_back(size_t(s.hq));
    }
    // Step 4: M_c, unless this is the prompt's last chunk.
    const bool prompt_ends = last && b0 + len == n;
    if (!prompt_ends) {
      s.build_memory(k, v, c0, c1, pos0);
      if (s.trace) s.trace->memory.back() = s.mem;
    }
    ++s.chunks;
    s.pos = c1;
    // The state now is what a batch ending at c1 leaves (chunks never look ahead: Phase 1 is
    // block-diagonal and the later chunks' scores are outside M_c), so a prefill can go on
    // from a snapshot taken here.
    if (!prompt_ends && s.on_memory) s.on_memory(c1);
  }

  if (stats) {
    st.causal_entries = 0;
    for (int64_t i = 0; i < n; ++i) st.causal_entries += s.hq * (pos0 + i + 1);
    stats->add(st);
  }
}

void attention_chunked_h2o(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const ChunkedH2OParams& p, const AttnOptions& opt,
                           float* lse, Stats* stats, ChunkedH2OTrace* trace) {
  const int64_t n = q.seq;
  SPATTN_CHECK(n >= 1 && k.seq == n,
               "chunked_h2o: a prompt's q and k must hold the same rows "
               "(self-attention), got q ",
               q.shape_str(), ", k ", k.shape_str());
  ChunkedH2OLayer layer(p, q.heads, k.heads, q.dim, k.dtype, n, opt.bf16_dot);
  layer.set_trace(trace);
  std::vector<float> lse_b;
  for (int64_t b0 = 0; b0 < n; b0 += p.batch) {
    const int64_t len = std::min(p.batch, n - b0);
    float* lb = nullptr;
    if (lse) {
      lse_b.resize(size_t(q.heads * len));
      lb = lse_b.data();
    }
    layer.prefill_batch(q.rows(b0, len), k.rows(b0, len), v.rows(b0, len), out.rows(b0, len), opt,
                        b0 + len == n, lb, stats);
    if (lse)
      for (int64_t h = 0; h < q.heads; ++h) std::copy_n(lb + h * len, len, lse + h * n + b0);
  }
}

namespace {

// Row i of chunk c sees M_{c-1} and the chunk's keys up to itself.
class H2OCoverage final : public Coverage {
 public:
  explicit H2OCoverage(ChunkedH2OTrace t) : t_(std::move(t)) {}
  void row_ranges(int64_t head, int64_t row, std::vector<KeyRange>& out) const override {
    const auto it = std::upper_bound(t_.chunk_begin.begin(), t_.chunk_begin.end(), row);
    const size_t c = size_t(it - t_.chunk_begin.begin()) - 1;
    if (t_.inter[c])
      for (int64_t j : t_.memory[c - 1][size_t(head)]) {
        if (!out.empty() && out.back().end == j)
          ++out.back().end;
        else
          out.push_back({j, j + 1});
      }
    const int64_t c0 = t_.chunk_begin[c];
    if (!out.empty() && out.back().end == c0)
      out.back().end = row + 1;
    else
      out.push_back({c0, row + 1});
  }

 private:
  ChunkedH2OTrace t_;
};

class ChunkedH2O final : public Method {
 public:
  explicit ChunkedH2O(const ChunkedH2OParams& p) : p_(p) {}
  std::string name() const override { return "chunked_h2o"; }
  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    MethodReport r;
    SPATTN_CHECK(opt.causal, "chunked_h2o: defined for causal attention only");
    if (q.seq <= kMaxDecodeQueries && q.seq < k.seq) {  // decode: always full attention
      attention_decode(q, k, v, out, opt, DecodeOptions{}, lse, &r.stats);
      r.path = KernelPath::decode;
      r.coverage = std::make_shared<FullCoverage>(q.seq, k.seq, true);
      return r;
    }
    ChunkedH2OTrace trace;
    attention_chunked_h2o(q, k, v, out, p_, opt, lse, &r.stats, &trace);
    r.extras["chunks"] = double(trace.chunk_begin.size());
    r.coverage = std::make_shared<H2OCoverage>(std::move(trace));
    r.extras["memory"] = double(p_.local + p_.heavy);
    return r;
  }

 private:
  ChunkedH2OParams p_;
};

}  // namespace

std::unique_ptr<Method> make_chunked_h2o(const MethodSpec& spec) {
  ParamReader r(spec);
  ChunkedH2OParams p;
  p.chunk = r.get_int("chunk", 1024, 1, int64_t(1) << 30);
  p.batch = r.get_int("batch", 2048, 1, int64_t(1) << 30);
  p.local = r.get_int("local", 256, 0, int64_t(1) << 30);
  p.heavy = r.get_int("heavy", 256, 0, int64_t(1) << 30);
  p.carry = r.get_int("carry", 1, 0, 1) != 0;
  r.finish();
  p.validate();
  return std::make_unique<ChunkedH2O>(p);
}

namespace {
struct H2OState final : BackendState {
  ChunkedH2OSnapshot snap;
  size_t bytes() const override { return snap.bytes(); }
};

// In a model runner: one ChunkedH2OLayer per layer, kept across the -b logical batches of a
// prompt; each batch passes through every layer at once (Phase 1 over the batch's -ub chunks,
// then Phase 2 chunk by chunk). Its sizes are the session's -b, -ub, --h2o-local and
// --h2o-heavy. Across ranks the memory set passes along the chain of ranks in position order
// (dist/h2o_chain.cpp); a prompt of one chunk runs dense, as in one process.
class H2OPrefill final : public LayerBackend {
 public:
  H2OPrefill(const ChunkedH2OParams& p, const BackendContext& ctx)
      : p_(p),
        layer_(p, ctx.q_heads, ctx.kv_heads, ctx.dim, DType::f32, ctx.n_ctx, true,
               shared_scratch(ctx)),
        k_type_(ctx.k_type),
        v_type_(ctx.v_type) {
    if (ctx.shared && !*ctx.shared) *ctx.shared = layer_.scratch();  // one for every layer
  }
  std::string name() const override { return "chunked_h2o"; }
  BackendCaps capabilities() const override {
    BackendCaps c;
    c.stateful = true;
    c.ring_grid = p_.chunk;
    return c;
  }
  TensorView prefill(const LayerCall& c) override {
    AttnOptions a = c.opt;
    a.q_start = -1;
    // The prompt's first batch is all the cache holds: Phase 1 runs over it as packed.
    layer_.prefill_batch(c.q, c.k, c.v, c.out, a, c.last, c.lse, c.stats,
                         c.packed->size() == c.q.seq ? c.packed : nullptr);
    return c.out;
  }

  RingPlan ring_plan(int64_t n, int ranks, bool gather_asked) const override {
    if (n > p_.chunk) return RingPlan{p_.chunk, false};
    return dense_ring_plan(n, ranks, gather_asked);
  }
  void ring_check(int64_t n, int ranks) const override {
    const dist::Zigzag on_grid{n, ranks, p_.chunk};
    if (n > p_.chunk)
      SPATTN_CHECK(!on_grid.empty_rank(), "--cp ", ranks, " with chunked_h2o: the prompt's ", n,
                   " tokens make fewer than the ", ranks, " chunks of -ub ", p_.chunk,
                   " the split needs (one per rank)");
  }
  void ring_prefill(const RingCall& c, const RingPlan& plan) override {
    if (c.zigzag.n <= p_.chunk) return dense_ring_prefill(c, plan);
    AttnOptions a = c.opt;
    a.q_start = -1;
    const dist::H2OChainLayer hl{
        c.q,     c.k,     c.v, c.out, c.q_heads, c.kv_heads, c.dim, p_.chunk, p_.local + p_.heavy,
        k_type_, v_type_, a};
    dist::h2o_chain_prefill(c.group, c.zigzag, hl, layer_, c.wire, c.stats);
  }

  // The -b batches on the grid a prefill from position 0 lays (multiples of -b): a prefill that
  // goes on from a kept chunk boundary inside a batch first finishes that batch.
  std::vector<std::pair<int64_t, int64_t>> batches(int64_t pos0, int64_t n) const override {
    std::vector<std::pair<int64_t, int64_t>> b;
    for (int64_t b0 = 0; b0 < n;) {
      const int64_t b1 = std::min(n, b0 + p_.batch - (pos0 + b0) % p_.batch);
      b.emplace_back(b0, b1);
      b0 = b1;
    }
    return b;
  }
  // Every chunk end but the prompt's own, where going on computes what the whole batch did: a
  // batch's end, or a chunk end a multiple of kKeyBlock keys into its batch (Phase 1 packs the
  // batch's keys in tiles of kKeyBlock from its start, so only there do the chunks after it
  // fall on the same tiles; with the default -ub 512 every chunk end).
  std::vector<int64_t> boundaries(int64_t pos0, const std::vector<std::pair<int64_t, int64_t>>& b,
                                  int64_t keep) const override {
    std::vector<int64_t> ends;
    if (keep <= 0) return ends;
    for (auto [b0, b1] : b)
      for (int64_t c1 = std::min(b1, b0 + p_.chunk);; c1 = std::min(b1, c1 + p_.chunk)) {
        if (c1 == b.back().second) break;
        const int64_t batch_start = (pos0 + b0) / p_.batch * p_.batch;
        if (c1 == b1 || (pos0 + c1 - batch_start) % kKeyBlock == 0) ends.push_back(pos0 + c1);
        if (c1 == b1) break;
      }
    if (int64_t(ends.size()) > keep) ends.erase(ends.begin(), ends.end() - keep);
    return ends;
  }
  // A prompt of one chunk runs dense.
  bool runs_from(int64_t pos0, int64_t n) const override { return pos0 + n > p_.chunk; }
  std::shared_ptr<const BackendState> snapshot() const override {
    auto s = std::make_shared<H2OState>();
    s->snap = layer_.snapshot();
    return s;
  }
  void restore(const BackendState& s) override {
    layer_.restore(dynamic_cast<const H2OState&>(s).snap);
  }
  void reset() override { layer_.reset(); }
  void set_on_boundary(std::function<void(int64_t)> f) override {
    layer_.set_on_memory(std::move(f));
  }
  size_t state_bytes() const override { return layer_.state_bytes(); }
  size_t scratch_bytes() const override { return layer_.scratch_bytes(); }
  void set_trace(ChunkedH2OTrace* trace) override { layer_.set_trace(trace); }
  std::shared_ptr<LayerBackend> fork(const std::shared_ptr<LayerBackend>&,
                                     const BackendContext& ctx) const override {
    return std::make_shared<H2OPrefill>(p_, ctx);
  }

 private:
  static std::shared_ptr<ChunkedH2OScratch> shared_scratch(const BackendContext& ctx) {
    return ctx.shared ? std::static_pointer_cast<ChunkedH2OScratch>(*ctx.shared) : nullptr;
  }
  ChunkedH2OParams p_;
  ChunkedH2OLayer layer_;
  KVType k_type_, v_type_;
};
}  // namespace

std::unique_ptr<LayerBackend> make_chunked_h2o_prefill(const MethodSpec& spec,
                                                       const BackendContext& ctx) {
  SPATTN_CHECK(spec.params.empty(),
               "--attn chunked_h2o takes its sizes from -b, -ub, "
               "--h2o-local and --h2o-heavy, not from the spec ('",
               spec.text, "')");
  ChunkedH2OParams p;
  p.chunk = ctx.n_ubatch;
  p.batch = ctx.n_batch;
  p.local = ctx.h2o_local;
  p.heavy = ctx.h2o_heavy;
  p.validate();
  // chunked_h2o's chunks restart at each logical batch: on the -ub grid only when -b is a
  // multiple of -ub, the grid the ranks' split is laid on.
  SPATTN_CHECK(!ctx.cp || ctx.n_batch % ctx.n_ubatch == 0, "--cp with chunked_h2o needs -b (",
               ctx.n_batch, ") a multiple of -ub (", ctx.n_ubatch, ")");
  return std::make_unique<H2OPrefill>(p, ctx);
}

}  // namespace spattn

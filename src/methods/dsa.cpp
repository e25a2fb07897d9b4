// DeepSeek's sparse attention (DSA; "DeepSeek-V3.2-Exp: Boosting Long-Context Efficiency with
// DeepSeek Sparse Attention", the report introducing it): the lightning indexer scores every cached token for
// each query, I[t][s] = sum_h w[t][h] ReLU(q[t][h] . k[s]) (its Eq. 1), and the attention reads
// only each query's top-k tokens. The runner's `dsa` backend: over the layer's indexer keys
// (the session keeps them beside its cache), the scores on the flash kernel's score micro-kernels
// (kernels/long_row_scores.hpp), the top-k as ggml's CPU top_k takes it (top_k_as_ggml: the
// same tokens among equal scores), and the attention over the chosen tokens alone
// (attention_token_sparse), in prefill and decode.
// llama.cpp (src/models/deepseek32.cpp, src/llama-graph.cpp's build_attn with top_k) computes
// the same selection and applies it as a mask over dense attention.
#include "methods/dsa.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <iterator>
#include <limits>
#include <numeric>
#include <span>
#include <string>

#include "core/threading.hpp"
#include "dist/ring_attention.hpp"
#include "methods/layer_backend.hpp"
#include "methods/registry.hpp"
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"

namespace spattn {

void hadamard_rotate(float* x, int64_t n) {
  for (int64_t s = 1; s < n; s *= 2)
    for (int64_t i = 0; i < n; i += 2 * s)
      for (int64_t j = i; j < i + s; ++j) {
        const float a = x[j], b = x[j + s];
        x[j] = a + b, x[j + s] = a - b;
      }
  const float f = 1.0f / std::sqrt(float(n));
  for (int64_t i = 0; i < n; ++i) x[i] *= f;
}

void IndexerKeys::truncate(int64_t n) {
  SPATTN_CHECK(n >= 0 && n <= size(), "internal: indexer keys truncated to ", n, " of ", size());
  rows_.resize(size_t(n * dim_));
  const size_t whole = size_t(n / kChunk);
  // A chunk past the cut, or the one it cuts, is packed again when read.
  if (chunks_.size() > whole) chunks_.resize(whole);
}

void IndexerKeys::append(const float* k, int64_t n) { rows_.insert(rows_.end(), k, k + n * dim_); }

void IndexerKeys::pack(int64_t n) {
  SPATTN_CHECK(n <= size(), "internal: indexer keys packed to ", n, " of ", size());
  const int64_t count = (n + kChunk - 1) / kChunk;
  if (int64_t(chunks_.size()) < count) chunks_.resize(size_t(count));
  for (int64_t c = 0; c < count; ++c) {
    const int64_t rows = std::min(kChunk, size() - c * kChunk);
    kernels::LongRowKeys& chunk = chunks_[size_t(c)];
    if (chunk.n == rows) continue;
    // A chunk is packed with room for the keys the rows' room holds in it, and those that
    // arrive later (a decode step's one) go into it in place: repacking the last chunk whole
    // at every step cost a fresh 2 MB of tiles a layer and a pack of up to 4,096 keys.
    if (chunk.data && chunk.n < rows && rows <= chunk.room()) {
      kernels::append_long_row_keys(chunk, row(c * kChunk), rows);
    } else {
      const int64_t room = std::clamp(int64_t(rows_.capacity()) / dim_ - c * kChunk, rows, kChunk);
      chunk = kernels::pack_long_row_keys(row(c * kChunk), rows, dim_, false, room);
    }
  }
}

size_t IndexerKeys::bytes() const {
  size_t b = rows_.capacity() * sizeof(float);
  for (const kernels::LongRowKeys& c : chunks_) b += size_t(c.room() * c.w) * sizeof(float);
  return b;
}

void indexer_scores(const float* q, const float* w, int64_t heads, const IndexerKeys& keys,
                    int64_t begin, int64_t end, float* scores, float* scratch) {
  constexpr int64_t C = IndexerKeys::kChunk, B = IndexerKeys::kBlock;
  static_assert(C % B == 0, "a block lies in one chunk");
  SPATTN_CHECK(begin >= 0 && begin % B == 0 && end <= keys.size(),
               "internal: indexer scores of keys ", begin, " to ", end, " of ", keys.size());
  for (int64_t j0 = begin; j0 < end; j0 += B) {
    const int64_t c = j0 / C, cols = std::min(B, end - j0);
    kernels::long_row_scores(q, heads, keys.chunk(c), cols, 1.0f, scratch, B, j0 - c * C);
    // As ggml's fused lightning indexer (ggml-cpu's ggml_compute_forward_lightning_indexer,
    // what llama.cpp runs): each key's float sum over the heads in order of ReLU(q . k) x w.
    // Heads outside, keys inside: the same sums, over contiguous rows of the block's products.
    float* s = scores + j0;
    std::fill(s, s + cols, 0.0f);
    for (int64_t h = 0; h < heads; ++h) {
      const float* x = scratch + h * B;
      const float wh = w[h];
      for (int64_t j = 0; j < cols; ++j) s[j] += std::max(x[j], 0.0f) * wh;
    }
  }
}

namespace {

// The linear-time top-k, in two steps so that a row's parts can take the first in parallel.
// Candidates: the indices of [begin, end) that may be among the k greatest of any row holding
// them, appended to cand: the part's own k greatest with any tied at its cut (all of the part's
// where it holds at most k). An index left out has k scores of its part above it. False where
// a score is NaN (which orders nothing).
bool top_k_candidates(const float* scores, int64_t begin, int64_t end, int64_t k,
                      std::vector<float>& values, std::vector<int64_t>& cand) {
  values.assign(scores + begin, scores + end);
  if (std::any_of(values.begin(), values.end(), [](float x) { return std::isnan(x); }))
    return false;
  float cut = -std::numeric_limits<float>::infinity();
  if (end - begin > k) {
    std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<>());
    cut = values[size_t(k - 1)];
  }
  for (int64_t j = begin; j < end; ++j)
    if (scores[j] >= cut) cand.push_back(j);
  return true;
}

// The k greatest scores of a row into out in index order, from candidates (ascending) that hold
// every index that may be among them, when they are one set whoever picks them: no score left
// out equals the k-th greatest. Else false.
bool top_k_of_candidates(const float* scores, const std::vector<int64_t>& cand, int64_t k,
                         std::vector<float>& values, std::vector<int64_t>& out) {
  if (int64_t(cand.size()) < k) return false;
  values.resize(cand.size());
  for (size_t a = 0; a < cand.size(); ++a) values[a] = scores[cand[a]];
  std::nth_element(values.begin(), values.begin() + (k - 1), values.end(), std::greater<>());
  const float cut = values[size_t(k - 1)];
  const auto kept = [&](int64_t j) { return scores[j] >= cut; };
  if (std::count_if(cand.begin(), cand.end(), kept) != k) return false;
  out.clear();
  std::copy_if(cand.begin(), cand.end(), std::back_inserter(out), kept);
  return true;
}

// ggml's partial sort itself (top_k_as_ggml says why it is kept).
void top_k_by_heap(const float* scores, int64_t n, int64_t k, std::vector<int32_t>& order,
                   std::vector<int64_t>& out) {
  order.resize(size_t(n));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + k, order.end(),
                    [scores](int32_t a, int32_t b) { return scores[a] > scores[b]; });
  out.assign(order.begin(), order.begin() + k);
}

}  // namespace

void top_k_as_ggml(const float* scores, int64_t n, int64_t k, TopKScratch& scratch,
                   std::vector<int64_t>& out) {
  SPATTN_CHECK(k > 0 && k <= n, "internal: the top ", k, " of ", n, " scores");
  // ggml-cpu's top_k (ops.cpp, ggml_compute_forward_top_k_f32) word for word: the indices in
  // order, std::partial_sort of the first k by "greater score", and those k kept. Its set
  // among equal scores is that of the standard library's partial_sort, not the earliest
  // tokens': libstdc++'s is a heap select (make_heap over the first k, then each later index
  // replaces the heap's root, a least one, only when its score is strictly greater), so which
  // of the tokens tied at the cut stay depends on the heap's order (worked through in
  // Dsa.TopKKeepsTheTiedTokensGgmlKeeps). The same call here keeps the same set as
  // llama.cpp built with the same library. llama.cpp's row also holds the masked positions
  // past the query's (-inf); they never enter the heap, so the n causal scores alone give the
  // same set.
  // The heap's order decides only among scores equal to the k-th greatest: when none of those
  // is left out, any selection keeps the same set, found in linear time (the heap select took
  // 0.6 ms of a 2.6 ms decode selection over 32K keys, on one thread while the other waited).
  std::vector<int64_t>& cand = scratch.candidates;
  cand.clear();
  if (top_k_candidates(scores, 0, n, k, scratch.values, cand) &&
      top_k_of_candidates(scores, cand, k, scratch.values, out))
    return;
  top_k_by_heap(scores, n, k, scratch.order, out);
}

TokenSelection dsa_select(const IndexerRows& rows, int64_t n, int64_t pos0, IndexerKeys& keys,
                          int64_t top_k, int threads) {
  SPATTN_CHECK(top_k > 0, "dsa: the indexer's top-k must be positive, got ", top_k);
  SPATTN_CHECK(keys.size() >= pos0 + n, "internal: the indexer holds ", keys.size(),
               " keys, rows end at ", pos0 + n);
  std::vector<std::vector<int64_t>> chosen(static_cast<size_t>(n));
  const int64_t first_sparse = std::max<int64_t>(0, top_k - pos0);  // row pos0 + i >= top_k
  if (first_sparse < n) keys.pack(pos0 + n);
  const int64_t H = rows.heads, D = rows.dim, B = IndexerKeys::kBlock;
  const int workers = std::max(1, threads);
  const int64_t sparse_rows = std::max<int64_t>(0, n - first_sparse);
  std::vector<std::vector<float>> scratch(static_cast<size_t>(workers));
  std::vector<TopKScratch> order(static_cast<size_t>(workers));
  if (sparse_rows >= workers) {
    // A row to a worker (prefill).
    parallel_for(sparse_rows, workers, [&](int64_t r, int tid) {
      const int64_t i = first_sparse + r, len = pos0 + i + 1;
      std::vector<float>& s = scratch[size_t(tid)];
      s.resize(size_t(H * B + len));
      float* scores = s.data() + H * B;
      indexer_scores(rows.q + i * H * D, rows.w + i * H, H, keys, 0, len, scores, s.data());
      top_k_as_ggml(scores, len, top_k, order[size_t(tid)], chosen[size_t(i)]);
    });
  } else {
    // Fewer rows than workers (decode): a row's keys split among the workers in whole blocks,
    // each part's top-k candidates found by its worker, the row's top-k among them after. The
    // scores are the same bits however they are split (indexer_scores); a NaN or a tie at the
    // row's cut leaves the row to ggml's partial sort (top_k_by_heap).
    std::vector<float> scores;
    std::vector<std::vector<int64_t>> cand(static_cast<size_t>(workers));
    std::vector<uint8_t> ok(static_cast<size_t>(workers));
    for (int64_t i = first_sparse; i < n; ++i) {
      const int64_t len = pos0 + i + 1, per = (len + B * workers - 1) / (B * workers) * B;
      scores.resize(size_t(len));
      parallel_for(workers, workers, [&](int64_t part, int tid) {
        const int64_t begin = part * per, end = std::min(len, begin + per);
        cand[size_t(part)].clear();
        ok[size_t(part)] = 1;
        if (begin >= end) return;
        std::vector<float>& s = scratch[size_t(tid)];
        s.resize(size_t(H * B));
        indexer_scores(rows.q + i * H * D, rows.w + i * H, H, keys, begin, end, scores.data(),
                       s.data());
        ok[size_t(part)] = top_k_candidates(scores.data(), begin, end, top_k,
                                            order[size_t(tid)].values, cand[size_t(part)]);
      });
      std::vector<int64_t>& all = order[0].candidates;
      all.clear();
      for (const std::vector<int64_t>& c : cand) all.insert(all.end(), c.begin(), c.end());
      const bool found =
          std::all_of(ok.begin(), ok.end(), [](uint8_t o) { return o != 0; }) &&
          top_k_of_candidates(scores.data(), all, top_k, order[0].values, chosen[size_t(i)]);
      if (!found) top_k_by_heap(scores.data(), len, top_k, order[0].order, chosen[size_t(i)]);
    }
  }
  TokenSelection result;
  for (int64_t i = 0; i < n; ++i) {
    if (pos0 + i + 1 <= top_k)
      result.add_all();
    else
      result.add(std::move(chosen[size_t(i)]));
  }
  return result;
}

namespace {

class Dsa final : public LayerBackend {
 public:
  std::string name() const override { return "dsa"; }
  BackendCaps capabilities() const override {
    BackendCaps c;
    c.sparse_decode = true;
    // A row's tokens depend on its own indexer query and the keys before it alone.
    c.rows_independent = true;
    c.ring_gather = true;  // across ranks it always gathers
    return c;
  }
  TensorView prefill(const LayerCall& c) override {
    const int64_t n = c.q.seq, r = n - c.read_from;
    TensorView done = c.out;
    if (r == 0) {
      done.seq = 0;
      return done;
    }
    const TokenSelection sel = select(c, c.read_from);
    done = c.out.rows(c.read_from, r);
    AttnOptions a = c.opt;
    a.q_start = c.pos0 + c.read_from;
    attention_token_sparse(c.q.rows(c.read_from, r), *c.packed, done, sel, a, c.lse, c.stats);
    return done;
  }
  void decode(const LayerCall& c, DecodeReads& reads) override {
    const TokenSelection sel = select(c, 0);
    AttnOptions a = c.opt;
    a.q_start = c.pos0;
    attention_token_sparse(c.q, *c.packed, c.out, sel, a, c.lse, c.stats);
    const PackedKV& kv = *c.packed;
    for (int64_t i = 0; i < sel.rows(); ++i)
      reads.keys_read += kv.kv_heads() * (sel.all[size_t(i)] ? c.pos0 + i + 1 : sel.count(i));
    reads.keys_total += kv.kv_heads() * kv.size();
  }

  // Across ranks, prefill: each of the rank's two runs selects over every position's indexer
  // keys (the session gathered them) as one process's rows do, then attends over its tokens of
  // the layer's whole K/V, gathered: one process's selection and bits. A ring passing only the
  // chosen keys would move less; the gather is the simple exact form.
  RingPlan ring_plan(int64_t, int, bool) const override { return RingPlan{1, true}; }
  void ring_prefill(const RingCall& c, const RingPlan&) override {
    check_call(c.dsa);
    if (c.dsa->shared) return ring_attention(c, nullptr, nullptr, true, c.dsa->carry->rows);
    const int r = c.group.rank();
    TokenSelection sel[2];
    int64_t row0 = 0;
    int i = 0;
    for (const dist::Zigzag::Run run : {c.zigzag.first(r), c.zigzag.second(r)}) {
      IndexerRows rows = c.dsa->rows;
      rows.q += row0 * rows.heads * rows.dim;
      rows.w += row0 * rows.heads;
      sel[i++] = dsa_select(rows, run.len, run.pos, *c.dsa->keys, c.dsa->top_k, c.opt.threads);
      row0 += run.len;
    }
    ring_attention(c, nullptr, nullptr, /*gather=*/true, sel);
    if (c.dsa->carry) std::swap(c.dsa->carry->rows, sel);
  }
  // Across ranks, decode: every rank selects the row's tokens over every position's keys (the
  // same top-k as one process), attends over those it holds, and the partials merge.
  void ring_decode(const LayerCall& c, dist::Group& g, int32_t token, std::vector<float>& scratch,
                   DecodeReads& reads) override {
    const TokenSelection sel = select(c, 0);
    // The rank's cache holds its tokens in position order (its two runs, then the decoded
    // tokens it owns, none past pos0): a walk over both sorted lists gives the slots of the
    // chosen positions, or every slot while the row reads every key.
    const PackedKV& kv = *c.packed;
    const std::span<const int64_t> pos = kv.positions();
    std::vector<int64_t> mine;
    for (int64_t s = 0, j = 0, m = sel.count(0); s < int64_t(pos.size()); ++s) {
      const int64_t p = pos[size_t(s)];
      while (j < m && sel.row(0)[j] < p) ++j;
      if (sel.all[0] || (j < m && sel.row(0)[j] == p)) mine.push_back(s);
    }
    TokenSelection local;
    const int64_t read = int64_t(mine.size());
    local.add(std::move(mine));
    AttnOptions a = c.opt;
    a.q_start = c.pos0;
    dist::decode_merge(g, c.q, kv, c.out, a, token, c.stats, scratch, &local);
    reads.keys_read += kv.kv_heads() * read;
    reads.keys_total += kv.kv_heads() * kv.size();
  }

 private:
  static void check_call(const DsaCall* dsa) {
    SPATTN_CHECK(dsa && (dsa->keys || dsa->shared),
                 "--attn dsa: the model has no lightning indexer (DeepSeek V3.2's deepseek32 "
                 "files have one); use --attn dense");
    SPATTN_CHECK(!dsa->shared || dsa->carry,
                 "internal: a layer sharing an indexer's selection without one to share");
  }
  // The tokens of the call's rows from `from` on: the layer's own indexer's, or (a layer
  // sharing one, GLM-5.2) those the last full layer chose for the same rows.
  static TokenSelection select(const LayerCall& c, int64_t from) {
    check_call(c.dsa);
    if (c.dsa->shared) {
      const TokenSelection& all = c.dsa->carry->rows[0];
      SPATTN_CHECK(all.rows() == c.q.seq, "internal: a shared selection of ", all.rows(),
                   " rows for ", c.q.seq);
      TokenSelection sel;
      for (int64_t i = from; i < all.rows(); ++i) {
        if (all.all[size_t(i)])
          sel.add_all();
        else
          sel.add(std::vector<int64_t>(all.row(i), all.row(i) + all.count(i)));
      }
      return sel;
    }
    IndexerRows rows = c.dsa->rows;
    rows.q += from * rows.heads * rows.dim;
    rows.w += from * rows.heads;
    TokenSelection sel =
        dsa_select(rows, c.q.seq - from, c.pos0 + from, *c.dsa->keys, c.dsa->top_k, c.opt.threads);
    // Only the last layer reads from past 0, and no layer comes after it to share its rows.
    if (c.dsa->carry && from == 0) c.dsa->carry->rows[0] = sel;
    return sel;
  }
};

void check_indexer(const BackendContext& ctx) {
  // validate() builds backends before a model is read (indexer_top_k < 0: not known yet).
  SPATTN_CHECK(ctx.indexer_top_k != 0,
               "--attn dsa: the model has no lightning indexer (DeepSeek V3.2's deepseek32 "
               "files have one); use --attn dense");
}

}  // namespace

std::unique_ptr<LayerBackend> make_dsa_backend(const MethodSpec& spec, const BackendContext& ctx) {
  SPATTN_CHECK(spec.params.empty(), "dsa takes no parameters (the model's own top-k), got '",
               spec.text, "'");
  check_indexer(ctx);
  return std::make_unique<Dsa>();
}

}  // namespace spattn

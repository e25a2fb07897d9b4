// momo: "Measure Once, Mask Once: Delta Refined Block Sparse Attention" (MOMO), Algorithm 1.
//
//   momo:gamma=16,chi=128,beta=64,k=128,k_exact=8,topk=hybrid,k_trim=K,sink=1,local=L,delta=on
//
//   gamma   query stride of the query-sparse pass (every gamma-th row; Section 3, Eq. 1-2)
//   chi     query rows per block of the block-sparse pass (a multiple of gamma)
//   beta    keys per key block (a multiple of 64, the kernel's key tile)
//   k       key blocks each sampled row selects online (Section 3, Eqs. 3-6)
//   k_exact exact slots of the hybrid selector (its "128/8"); must be <= k for every kind;
//           default min(8, k)
//   topk    exact | tree | estimate | hybrid (the four selectors of src/select)
//   k_trim  key blocks kept per query block after the union (Appendix, Algorithm 2); default k
//   sink    leading key blocks every query block keeps (the S of Eq. 9); default 1
//   local   key blocks ending at each query block's last causal block, always kept (the W of
//           Eq. 9, the diagonal window); default ceil((chi - 1) / beta) + 1, the most key blocks
//           a query block's diagonal can touch for any alignment (3 at chi = 128, beta = 64)
//   delta   on | off: apply Delta = O_gamma - (O_*)_gamma to the rows of each gamma-group
//           (Eq. 2), or not
//   timing  0 | 1: add ms_fused, ms_trim, ms_sparse, ms_delta (steady clock) to the extras;
//           off by default, so that two runs report identical extras
// Sink and local blocks are not pushed to the selectors and do not count against k or k_trim.
//
// A run (prefill, q_len > 16):
//   1. Fused pass (Algorithm 1, step 1): K/V packed once; attention_query_sparse over
//      strided_rows(q_len, gamma) (rows gamma-1, 2 gamma-1, ..., and always the last row) gives
//      O_gamma and, through a BlockLseObserver, each sampled row's per-64-key-tile LSE. Tiles are
//      combined by log-add-exp into beta-key blocks, the block score S(j) (Eq. 3), and pushed
//      into the row's own online top-k selector.
//   2. Union and trim (Algorithm 2): the chi / gamma sampled rows of a query block pool their
//      selected blocks, a block chosen by several rows takes the mean of its scores, the top
//      k_trim by score (ties: smaller block) are kept, and the sink and local blocks added.
//      The result is a validated causal BlockMask (block_q = chi, block_k = beta).
//   3. Block-sparse pass over the same PackedKV: O_*.
//   4. Delta correction (Eq. 2): row i takes O_*_i + (O_gamma - O_*) at the sampled row of its
//      group (the first sampled row at or after i). Sampled rows take O_gamma itself (copied,
//      bitwise), with delta on or off: with delta=off a non-sampled row is exactly O_*_i, and
//      the output is exact attention restricted to the coverage below.
// LSE (when asked for): the query-sparse pass's LSE at sampled rows (exact), the block-sparse
// pass's LSE of the masked keys elsewhere (the delta correction does not change it).
// Coverage: every causal key for sampled rows, the mask's keys for the others (MomoCoverage).
// Decode (q_len <= 16) runs dense decode (run_decode_or_prefill): at that few rows there is
// nothing to sample; the report says path "decode" and covers every key.
//
// Report extras (Table 4 and Eq. 9 of the paper):
//   k_sparse             keys per query row the block-sparse pass attends (mask entries / rows)
//   k_dense              keys per query row the query-sparse pass attends, amortised over all
//                        rows (its score entries / rows)
//   blocks_per_row       mean blocks selected online per sampled row (sink and local excluded)
//   blocks_per_qblock    mean blocks per query block in the trimmed mask (sink, local included)
//   sparsity_eq9         1 - min(1, (beta K + S + W + C / gamma) / C), Eq. 9, with K the mean
//                        selected (non-forced) blocks per query block, S = sink * beta,
//                        W = local * beta, C = kv_len
// stats are the sum of both passes (causal_entries: the problem's, counted once).
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "methods/kernel_path.hpp"
#include "methods/registry.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/select.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

float log_add_exp(float a, float b) {
  const float m = std::max(a, b);
  if (m == -std::numeric_limits<float>::infinity()) return m;
  return m + std::log1p(std::exp(std::min(a, b) - m));
}

// Sampled rows (is_strided_row) see every causal key; every other row sees what the block mask
// lists.
class MomoCoverage final : public Coverage {
 public:
  MomoCoverage(std::shared_ptr<const BlockMask> mask, int64_t gamma)
      : mask_(block_mask_coverage(mask)), m_(std::move(mask)), gamma_(gamma) {}
  void row_ranges(int64_t head, int64_t row, std::vector<KeyRange>& out) const override {
    if (is_strided_row(row, m_->q_len, gamma_)) {
      const int64_t lim = causal_limit(row, m_->q_len, m_->kv_len, m_->causal);
      if (lim > 0) out.push_back({0, lim});
      return;
    }
    mask_->row_ranges(head, row, out);
  }

 private:
  std::unique_ptr<Coverage> mask_;
  std::shared_ptr<const BlockMask> m_;
  int64_t gamma_;
};

// Per query block: the key blocks always kept, [0, sink_end) and [local_begin, causal_end).
struct ForcedBlocks {
  int64_t sink_end = 0, local_begin = 0, causal_end = 0;
  bool forced(int64_t j) const { return j < sink_end || j >= local_begin; }
  // Forced blocks among [0, nb), nb <= causal_end.
  int64_t count(int64_t nb) const {
    const int64_t s = std::min(sink_end, nb);
    return s + std::max<int64_t>(0, nb - std::max(local_begin, s));
  }
};

// Step 1's selection: per (q head, sampled row) an online top-k selector fed the row's block
// scores S(j) as the query-sparse kernel reports them.
class SelectObserver final : public BlockLseObserver {
 public:
  SelectObserver(int64_t heads, const std::vector<int64_t>& rows, int64_t q_len, int64_t kv_len,
                 int64_t beta, const std::vector<ForcedBlocks>& forced, int64_t chi,
                 const TopKParams& params)
      : rows_(rows.size()), beta_(beta), params_(params), state_(size_t(heads) * rows.size()) {
    limit_.reserve(rows.size());
    forced_.reserve(rows.size());
    for (int64_t r : rows) {
      limit_.push_back(causal_limit(r, q_len, kv_len, true));
      forced_.push_back(forced[size_t(r / chi)]);
    }
  }

  void observe(int64_t q_head, int64_t row_begin, int64_t rows, int64_t key_block,
               const float* block_lse) override {
    const int64_t key0 = key_block * kKeyBlock, key1 = key0 + kKeyBlock;
    const int64_t j = key0 / beta_;
    const bool first_tile = key0 % beta_ == 0;
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t r = row_begin + i;
      const int64_t limit = limit_[size_t(r)];
      if (key0 >= limit) continue;  // past this row's causal keys (the tile served later rows)
      Row& s = state_[size_t(q_head * rows_ + r)];
      s.acc = first_tile ? block_lse[i] : log_add_exp(s.acc, block_lse[i]);
      if (key1 % beta_ != 0 && key1 < limit) continue;  // block j goes on in the next tile
      const ForcedBlocks& f = forced_[size_t(r)];
      if (f.forced(j)) continue;
      if (!s.sel) {
        const int64_t nb = (limit + beta_ - 1) / beta_;
        TopKParams p = params_;
        p.total_blocks = nb - f.count(nb);
        s.sel.emplace(p);
      }
      s.sel->push(int32_t(j), s.acc);
    }
  }

  // The blocks row r of q head h selected (empty if it had none to choose from).
  void result(int64_t h, int64_t r, std::vector<BlockScore>& out) const {
    const Row& s = state_[size_t(h * rows_ + r)];
    if (s.sel) s.sel->result(out);
    else out.clear();
  }

 private:
  struct Row {
    std::optional<TopKSelector> sel;
    float acc = 0.0f;  // LSE of the beta-block in progress
  };
  int64_t rows_, beta_;
  TopKParams params_;
  std::vector<int64_t> limit_;
  std::vector<ForcedBlocks> forced_;
  std::vector<Row> state_;
};

class Momo final : public Method {
 public:
  explicit Momo(const MethodSpec& spec) {
    ParamReader r(spec);
    gamma_ = r.get_int("gamma", 16, 1, 1 << 20);
    chi_ = r.get_int("chi", 128, 1, 1 << 20);
    beta_ = r.get_int("beta", 64, 64, 1 << 20);
    k_ = int(r.get_int("k", 128, 1, 1 << 24));
    k_exact_ = int(r.get_int("k_exact", std::min(8, k_), 0, 1 << 24));
    const std::string topk = r.get_string("topk", "hybrid");
    SPATTN_CHECK(topk == "exact" || topk == "tree" || topk == "estimate" || topk == "hybrid",
                 "momo: topk='", topk, "' must be exact, tree, estimate or hybrid");
    kind_ = parse_topk_kind(topk);
    k_trim_ = r.get_int("k_trim", k_, 1, int64_t(1) << 40);
    sink_ = r.get_int("sink", 1, 0, int64_t(1) << 40);
    local_ = r.get_int("local", (chi_ - 1 + beta_ - 1) / beta_ + 1, 0, int64_t(1) << 40);
    const std::string delta = r.get_string("delta", "on");
    timing_ = r.get_int("timing", 0, 0, 1) != 0;
    r.finish();
    SPATTN_CHECK(gamma_ <= chi_, "momo: gamma=", gamma_, " must be <= chi=", chi_);
    SPATTN_CHECK(chi_ % gamma_ == 0, "momo: chi=", chi_, " must be a multiple of gamma=", gamma_);
    SPATTN_CHECK(beta_ % kKeyBlock == 0, "momo: beta=", beta_, " must be a multiple of ",
                 kKeyBlock, " (the kernel's key tile)");
    SPATTN_CHECK(k_exact_ <= k_, "momo: k_exact=", k_exact_, " must be <= k=", k_);
    SPATTN_CHECK(delta == "on" || delta == "off", "momo: delta='", delta,
                 "' must be on or off");
    delta_ = delta == "on";
  }
  std::string name() const override { return "momo"; }

  MethodReport run(const TensorView& q, const TensorView& k, const TensorView& v,
                   const TensorView& out, const AttnOptions& opt, float* lse) const override {
    SPATTN_CHECK(opt.causal, "momo: needs causal attention");
    SPATTN_CHECK(opt.q_start < 0 || opt.q_start == k.seq - q.seq,
                 "momo: queries sit bottom-right (q_start -1), got q_start=", opt.q_start);
    MethodReport r;
    r.path = run_decode_or_prefill(
        q.seq,
        [&] {
          attention_decode(q, k, v, out, opt, DecodeOptions{}, lse, &r.stats);
          r.coverage = std::make_shared<FullCoverage>(q.seq, k.seq, opt.causal);
        },
        [&] { prefill(q, k, v, out, opt, lse, r); });
    return r;
  }

 private:
  void prefill(const TensorView& q, const TensorView& k, const TensorView& v,
               const TensorView& out, const AttnOptions& opt, float* lse,
               MethodReport& rep) const {
    validate_attention_args(q, k, v, out, opt);
    const int64_t H = q.heads, L = q.seq, Lkv = k.seq, d = q.dim;
    // Geometry of the mask and each query block's forced (sink, local) blocks.
    auto mask = std::make_shared<BlockMask>(H, L, Lkv, chi_, beta_, true);
    const int64_t nqb = mask->n_qb();
    std::vector<ForcedBlocks> forced(static_cast<size_t>(nqb));
    for (int64_t qb = 0; qb < nqb; ++qb) {
      ForcedBlocks& f = forced[size_t(qb)];
      f.causal_end = mask->causal_blocks(qb);
      f.sink_end = std::min(sink_, f.causal_end);
      f.local_begin = std::max<int64_t>(0, f.causal_end - local_);
    }

    // Step 1: the fused query-sparse pass with online selection.
    auto t0 = Clock::now();
    const PackedKV packed = PackedKV::pack(k, v, 0, opt.threads);
    const std::vector<int64_t> rows = strided_rows(L, gamma_);
    const int64_t R = int64_t(rows.size());
    Tensor og(DType::f32, H, R, d);
    std::vector<float> lse_g(size_t(H * R));
    TopKParams params;
    params.kind = kind_;
    params.k = k_;
    params.k_exact = k_exact_;
    SelectObserver observer(H, rows, L, Lkv, beta_, forced, chi_, params);
    Stats qs_stats;
    attention_query_sparse(q, packed, rows, og, opt, lse_g.data(), &observer, &qs_stats);
    const double ms_fused = ms_since(t0);

    // Step 2: union and trim (Algorithm 2) per (head, query block).
    t0 = Clock::now();
    std::vector<std::vector<int32_t>> lists(size_t(H * nqb));
    std::vector<BlockScore> pool, one;
    int64_t selected_row_blocks = 0, selected_mask_blocks = 0;
    for (int64_t h = 0; h < H; ++h) {
      size_t ri = 0;
      for (int64_t qb = 0; qb < nqb; ++qb) {
        pool.clear();
        for (; ri < rows.size() && rows[ri] < (qb + 1) * chi_; ++ri) {
          observer.result(h, int64_t(ri), one);
          selected_row_blocks += int64_t(one.size());
          pool.insert(pool.end(), one.begin(), one.end());
        }
        // Duplicates (a block several rows chose) take the mean of their scores.
        std::sort(pool.begin(), pool.end(),
                  [](const BlockScore& a, const BlockScore& b) { return a.block < b.block; });
        size_t n = 0;
        for (size_t i = 0; i < pool.size();) {
          size_t e = i;
          double sum = 0;
          while (e < pool.size() && pool[e].block == pool[i].block) sum += pool[e++].score;
          pool[n++] = {pool[i].block, float(sum / double(e - i))};
          i = e;
        }
        pool.resize(n);
        const size_t keep = size_t(std::min<int64_t>(int64_t(n), k_trim_));
        std::partial_sort(pool.begin(), pool.begin() + ptrdiff_t(keep), pool.end(), ranks_before);
        selected_mask_blocks += int64_t(keep);
        std::vector<int32_t>& list = lists[size_t(h * nqb + qb)];
        const ForcedBlocks& f = forced[size_t(qb)];
        for (int64_t j = 0; j < f.sink_end; ++j) list.push_back(int32_t(j));
        for (size_t i = 0; i < keep; ++i) list.push_back(pool[i].block);
        for (int64_t j = std::max(f.local_begin, f.sink_end); j < f.causal_end; ++j)
          list.push_back(int32_t(j));
        std::sort(list.begin(), list.end());
      }
    }
    *mask = BlockMask::from_lists(H, L, Lkv, chi_, beta_, true, lists);
    mask->validate();
    const double ms_trim = ms_since(t0);

    // Step 3: the block-sparse pass over the same packed K/V, in f32 (the correction is added
    // before the one rounding to out's dtype).
    t0 = Clock::now();
    const bool direct = out.dtype == DType::f32 && out.stride_dim == 1;
    Tensor tmp = direct ? Tensor() : Tensor(DType::f32, H, L, d);
    const TensorView os = direct ? out : tmp.view();  // f32, contiguous along dim
    Stats bs_stats;
    attention_block_sparse(q, packed, os, *mask, opt, lse, &bs_stats);
    const double ms_sparse = ms_since(t0);

    // Step 4: the delta correction (Eq. 2); sampled rows take O_gamma.
    t0 = Clock::now();
    std::vector<float> delta(static_cast<size_t>(d));
    auto row = [&](int64_t h, int64_t i) { return static_cast<float*>(os.ptr(h, i)); };
    for (int64_t h = 0; h < H; ++h) {
      int64_t begin = 0;
      for (int64_t ri = 0; ri < R; ++ri) {
        const int64_t s = rows[size_t(ri)];
        const float* g = static_cast<const float*>(og.view().ptr(h, ri));
        float* o_s = row(h, s);
        if (delta_) {
          for (int64_t c = 0; c < d; ++c) delta[size_t(c)] = g[c] - o_s[c];
          for (int64_t i = begin; i < s; ++i) {
            float* o = row(h, i);
            for (int64_t c = 0; c < d; ++c) o[c] += delta[size_t(c)];
          }
        }
        std::memcpy(o_s, g, size_t(d) * sizeof(float));
        if (lse) lse[h * L + s] = lse_g[size_t(h * R + ri)];
        begin = s + 1;
      }
    }
    if (!direct)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < L; ++i) {
          const float* o = row(h, i);
          for (int64_t c = 0; c < d; ++c) out.set(h, i, c, o[c]);
        }
    const double ms_delta = ms_since(t0);

    rep.stats = qs_stats;
    rep.stats.add(bs_stats);
    rep.stats.causal_entries = bs_stats.causal_entries;
    const double qrows = double(H * L);
    rep.extras["k_sparse"] = double(bs_stats.score_entries) / qrows;
    rep.extras["k_dense"] = double(qs_stats.score_entries) / qrows;
    rep.extras["blocks_per_row"] = double(selected_row_blocks) / double(H * R);
    rep.extras["blocks_per_qblock"] = double(mask->block_count()) / double(H * nqb);
    const double K = double(selected_mask_blocks) / double(H * nqb), C = double(Lkv);
    rep.extras["sparsity_eq9"] =
        1.0 - std::min(1.0, (double(beta_) * K + double(sink_ * beta_) + double(local_ * beta_) +
                             C / double(gamma_)) / C);
    if (timing_) {
      rep.extras["ms_fused"] = ms_fused;
      rep.extras["ms_trim"] = ms_trim;
      rep.extras["ms_sparse"] = ms_sparse;
      rep.extras["ms_delta"] = ms_delta;
    }
    std::shared_ptr<const BlockMask> cmask = std::move(mask);
    rep.coverage = std::make_shared<MomoCoverage>(cmask, gamma_);
    rep.mask = std::move(cmask);
  }

  int64_t gamma_, chi_, beta_;
  int k_, k_exact_;
  TopKKind kind_;
  int64_t k_trim_, sink_, local_;
  bool delta_ = true, timing_ = false;
};

}  // namespace

std::unique_ptr<Method> make_momo(const MethodSpec& spec) {
  return std::make_unique<Momo>(spec);
}

}  // namespace spattn

// Quest decode ("Quest: Query-Aware Sparsity for Efficient Long-Context LLM Inference",
// ICML'24, Section 3): the KV cache is cut into pages of `page` keys; beside the cache each page
// keeps the element-wise min and max of its keys (updated as keys are appended, O(head_dim) per
// key). A decode query q bounds each page's largest score from above,
//     U(page) = sum_i max(q_i * min_i, q_i * max_i)  >=  q . k  for every key k of the page,
// and attends only to the pages with the largest bounds (a budget of `topk` pages, or with
// `topp=P` the fewest pages whose estimated mass, the softmax of scale * G over the pages,
// reaches P for every q head, or with `min_share=T` every page whose estimated mass is at
// least T; G is a page's expected score, kernels/quest_bounds.hpp, beyond the paper), plus the
// first `sink` pages and the newest `local` pages, always. Under GQA the
// q heads of a group share their kv head's pages (quest_select). Only the chosen
// pages' K and V are read (attention_decode_ranges over the packed cache).
//
// Spec: quest[:k=PAGES,page=TOKENS,topp=P,min_share=T,per=row|block,est=bound|gauss,
//               sink=PAGES,local=PAGES,dense_layers=L,dense_at=F,sums=cache|i8]
//   page          16..64, a multiple of 16 (default 16, the paper's page size)
//   k             pages kept by bound besides sink and local (default 256: 4096 tokens at
//                 page 16, the top of the 1K-4K token budgets the paper evaluates; at 2048
//                 tokens code-small-32k's 32K decode tail lost 2.7% of its likelihood, at
//                 4096 0.14%: BENCHMARKS.md, "Quest's default budget")
//   topp          in (0, 1]: a mass budget instead of k (giving both is an Error)
//   min_share     in (0, 1): a threshold instead of k or topp, every page of at least that
//                 share of the estimated mass (one threshold across pages and steps; the
//                 budgets compared: docs/methods/README.md, "Budgets")
//   per           with topp: `row` (default) holds every q head of a kv head's group to P of
//                 its own estimated mass (masks::keep_row_mass); `block` the group's mean
//                 softmax, where a head whose mass lies apart from its group's is outvoted
//   est           the page score a budget reads: `bound` (the paper's U; the default with k)
//                 or `gauss` (G, the page's expected exp-score under a uniform box; the
//                 default with topp and min_share, which read magnitudes: U's softmax is
//                 over-confident where a page's box is wide); with G the sink and local
//                 pages, read anyway, count their exact mass (quest_select's kv). Issue
//                 61's sweep is in BENCHMARKS.md, "Mass budgets against counts on real
//                 attention"
//   sink, local   pages always kept at the start and the end (default 1 each)
//   dense_layers  the first L layers decode densely (default 2: the paper leaves its first two
//                 layers dense, their attention being the least sparse)
//   dense_at      in (0, 1]: a k budget (sink + k + local pages) reaching this share of the
//                 cache's keys decodes densely instead (default 0.5; 1: only when it covers
//                 every page). Chosen pages are read at half to two thirds of dense decode's
//                 rate per key on 2 Zen 5 cores, and choosing them costs besides, so a budget of
//                 half the cache gains nothing: on the 1B shape at 8K depth the default budget
//                 read half of each sparse layer's keys and decoded 1.04-1.17x slower than dense
//                 (BENCHMARKS.md, "Quest decodes densely where its budget is half the cache").
//   sums          what the bound pass reads: `i8` (default), 8-bit codes of the summaries (per
//                 block of 32 pages and dimension a scale; each range rounded outward, so U
//                 still bounds every score), half the bytes of f16 at every decode step
//                 (QuestPages); or `cache`, the exact summaries in the cache's type (f16 /
//                 bf16, else f32). At 32K on code-small-32k i8 chose pages about 15 us a layer
//                 faster and kept 0.9565 of the mass against 0.9567 (BENCHMARKS.md, "Quest's
//                 page choice on 8-bit summaries")
#pragma once
#include <cstdint>
#include <string_view>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/method.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

class PackedKV;

// What Quest's bound pass reads (the `sums` parameter).
enum class QuestSums { cache, i8 };
// The page score a budget reads: the paper's bound U, or G, a page's expected score (above).
enum class QuestEstimate { bound, gauss };

struct QuestParams {
  QuestSums sums = QuestSums::i8;
  int64_t page = 16;
  int64_t topk = 256;
  double topp = 0;       // 0: the topk budget; else the mass budget in (0, 1]
  double min_share = 0;  // > 0: the share threshold in (0, 1) instead of topk or topp
  // With topp: every q head of a kv head's group keeps topp of its own estimated mass
  // (masks::keep_row_mass), not the group's mean; a head whose mass lies apart from its
  // group's is not outvoted.
  bool per_row = false;
  QuestEstimate est = QuestEstimate::bound;  // the page score (kernels/quest_bounds.hpp)
  int64_t sink = 1, local = 1;
  int64_t dense_layers = 2;
  double dense_at = 0.5;
};
// Parses a `quest[:...]` spec (above); Error naming the parameter for anything out of range.
QuestParams parse_quest_params(const MethodSpec& spec);

// Per kv head and page, the element-wise min and max of the page's keys, as the cache stores
// them (rows rounded to k_type first, so the bounds hold for the keys the kernels read).
// Stored in the cache's own type when it is f16 or bf16 (the min and max of f16 values are
// f16 values: exact, and half the bytes a decode step reads), else in f32.
// With QuestSums::i8 also as 8-bit codes, which the bound pass reads instead: per kv head,
// block of 32 pages and dimension c a scale s = amax / 126, amax the largest |min| or |max|
// of the block's pages in c, and each page's min and max as the codes floor(min / s) and
// ceil(max / s), moved one further where the float product would land inside the range, so
// [s lo8, s hi8] holds [min, max]. The codes are a function of the exact summaries (kept as
// above): a block's codes in c are redone when its amax grows, or after a truncate.
class QuestPages {
 public:
  QuestPages(int64_t kv_heads, int64_t dim, int64_t page, int64_t capacity,
             KVType k_type = KVType::f32, QuestSums sums = QuestSums::cache);
  // Keys [size(), size() + n) from k ([kv_heads, n, dim]): each widens its page's min and max.
  void append(const TensorView& k);
  // Keeps the first n keys. The page holding key n - 1, when cut, is rebuilt from the keys the
  // cache holds (kv: the packed cache, holding at least n keys), so the summaries are what
  // appending those n keys gives.
  void truncate(int64_t n, const PackedKV& kv);

  int64_t size() const { return size_; }
  int64_t page() const { return page_; }
  int64_t pages() const { return (size_ + page_ - 1) / page_; }
  int64_t kv_heads() const { return kv_heads_; }
  int64_t dim() const { return dim_; }
  size_t bytes() const {
    return sums_.size() + codes_.size() + (scales_.size() + amax_.size()) * sizeof(float);
  }
  // The summaries' element type (f32, f16 or bf16) and kv head h's summaries in the block
  // layout of kernels::quest_sum_index.
  DType type() const { return type_; }
  const void* data(int64_t h) const {
    return sums_.data() + size_t(h * head_elems_) * dtype_size(type_);
  }
  // Page p's min (or max) in dimension c of kv head h, widened to f32.
  float get(int64_t h, int64_t p, int64_t c, bool max) const;
  // QuestSums::i8: kv head h's codes (the layout of data(h)) and scales ([blocks][dim]); a
  // page's code in c (lo8 for the min, hi8 for the max).
  bool i8() const { return !codes_.empty(); }
  const int8_t* codes(int64_t h) const { return codes_.data() + h * head_elems_; }
  const float* scales(int64_t h) const { return scales_.data() + h * blocks_ * dim_; }
  int code(int64_t h, int64_t p, int64_t c, bool max) const;

 private:
  // Keys i .. i + n (n rows of dim floats, as the cache stores them), all in page i / page.
  void add_keys(int64_t h, int64_t i, const float* keys, int64_t n);
  size_t offset(int64_t h, int64_t p, int64_t c, bool max) const;  // bytes into sums_
  // (i8) Block b's amax, scale and codes in dimension c from pages [32 b, end) (end: one past
  // the last page holding keys).
  void encode_block(int64_t h, int64_t b, int64_t c, int64_t end);
  int64_t kv_heads_, dim_, page_, capacity_, head_elems_ = 0, blocks_ = 0, size_ = 0;
  KVType k_type_;
  DType type_;  // the summaries' elements
  std::vector<unsigned char> sums_;
  std::vector<int8_t> codes_;         // i8: [kv_heads][head_elems_]
  std::vector<float> scales_, amax_;  // i8: [kv_heads][blocks_][dim]
  std::vector<float> rows_;           // add_keys' scratch: a page's min and max rows
};

// What a decode read, summed over kv heads (and layers, by the runner).
struct QuestDecodeStats {
  int64_t pages_read = 0, pages_total = 0;
  int64_t keys_read = 0, keys_total = 0;
  // quest_decode's time choosing pages (the bounds, the budget, the ranges), wall clock: the
  // part of a step's cost that grows with the cache's pages, not with the keys read.
  double select_ms = 0;
  void add(const QuestDecodeStats& o) {
    pages_read += o.pages_read, pages_total += o.pages_total;
    keys_read += o.keys_read, keys_total += o.keys_total;
    select_ms += o.select_ms;
  }
};

// The bound U of every page of kv head h for one query row q (dim floats).
void quest_page_bounds(const QuestPages& pages, int64_t h, const float* q, float* bounds);
// The key ranges (ascending, merged) each kv head reads for q ([Hq, 1, d]) over the first
// pages.size() keys. The q heads of a GQA group share their kv head's pages (its K and V are
// then read once per group): a page's score is its estimated mass, the softmax over the pages
// of scale * U (or G, params.est), averaged over the group's q heads (one q head per kv head:
// the paper's ranking by U); topk keeps the k best, topp the fewest whose scores, with the
// sink's and the newest pages', reach P (per_row: each q head's own softmax reaches P),
// min_share every page whose score is at least T. scale: the softmax scale (resolved);
// threads: kv heads in parallel. kv: the cache the pages summarize, or null; given, a mass
// budget on G counts the sink and local pages (read anyway) at their exact mass.
std::vector<std::vector<KeyRange>> quest_select(const TensorView& q, const QuestPages& pages,
                                                const QuestParams& params, float scale,
                                                QuestDecodeStats* stats = nullptr, int threads = 1,
                                                const PackedKV* kv = nullptr);
// Attention of q ([Hq, 1, d], the newest token: every key visible) over the ranges of its kv
// head (quest_select's), each group's q heads as the rows of one item.
void quest_attend(const TensorView& q, const PackedKV& kv,
                  const std::vector<std::vector<KeyRange>>& ranges, const TensorView& out,
                  const AttnOptions& opt = {}, float* lse = nullptr, Stats* stats = nullptr);
// Whether a decode step over a cache of `keys` keys reads every key (dense decode, nothing
// chosen): a k budget of at least dense_at x keys (or every page).
bool quest_reads_every_key(const QuestParams& params, int64_t keys);
// One decode step: q [Hq, 1, d] attends to the selected pages of kv (pages summarises kv's keys);
// densely where quest_reads_every_key says so.
void quest_decode(const TensorView& q, const PackedKV& kv, const QuestPages& pages,
                  const QuestParams& params, const TensorView& out, const AttnOptions& opt = {},
                  float* lse = nullptr, Stats* stats = nullptr, QuestDecodeStats* qstats = nullptr);

}  // namespace spattn

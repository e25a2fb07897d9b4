// Quest decode (spattn/quest.hpp): page summaries kept beside the KV cache, the per-page upper
// bound of q . k, the page budget (topk or topp) and the decode over the chosen pages.
#include "spattn/quest.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <numeric>

#include "spattn/decode.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"
#include "core/threading.hpp"
#include "kernels/exp_row.hpp"
#include "kernels/quest_bounds.hpp"

namespace spattn {

namespace {

uint64_t bits_of(double x) { return std::bit_cast<uint64_t>(x); }

// The k-th largest (k in [1, a.size()]) of a, values compared as unsigned integers: 11 bits
// at a time from the top, each pass counting the candidates' digits, keeping those in the
// digit where the k-th lies and dropping the rest (a is overwritten). Branch-free counting.
uint64_t kth_largest(std::vector<uint64_t>& a, int64_t k, std::vector<uint32_t>& hist) {
  int64_t m = int64_t(a.size()), need = k;  // the need-th largest of a[0, m)
  for (int shift = 53; m > 1; shift -= 11) {
    const int width = shift >= 0 ? 11 : 11 + shift;
    const int at = std::max(shift, 0);
    const uint64_t mask = (uint64_t(1) << width) - 1;
    hist.assign(size_t(mask + 1), 0);
    for (int64_t i = 0; i < m; ++i) ++hist[size_t((a[size_t(i)] >> at) & mask)];
    uint64_t digit = mask;
    for (int64_t above = 0;; --digit) {
      if (above + int64_t(hist[size_t(digit)]) >= need) {
        need -= above;
        break;
      }
      above += hist[size_t(digit)];
    }
    int64_t j = 0;
    for (int64_t i = 0; i < m; ++i) {
      a[size_t(j)] = a[size_t(i)];
      j += ((a[size_t(i)] >> at) & mask) == digit;
    }
    m = j;
    if (at == 0) break;  // every bit decided: the m left are equal
  }
  return a[0];
}

}  // namespace

QuestParams parse_quest_params(const MethodSpec& spec) {
  SPATTN_CHECK(spec.name == "quest", "quest: not a quest spec ('", spec.text, "')");
  ParamReader r(spec);
  QuestParams p;
  p.page = r.get_int("page", p.page, 16, 64);
  SPATTN_CHECK(p.page % 16 == 0, "quest: page=", p.page, " is not a multiple of 16");
  SPATTN_CHECK(!(r.has("k") && r.has("topp")), "quest: give k (pages) or topp (mass), not both");
  p.topk = r.get_int("k", p.topk, 0, int64_t(1) << 30);
  if (r.has("topp")) {
    p.topp = r.get_double("topp", 1.0, -HUGE_VAL, HUGE_VAL);
    SPATTN_CHECK(p.topp > 0 && p.topp <= 1, "quest: topp=", p.topp, " outside (0, 1]");
  }
  p.sink = r.get_int("sink", p.sink, 0, int64_t(1) << 30);
  p.local = r.get_int("local", p.local, 1, int64_t(1) << 30);
  p.dense_layers = r.get_int("dense_layers", p.dense_layers, 0, int64_t(1) << 20);
  p.dense_at = r.get_double("dense_at", p.dense_at, -HUGE_VAL, HUGE_VAL);
  SPATTN_CHECK(p.dense_at > 0 && p.dense_at <= 1, "quest: dense_at=", p.dense_at, " outside (0, 1]");
  const std::string sums = r.get_string("sums", p.sums == QuestSums::i8 ? "i8" : "cache");
  SPATTN_CHECK(sums == "cache" || sums == "i8", "quest: sums=", sums, " is not cache or i8");
  p.sums = sums == "i8" ? QuestSums::i8 : QuestSums::cache;
  r.finish();
  return p;
}

QuestPages::QuestPages(int64_t kv_heads, int64_t dim, int64_t page, int64_t capacity,
                       KVType k_type, QuestSums sums)
    : kv_heads_(kv_heads), dim_(dim), page_(page), capacity_(capacity), k_type_(k_type),
      type_(k_type == KVType::f16 ? DType::f16 : k_type == KVType::bf16 ? DType::bf16 : DType::f32) {
  SPATTN_CHECK(kv_heads >= 1 && dim >= 1 && capacity >= 1, "quest: bad cache shape ", kv_heads,
               " x ", capacity, " x ", dim);
  SPATTN_CHECK(page >= 16 && page <= 64 && page % 16 == 0, "quest: page=", page,
               " is not a multiple of 16 in [16, 64]");
  head_elems_ = kernels::quest_padded((capacity + page - 1) / page) * 2 * dim;
  sums_.assign(size_t(kv_heads * head_elems_) * dtype_size(type_), 0);
  if (sums == QuestSums::i8) {
    blocks_ = head_elems_ / (2 * dim * kernels::kQuestPagePad);
    codes_.assign(size_t(kv_heads * head_elems_), 0);
    scales_.assign(size_t(kv_heads * blocks_ * dim), 0.0f);
    amax_.assign(scales_.size(), 0.0f);
  }
}

int QuestPages::code(int64_t h, int64_t p, int64_t c, bool max) const {
  return codes_[size_t(h * head_elems_ + kernels::quest_sum_index(dim_, p, c, max))];
}

void QuestPages::encode(int64_t h, int64_t p, int64_t c, float mn, float mx) {
  const float s = scales_[size_t((h * blocks_ + p / kernels::kQuestPagePad) * dim_ + c)];
  float lo = 0, hi = 0;
  if (s > 0) {  // s = 0: amax = 0, every value in the block's dimension 0
    lo = std::floor(mn / s);
    if (lo * s > mn) lo -= 1;
    hi = std::ceil(mx / s);
    if (hi * s < mx) hi += 1;
  }
  // |min|, |max| <= 126 s up to rounding, so the codes lie in [-127, 127]; the clamp (NaN
  // included) only keeps a non-finite key from making an out-of-range conversion.
  const auto clamp = [](float x) {
    return int8_t(x >= -127.0f ? (x <= 127.0f ? x : 127.0f) : -127.0f);
  };
  int8_t* k = codes_.data() + h * head_elems_;
  k[kernels::quest_sum_index(dim_, p, c, false)] = clamp(lo);
  k[kernels::quest_sum_index(dim_, p, c, true)] = clamp(hi);
}

void QuestPages::encode_block(int64_t h, int64_t b, int64_t c, int64_t end) {
  const int64_t first = b * kernels::kQuestPagePad;
  end = std::min(end, first + kernels::kQuestPagePad);
  float amax = 0;
  for (int64_t p = first; p < end; ++p)
    amax = std::max({amax, std::fabs(get(h, p, c, false)), std::fabs(get(h, p, c, true))});
  const size_t i = size_t((h * blocks_ + b) * dim_ + c);
  amax_[i] = amax;
  // A scale too small to be a normal float's 1/126 takes amax itself (codes within +-1).
  scales_[i] = amax / 126.0f > 0 ? amax / 126.0f : amax;
  for (int64_t p = first; p < end; ++p) encode(h, p, c, get(h, p, c, false), get(h, p, c, true));
}

size_t QuestPages::offset(int64_t h, int64_t p, int64_t c, bool max) const {
  return size_t(h * head_elems_ + kernels::quest_sum_index(dim_, p, c, max)) * dtype_size(type_);
}

float QuestPages::get(int64_t h, int64_t p, int64_t c, bool max) const {
  return load_as_f32(sums_.data() + offset(h, p, c, max), type_);
}

// x is a key's value as the cache stores it, so a 16-bit summary holds it exactly.
void QuestPages::put(int64_t h, int64_t p, int64_t c, bool max, float x) {
  store_from_f32(sums_.data() + offset(h, p, c, max), type_, x);
}

// The page's running min and max in f32, read and written once per call rather than once per
// key (that get / put pair per dimension and key was 0.28% of the samples of a 32K perplexity
// run with Quest decode, now 0.04%). The same values in the same order: a page's first key
// sets its summary, each later one takes the min / max with it, and the stored summary (the
// cache's type) holds every such value exactly.
void QuestPages::add_keys(int64_t h, int64_t i, const float* keys, int64_t n) {
  if (n <= 0) return;
  const int64_t p = i / page_;
  std::vector<float> lo(keys, keys + dim_), hi(lo);
  int64_t t = 1;  // a page's first key sets its summary
  if (i % page_ != 0) {
    for (int64_t c = 0; c < dim_; ++c) lo[size_t(c)] = get(h, p, c, false), hi[size_t(c)] = get(h, p, c, true);
    t = 0;
  }
  for (; t < n; ++t)
    for (int64_t c = 0; c < dim_; ++c) {
      lo[size_t(c)] = std::min(lo[size_t(c)], keys[t * dim_ + c]);
      hi[size_t(c)] = std::max(hi[size_t(c)], keys[t * dim_ + c]);
    }
  for (int64_t c = 0; c < dim_; ++c) put(h, p, c, false, lo[size_t(c)]), put(h, p, c, true, hi[size_t(c)]);
  if (!i8()) return;
  // The block's amax over its pages so far (a block's first page starts it afresh): a larger
  // one redoes the block's codes in c, else only this page's.
  const int64_t b = p / kernels::kQuestPagePad;
  const bool fresh = p % kernels::kQuestPagePad == 0 && i % page_ == 0;
  for (int64_t c = 0; c < dim_; ++c) {
    const float mn = lo[size_t(c)], mx = hi[size_t(c)];  // as put() stored them, exactly
    const float amax = amax_[size_t((h * blocks_ + b) * dim_ + c)];
    if (fresh || std::max(std::fabs(mn), std::fabs(mx)) > amax)
      encode_block(h, b, c, p + 1);
    else
      encode(h, p, c, mn, mx);
  }
}

void QuestPages::append(const TensorView& k) {
  SPATTN_CHECK(k.heads == kv_heads_ && k.dim == dim_, "quest: appending keys of ", k.heads,
               " heads x ", k.dim, " dims to summaries of ", kv_heads_, " x ", dim_);
  SPATTN_CHECK(size_ + k.seq <= capacity_, "quest: ", size_ + k.seq,
               " keys exceed the summaries' capacity");
  std::vector<float> rows(static_cast<size_t>(page_ * dim_));
  for (int64_t h = 0; h < kv_heads_; ++h)
    for (int64_t s = 0; s < k.seq;) {  // one page's keys at a time
      const int64_t i = size_ + s, n = std::min(k.seq - s, page_ - i % page_);
      for (int64_t t = 0; t < n; ++t) {
        float* row = rows.data() + t * dim_;
        for (int64_t c = 0; c < dim_; ++c) row[c] = k.get(h, s + t, c);
        kv_round_row(k_type_, row, row, dim_);  // as the cache stores it
      }
      add_keys(h, i, rows.data(), n);
      s += n;
    }
  size_ += k.seq;
}

void QuestPages::truncate(int64_t n, const PackedKV& kv) {
  SPATTN_CHECK(n >= 0 && n <= size_, "quest: truncate to ", n, " keys, outside [0, ", size_, "]");
  SPATTN_CHECK(kv.size() >= n, "quest: the cache holds ", kv.size(), " keys, fewer than ", n);
  if (n % page_ != 0) {  // the cut page: rebuilt from the keys it keeps
    const int64_t first = n / page_ * page_;
    std::vector<float> rows(static_cast<size_t>((n - first) * dim_));
    for (int64_t h = 0; h < kv_heads_; ++h) {
      for (int64_t i = first; i < n; ++i) kv.read_key(h, i, rows.data() + (i - first) * dim_);
      add_keys(h, first, rows.data(), n - first);
    }
  }
  size_ = n;
  // (i8) The last block's amax may hold pages or keys cut off: its codes from what is kept.
  if (i8() && n > 0)
    for (int64_t h = 0; h < kv_heads_; ++h)
      for (int64_t c = 0; c < dim_; ++c)
        encode_block(h, (pages() - 1) / kernels::kQuestPagePad, c, pages());
}

namespace {
// The bounds of kv head h's pages for `rows` query rows (q: [rows][dim]), into u (rows x ldu),
// from the codes or the exact summaries, whichever the pages keep for the bound pass.
void page_bounds(const QuestPages& pages, int64_t h, const float* q, int64_t rows, float* u,
                 int64_t ldu) {
  if (pages.i8())
    kernels::quest_bounds_i8(q, rows, pages.dim(), pages.codes(h), pages.scales(h),
                             pages.pages(), u, ldu);
  else
    kernels::quest_bounds(q, rows, pages.dim(), pages.data(h), pages.type(), pages.pages(), u,
                          ldu);
}
}  // namespace

void quest_page_bounds(const QuestPages& pages, int64_t h, const float* q, float* bounds) {
  const int64_t np = pages.pages();
  std::vector<float> u(size_t(kernels::quest_padded(np)));
  page_bounds(pages, h, q, 1, u.data(), int64_t(u.size()));
  std::copy_n(u.data(), np, bounds);
}

std::vector<std::vector<KeyRange>> quest_select(const TensorView& q, const QuestPages& pages,
                                                const QuestParams& params, float scale,
                                                QuestDecodeStats* stats, int threads) {
  SPATTN_CHECK(q.seq == 1, "quest: decode takes one query per q head, got ", q.seq);
  SPATTN_CHECK(q.dim == pages.dim() && q.heads % pages.kv_heads() == 0, "quest: q of ", q.heads,
               " heads x ", q.dim, " dims over summaries of ", pages.kv_heads(), " x ",
               pages.dim());
  const int64_t np = pages.pages(), n = pages.size(), page = pages.page();
  const int64_t hkv = pages.kv_heads(), group = q.heads / hkv;
  std::vector<std::vector<KeyRange>> out(static_cast<size_t>(hkv));
  std::vector<QuestDecodeStats> per_head(static_cast<size_t>(hkv));
  const int64_t ldu = kernels::quest_padded(np);
  // Sink and local pages are always read; the rest compete on their scores.
  const int64_t first = std::min(np, params.sink), last = std::max(first, np - params.local);
  const bool all = params.topp == 0 && params.topk >= last - first;
  // Kv heads in parallel (each reads its own summaries, writes its own ranges and stats).
  parallel_for(hkv, threads, [&](int64_t g, int) {
    std::vector<float> qrows(static_cast<size_t>(group * q.dim)), bounds(static_cast<size_t>(group * ldu));
    std::vector<double> score(static_cast<size_t>(np)), e(static_cast<size_t>(np));
    std::vector<uint64_t> cand;
    std::vector<uint32_t> hist;
    std::vector<int64_t> order(size_t(last - first));
    std::vector<char> keep(static_cast<size_t>(np), 0);
    for (int64_t p = 0; p < first; ++p) keep[size_t(p)] = 1;
    for (int64_t p = last; p < np; ++p) keep[size_t(p)] = 1;
    std::iota(order.begin(), order.end(), first);
    if (!all && !order.empty()) {
      // A page's score: its estimated attention mass, the softmax of scale x U over the pages,
      // averaged over the q heads of the group (they share the kv head's pages, so its K and V
      // are read once). With one q head per kv head this ranks pages by U, as the paper does.
      // The group's bounds in one pass over the kv head's summaries.
      for (int64_t r = 0; r < group; ++r)
        for (int64_t c = 0; c < q.dim; ++c) qrows[size_t(r * q.dim + c)] = q.get(g * group + r, 0, c);
      page_bounds(pages, g, qrows.data(), group, bounds.data(), ldu);
      std::fill(score.begin(), score.end(), 0.0);
      for (int64_t r = 0; r < group; ++r) {
        const float* u = bounds.data() + r * ldu;
        // The max over four chains of compares (one chain, max_element's, waits on each).
        float m4[4] = {u[0], u[0], u[0], u[0]};
        for (int64_t p = 0; p < np; ++p) m4[p & 3] = std::max(m4[p & 3], u[p]);
        const float mx = std::max(std::max(m4[0], m4[1]), std::max(m4[2], m4[3]));
        const double total = kernels::exp_row_f64(u, np, double(mx), e.data(), double(scale));
        for (int64_t p = 0; p < np; ++p) score[size_t(p)] += e[size_t(p)] / (total * double(group));
      }
      // Largest score first; ties by page index, so the choice is deterministic.
      const auto by_score = [&](int64_t a, int64_t b) {
        return score[size_t(a)] != score[size_t(b)] ? score[size_t(a)] > score[size_t(b)] : a < b;
      };
      if (params.topp == 0) {
        // The topk best by_score: every page scoring above the k-th best score t, then pages
        // scoring t in index order. t by a radix select on the scores' bits (a non-negative
        // double's bits order as its value), where nth_element's unpredictable branches over
        // 1,790 candidates took 12-14 us of a 32K layer's 75 us page choice.
        const int64_t take = params.topk;
        if (take > 0) {
          cand.resize(size_t(last - first));
          for (int64_t p = first; p < last; ++p)
            cand[size_t(p - first)] = bits_of(score[size_t(p)]);
          const uint64_t t = kth_largest(cand, take, hist);
          int64_t ties = take;
          for (int64_t p = first; p < last; ++p) ties -= bits_of(score[size_t(p)]) > t;
          for (int64_t p = first; p < last; ++p) {
            const uint64_t b = bits_of(score[size_t(p)]);
            if (b > t || (b == t && ties-- > 0)) keep[size_t(p)] = 1;
          }
        }
      } else {
        // The best pages one at a time off a heap until the mass is reached: the sorted order's
        // prefix (the order is total), without sorting the pages never taken.
        const auto after = [&](int64_t a, int64_t b) { return by_score(b, a); };
        std::make_heap(order.begin(), order.end(), after);
        double kept = 0;
        for (int64_t p = 0; p < np; ++p)
          if (keep[size_t(p)]) kept += score[size_t(p)];
        for (auto end = order.end(); end != order.begin() && kept < params.topp; --end) {
          std::pop_heap(order.begin(), end, after);  // the best left moves to end - 1
          const int64_t best = *(end - 1);
          kept += score[size_t(best)];
          keep[size_t(best)] = 1;
        }
      }
    } else {
      for (int64_t p : order) keep[size_t(p)] = 1;
    }
    auto& r = out[size_t(g)];
    int64_t read = 0, pages_read = 0;
    for (int64_t p = 0; p < np; ++p) {
      if (!keep[size_t(p)]) continue;
      const int64_t b = p * page, end = std::min(n, b + page);
      if (!r.empty() && r.back().end == b) r.back().end = end;
      else r.push_back({b, end});
      read += end - b;
      ++pages_read;
    }
    per_head[size_t(g)] = {pages_read, np, read, n};
  });
  if (stats)
    for (const QuestDecodeStats& s : per_head) stats->add(s);
  return out;
}

void quest_attend(const TensorView& q, const PackedKV& kv,
                  const std::vector<std::vector<KeyRange>>& ranges, const TensorView& out,
                  const AttnOptions& opt, float* lse, Stats* stats) {
  const int64_t hkv = kv.kv_heads(), group = hkv > 0 ? q.heads / hkv : 0;
  SPATTN_CHECK(q.seq == 1 && out.seq == 1 && out.heads == q.heads && group >= 1 &&
                   group * hkv == q.heads && group <= kMaxDecodeQueries,
               "quest: q of ", q.heads, " heads x ", q.seq, " rows over ", hkv, " kv heads");
  SPATTN_CHECK(!opt.causal || opt.q_start < 0 || opt.q_start >= kv.max_position(),
               "quest: the decode query must see every key (q_start ", opt.q_start,
               ", newest key ", kv.max_position(), ")");
  // The q heads of a group become the rows of one item over the group's pages (as dense decode
  // groups them): every key is visible to the newest token, so no causal mask.
  const auto grouped = [&](const TensorView& t) {
    TensorView g = t;
    g.heads = hkv;
    g.seq = group;
    g.stride_seq = t.stride_head;
    g.stride_head = t.stride_head * group;
    return g;
  };
  AttnOptions a = opt;
  a.causal = false;
  a.q_start = -1;
  attention_decode_ranges(grouped(q), kv, grouped(out), ranges, a, lse, stats);
}

bool quest_reads_every_key(const QuestParams& params, int64_t keys) {
  if (params.topp != 0 || keys <= 0) return false;  // a mass budget's size is known after choosing
  const int64_t pages = (keys + params.page - 1) / params.page;
  const int64_t budget = std::min(pages, params.sink + params.topk + params.local) * params.page;
  return double(std::min(budget, keys)) >= params.dense_at * double(keys);
}

void quest_decode(const TensorView& q, const PackedKV& kv, const QuestPages& pages,
                  const QuestParams& params, const TensorView& out, const AttnOptions& opt,
                  float* lse, Stats* stats, QuestDecodeStats* qstats) {
  SPATTN_CHECK(pages.size() == kv.size(), "quest: the page summaries cover ", pages.size(),
               " keys, the cache holds ", kv.size());
  QuestDecodeStats qs;
  std::vector<std::vector<KeyRange>> ranges;
  if (quest_reads_every_key(params, kv.size())) {  // nothing chosen: every page, every key
    const int64_t np = pages.kv_heads() * pages.pages(), n = pages.kv_heads() * kv.size();
    qs = {np, np, n, n, 0.0};
  } else {
    const auto t0 = std::chrono::steady_clock::now();
    ranges = quest_select(q, pages, params, softmax_scale(opt, q.dim), &qs, opt.threads);
    qs.select_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  if (qstats) qstats->add(qs);
  if (qs.keys_read == qs.keys_total)  // every key: dense decode
    attention_decode(q, kv, out, opt, DecodeOptions{}, lse, stats);
  else
    quest_attend(q, kv, ranges, out, opt, lse, stats);
}

}  // namespace spattn

// Quest decode (spattn/quest.hpp): page summaries kept beside the KV cache, the per-page upper
// bound of q . k, the page budget (topk or topp) and the decode over the chosen pages.
#include "spattn/quest.hpp"

#include <algorithm>
#include <bit>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>

#include "spattn/decode.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"
#include "core/threading.hpp"
#include "kernels/quest_bounds.hpp"
#include "kernels/quest_pages.hpp"
#include "kernels/quest_scores.hpp"
#include "masks/block_budget.hpp"
#include "methods/fraction.hpp"
#include "methods/layer_backend.hpp"
#include "methods/registry.hpp"

namespace spattn {

namespace {

uint32_t bits_of(float x) { return std::bit_cast<uint32_t>(x); }

// The k-th largest t (k in [1, a.size()]) of a, values compared as unsigned integers, and how
// many of the k largest equal t (the rest lie above it): a byte at a time from the top, each
// pass counting the candidates' digits, keeping those in the digit where the k-th lies and
// dropping the rest (a is overwritten). Bytes, not wider digits: the passes after the first
// count few candidates, and a pass's scan over the histogram waits on each bin.
struct Kth {
  uint32_t t;
  int64_t ties;
};
Kth kth_largest(std::vector<uint32_t>& a, int64_t k) {
  int64_t m = int64_t(a.size()), need = k;  // the need-th largest of a[0, m)
  for (int at = 24; at >= 0 && m > 1; at -= 8) {
    uint32_t hist[256] = {};
    for (int64_t i = 0; i < m; ++i) ++hist[(a[size_t(i)] >> at) & 255];
    uint32_t digit = 255;
    for (int64_t above = 0;; --digit) {
      if (above + int64_t(hist[digit]) >= need) {
        need -= above;
        break;
      }
      above += hist[digit];
    }
    int64_t j = 0;
    for (int64_t i = 0; i < m; ++i) {
      a[size_t(j)] = a[size_t(i)];
      j += ((a[size_t(i)] >> at) & 255) == digit;
    }
    m = j;
  }
  // Every bit decided (or one candidate left): the m left equal t, the need-th of them is the
  // k-th largest, and the k - need dropped above it are larger.
  return {a[0], need};
}

// One thread's buffers for quest_select, kept from call to call.
struct SelectScratch {
  std::vector<float> qrows, bounds;
  std::vector<float> score, e;
  std::vector<uint32_t> cand;
  std::vector<int64_t> order;
  std::vector<uint8_t> keep;
  std::vector<double> rows;  // per=row: each q head's estimated masses over the pages
  masks::RowMassScratch row_mass;
  std::vector<float> key;     // a forced page's key, widened
  std::vector<double> exact;  // the forced keys' scores
};

// One q row's page masses for a mass budget on G, into out[0, np): the forced pages' (keep[p]
// set: sink and local, read by the decode anyway) exact, the sum over their keys of
// exp(scale (q . k - m)), keys as the cache holds them (kv head g); every other page's
// estimated, page x exp(scale (G_p - m)), G_p the page's expected score (kernels/
// quest_bounds.hpp); m the largest exponent, so nothing overflows. G misjudges exactly the
// pages a budget cannot leave out: the sink page's box, widened by its first key, read as 0.90
// of a head's mass against 0.21 true (code-tiny-8k, log entry "Quest's mass budgets per q head
// on an estimate of page mass"), and a topp then kept too little beside it.
void forced_exact_masses(const float* qr, const float* G, const std::vector<uint8_t>& keep,
                         const PackedKV& kv, int64_t g, int64_t page, int64_t n, float scale,
                         SelectScratch& sc, double* out) {
  const int64_t np = int64_t(keep.size()), dim = kv.dim();
  sc.key.resize(size_t(dim));
  sc.exact.clear();
  double m = -std::numeric_limits<double>::infinity();
  for (int64_t p = 0; p < np; ++p) {
    if (!keep[size_t(p)]) {
      m = std::max(m, double(G[p]));
      continue;
    }
    for (int64_t j = p * page; j < std::min(n, (p + 1) * page); ++j) {
      kv.read_key(g, j, sc.key.data());
      double s = 0;
      for (int64_t c = 0; c < dim; ++c) s += double(qr[c]) * double(sc.key[size_t(c)]);
      sc.exact.push_back(s);
      m = std::max(m, s);
    }
  }
  size_t next = 0;  // the forced keys' scores, in page order
  for (int64_t p = 0; p < np; ++p) {
    double e = 0;
    if (!keep[size_t(p)]) {
      e = double(page) * std::exp(double(scale) * (double(G[p]) - m));
    } else {
      for (int64_t j = p * page; j < std::min(n, (p + 1) * page); ++j)
        e += std::exp(double(scale) * (sc.exact[next++] - m));
    }
    out[p] = e;
  }
}

}  // namespace

QuestParams parse_quest_params(const MethodSpec& spec) {
  SPATTN_CHECK(spec.name == "quest", "quest: not a quest spec ('", spec.text, "')");
  ParamReader r(spec);
  QuestParams p;
  p.page = r.get_int("page", p.page, 16, 64);
  SPATTN_CHECK(p.page % 16 == 0, "quest: page=", p.page, " is not a multiple of 16");
  SPATTN_CHECK(!(r.has("k") && r.has("topp")), "quest: give k (pages) or topp (mass), not both");
  SPATTN_CHECK(!(r.has("min_share") && (r.has("k") || r.has("topp"))),
               "quest: give min_share (a threshold) without k or topp, not both");
  p.topk = r.get_int("k", p.topk, 0, int64_t(1) << 30);
  if (r.has("topp")) p.topp = get_fraction(r, spec.name, "topp", 1.0, Fraction::up_to_one);
  if (r.has("min_share"))
    p.min_share = get_fraction(r, spec.name, "min_share", 0.5, Fraction::below_one);
  // A mass budget reads magnitudes: by default each q head's own mass (per=row) from G, the
  // pages' expected scores; a count keeps the paper's order by U (kernels/quest_bounds.hpp).
  const bool mass = p.topp > 0 || p.min_share > 0;
  p.per_row = read_per_row(r, spec.name, !r.has("topp"), p.topp > 0);
  const std::string est = r.get_string("est", mass ? "gauss" : "bound");
  SPATTN_CHECK(est == "bound" || est == "gauss", "quest: est=", est, " is not bound or gauss");
  p.est = est == "gauss" ? QuestEstimate::gauss : QuestEstimate::bound;
  p.sink = r.get_int("sink", p.sink, 0, int64_t(1) << 30);
  p.local = r.get_int("local", p.local, 1, int64_t(1) << 30);
  p.dense_layers = r.get_int("dense_layers", p.dense_layers, 0, int64_t(1) << 20);
  p.dense_at = get_fraction(r, spec.name, "dense_at", p.dense_at, Fraction::up_to_one);
  const std::string sums = r.get_string("sums", p.sums == QuestSums::i8 ? "i8" : "cache");
  SPATTN_CHECK(sums == "cache" || sums == "i8", "quest: sums=", sums, " is not cache or i8");
  p.sums = sums == "i8" ? QuestSums::i8 : QuestSums::cache;
  r.finish();
  return p;
}

QuestPages::QuestPages(int64_t kv_heads, int64_t dim, int64_t page, int64_t capacity, KVType k_type,
                       QuestSums sums)
    : kv_heads_(kv_heads),
      dim_(dim),
      page_(page),
      capacity_(capacity),
      k_type_(k_type),
      type_(dtype_holding(k_type)) {
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

void QuestPages::encode_block(int64_t h, int64_t b, int64_t c, int64_t end) {
  const int64_t first = b * kernels::kQuestPagePad;
  end = std::min(end, first + kernels::kQuestPagePad);
  float lo[kernels::kQuestPagePad], hi[kernels::kQuestPagePad], amax = 0;
  for (int64_t p = first; p < end; ++p) {
    lo[p - first] = get(h, p, c, false), hi[p - first] = get(h, p, c, true);
    amax = std::max({amax, std::fabs(lo[p - first]), std::fabs(hi[p - first])});
  }
  const size_t i = size_t((h * blocks_ + b) * dim_ + c);
  amax_[i] = amax;
  // A scale too small to be a normal float's 1/126 takes amax itself (codes within +-1).
  scales_[i] = amax / 126.0f > 0 ? amax / 126.0f : amax;
  int8_t* codes = codes_.data() + h * head_elems_;
  if (end > first)  // the block's pages in c lie side by side
    kernels::quest_encode(lo, hi, &scales_[i], 0, end - first,
                          codes + kernels::quest_sum_index(dim_, first, c, false),
                          codes + kernels::quest_sum_index(dim_, first, c, true), 1);
}

size_t QuestPages::offset(int64_t h, int64_t p, int64_t c, bool max) const {
  return size_t(h * head_elems_ + kernels::quest_sum_index(dim_, p, c, max)) * dtype_size(type_);
}

float QuestPages::get(int64_t h, int64_t p, int64_t c, bool max) const {
  return load_as_f32(sums_.data() + offset(h, p, c, max), type_);
}

// The page's running min and max as two f32 rows, read and written once per call rather than
// once per key and dimension (the kernels move a page between the block layout and the rows),
// the same values in the same order: a page's first key sets its summary, each later one takes
// the min / max with it, and the stored summary (the cache's type) holds every such value
// exactly.
void QuestPages::add_keys(int64_t h, int64_t i, const float* keys, int64_t n) {
  if (n <= 0) return;
  const int64_t p = i / page_;
  void* sums = sums_.data() + size_t(h * head_elems_) * dtype_size(type_);
  rows_.resize(size_t(2 * dim_));
  float *lo = rows_.data(), *hi = lo + dim_;
  int64_t t = 1;  // a page's first key sets its summary
  if (i % page_ != 0) {
    kernels::quest_page_read(sums, type_, dim_, p, lo, hi);
    t = 0;
  } else {
    std::copy_n(keys, dim_, lo);
    std::copy_n(keys, dim_, hi);
  }
  for (; t < n; ++t)
    for (int64_t c = 0; c < dim_; ++c) {
      lo[c] = std::min(lo[c], keys[t * dim_ + c]);
      hi[c] = std::max(hi[c], keys[t * dim_ + c]);
    }
  kernels::quest_page_write(sums, type_, dim_, p, lo, hi);
  if (!i8()) return;
  // The block's amax over its pages so far (a block's first page starts it afresh): a larger
  // one redoes the block's codes in c (page p's among them); then page p's codes in every c.
  const int64_t b = p / kernels::kQuestPagePad;
  const bool fresh = p % kernels::kQuestPagePad == 0 && i % page_ == 0;
  const float* amax = amax_.data() + (h * blocks_ + b) * dim_;
  for (int64_t c = 0; c < dim_; ++c)  // lo, hi: as quest_page_write stored them, exactly
    if (fresh || std::max(std::fabs(lo[c]), std::fabs(hi[c])) > amax[c])
      encode_block(h, b, c, p + 1);
  int8_t* codes = codes_.data() + h * head_elems_;
  kernels::quest_encode(lo, hi, scales_.data() + (h * blocks_ + b) * dim_, 1, dim_,
                        codes + kernels::quest_sum_index(dim_, p, 0, false),
                        codes + kernels::quest_sum_index(dim_, p, 0, true),
                        2 * kernels::kQuestPagePad);
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
        if (k.dtype == DType::f32 && k.stride_dim == 1)
          std::copy_n(static_cast<const float*>(k.ptr(h, s + t)), dim_, row);
        else
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
// The bounds U (or the estimates G, est) of kv head h's pages for `rows` query rows
// (q: [rows][dim]), into u (rows x ldu), from the codes or the exact summaries, whichever the
// pages keep for the bound pass; scale: the softmax scale (G's variance term).
void page_bounds(const QuestPages& pages, int64_t h, const float* q, int64_t rows, float* u,
                 int64_t ldu, QuestEstimate est = QuestEstimate::bound, float scale = 0) {
  const auto e =
      est == QuestEstimate::gauss ? kernels::PageEstimate::gauss : kernels::PageEstimate::bound;
  if (pages.i8())
    kernels::quest_bounds_i8(q, rows, pages.dim(), pages.codes(h), pages.scales(h), pages.pages(),
                             u, ldu, e, scale);
  else
    kernels::quest_bounds(q, rows, pages.dim(), pages.data(h), pages.type(), pages.pages(), u, ldu,
                          e, scale);
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
                                                QuestDecodeStats* stats, int threads,
                                                const PackedKV* kv) {
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
  const bool count = params.topp == 0 && params.min_share == 0;
  const bool all = count && params.topk >= last - first;
  // A mass budget on G, the cache at hand: the forced pages count their exact mass.
  const bool exact_forced = kv && !count && params.est == QuestEstimate::gauss;
  SPATTN_CHECK(!kv || (kv->size() == n && kv->kv_heads() == hkv && kv->dim() == q.dim),
               "quest: the cache (", kv ? kv->size() : 0, " keys) is not the one the ", n,
               " keys' summaries describe");
  // Kv heads in parallel (each reads its own summaries, writes its own ranges and stats), each
  // in its thread's scratch: a decode step selects in every sparse layer, and allocating
  // these buffers each time was a tenth of the choice's time.
  parallel_for(hkv, threads, [&](int64_t g, int) {
    thread_local SelectScratch sc;
    std::vector<float>& qrows = sc.qrows;
    std::vector<float>& bounds = sc.bounds;
    std::vector<float>& score = sc.score;
    std::vector<uint8_t>& keep = sc.keep;
    qrows.resize(size_t(group * q.dim));
    bounds.resize(size_t(group * ldu));
    score.resize(size_t(ldu));
    sc.e.resize(size_t(ldu));
    keep.assign(size_t(np), 0);
    for (int64_t p = 0; p < first; ++p) keep[size_t(p)] = 1;
    for (int64_t p = last; p < np; ++p) keep[size_t(p)] = 1;
    if (!all && last > first) {
      // A page's score: its estimated attention mass, the softmax of scale x U (or G,
      // params.est) over the pages, averaged over the q heads of the group (they share the kv
      // head's pages, so its K and V are read once). With one q head per kv head this ranks
      // pages by U, as the paper does.
      // The group's bounds in one pass over the kv head's summaries.
      for (int64_t r = 0; r < group; ++r)
        for (int64_t c = 0; c < q.dim; ++c)
          qrows[size_t(r * q.dim + c)] = q.get(g * group + r, 0, c);
      page_bounds(pages, g, qrows.data(), group, bounds.data(), ldu, params.est, scale);
      if (params.per_row || exact_forced) {
        // Each q head's own page masses: the softmax of its estimates alone, or with the
        // forced pages' exact (forced_exact_masses).
        sc.rows.resize(size_t(group * np));
        for (int64_t r = 0; r < group; ++r) {
          double* row = sc.rows.data() + r * np;
          if (exact_forced) {
            forced_exact_masses(qrows.data() + r * q.dim, bounds.data() + r * ldu, keep, *kv, g,
                                page, n, scale, sc, row);
          } else {
            kernels::quest_page_scores(bounds.data() + r * ldu, 1, ldu, np, scale, score.data(),
                                       sc.e.data());
            std::copy_n(score.data(), np, row);
          }
        }
      }
      if (params.per_row) {  // each q head held to topp
        masks::keep_row_mass({sc.rows.data(), group, np}, np, params.topp, keep, sc.row_mass);
      } else {
        if (exact_forced) {  // the group's mean share, as the kernel's below
          std::fill(score.begin(), score.end(), 0.0f);
          for (int64_t r = 0; r < group; ++r) {
            const double* row = sc.rows.data() + r * np;
            const double total = std::accumulate(row, row + np, 0.0);
            for (int64_t p = 0; p < np; ++p)
              score[size_t(p)] += float(row[p] / total / double(group));
          }
        } else {
          kernels::quest_page_scores(bounds.data(), group, ldu, np, scale, score.data(),
                                     sc.e.data());
        }
        if (params.min_share > 0) {
          // Every page whose score (a share: the scores sum to 1 over the pages) is at least T.
          for (int64_t p = first; p < last; ++p)
            keep[size_t(p)] = uint8_t(double(score[size_t(p)]) >= params.min_share);
        } else if (params.topp == 0) {
          // The topk best: every page scoring above the k-th best score t, then pages scoring t
          // in index order (ties by page index, so the choice is deterministic). t by a radix
          // select on the scores' bits (a non-negative float's bits order as its value), where
          // nth_element's unpredictable branches over 1,790 candidates took 12-14 us of a 32K
          // layer's 75 us page choice.
          const int64_t take = params.topk;
          if (take > 0) {
            sc.cand.resize(size_t(last - first));
            for (int64_t p = first; p < last; ++p)
              sc.cand[size_t(p - first)] = bits_of(score[size_t(p)]);
            const auto [t, equal] = kth_largest(sc.cand, take);
            int64_t ties = equal;
            for (int64_t p = first; p < last; ++p) {  // branch-free: the choice is data
              const uint32_t b = bits_of(score[size_t(p)]);
              keep[size_t(p)] = uint8_t((b > t) | ((b == t) & (ties > 0)));
              ties -= b == t;
            }
          }
        } else {
          // The best pages one at a time off a heap until the mass is reached: the sorted order's
          // prefix (the order is total: largest score first, ties by page index), without sorting
          // the pages never taken.
          const auto after = [&](int64_t a, int64_t b) {
            return score[size_t(a)] != score[size_t(b)] ? score[size_t(a)] < score[size_t(b)]
                                                        : a > b;
          };
          std::vector<int64_t>& order = sc.order;
          order.resize(size_t(last - first));
          std::iota(order.begin(), order.end(), first);
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
      }
    } else {
      std::fill(keep.begin() + first, keep.begin() + last, uint8_t(1));
    }
    auto& r = out[size_t(g)];
    int64_t read = 0, pages_read = 0;
    for (int64_t p = 0; p < np; ++p) {
      if (!keep[size_t(p)]) continue;
      const int64_t b = p * page, end = std::min(n, b + page);
      if (!r.empty() && r.back().end == b)
        r.back().end = end;
      else
        r.push_back({b, end});
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
               "quest: the decode query must see every key (q_start ", opt.q_start, ", newest key ",
               kv.max_position(), ")");
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
  // A mass or threshold budget's size is known only after choosing.
  if (params.topp != 0 || params.min_share != 0 || keys <= 0) return false;
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
    ranges = quest_select(q, pages, params, softmax_scale(opt, q.dim), &qs, opt.threads, &kv);
    qs.select_ms =
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  }
  if (qstats) qstats->add(qs);
  if (qs.keys_read == qs.keys_total)  // every key: dense decode
    attention_decode(q, kv, out, opt, DecodeOptions{}, lse, stats);
  else
    quest_attend(q, kv, ranges, out, opt, lse, stats);
}

namespace {
// Decode (`--attn-decode quest[:...]`) in a model runner: the pages of the layer's cache its
// bounds choose, past the first dense_layers layers (those decode densely and report "dense").
// The session keeps the page summaries where decode() reads them (BackendCaps::quest_page).
class QuestDecode final : public LayerBackend {
 public:
  QuestDecode(std::string spec, const QuestParams& p, bool dense_layer)
      : spec_(std::move(spec)), p_(p), dense_(dense_layer) {}
  std::string name() const override { return dense_ ? "dense" : spec_; }
  BackendCaps capabilities() const override {
    BackendCaps c;
    c.sparse_decode = !dense_;
    c.quest_page = p_.page;
    c.quest_sums = p_.sums;
    c.reads_pages = !dense_;
    return c;
  }
  TensorView prefill(const LayerCall& c) override { return dense_prefill(c); }
  void decode(const LayerCall& c, DecodeReads& reads) override {
    if (dense_) return dense_decode(c, reads);
    QuestDecodeStats qs;
    quest_decode(c.q, *c.packed, *c.pages, p_, c.out, decode_options(c.opt, c.pos0, *c.packed),
                 c.lse, c.stats, &qs);
    reads.keys_read += qs.keys_read;
    reads.keys_total += qs.keys_total;
    reads.pages_read += qs.pages_read;
    reads.pages_total += qs.pages_total;
    reads.select_ms += qs.select_ms;
  }

 private:
  std::string spec_;
  QuestParams p_;
  bool dense_;
};
}  // namespace

std::unique_ptr<LayerBackend> make_quest_decode(const MethodSpec& spec, const BackendContext& ctx) {
  const QuestParams p = parse_quest_params(spec);
  return std::make_unique<QuestDecode>(spec.text, p, ctx.layer < p.dense_layers);
}

}  // namespace spattn

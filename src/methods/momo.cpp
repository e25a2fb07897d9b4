// momo: "Measure Once, Mask Once: Delta Refined Block Sparse Attention" (MOMO), Algorithm 1.
//
//   momo:gamma=auto,chi=128,beta=64,k=128,k_exact=8,topk=exact,k_trim=K,trim=mass,
//        blend=moments,pool=above,sink=1,local=L,delta=on[,topp=P | min_share=T]
//
//   gamma   query stride of the query-sparse pass (every gamma-th row; Section 3, Eq. 1-2): an
//           integer, or auto (default, beyond the paper's fixed 16): per run the smallest of
//           16, 32, 64, ... (a divisor of chi) whose dense sampled rows take at most 1/32 of
//           Eq. 9's per-row budget, C / gamma <= (beta k_trim + S + W + C / gamma) / 32 with
//           C = kv_len; chi if none does (gamma_for). Why: at matched density the oracle spends
//           on its best blocks what momo spends on rows that see every key; at gamma = 16 those
//           rows were over a quarter of the budget at 75% sparsity, and on diffuse layers (a
//           row seen in full adds little; a block more per query block adds a lot) momo trailed
//           oracle_topk by 2-7 points even with perfect selection. With the bound, the
//           structure's own ceiling is within 1.25 points of the oracle on every layer of both
//           code models at ~50% and ~75% sparsity, at the cost of pooling fewer rows per query
//           block (one at 128, which loses 1.2-3.6 points on layers whose blocks vary from row
//           to row: code-tiny-8k layers 1, 2 and 7, code-small-32k layer 5 at ~75%). 1/32 is
//           one rule for every layer and model, chosen from gamma 16-128 measured on every
//           layer of code-tiny-8k and three of code-small-32k; docs/methods/momo.md, "The
//           structural gap". The fused pass's work only shrinks as gamma grows.
//   chi     query rows per block of the block-sparse pass (a multiple of gamma)
//   beta    keys per key block (a multiple of 64, the kernel's key tile)
//   k       key blocks each sampled row selects online (Section 3, Eqs. 3-6)
//   k_exact exact slots of the hybrid selector (its "128/8"); must be <= k for every kind;
//           default min(8, k)
//   topk    exact | tree | estimate | hybrid (the four selectors of src/select); default exact,
//           not the paper's hybrid 128/8: on real attention the block scores drift upward along
//           the row in the order the fused pass delivers them, and the estimate of Eqs. (5)-(6),
//           which takes blocks for good, spends its slots before the best blocks arrive (the
//           hybrid lost up to 36 points of a row's top-k mass, the estimate 68, on
//           code-small-32k's layer 1; docs/methods/momo.md, "MOMO's selection on real attention"). The exact buffer costs a compare per losing block on a
//           CPU, where the SRAM limit the estimate works around does not exist.
//   k_trim  key blocks kept per query block after the union (Appendix, Algorithm 2); default k
//   topp    (beyond the paper; absent by default) a mass budget in (0, 1] instead of a count:
//           per query block the fewest candidates, in the blend's order, whose estimated mass
//           with the sink's and the local window's reaches P of the query block's estimated
//           total, at most k_trim (which gamma=auto still budgets for). The estimate is the
//           blend's score of every causal block (the pooled share plus the rows' votes above
//           their cut), normalised over the causal blocks, so topp needs a blend: with
//           blend=none only the rows' chosen blocks have a score and the rest of the mass has
//           no estimate. Why: "The Sparse Frontier" (arXiv 2504.17768) and Twilight (top-p)
//           find that the blocks a query block needs vary with its attention's spread, which a
//           fixed count cannot follow; the same budget as mean_pool's, xattention's tau and
//           quest's topp.
//   min_share (beyond the paper; absent by default) a budget in (0, 1) by threshold instead: every
//           candidate whose estimated share (the same normalised blend score) is at least T,
//           at most k_trim of them (the best), beside sink and local; needs a blend, as topp.
//           Why: the mean recall over rows is a sum of the kept blocks' shares, and every full
//           block costs the same entries, so at a given density it is highest when blocks are
//           kept by one threshold on their share across all query blocks. topp instead evens
//           out the mass kept per query block (better worst rows, more blocks where attention
//           is spread) and k_trim spends the same count everywhere. On the real dumps at equal
//           density it kept 0.12-2.75 points more recall than k_trim, also where topp lost up
//           to 0.4 (BENCHMARKS.md, "Mass and threshold budgets against counts").
//   trim    mass | mean: how the union ranks a block several sampled rows chose. mean: the mean
//           of their scores S(j) (the paper's "mean calculation"); mass (default): the sum over
//           those rows of the block's share of the row's attention, exp(S(j) - LSE_row), with
//           LSE_row from the same fused pass. Raw S(j) of different rows sit on different scales
//           (each row's own LSE), so the mean favours a block one loud row chose over one every
//           row chose; ranking by mass lost up to 5 points less of the sampled rows' mass.
//   blend   moments | mean_pool | none (beyond the paper; default moments with trim=mass, none
//           with trim=mean, which it needs): how the union ranks a query block's candidates.
//           none: the trim above over the pooled rows' choices alone. mean_pool: every candidate
//           block (sink and local excluded) scores the mean over the block's pooled rows of what
//           the row's share exp(S(j) - LSE_row) holds above its k-th chosen share (a block the
//           row left out is at most that share, so it counts as that: 0), plus its share of the
//           softmax over the query block's causal blocks of the pooled estimate: scale * qm . km,
//           qm and km the means of the block's q rows and of the key block's k rows
//           (mean_pool_rows, the estimate of mean_pool, MOMO's Eq. 1). Why: at gamma=auto a
//           query block has one sampled row, which sees its own needs exactly but not the other
//           127 rows'; on layers whose attention moves from row to row the pooled query sees
//           every row's, roughly (select-diag --study: on code-tiny-8k layer 1 at k = 33 the last
//           row's top-k held 1.95 points less of the block's mass than the block's own top-k,
//           the pooled estimate 0.17, the blend 0.28). moments (default): the pooled estimate
//           with its second-order term, scale * qm . km + scale^2 / 2 * sum_c (qm_c^2 vk_c +
//           vq_c (km_c^2 + vk_c)), vq and vk the per-channel variances over the same rows
//           (pool_row_moments): the log of the mean of exp(score) over the block pair's (row,
//           key) pairs if the score were Gaussian with the variance of a product of independent
//           channels. Why: the block's mass is a mean of exponentials, which favours the blocks
//           where the rows' scores spread (the rows that need the block need it a lot), and the
//           mean query alone cannot see that spread (select-diag --study, code-tiny-8k layer 7
//           at k = 14: the mean query against every key exactly is 0.83 points short of the
//           block's own top-k, against the pooled keys 0.84, with the second-order term 0.66).
//           Its work, in the union step: three d-long products per causal (query block, key
//           block) pair instead of one, and one pass over Q and K (sums and squares): 7.1% of
//           the fused pass's multiply-adds on code-tiny-8k at 8K and 3.7% on code-small-32k at
//           32K (mean_pool: 3.6% and 2.1%); the fused pass itself (k_dense) is unchanged.
//           docs/methods/momo.md, "The selection's last misses" and "The last miss".
//   pool    above | block: the rows the union pools for a query block: its own sampled rows
//           (block, Algorithm 2), or those and the last sampled row above it (above; its choices
//           outside the block's candidates dropped). Default above with a blend, block with
//           blend=none. With the blend, above is as good or better on every layer of both code
//           models at both budgets measured (it brackets the block: the first rows of a block
//           need what the row just above it needs); with blend=none it was a wash on
//           code-tiny-8k (sum of the gaps to the oracle 20.05 against 20.15 points).
//   sink    leading key blocks every query block keeps (the S of Eq. 9); default 1
//   local   key blocks ending at each query block's last causal block, always kept (the W of
//           Eq. 9, the diagonal window); default ceil((chi - 1) / beta) + 1, the most key blocks
//           a query block's diagonal can touch for any alignment (3 at chi = 128, beta = 64)
//   delta   on | off: apply Delta = O_gamma - (O_*)_gamma to the rows of each gamma-group
//           (Eq. 2), or not
//   lambda  (beyond the paper) BLASST's skip rule (blasst_skips, "BLASST: Dynamic Blocked
//           Attention Sparsity via Softmax Thresholding", Section 3) inside both passes, threshold
//           lambda in [0, 1]; absent: no rule. lambda=0 skips nothing and is the same output bit
//           for bit. In the fused pass a skipped tile adds nothing to its block's score S(j) (its
//           mass is below lambda times the running max's), and a block all of whose tiles were
//           skipped is not pushed to the selector (the estimated selector still counts it among
//           the row's blocks, so it is a little stricter there).
//   order   local_first | in_order: the tile visiting order of the rule (BlasstOrder); default
//           local_first, BLASST's default. Only with lambda.
//   timing  0 | 1: add ms_fused, ms_trim, ms_sparse, ms_delta (steady clock) to the extras;
//           off by default, so that two runs report identical extras
// Sink and local blocks are not pushed to the selectors and do not count against k or k_trim.
//
// A run (prefill, q_len > 16):
//   1. Fused pass (Algorithm 1, step 1): K/V packed once; attention_query_sparse over
//      strided_rows(q_len, gamma) (rows gamma-1, 2 gamma-1, ..., and always the last row) gives
//      O_gamma and, through a BlockSelectObserver (spattn/select_observer.hpp), each sampled
//      row's per-64-key-tile LSE, combined by log-add-exp into beta-key blocks, the block score
//      S(j) (Eq. 3), and pushed into the row's own online top-k selector.
//   2. Union and trim (Algorithm 2): the chi / gamma sampled rows of a query block (with
//      pool=above, and the last one above it) pool their selected blocks, a block chosen by
//      several rows takes the sum of its row-normalised masses (trim=mass) or the mean of its
//      scores (trim=mean), with a blend (moments or mean_pool) the rows' votes above their cut
//      and the pooled estimate's share (every candidate), the top k_trim by that (ties: smaller
//      block) are kept, and the sink and local blocks added.
//      The result is a validated causal BlockMask (block_q = chi, block_k = beta).
//   3. Block-sparse pass over the same PackedKV: O_*.
//   4. Delta correction (Eq. 2): row i takes O_*_i + (O_gamma - O_*) at the sampled row of its
//      group (the first sampled row at or after i). Sampled rows take O_gamma itself (copied,
//      bitwise), with delta on or off: with delta=off a non-sampled row is exactly O_*_i, and
//      the output is exact attention restricted to the coverage below.
// LSE (when asked for): the query-sparse pass's LSE at sampled rows (exact), the block-sparse
// pass's LSE of the masked keys elsewhere (the delta correction does not change it).
// Coverage: every causal key for sampled rows, the mask's keys for the others (MomoCoverage).
// Dense shortcut (dense_shortcut.hpp; not with lambda, whose rule still skips): k_trim alone
// (no topp, min_share) covering every key block runs the dense kernel with no fused pass; a
// trimmed mask keeping every block runs it in place of steps 3 and 4.
// Decode (q_len <= 16) runs dense decode (run_decode_or_prefill; lambda does not apply): at
// that few rows there is nothing to sample; the report says path "decode" and covers every key.
// On device tensors (run_cuda) the same geometry goes to cuda::momo_attention (src/cuda/momo.cu),
// which runs steps 1-4 as kernels with no host round trip: the same selections (exact top-k,
// ties to the smaller block), trim, blend and budgets; topk=estimate|hybrid and lambda are
// Errors there, timing adds nothing, and the mask is read back after the run for the report.
//
// Report extras (Table 4 and Eq. 9 of the paper):
//   k_sparse             keys per query row the block-sparse pass attends (mask entries / rows)
//   k_dense              keys per query row the query-sparse pass attends, amortised over all
//                        rows (its score entries / rows)
//   blocks_per_row       mean blocks selected online per sampled row (sink and local excluded)
//   blocks_per_qblock    mean blocks per query block in the trimmed mask (sink, local included)
//   gamma                the query stride this run used (gamma=auto picks it per run)
//   sparsity_eq9         1 - min(1, (beta K + S + W + C / gamma) / C), Eq. 9, with K the mean
//                        selected (non-forced) blocks per query block, S = sink * beta,
//                        W = local * beta, C = kv_len
//   (lambda only) lambda, skipped_fused and skipped_sparse: the fraction of visited key tiles
//                        each pass skipped
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

#include "core/blas.hpp"
#include "core/threading.hpp"
#include "methods/dense_shortcut.hpp"
#include "methods/fraction.hpp"
#include "methods/kernel_path.hpp"
#include "methods/registry.hpp"
#include "spattn/blasst.hpp"
#include "spattn/cuda.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/select.hpp"
#include "spattn/select_observer.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {
namespace {

// gamma=auto (Momo::gamma_for): the smallest stride it picks (the paper's gamma), and the most
// of Eq. 9's budget the dense sampled rows may take.
constexpr int64_t kAutoGammaMin = 16;
constexpr double kAutoDenseShare = 1.0 / 32;

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

// Sampled rows (is_strided_row) see every causal key; every other row sees what the block mask
// lists. Under the skip rule (lambda), less the tiles each pass's query tile skipped: the
// fused pass's tiles hold 64 consecutive sampled rows, the block-sparse pass's tile_rows rows.
class MomoCoverage final : public Coverage {
 public:
  MomoCoverage(std::shared_ptr<const BlockMask> mask, int64_t gamma, int64_t sampled_rows,
               std::optional<SkipStats> fused_skips, std::optional<SkipStats> sparse_skips)
      : mask_(block_mask_coverage(mask)),
        m_(std::move(mask)),
        gamma_(gamma),
        sampled_(sampled_rows),
        fused_(std::move(fused_skips)),
        sparse_(std::move(sparse_skips)) {}
  void row_ranges(int64_t head, int64_t row, std::vector<KeyRange>& out) const override {
    const size_t from = out.size();
    if (is_strided_row(row, m_->q_len, gamma_)) {
      const int64_t lim = causal_limit(row, m_->q_len, m_->kv_len, m_->causal);
      if (lim > 0) out.push_back({0, lim});
      // Its index among strided_rows: row gamma - 1 is 0, and the last row is the last.
      const int64_t ri = row % gamma_ == gamma_ - 1 ? row / gamma_ : sampled_ - 1;
      if (fused_) subtract_skipped_tiles(skipped(*fused_, head, ri), out, from);
      return;
    }
    mask_->row_ranges(head, row, out);
    if (sparse_) subtract_skipped_tiles(skipped(*sparse_, head, row), out, from);
  }

 private:
  static const std::vector<int32_t>& skipped(const SkipStats& s, int64_t head, int64_t row) {
    return s.skipped_tiles[size_t(head * s.q_tiles + row / s.tile_rows)];
  }
  std::unique_ptr<Coverage> mask_;
  std::shared_ptr<const BlockMask> m_;
  int64_t gamma_, sampled_;
  std::optional<SkipStats> fused_, sparse_;
};

class Momo final : public Method {
 public:
  explicit Momo(const MethodSpec& spec) {
    ParamReader r(spec);
    // gamma: an integer, or auto (default): chosen per run from the budget (gamma_for).
    if (!r.has("gamma") || r.get_string("gamma", "auto") == "auto")
      gamma_ = 0;
    else
      gamma_ = r.get_int("gamma", 16, 1, 1 << 20);
    chi_ = r.get_int("chi", 128, 1, 1 << 20);
    beta_ = r.get_int("beta", 64, 64, 1 << 20);
    k_ = int(r.get_int("k", 128, 1, 1 << 24));
    k_exact_ = int(r.get_int("k_exact", std::min(8, k_), 0, 1 << 24));
    const std::string topk = r.get_string("topk", "exact");
    SPATTN_CHECK(topk == "exact" || topk == "tree" || topk == "estimate" || topk == "hybrid",
                 "momo: topk='", topk, "' must be exact, tree, estimate or hybrid");
    kind_ = parse_topk_kind(topk);
    k_trim_ = r.get_int("k_trim", k_, 1, int64_t(1) << 40);
    SPATTN_CHECK(!(r.has("topp") && r.has("min_share")),
                 "momo: give topp (a mass) or min_share (a threshold), not both");
    if (r.has("topp")) topp_ = get_fraction(r, spec.name, "topp", 1.0, Fraction::up_to_one);
    if (r.has("min_share"))
      min_share_ = get_fraction(r, spec.name, "min_share", 0.5, Fraction::below_one);
    const std::string trim = r.get_string("trim", "mass");
    SPATTN_CHECK(trim == "mass" || trim == "mean", "momo: trim='", trim, "' must be mass or mean");
    trim_mass_ = trim == "mass";
    // blend: moments (default with trim=mass), mean_pool or none; see the header.
    const std::string blend = r.get_string("blend", trim_mass_ ? "moments" : "none");
    SPATTN_CHECK(blend == "moments" || blend == "mean_pool" || blend == "none", "momo: blend='",
                 blend, "' must be moments, mean_pool or none");
    SPATTN_CHECK(blend == "none" || trim_mass_, "momo: blend=", blend,
                 " needs trim=mass (it adds "
                 "a share of the query block's attention, which a mean score has no scale for)");
    blend_ = blend != "none";
    SPATTN_CHECK(blend_ || (topp_ == 0 && min_share_ == 0),
                 "momo: ", topp_ > 0 ? "topp" : "min_share",
                 " needs blend=moments or blend=mean_pool (an "
                 "estimate of every causal block's mass; with blend=",
                 blend, " only the rows' chosen blocks have one)");
    moments_ = blend == "moments";
    // pool: above (default with a blend) or block (default with blend=none); see the header.
    const std::string pool = r.get_string("pool", blend_ ? "above" : "block");
    SPATTN_CHECK(pool == "block" || pool == "above", "momo: pool='", pool,
                 "' must be block or above");
    pool_above_ = pool == "above";
    sink_ = r.get_int("sink", 1, 0, int64_t(1) << 40);
    local_ = r.get_int("local", (chi_ - 1 + beta_ - 1) / beta_ + 1, 0, int64_t(1) << 40);
    const std::string delta = r.get_string("delta", "on");
    timing_ = r.get_int("timing", 0, 0, 1) != 0;
    if (r.has("lambda")) {
      blasst_.emplace();
      blasst_->lambda = r.get_double("lambda", 0.0, 0.0, 1.0);
      try {
        blasst_->order = parse_blasst_order(r.get_string("order", "local_first"));
      } catch (const Error& e) {
        detail::fail("momo: order: ", e.what());
      }
    }
    SPATTN_CHECK(blasst_ || !r.has("order"),
                 "momo: order= goes with lambda=X (the skip rule's "
                 "visiting order)");
    r.finish();
    if (gamma_ == 0) {
      SPATTN_CHECK(chi_ % kAutoGammaMin == 0, "momo: chi=", chi_, " must be a multiple of ",
                   kAutoGammaMin, " with gamma=auto (its smallest stride; or give gamma)");
    } else {
      SPATTN_CHECK(gamma_ <= chi_, "momo: gamma=", gamma_, " must be <= chi=", chi_);
      SPATTN_CHECK(chi_ % gamma_ == 0, "momo: chi=", chi_, " must be a multiple of gamma=", gamma_);
    }
    SPATTN_CHECK(beta_ % kKeyBlock == 0, "momo: beta=", beta_, " must be a multiple of ", kKeyBlock,
                 " (the kernel's key tile)");
    SPATTN_CHECK(k_exact_ <= k_, "momo: k_exact=", k_exact_, " must be <= k=", k_);
    SPATTN_CHECK(delta == "on" || delta == "off", "momo: delta='", delta, "' must be on or off");
    delta_ = delta == "on";
  }
  std::string name() const override { return "momo"; }

  // gamma=auto: the smallest stride kAutoGammaMin * 2^i (a divisor of chi) whose dense sampled
  // rows take at most kAutoDenseShare of Eq. 9's per-row budget, (C / gamma) / (beta k_trim +
  // S + W + C / gamma) with C = kv_len; chi if none does. The share bound is the one rule for
  // every layer and model (docs/methods/momo.md, "MOMO's selection on real attention").
  int64_t gamma_for(int64_t kv_len) const {
    if (gamma_ > 0) return gamma_;
    const double C = double(kv_len);
    const double mask = double(beta_) * double(k_trim_ + sink_ + local_);
    int64_t g = kAutoGammaMin;
    while (2 * g <= chi_ && chi_ % (2 * g) == 0 &&
           (C / double(g)) / (mask + C / double(g)) > kAutoDenseShare)
      g *= 2;
    return g;
  }

  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
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

  // The GPU path (src/cuda/momo.cu): the same geometry, selection and mask, every step a
  // kernel on opt.stream; the mask and counts are read back once it is done, for the report.
  MethodReport run_cuda(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    SPATTN_CHECK(opt.causal, "momo: needs causal attention");
    SPATTN_CHECK(opt.q_start < 0 || opt.q_start == k.seq - q.seq,
                 "momo: queries sit bottom-right (q_start -1), got q_start=", opt.q_start);
    SPATTN_CHECK(kind_ == TopKKind::exact || kind_ == TopKKind::tree,
                 "momo: topk=estimate and topk=hybrid have no GPU path (exact and tree, which "
                 "select the same blocks, do)");
    SPATTN_CHECK(!blasst_, "momo: lambda (BLASST's rule inside the passes) has no GPU path yet");
    MethodReport r;
    r.path = run_decode_or_prefill(
        q.seq,
        [&] {
          cuda::attention_decode(q, k, v, out, opt, DecodeOptions{}, lse, &r.stats, nullptr,
                                 opt.stream);
          r.coverage = std::make_shared<FullCoverage>(q.seq, k.seq, opt.causal);
        },
        [&] { prefill_cuda(q, k, v, out, opt, lse, r); });
    return r;
  }

 private:
  // Whether k_trim alone (no topp or min_share) keeps every key block at kv_len keys, so the
  // dense kernel computes the same without the fused pass. Never under lambda, whose rule still
  // skips (the GPU path refuses lambda before asking).
  bool budget_covers(int64_t kv_len) const {
    return !blasst_ && topp_ == 0 && min_share_ == 0 &&
           budget_covers_context(k_trim_, kv_len, beta_);
  }

  // A run's geometry: the stride, the sampled rows, each query block's forced (sink, local)
  // blocks and its first sampled row (rows[first_row[qb]...] lie in block qb).
  struct Geometry {
    int64_t gamma = 0, nqb = 0;
    std::vector<int64_t> rows;
    std::vector<ForcedBlocks> forced;
    std::vector<size_t> first_row;
  };
  Geometry geometry(const BlockMask& mask) const {
    Geometry g;
    g.gamma = gamma_for(mask.kv_len);
    g.nqb = mask.n_qb();
    g.forced.resize(size_t(g.nqb));
    for (int64_t qb = 0; qb < g.nqb; ++qb) {
      ForcedBlocks& f = g.forced[size_t(qb)];
      f.causal_end = mask.causal_blocks(qb);
      f.sink_end = std::min(sink_, f.causal_end);
      f.local_begin = std::max<int64_t>(0, f.causal_end - local_);
    }
    g.rows = strided_rows(mask.q_len, g.gamma);
    g.first_row.resize(size_t(g.nqb + 1));
    for (int64_t qb = 0; qb <= g.nqb; ++qb)
      g.first_row[size_t(qb)] =
          size_t(std::lower_bound(g.rows.begin(), g.rows.end(), qb * chi_) - g.rows.begin());
    return g;
  }

  // The report's stats and extras (see the header), from either device's run.
  void report(MethodReport& rep, const Stats& qs_stats, const Stats& bs_stats, const Geometry& g,
              const BlockMask& mask, int64_t selected_row_blocks,
              int64_t selected_mask_blocks) const {
    const int64_t H = mask.heads, R = int64_t(g.rows.size());
    rep.stats = qs_stats;
    rep.stats.add(bs_stats);
    rep.stats.causal_entries = bs_stats.causal_entries;
    const double qrows = double(H * mask.q_len);
    rep.extras["k_sparse"] = double(bs_stats.score_entries) / qrows;
    rep.extras["k_dense"] = double(qs_stats.score_entries) / qrows;
    rep.extras["blocks_per_row"] = double(selected_row_blocks) / double(H * R);
    rep.extras["blocks_per_qblock"] = double(mask.block_count()) / double(H * g.nqb);
    const double K = double(selected_mask_blocks) / double(H * g.nqb), C = double(mask.kv_len);
    rep.extras["sparsity_eq9"] =
        1.0 - std::min(1.0, (double(beta_) * K + double(sink_ * beta_) + double(local_ * beta_) +
                             C / double(g.gamma)) /
                                C);
    rep.extras["gamma"] = double(g.gamma);
  }

  void prefill_cuda(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const AttnOptions& opt, float* lse,
                    MethodReport& rep) const {
    const int64_t H = q.heads, L = q.seq, Lkv = k.seq;
    // The host's budget shortcut (prefill below), so that both devices report the same run.
    if (budget_covers(Lkv)) {
      run_dense_instead(q, k, v, out, opt, lse, kDenseByBudget, true, nullptr, chi_, beta_, rep);
      return;
    }
    auto mask = std::make_shared<BlockMask>(H, L, Lkv, chi_, beta_, true);
    const Geometry g = geometry(*mask);
    cuda::MomoGpuPlan plan;
    plan.chi = chi_, plan.beta = beta_, plan.k = k_, plan.k_trim = k_trim_;
    plan.trim_mass = trim_mass_, plan.blend = blend_ ? (moments_ ? 2 : 1) : 0;
    plan.pool_above = pool_above_, plan.delta = delta_;
    plan.topp = topp_, plan.min_share = min_share_;
    plan.rows = g.rows, plan.forced = g.forced;
    plan.first_row.assign(g.first_row.begin(), g.first_row.end());
    cuda::MomoGpuResult res;
    cuda::momo_attention(q, k, v, out, plan, opt, lse, res, false, opt.stream);
    *mask = BlockMask::from_lists(H, L, Lkv, chi_, beta_, true, res.lists);
    mask->validate();
    int64_t selected_row_blocks = 0, selected_mask_blocks = 0;
    for (size_t i = 0; i < res.row_blocks.size(); ++i)
      selected_row_blocks += res.row_blocks[i], selected_mask_blocks += res.kept_blocks[i];
    report(rep, res.fused, res.sparse, g, *mask, selected_row_blocks, selected_mask_blocks);
    rep.extras["fused_select"] = res.fused_select ? 1.0 : 0.0;  // SPATTN_CUDA_MOMO_FUSED
    std::shared_ptr<const BlockMask> cmask = std::move(mask);
    rep.coverage = std::make_shared<MomoCoverage>(cmask, g.gamma, int64_t(g.rows.size()),
                                                  std::nullopt, std::nullopt);
    rep.mask = std::move(cmask);
  }

  void prefill(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
               const AttnOptions& opt, float* lse, MethodReport& rep) const {
    validate_attention_args(q, k, v, out, opt);
    const int64_t H = q.heads, L = q.seq, Lkv = k.seq, d = q.dim;
    // A count budget (k_trim, no topp or min_share) covering every key block leaves nothing
    // to skip: dense, with no fused pass (dense_shortcut.hpp). Not under the skip rule, which
    // still skips.
    if (budget_covers(Lkv)) {
      run_dense_instead(q, k, v, out, opt, lse, kDenseByBudget, false, nullptr, chi_, beta_, rep);
      return;
    }
    auto mask = std::make_shared<BlockMask>(H, L, Lkv, chi_, beta_, true);
    const Geometry g = geometry(*mask);
    const int64_t gamma = g.gamma, nqb = g.nqb;
    const std::vector<ForcedBlocks>& forced = g.forced;
    const std::vector<int64_t>& rows = g.rows;
    const std::vector<size_t>& first_row = g.first_row;

    // Step 1: the fused query-sparse pass with online selection.
    auto t0 = Clock::now();
    const PackedKV packed = PackedKV::pack(k, v, 0, opt.threads, opt.bf16_dot);
    const int64_t R = int64_t(rows.size());
    Tensor og(DType::f32, H, R, d);
    std::vector<float> lse_g(size_t(H * R));
    TopKParams params;
    params.kind = kind_;
    params.k = k_;
    params.k_exact = k_exact_;
    BlockSelectObserver observer(H, rows, L, Lkv, beta_, forced, chi_, params);
    Stats qs_stats;
    // Under the skip rule each pass records the tiles it skipped, for the coverage.
    std::optional<SkipStats> fused_skips, sparse_skips;
    BlasstSkip fused_rule, sparse_rule;
    if (blasst_) {
      fused_skips.emplace().record_tiles = true;
      sparse_skips.emplace().record_tiles = true;
      fused_rule = sparse_rule = *blasst_;
      fused_rule.record = &*fused_skips;
      sparse_rule.record = &*sparse_skips;
    }
    attention_query_sparse(q, packed, rows, og, opt, lse_g.data(), &observer, &qs_stats,
                           blasst_ ? &fused_rule : nullptr);
    const double ms_fused = ms_since(t0);

    // Step 2: union and trim (Algorithm 2), one item per (head, query block), in parallel:
    // each item writes only its own list and counts, so the mask is the same for any thread
    // count.
    t0 = Clock::now();
    std::vector<std::vector<int32_t>> lists(size_t(H * nqb));
    const int threads = resolve_threads(opt.threads);
    // blend: the pooled query of each query block against the pooled key of each key block,
    // per q head and per kv head, for the blend's share below. mean_pool: the means
    // (mean_pool_rows), the product scaled in the sgemm. moments: rows of pd = 3 d, so that one
    // product gives the log-normal estimate of the block pair's mean exp(score) (see the
    // header): q side [qm, qm^2, vq], k side [s km, s^2/2 vk, s^2/2 (km^2 + vk)] (s the softmax
    // scale, m means, v variances per channel, pool_row_moments).
    const int64_t nkb = mask->n_kb(), group = H / k.heads;
    const int64_t pd = moments_ ? 3 * d : d;
    const float scale = softmax_scale(opt, d);
    std::vector<std::vector<float>> qpool(size_t(blend_ ? H : 0)),
        kpool(size_t(blend_ ? k.heads : 0));
    if (blend_)
      parallel_for(H + k.heads, threads, [&](int64_t i, int) {
        const bool is_q = i < H;
        const int64_t hh = is_q ? i : i - H;
        std::vector<float>& dst = is_q ? qpool[size_t(hh)] : kpool[size_t(hh)];
        if (!moments_) {
          dst = mean_pool_rows(is_q ? q : k, hh, is_q ? chi_ : beta_);
          return;
        }
        const std::vector<float> mv = pool_row_moments(is_q ? q : k, hh, is_q ? chi_ : beta_);
        const int64_t nb = int64_t(mv.size()) / (2 * d);
        const float s2 = 0.5f * scale * scale;
        dst.resize(size_t(nb * pd));
        for (int64_t b = 0; b < nb; ++b) {
          const float* m = &mv[size_t(b * 2 * d)];
          const float* var = m + d;
          float* o = &dst[size_t(b * pd)];
          for (int64_t c = 0; c < d; ++c) {
            if (is_q) {
              o[c] = m[c], o[d + c] = m[c] * m[c], o[2 * d + c] = var[c];
            } else {
              o[c] = scale * m[c], o[d + c] = s2 * var[c];
              o[2 * d + c] = s2 * (m[c] * m[c] + var[c]);
            }
          }
        }
      });
    // Items of kQbChunk query blocks of one head: the blend's products are one single-threaded
    // sgemm per item, so the mask does not depend on the thread count.
    constexpr int64_t kQbChunk = 16;
    const int64_t chunks = (nqb + kQbChunk - 1) / kQbChunk;
    std::vector<std::vector<BlockScore>> pools(static_cast<size_t>(threads)),
        ones(static_cast<size_t>(threads));
    std::vector<std::vector<float>> scores(size_t(blend_ ? threads : 0)),
        dense(size_t(blend_ ? threads : 0));
    std::vector<int64_t> row_blocks(size_t(H * nqb)), kept_blocks(size_t(H * nqb));
    parallel_for(H * chunks, threads, [&](int64_t chunk_item, int thread) {
      const int64_t h = chunk_item / chunks, qb0 = (chunk_item % chunks) * kQbChunk,
                    qb1 = std::min(nqb, qb0 + kQbChunk);
      if (blend_) {
        std::vector<float>& sc = scores[size_t(thread)];
        sc.resize(size_t((qb1 - qb0) * nkb));
        // Only the key blocks the item's last query block sees (the others are never read).
        const int64_t ncols = forced[size_t(qb1 - 1)].causal_end;
        blas::sgemm(true, qb1 - qb0, ncols, pd, moments_ ? 1.0f : scale,
                    qpool[size_t(h)].data() + qb0 * pd, pd, kpool[size_t(h / group)].data(), pd,
                    0.0f, sc.data(), nkb, 1);
      }
      for (int64_t qb = qb0; qb < qb1; ++qb) {
        const int64_t item = h * nqb + qb;
        std::vector<BlockScore>& pool = pools[size_t(thread)];
        std::vector<BlockScore>& one = ones[size_t(thread)];
        pool.clear();
        const ForcedBlocks& fb = forced[size_t(qb)];
        // pool=above: also the last sampled row above the block (its choices outside this
        // block's candidates, the sink and the local window, dropped).
        const size_t from = first_row[size_t(qb)] - (pool_above_ && first_row[size_t(qb)] > 0);
        for (size_t ri = from; ri < first_row[size_t(qb + 1)]; ++ri) {
          observer.result(h, int64_t(ri), one);
          if (trim_mass_) {
            // The block's share of the row's attention, exp(S(j) - LSE_row): S(j) is an
            // unnormalised log-mass, so raw scores of rows with different LSEs do not compare.
            const double row_lse = double(lse_g[size_t(h * R + int64_t(ri))]);
            for (BlockScore& b : one) b.score = float(std::exp(double(b.score) - row_lse));
          }
          if (blend_ && !one.empty()) {
            // The row knows its shares above its cut and, for every block it left out, only a
            // bound: its k-th share. Those are taken at the bound, so the row's vote is what its
            // chosen blocks hold above it (the k-th itself adds 0), and the blocks it left out
            // are ranked by the pooled estimate alone.
            float cut = one.front().score;
            for (const BlockScore& b : one) cut = std::min(cut, b.score);
            for (BlockScore& b : one) b.score -= cut;
          }
          if (ri < first_row[size_t(qb)])
            one.erase(std::remove_if(one.begin(), one.end(),
                                     [&](const BlockScore& b) {
                                       return b.block < fb.sink_end || b.block >= fb.local_begin;
                                     }),
                      one.end());
          else
            row_blocks[size_t(item)] += int64_t(one.size());
          pool.insert(pool.end(), one.begin(), one.end());
        }
        const double pooled_rows = double(first_row[size_t(qb + 1)] - from);
        // Duplicates (a block several rows chose) take the mean of their scores, or with
        // trim=mass the sum of their shares (a row that did not choose a block adds ~0).
        std::sort(pool.begin(), pool.end(),
                  [](const BlockScore& a, const BlockScore& b) { return a.block < b.block; });
        size_t n = 0;
        for (size_t i = 0; i < pool.size();) {
          size_t e = i;
          double sum = 0;
          while (e < pool.size() && pool[e].block == pool[i].block) sum += pool[e++].score;
          pool[n++] = {pool[i].block, float(trim_mass_ ? sum : sum / double(e - i))};
          i = e;
        }
        pool.resize(n);
        // topp, min_share: the blend's estimate of the query block's total mass, and of the
        // forced blocks' part of it (no candidates: nothing more is needed).
        double mass_total = 0, mass_forced = 0;
        if (blend_ && fb.local_begin > fb.sink_end) {
          // blend=mean_pool: every candidate block scores the mean of the pooled rows' shares
          // (a row that did not choose it adds 0) plus its share of the pooled query's softmax
          // over the query block's causal blocks. The sampled rows see their own needs exactly;
          // the pooled query sees, roughly, every row's.
          const float* srow = scores[size_t(thread)].data() + (qb - qb0) * nkb;
          std::vector<float>& mp = dense[size_t(thread)];
          mp.assign(size_t(fb.causal_end), 0.0f);
          float mx = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j < fb.causal_end; ++j) mx = std::max(mx, srow[j]);
          double tot = 0;
          for (int64_t j = 0; j < fb.causal_end; ++j)
            tot += double(mp[size_t(j)] = std::exp(srow[j] - mx));
          for (float& x : mp) x = float(double(x) / tot);
          for (const BlockScore& b : pool)
            mp[size_t(b.block)] += float(double(b.score) / pooled_rows);
          for (int64_t j = 0; j < fb.causal_end; ++j) {
            mass_total += double(mp[size_t(j)]);
            if (j < fb.sink_end || j >= fb.local_begin) mass_forced += double(mp[size_t(j)]);
          }
          pool.clear();
          for (int64_t j = fb.sink_end; j < fb.local_begin; ++j)
            pool.push_back({int32_t(j), mp[size_t(j)]});
          n = pool.size();
        }
        size_t keep = size_t(std::min<int64_t>(int64_t(n), k_trim_));
        std::partial_sort(pool.begin(), pool.begin() + ptrdiff_t(keep), pool.end(), ranks_before);
        // topp and min_share keep a prefix of those k_trim best: until the kept estimate
        // reaches topp, or while a candidate's share is at least min_share.
        size_t take = 0;
        if (topp_ > 0)
          for (double kept = mass_forced; take < keep && kept < topp_ * mass_total; ++take)
            kept += double(pool[take].score);
        else if (min_share_ > 0)
          while (take < keep && double(pool[take].score) >= min_share_ * mass_total) ++take;
        else
          take = keep;
        keep = take;
        kept_blocks[size_t(item)] = int64_t(keep);
        std::vector<int32_t>& list = lists[size_t(item)];
        const ForcedBlocks& f = forced[size_t(qb)];
        for (int64_t j = 0; j < f.sink_end; ++j) list.push_back(int32_t(j));
        for (size_t i = 0; i < keep; ++i) list.push_back(pool[i].block);
        for (int64_t j = std::max(f.local_begin, f.sink_end); j < f.causal_end; ++j)
          list.push_back(int32_t(j));
        std::sort(list.begin(), list.end());
      }
    });
    int64_t selected_row_blocks = 0, selected_mask_blocks = 0;
    for (size_t i = 0; i < row_blocks.size(); ++i)
      selected_row_blocks += row_blocks[i], selected_mask_blocks += kept_blocks[i];
    *mask = BlockMask::from_lists(H, L, Lkv, chi_, beta_, true, lists);
    mask->validate();
    const double ms_trim = ms_since(t0);
    // The mask kept every block: dense computes the same in place of steps 3 and 4.
    if (!blasst_ && keeps_every_block(*mask)) {
      rep.extras["gamma"] = double(gamma);
      rep.stats = qs_stats;  // the fused pass ran
      run_dense_instead(q, k, v, out, opt, lse, kDenseByEstimate, false, std::move(mask), chi_,
                        beta_, rep);
      return;
    }

    // Step 3: the block-sparse pass over the same packed K/V, in f32 (the correction is added
    // before the one rounding to out's dtype).
    t0 = Clock::now();
    const bool direct = out.dtype == DType::f32 && out.stride_dim == 1;
    Tensor tmp = direct ? Tensor() : Tensor(DType::f32, H, L, d);
    const TensorView os = direct ? out : tmp.view();  // f32, contiguous along dim
    Stats bs_stats;
    attention_block_sparse(q, packed, os, *mask, opt, lse, &bs_stats,
                           blasst_ ? &sparse_rule : nullptr);
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

    report(rep, qs_stats, bs_stats, g, *mask, selected_row_blocks, selected_mask_blocks);
    if (blasst_) {
      rep.extras["lambda"] = blasst_->lambda;
      rep.extras["skipped_fused"] = fused_skips->skipped_fraction();
      rep.extras["skipped_sparse"] = sparse_skips->skipped_fraction();
    }
    if (timing_) {
      rep.extras["ms_fused"] = ms_fused;
      rep.extras["ms_trim"] = ms_trim;
      rep.extras["ms_sparse"] = ms_sparse;
      rep.extras["ms_delta"] = ms_delta;
    }
    std::shared_ptr<const BlockMask> cmask = std::move(mask);
    rep.coverage = std::make_shared<MomoCoverage>(cmask, gamma, R, std::move(fused_skips),
                                                  std::move(sparse_skips));
    rep.mask = std::move(cmask);
  }

  int64_t gamma_, chi_, beta_;
  int k_, k_exact_;
  TopKKind kind_;
  int64_t k_trim_, sink_, local_;
  double topp_ = 0;       // 0: k_trim alone; else the mass budget in (0, 1], at most k_trim blocks
  double min_share_ = 0;  // 0: none; else the share threshold in (0, 1), at most k_trim blocks
  bool delta_ = true, timing_ = false, trim_mass_ = true, pool_above_ = false, blend_ = true,
       moments_ = true;
  std::optional<BlasstSkip> blasst_;  // lambda given: the skip rule (record set per run)
};

}  // namespace

std::unique_ptr<Method> make_momo(const MethodSpec& spec) { return std::make_unique<Momo>(spec); }

}  // namespace spattn

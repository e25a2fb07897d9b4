// Online top-k block selectors: the per-row block choice of "Measure Once, Mask Once: Delta
// Refined Block Sparse Attention" (MOMO), Section 3.
//
// A selector watches a row's key blocks go by, one push(block, score) each, and keeps the k
// it would attend to. The score is the paper's block score S(j) = log sum_{l in B(j)}
// exp(q . k_l) (Section 3, Eq. 3): the row's natural-log sum of exp over the block's keys, of
// the scores as the softmax sees them (scale included), which is what the attention kernel
// hands its observer as a tile's per-row LSE. Equation numbers
// here follow the rendering in which the block score is Eq. (3), the update rule U Eq. (4)
// and the acceptance threshold Eqs. (5)-(6); a later revision numbers each one higher.
//
// Four selectors, each usable alone:
//   ExactTopK       the paper's "Online Exact Top-K": k slots, argmin kept after every update
//   TournamentTopK  the paper's "Tournament Tree Exact Top-K": a winner tree, O(log k) update
//   EstimatedTopK   the paper's "Estimated Online Top-K": O(1), a Gaussian acceptance threshold
//   HybridTopK      the paper's hybrid: k_exact exact slots, the rest estimated
// and TopKSelector, which holds any one of them chosen at run time (TopKKind).
//
// Cost. push() allocates nothing and is inline; a block that loses to the exact selectors'
// current minimum costs one integer compare. reset() allocates only when k grows past what the
// selector held before, so one selector can be reset per row and reused.
//
// Order and ties. Blocks are ranked by score, higher first; equal scores rank the smaller
// block index first (the tie rule of Eq. 4: on s_mu = S(j) the slot takes j iff j < t_mu).
// The exact selectors return exactly the k best blocks under that order, for blocks pushed in
// any order (the attention kernel pushes them in increasing index order, where the rule means
// "an equal score arriving later never displaces an earlier block"). -0.0 and +0.0 are equal
// scores (both are reported as +0.0).
//
// Preconditions, not checked in push(): block >= 0, each block pushed at most once per row,
// score not NaN (+-inf are allowed: a -inf block is still a block and ranks last).
#pragma once
#include <array>
#include <bit>
#include <climits>
#include <cmath>
#include <cstdint>
#include <string_view>
#include <variant>
#include <vector>

namespace spattn {

// One selected block and its score S(j).
struct BlockScore {
  int32_t block = 0;
  float score = 0.0f;
  friend bool operator==(const BlockScore&, const BlockScore&) = default;
};

// The selectors' order: true if a ranks before b (higher score; equal scores, smaller block).
inline bool ranks_before(const BlockScore& a, const BlockScore& b) {
  return a.score > b.score || (a.score == b.score && a.block < b.block);
}

// erf^-1(x) for x in [-1, 1] (+-inf at +-1, NaN outside): M. Giles' single-precision
// approximation ("Approximating the erfinv function", GPU Computing Gems, 2011), within 1e-6
// of the exact inverse (relative, or absolute below 1) on the float grid; the C++ library has
// none. Used for the threshold of Eq. (6).
float erfinv(float x);

namespace topk_detail {

// A (block, score) pair as one unsigned key whose integer order is the selectors' order: the
// high word is the score's bits mapped so unsigned order is float order, the low word the
// complement of the block index (a smaller block is a larger key). With it, Eq. (4)'s three
// cases (pass; equal score and j < t_mu; higher score) are one compare: key > key_mu.
// Key 0 is an empty slot (the paper's s = -inf, t = inf): below every non-NaN score's key.
inline uint64_t make_key(int32_t block, float score) {
  const uint32_t b = std::bit_cast<uint32_t>(score + 0.0f);  // -0 + 0 = +0: one zero
  const uint32_t ordered = (b & 0x80000000u) ? ~b : (b | 0x80000000u);
  return (uint64_t(ordered) << 32) | uint64_t(~uint32_t(block));
}

// kInverse[n] = 1.0 / double(n) (n >= 1), computed at compile time, for the estimate's Welford
// update: a row of up to kInverses blocks divides nowhere (IEEE division is correctly rounded
// at compile time as at run time: the same bits).
inline constexpr int64_t kInverses = 4096;
inline constexpr std::array<double, kInverses> kInverse = [] {
  std::array<double, kInverses> a{};
  for (int64_t n = 1; n < kInverses; ++n) a[size_t(n)] = 1.0 / double(n);
  return a;
}();

inline BlockScore from_key(uint64_t key) {
  const uint32_t ordered = uint32_t(key >> 32);
  const uint32_t b = (ordered & 0x80000000u) ? (ordered & 0x7fffffffu) : ~ordered;
  return {int32_t(~uint32_t(key)), std::bit_cast<float>(b)};
}

}  // namespace topk_detail

class HybridTopK;

// MOMO Section 3, "Online Exact Top-K": the buffers t (blocks) and s (scores) as k keys, with
// mu = argmin s kept after every update so the next push tests only s_mu (Eq. 4). While the
// buffer is still filling, a block takes the next empty slot in O(1) (every empty slot is an
// argmin). Finding the new mu after an update is the paper's O(k) rescan done in two levels:
// the slots are cut into groups of kGroup, each with its minimum and that minimum's slot kept,
// so an update rescans the group it wrote, then the group minima (kGroup + k / kGroup keys, a
// few cache lines, instead of k). The argmin it finds is the same.
class ExactTopK {
 public:
  ExactTopK() = default;  // k = 0: keeps nothing until reset
  explicit ExactTopK(int k) { reset(k); }
  void reset(int k);  // throws Error naming k unless k > 0
  void reset();       // a new row, same k

  void push(int32_t block, float score) {
    const uint64_t key = topk_detail::make_key(block, score);
    if (key > min_key_) replace(key);
  }

  // Every push whose key (topk_detail::make_key) is <= gate() changes nothing (see TopKSelector).
  uint64_t gate() const { return min_key_; }
  int k() const { return int(keys_.size()); }
  int size() const { return filled_; }  // blocks held: min(k, blocks pushed)
  // The held blocks, best first (ranks_before). The first form reuses out's capacity.
  void result(std::vector<BlockScore>& out) const;
  std::vector<BlockScore> result() const;

 private:
  friend class HybridTopK;
  void init(int k);  // k >= 0 unchecked (the hybrid's k_exact may be 0)
  void replace(uint64_t key);
  // Recomputes group g's minimum and its slot; find_min then finds mu from the group minima.
  void rescan_group(int g);
  void find_min();
  // Stores `key` (> min_key_); returns the key it evicted, or 0 if it took an empty slot.
  uint64_t exchange(uint64_t key);

  static constexpr int kGroup = 16;  // slots per group: two cache lines of keys
  std::vector<uint64_t> keys_;       // (t_i, s_i) packed, filled_ of them valid
  std::vector<uint64_t> group_min_;  // per group of kGroup slots, its least key (once full)
  std::vector<uint8_t> group_arg_;   // and that key's slot within the group
  uint64_t min_key_ = ~uint64_t(0);  // key of slot mu; 0 while a slot is empty
  int min_pos_ = 0;                  // mu
  int filled_ = 0;
};

// MOMO Section 3, "Tournament Tree Exact Top-K": a winner tree whose root holds the minimum of
// the k held blocks, so a losing push costs one compare and a winning one replaces the root's
// leaf and replays the matches on its path to the root, O(log k). Heap layout over 2k nodes:
// root at 1, leaves at [k, 2k), node i's parent at i / 2. The paper assumes k is a power of
// two; none is needed: for any k >= 1 the nodes 1..2k-1 in heap order form a complete binary
// tree whose childless nodes are exactly [k, 2k), so each internal node has two children and
// the leaves sit at depths floor(log2 k) and ceil(log2 k) (a path is at most ceil(log2 k) long).
class TournamentTopK {
 public:
  TournamentTopK() = default;  // k = 0: keeps nothing until reset
  explicit TournamentTopK(int k) { reset(k); }
  void reset(int k);  // throws Error naming k unless k > 0
  void reset();

  void push(int32_t block, float score) {
    const uint64_t key = topk_detail::make_key(block, score);
    if (key > node_key_[1]) replace(key);
  }

  uint64_t gate() const { return node_key_[1]; }
  int k() const { return k_; }
  int size() const { return filled_; }
  void result(std::vector<BlockScore>& out) const;
  std::vector<BlockScore> result() const;

 private:
  void replace(uint64_t key);

  int k_ = 0;
  int filled_ = 0;
  // node_key_[i]: the winning (smallest) key under node i (s and t of the paper's 2k buffers);
  // node_leaf_[i]: the leaf it sits in (the paper's t'). Index 0 is unused; at k = 0 the root
  // slot holds the largest key so that nothing enters.
  std::vector<uint64_t> node_key_ = {0, ~uint64_t(0)};
  std::vector<int32_t> node_leaf_;
};

// MOMO Section 3, "Estimated Online Top-K" (Eqs. 5-6, Appendix A): keeps a running mean m and
// variance sigma^2 of the scores seen (Welford's update) and takes a block, for good, when its
// score exceeds
//   s_th = sqrt(2) sigma erfinv(2p - 1) + m,   p = 1 - remaining_slots / remaining_blocks,
// the score that a fraction remaining_slots / remaining_blocks of N(m, sigma^2) exceeds. It
// needs the row's block count up front (reset), and O(1) per push. Precisely:
//   - remaining_blocks counts the pushed block itself (the blocks left to scan at step j, j
//     included); remaining_slots = k - blocks taken.
//   - The block is judged against the statistics of the blocks before it, then joins them.
//   - p <= 0 (as many slots left as blocks, or more): the block is taken without a test, so a
//     row of exactly total_blocks pushes ends with min(k, total_blocks) blocks, never fewer.
//     p >= 1 (no slot left): it is not. Neither case evaluates erfinv.
//   - Before any score is seen (the row's first block) there is no mean: the block is taken.
//     Before a second score, or while all scores so far are equal, sigma = 0 and the
//     threshold is the mean: a block is taken iff its score exceeds it.
//   - "Exceeds" is strict: a score equal to s_th is not taken.
//   - Infinite scores are judged like any other (+inf exceeds every finite threshold, -inf none)
//     but stay out of m and sigma.
//   - Pushing more than total_blocks blocks: the extra ones count as "no block left", so they
//     are taken while slots remain.
// Most pushes are decided by cached bounds on the threshold (see exceeds_threshold), which
// decide as Eq. (6) does up to rounding at s_th itself.
class EstimatedTopK {
 public:
  EstimatedTopK() = default;  // k = 0: keeps nothing until reset
  EstimatedTopK(int k, int64_t total_blocks) { reset(k, total_blocks); }
  // Throws Error naming k unless k > 0, naming total_blocks if it is negative.
  void reset(int k, int64_t total_blocks);
  void reset(int64_t total_blocks);  // a new row, same k

  void push(int32_t block, float score) {
    const int slots = k_ - taken_;
    if (slots <= 0) return;                      // p >= 1
    const int64_t remaining = total_ - seen_++;  // blocks left to scan, this one included
    if (slots >= remaining || exceeds_threshold(score, slots, remaining))
      held_[size_t(taken_++)] = {block, score + 0.0f};
    if (std::isfinite(score)) {
      // Welford's update of m and sigma^2; 1/n is off the dependency chain through m, and
      // read from a table for the first counts (the same value, without a division).
      const int64_t n = ++n_;
      const double x = score, d = x - mean_;
      const double inv_n = n < topk_detail::kInverses ? topk_detail::kInverse[n] : 1.0 / double(n);
      mean_ += d * inv_n;
      m2_ += d * (x - mean_);
    }
  }

  // A push with a slot free updates m and sigma, taken or not; with none it does nothing.
  uint64_t gate() const { return taken_ < k_ ? 0 : ~uint64_t(0); }
  int k() const { return k_; }
  int64_t total_blocks() const { return total_; }
  int size() const { return taken_; }
  // m and sigma (sample standard deviation; 0 before two scores) of the finite scores pushed
  // while a slot was free.
  double mean() const { return mean_; }
  double sigma() const;
  void result(std::vector<BlockScore>& out) const;
  std::vector<BlockScore> result() const;

 private:
  friend class HybridTopK;
  void init(int k, int64_t total_blocks);

  // Eq. (6)'s test with 0 < slots < remaining. Most blocks are decided without erfinv, by
  // cached bounds on z = erfinv(2p - 1) for p >= 1/2 (where s_th >= m): z grows with p, and p
  // falls as the row goes on (fewer blocks left for the same slots) until a block is taken,
  // which raises it. So
  //   z_lo, a lower bound on z at a p_lo a few blocks ahead, stays below z until remaining < r_lo;
  //   z_hi, an upper bound on z when it was cached, stays above z until the next block is taken.
  // A score is rejected when S - m <= sqrt(2) sigma z_lo, taken when S - m > sqrt(2) sigma z_hi,
  // both compared squared, (S - m)^2 (n - 1) against 2 z^2 M2: no division, no square root.
  // The bounds come from erfinv tabulated once on a grid (topk_detail::erfinv_bounds); the
  // scores between them, or the first after they expire, go to exceeds_threshold_exact, which
  // decides by the grid's bounds at the current p and evaluates erfinv only for a score within a
  // few grid steps of s_th.
  bool exceeds_threshold(float score, int slots, int64_t remaining) {
    const double dev = double(score) - mean_;
    if (n_ >= 2 && 2 * int64_t(slots) <= remaining) {  // p >= 1/2
      // Both rejections (S <= m, and S - m at or below the lower bound) in one compare: dev's
      // sign alone is a coin toss per block and would mispredict, while "rejected" is what
      // most blocks are. a carries dev's sign, so a <= 0 iff dev <= 0; the bound is >= 0 (0
      // once expired); for dev > 0, a is (S - m)^2 (n - 1) to the bit.
      const double a = dev * std::fabs(dev) * double(n_ - 1);
      const double lo = remaining >= lo_remaining_ ? lo_2z2_ * m2_ : 0.0;
      if (a <= lo) return false;
      if (slots == hi_slots_ && a > hi_2z2_ * m2_) return true;
    }
    return exceeds_threshold_exact(score, slots, remaining);
  }
  // Eq. (6) itself; renews the bounds that have expired.
  bool exceeds_threshold_exact(float score, int slots, int64_t remaining);

  int k_ = 0, taken_ = 0;
  int64_t total_ = 0, seen_ = 0;
  int64_t n_ = 0;  // Welford: scores in m, sigma
  double mean_ = 0.0, m2_ = 0.0;
  // The bounds: 2 z_lo^2, valid while remaining >= lo_remaining_; 2 z_hi^2, valid while the
  // slots left are hi_slots_.
  int64_t lo_remaining_ = INT64_MAX;
  double lo_2z2_ = 0.0;
  int hi_slots_ = -1;
  double hi_2z2_ = 0.0;
  std::vector<BlockScore> held_;
};

// The paper's hybrid (Section 3, end of "Estimated Online Top-K"; Section 4.2, "Estimated vs.
// Exact k"): the top k_exact blocks by exact top-k, the remaining k - k_exact by the estimate, "so the most important key blocks are never missed by a bad initial running
// statistic". Settings are written k/k_exact: 128/8, 64/64. Combined as a cascade:
//   every block goes to an exact buffer of k_exact slots first; the block that buffer does not
//   keep (the pushed one if it lost, or the minimum it evicted) goes on to an EstimatedTopK of
//   k - k_exact slots over total_blocks - k_exact blocks (each push past the first k_exact
//   hands exactly one block on).
// So the result always holds the row's true top min(k_exact, blocks) blocks, the two parts never
// share a block, and a block evicted from the exact part gets its chance at the estimate. The
// estimate's statistics are those of the blocks handed on (its "first block", taken, is the
// first one handed on). A push costs the exact part's O(k_exact), a constant, plus the
// estimate's O(1), as the paper notes. k_exact = k is ExactTopK(k), k_exact = 0 is
// EstimatedTopK(k, total_blocks), block for block.
class HybridTopK {
 public:
  HybridTopK() = default;
  HybridTopK(int k, int k_exact, int64_t total_blocks) { reset(k, k_exact, total_blocks); }
  // Throws Error naming k unless k > 0, k_exact unless 0 <= k_exact <= k, total_blocks if < 0.
  void reset(int k, int k_exact, int64_t total_blocks);
  void reset(int64_t total_blocks);  // a new row, same k and k_exact

  void push(int32_t block, float score) {
    const uint64_t key = topk_detail::make_key(block, score);
    if (key > exact_.min_key_) {
      const uint64_t out = exact_.exchange(key);
      if (out != 0 && estimate_.k_ > 0) {
        const BlockScore b = topk_detail::from_key(out);
        estimate_.push(b.block, b.score);
      }
    } else if (estimate_.k_ > 0) {
      estimate_.push(block, score + 0.0f);  // as from_key(key) would give it back
    }
  }

  // Once the estimate has no slot left (or none at all), what the exact part does not keep
  // goes nowhere: the exact part's gate; before, every block counts in the estimate's m, sigma.
  uint64_t gate() const { return estimate_.taken_ < estimate_.k_ ? 0 : exact_.gate(); }
  int k() const { return exact_.k() + estimate_.k(); }
  int k_exact() const { return exact_.k(); }
  int size() const { return exact_.size() + estimate_.size(); }
  const ExactTopK& exact_part() const { return exact_; }
  const EstimatedTopK& estimated_part() const { return estimate_; }
  void result(std::vector<BlockScore>& out) const;
  std::vector<BlockScore> result() const;

 private:
  ExactTopK exact_;
  EstimatedTopK estimate_;
};

enum class TopKKind { exact, tree, estimate, hybrid };
// "exact", "tree", "estimate", "hybrid"; throws Error naming the value otherwise.
TopKKind parse_topk_kind(std::string_view s);
const char* topk_kind_name(TopKKind kind);

struct TopKParams {
  TopKKind kind = TopKKind::exact;
  int k = 0;                 // blocks kept per row, > 0
  int k_exact = 0;           // hybrid: exact slots, in [0, k] (checked for every kind)
  int64_t total_blocks = 0;  // estimate, hybrid: blocks in the first row, >= 0
};

// Any selector, chosen at run time (the factory). push() dispatches on the held type; a caller
// driving a kernel per block can instead template on the concrete type.
class TopKSelector {
 public:
  explicit TopKSelector(const TopKParams& p);  // throws Error naming a bad parameter
  void reset(int64_t total_blocks);            // a new row: forget every block, same k
  void push(int32_t block, float score) {
    std::visit([&](auto& s) { s.push(block, score); }, impl_);
  }
  TopKKind kind() const { return TopKKind(impl_.index()); }
  // A key (topk_detail::make_key(block, score)) at or below which push() is certain to keep
  // nothing and change nothing, so a caller may drop such a block with one compare: for the
  // exact selectors their minimum's key, for the estimate 0 while it has a slot free.
  uint64_t gate() const {
    return std::visit([](const auto& s) { return s.gate(); }, impl_);
  }
  // The held selector as its concrete type S, which must be the one kind() names: a caller
  // pushing many rows' blocks dispatches on the kind once instead of once per push.
  template <class S>
  S& as() {
    return *std::get_if<S>(&impl_);
  }
  int k() const;
  int size() const;
  void result(std::vector<BlockScore>& out) const;
  std::vector<BlockScore> result() const;

 private:
  // Alternatives in TopKKind order.
  std::variant<ExactTopK, TournamentTopK, EstimatedTopK, HybridTopK> impl_;
};

}  // namespace spattn

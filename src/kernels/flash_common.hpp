// Target-independent pieces of the flash attention loop: the validated problem, the policy
// interface every kernel form implements, and the scratch sizes. The per-target loop itself
// is in flash-inl.h.
//
// A policy answers the kernel's four questions (DESIGN.md "Kernel shape"):
//   rows:       which query rows form tile t            (all / strided / list)
//   key_ranges: which keys tile t attends to             (all causal / block list)
//   skip:       may this key tile be dropped once its scores are known (BLASST)
//   observe:    who sees each key tile's per-row log-sum-exp          (MOMO)
// The dense policy answers "all, all, never, nobody" with compile-time constants, so the
// dense kernel pays nothing for the hooks.
#pragma once
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"

namespace spattn::kernels {

inline constexpr int64_t kTileKeys = kKeyBlock;  // keys per tile (Bc)
inline constexpr int64_t kMaxTileRows = 128;     // largest query tile (Br) a policy may ask for
inline constexpr float kLog2e = 1.4426950408889634f;
inline constexpr float kLn2 = 0.6931471805599453f;
inline constexpr float kNegInf = -std::numeric_limits<float>::infinity();

// Validated inputs shared by every kernel form.
struct Problem {
  TensorView q, k, v, out;
  float* lse = nullptr;  // [Hq, Lq] natural log, or null
  bool causal = true;
  float scale = 0;       // softmax scale (resolved, > 0)
  int threads = 1;
  int64_t group = 1;     // q heads per kv head
  int64_t q_len = 0, kv_len = 0, dim = 0;
  // Absolute position of query row i is i + pos_offset (bottom-right causal alignment).
  int64_t pos_offset = 0;
};

// Resolves defaults and validates (throws Error).
Problem make_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, float* lse);

// The dense policy: contiguous query tiles of `tile_rows`, every causal key, no skipping,
// no observer. Other policies derive from it and override what they change; the loop calls
// the hooks statically, so an unused hook costs nothing.
struct DensePolicy {
  static constexpr bool kMaySkip = false;  // calls skip() after each tile's scores
  static constexpr bool kObserve = false;  // calls observe() after each contiguous tile
  static constexpr bool kGather = false;   // calls key_columns() for gathered key tiles
  int64_t tile_rows = 64;

  int64_t num_tiles(const Problem& p) const { return (p.q_len + tile_rows - 1) / tile_rows; }
  // Writes the q rows of tile t (ascending) and the output rows they go to; returns how many.
  int64_t rows(const Problem& p, int64_t t, int64_t* q_rows, int64_t* out_rows) const {
    int64_t b = t * tile_rows, n = std::min(tile_rows, p.q_len - b);
    for (int64_t r = 0; r < n; ++r) q_rows[r] = out_rows[r] = b + r;
    return n;
  }
  // Appends the key ranges q head h's tile t attends to; the kernel clips them to the causal
  // limit of the tile's last row (key_limit) and to kv_len, sorts and coalesces them.
  void key_ranges(const Problem& p, int64_t h, int64_t t, int64_t key_limit,
                  std::vector<KeyRange>& out) const {
    out.push_back({0, key_limit});
  }
  // Appends single key columns (kGather): the kernel drops those beyond key_limit or inside a
  // range, and gathers the rest 64 at a time.
  void key_columns(const Problem&, int64_t, int64_t, int64_t, std::vector<int64_t>&) const {}
  // Scheduling weight of (h, t): the keys it may see. Items run longest first.
  int64_t cost(const Problem& p, int64_t h, int64_t t, int64_t last_q_row) const {
    return p.causal ? last_q_row + p.pos_offset + 1 : p.kv_len;
  }
  // After tile key_tile's scores are known (kMaySkip): tile_max and m are per-row maxima of
  // this tile and running maxima before it, in log2 units; entries: score entries it holds.
  // Gathered tiles pass key_tile = -1.
  bool skip(int64_t h, int64_t t, int64_t key_tile, const float* tile_max, const float* m,
            int64_t n, int64_t entries) {
    return false;
  }
  // Each row's natural-log LSE over this contiguous key tile (kObserve).
  void observe(int64_t h, const int64_t* out_rows, int64_t n, int64_t key_tile,
               const float* lse) {}
};

// The dense policy plus a BlockLseObserver (per-(row, key tile) log-sum-exp).
struct ObservedDensePolicy : DensePolicy {
  static constexpr bool kObserve = true;
  BlockLseObserver* observer = nullptr;
  // Output rows of a tile are contiguous in every policy that observes.
  void observe(int64_t h, const int64_t* out_rows, int64_t n, int64_t key_tile,
               const float* lse) {
    observer->observe(h, out_rows[0], n, key_tile, lse);
  }
};

// Sorted, clipped to [0, limit), adjacent/overlapping ranges merged.
inline void NormalizeRanges(std::vector<KeyRange>& r, int64_t limit) {
  for (auto& x : r) {
    x.begin = std::max<int64_t>(x.begin, 0);
    x.end = std::min(x.end, limit);
  }
  r.erase(std::remove_if(r.begin(), r.end(), [](const KeyRange& x) { return x.end <= x.begin; }),
          r.end());
  std::sort(r.begin(), r.end(), [](const KeyRange& a, const KeyRange& b) { return a.begin < b.begin; });
  size_t w = 0;
  for (size_t i = 0; i < r.size(); ++i) {
    if (w > 0 && r[i].begin <= r[w - 1].end) r[w - 1].end = std::max(r[w - 1].end, r[i].end);
    else r[w++] = r[i];
  }
  r.resize(w);
}

// Drops columns beyond limit or inside a range; sorts and dedups the rest.
inline void NormalizeColumns(std::vector<int64_t>& cols, const std::vector<KeyRange>& ranges,
                             int64_t limit) {
  std::sort(cols.begin(), cols.end());
  cols.erase(std::unique(cols.begin(), cols.end()), cols.end());
  size_t w = 0, ri = 0;
  for (int64_t c : cols) {
    if (c < 0 || c >= limit) continue;
    while (ri < ranges.size() && ranges[ri].end <= c) ++ri;
    if (ri < ranges.size() && ranges[ri].begin <= c) continue;
    cols[w++] = c;
  }
  cols.resize(w);
}

// Sums the per-thread Stats of one call into *stats (if given), with the whole problem's
// entries and the FLOPs of the entries computed.
void add_kernel_stats(const Problem& p, const std::vector<Stats>& parts, Stats* stats);

// out[h, row, :] = src[0..dim) * scale, in out's dtype and strides.
void store_row(const TensorView& out, int64_t h, int64_t row, const float* src, int64_t dim,
               float scale);

// Throws Error unless lambda (BLASST's threshold) is in [0, 1]; `who` prefixes the message.
void check_lambda(double lambda, const char* who);

// Test hook: when false, bf16 inputs take the portable widen-to-f32 path even where the CPU
// has bf16 dot-product instructions.
void set_bf16_dot_enabled(bool enabled);
bool bf16_dot_enabled();
bool cpu_has_bf16_dot();

// Which operand path bf16 inputs take, chosen by measurement rather than by CPU flag alone.
struct Bf16PathChoice {
  bool dot = false;     // the bf16 dot-product path was chosen (and is now enabled)
  double dot_ms = 0;    // median time of the probe on each path; both 0 when nothing was
  double widen_ms = 0;  // timed (the CPU lacks AVX512_BF16, so only widening can run)
};
// Times attention_dense on a causal bf16 problem of 2 heads x seq x dim with the dot path and
// the widened path, one warm-up each and then `reps` runs round-robin (dot, widen, dot, ...),
// and enables the path with the lower median (set_bf16_dot_enabled). Numerics of both paths
// are untouched; only which one runs changes. About 2 (reps + 1) dense calls.
Bf16PathChoice choose_bf16_path(int threads, int64_t dim = 128, int64_t seq = 2048,
                                int reps = 5);

}  // namespace spattn::kernels

// The flash attention loop, compiled once per SIMD target (hwy/foreach_target.h).
//
// One work item is (q head h, query tile t). For each key tile the policy lets through:
//   S   = Q_t K_j^T                       (Scores; unscaled f32)
//   x   = S * scale * log2(e)             (base-2 softmax: exp2 is cheaper than exp)
//   m'  = max(m, rowmax x)                (running max, per row)
//   P   = 2^(x - m'),  alpha = 2^(m - m')
//   l   = alpha l + rowsum P,  O = alpha O + P V_j
// and at the end O /= l, LSE = (m + log2 l) ln 2. Storage of K and V is packed once per call
// into tile-major layouts the micro-kernels stream (K transposed so scores vectorize along
// keys; V row-major so P.V vectorizes along the head dim).
//
// Two operand formats: F32Ops (every target; bf16/f16 inputs are widened while packing) and,
// on AVX-512 CPUs with AVX512_BF16, Bf16DotOps, which keep bf16 operands and use vdpbf16ps
// (two products per lane per instruction) for both S and P.V.

#if defined(SPATTN_KERNELS_FLASH_INL_H_) == defined(HWY_TARGET_TOGGLE)
#ifdef SPATTN_KERNELS_FLASH_INL_H_
#undef SPATTN_KERNELS_FLASH_INL_H_
#else
#define SPATTN_KERNELS_FLASH_INL_H_
#endif

#include <algorithm>
#include <cstring>
#include <memory>
#include <numeric>
#include <type_traits>
#include <vector>

#include "core/threading.hpp"
#include "hwy/cache_control.h"
#include "hwy/contrib/math/math-inl.h"
#include "hwy/highway.h"
#include "kernels/flash_common.hpp"
#include "kernels/packed_kv.hpp"
#include "spattn/error.hpp"

HWY_BEFORE_NAMESPACE();
// The pieces, in the order each needs the ones before (every one is per target, like this file).
#include "kernels/flash_simd-inl.h"      // vector type, blocking, exp2, element access
#include "kernels/flash_avx512-inl.h"    // AVX-512 only: shifted permute, Bf16DotOps
#include "kernels/flash_f32_ops-inl.h"   // F32Ops
#include "kernels/flash_kv_widen-inl.h"  // stored K/V tiles widened to F32Ops' layouts
#include "kernels/group_tiles-inl.h"     // stored 16-bit tiles read in place (decode)
#include "kernels/flash_pack-inl.h"      // packing K/V and head columns
#include "kernels/flash_softmax-inl.h"   // masks, row max, online softmax, finalize
#include "kernels/flash_scratch-inl.h"   // per-thread scratch, KVTiles
#include "kernels/flash_tile-inl.h"      // RunTile: one work item
namespace spattn::kernels::HWY_NAMESPACE {

// Fixed assignment of items (already longest first) to threads: each goes to the thread with
// the least cost so far (ties: the lowest index). Used when a policy reduces per-thread state,
// whose sums must not depend on which thread was quicker to claim an item.
inline std::vector<std::vector<int64_t>> StaticSchedule(const std::vector<int64_t>& costs,
                                                        int threads) {
  std::vector<std::vector<int64_t>> lists(static_cast<size_t>(threads));
  std::vector<int64_t> load(static_cast<size_t>(threads), 0);
  for (size_t i = 0; i < costs.size(); ++i) {
    const size_t w = size_t(std::min_element(load.begin(), load.end()) - load.begin());
    lists[w].push_back(int64_t(i));
    load[w] += std::max<int64_t>(costs[i], 1);
  }
  return lists;
}

template <class Ops, class Policy>
void RunFlashOps(const Problem& p, Policy& pol, const PackedKVData& packed, Stats* stats) {
  const int64_t dp = packed.dp;
  std::vector<HeadColumns> columns;
  if constexpr (Policy::KeySource::kPackedColumns) columns = PackHeadColumns<Ops>(p, pol, packed);
  const KVTiles<Ops> kv{packed, packed.mask_positions(), &columns};

  // Items kv head by kv head, each head's longest first: the threads then stream the same
  // head's K and V at the same time (at 16K two heads' K/V overflow a 32 MiB L3, one does not:
  // 74% -> 79% of the FMA peak on Zen 5), and the last items to run are short, so they finish
  // together. The order is fixed, and each item is computed by one thread, so the output does
  // not depend on scheduling.
  const int64_t tiles = pol.num_tiles(p);
  struct Item {
    int64_t h, t, cost;
  };
  std::vector<Item> items;
  items.reserve(size_t(tiles * p.q.heads));
  std::vector<int64_t> rows(kMaxTileRows), out_rows(kMaxTileRows);
  for (int64_t t = 0; t < tiles; ++t) {
    const int64_t n = pol.rows(p, t, rows.data(), out_rows.data());
    if (n <= 0) continue;
    for (int64_t h = 0; h < p.q.heads; ++h)
      items.push_back({h, t, pol.cost(p, h, t, rows[size_t(n - 1)])});
  }
  std::stable_sort(items.begin(), items.end(), [&](const Item& a, const Item& b) {
    const int64_t ka = a.h / p.group, kb = b.h / p.group;
    return ka != kb ? ka < kb : a.cost > b.cost;
  });

  const int threads =
      int(std::min<int64_t>(p.threads, std::max<int64_t>(1, int64_t(items.size()))));
  std::vector<std::unique_ptr<Scratch<Ops>>> scratch;
  std::vector<Stats> part(static_cast<size_t>(threads));
  std::vector<typename Policy::Local> locals(static_cast<size_t>(threads));
  for (int i = 0; i < threads; ++i) {
    scratch.push_back(std::make_unique<Scratch<Ops>>(p.dim, dp));
    scratch.back()->win.init(packed);
  }
  const Policy& cpol = pol;
  auto run = [&](int64_t i, size_t tid) {
    const Item& it = items[size_t(i)];
    RunTile<Ops>(p, cpol, locals[tid], kv, dp, it.h, it.t, *scratch[tid], part[tid]);
  };
  if constexpr (Policy::Observers::kReduce) {
    std::vector<int64_t> costs;
    for (const Item& it : items) costs.push_back(it.cost);
    const auto lists = StaticSchedule(costs, threads);
    parallel_for(threads, threads, [&](int64_t w, int) {
      for (int64_t i : lists[size_t(w)]) run(i, size_t(w));
    });
    pol.reduce(locals);
  } else {
    parallel_for(int64_t(items.size()), threads, [&](int64_t i, int tid) { run(i, size_t(tid)); });
  }
  add_kernel_stats(p, part, stats);
}

// Runs the loop with the caller's packed K/V, or packs p.k and p.v for this call. The operand
// format is the packed one's; for a call that packs, bf16 inputs use bf16 dot products where
// this target and CPU have them.
template <class Policy>
void RunFlash(const Problem& p, Policy& pol, Stats* stats) {
  static_assert(FlashPolicy<Policy>,
                "a flash policy needs the DensePolicy hooks with their signatures (derive from "
                "DensePolicy and override what changes)");
  const PackedKVData* packed = p.packed;
  PackedKVData own;
  if (!packed) {
    PackInto(own, OperandsHere(p.q.dtype, p.bf16_dot), p.k, p.v, p.threads);
    packed = &own;
  }
#if HWY_TARGET == HWY_AVX3
  if (packed->ops == Operands::bf16_dot) {
    RunFlashOps<Bf16DotOps>(p, pol, *packed, stats);
    return;
  }
#endif
  SPATTN_CHECK(packed->ops == Operands::f32,
               "this K/V was packed for bf16 dot products, which the SIMD target now running "
               "lacks: pack it again");
  RunFlashOps<F32Ops>(p, pol, *packed, stats);
}

}  // namespace spattn::kernels::HWY_NAMESPACE
HWY_AFTER_NAMESPACE();

#endif  // include guard

// Token-sparse attention (spattn/token_sparse.hpp: DSA's per-query tokens) against its plain
// twin: for each q head and row, softmax attention in double over exactly the keys the row
// lists (or every key up to its position), computed from the raw K/V. Over f32, f16-stored and
// bf16-pair caches, prefill rows (their keys gathered from token-major rows) and one decode row
// (gathered from the packed tiles), rows of lists and of "all" mixed; stored caches bit for bit as
// f32 ones; the work is the lists' and nothing more; bad selections are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/kv_type.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/token_sparse.hpp"
#include "targets.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::random_tensor;

// The value a cache of type t stores for x.
float stored(KVType t, float x) {
  float y = x;
  if (t != KVType::f32) kv_round_row(t, &x, &y, 1);
  return y;
}

// Row i (position pos0 + i) of q head h over the keys `keys` of raw k, v, in double.
std::vector<double> plain_row(const Tensor& q, const Tensor& k, const Tensor& v, int64_t h,
                              int64_t i, const std::vector<int64_t>& keys, int64_t group, KVType kt,
                              KVType vt) {
  const TensorView qv = q.view(), kv = k.view(), vv = v.view();
  const int64_t d = qv.dim, kh = h / group;
  const double scale = 1.0 / std::sqrt(double(d));
  std::vector<double> s;
  double mx = -INFINITY;
  for (int64_t j : keys) {
    double dot = 0;
    for (int64_t c = 0; c < d; ++c)
      dot += double(qv.get(h, i, c)) * double(stored(kt, kv.get(kh, j, c)));
    s.push_back(dot * scale);
    mx = std::max(mx, s.back());
  }
  double sum = 0;
  for (double& x : s) sum += (x = std::exp(x - mx));
  std::vector<double> o(size_t(d), 0.0);
  for (size_t a = 0; a < keys.size(); ++a)
    for (int64_t c = 0; c < d; ++c)
      o[size_t(c)] += s[a] / sum * double(stored(vt, vv.get(kh, keys[a], c)));
  return o;
}

struct Case {
  int64_t hq, hkv, n, pos0, d, per_row;  // per_row: keys a listed row keeps
  KVType type;
  DType dtype = DType::f32;  // bf16: the cache in bf16 pairs where the CPU has AVX512_BF16
  double tol = 2e-5;
};

void check_case(const Case& c, uint64_t seed) {
  const int64_t L = c.pos0 + c.n;
  Tensor q = random_tensor(c.dtype, c.hq, c.n, c.d, seed),
         k = random_tensor(c.dtype, c.hkv, L, c.d, seed + 1),
         v = random_tensor(c.dtype, c.hkv, L, c.d, seed + 2);
  PackedKV kv = PackedKV::pack(k.view(), v.view(), 0, 1, true, c.type, c.type);
  // Rows that see at most per_row keys read them all; the others a random set of per_row keys
  // at or before their position (their own among them every third row).
  std::mt19937_64 rng(seed + 3);
  TokenSelection sel;
  std::vector<std::vector<int64_t>> lists;
  for (int64_t i = 0; i < c.n; ++i) {
    const int64_t pos = c.pos0 + i;
    std::vector<int64_t> all(size_t(pos + 1));
    for (int64_t j = 0; j <= pos; ++j) all[size_t(j)] = j;
    if (pos + 1 <= c.per_row) {
      sel.add_all();
      lists.push_back(all);
      continue;
    }
    std::shuffle(all.begin(), all.end(), rng);
    all.resize(size_t(c.per_row));
    if (i % 3 == 0 && std::find(all.begin(), all.end(), pos) == all.end()) all[0] = pos;
    std::sort(all.begin(), all.end());
    lists.push_back(all);
    sel.add(all);
  }
  Tensor out(DType::f32, c.hq, c.n, c.d);
  AttnOptions opt;
  opt.threads = 2;
  opt.q_start = c.pos0;
  Stats st;
  attention_token_sparse(q.view(), kv, out.view(), sel, opt, nullptr, &st);
  int64_t entries = 0;
  for (int64_t h = 0; h < c.hq; ++h)
    for (int64_t i = 0; i < c.n; ++i) {
      entries += int64_t(lists[size_t(i)].size());
      const std::vector<double> want =
          plain_row(q, k, v, h, i, lists[size_t(i)], c.hq / c.hkv, c.type, c.type);
      for (int64_t cc = 0; cc < c.d; ++cc)
        ASSERT_NEAR(out.view().get(h, i, cc), want[size_t(cc)], c.tol)
            << "head " << h << " row " << i << " dim " << cc;
    }
  EXPECT_EQ(st.score_entries, entries);
}

TEST(TokenSparse, EqualsPlainAttentionOverEachRowsKeys) {
  check_case({2, 2, 150, 0, 32, 40, KVType::f32}, 1);    // prefill from 0: all, then lists
  check_case({4, 2, 70, 300, 64, 100, KVType::f32}, 2);  // GQA, a chunk placed later
  check_case({2, 1, 90, 200, 32, 64, KVType::f16}, 3);   // an f16 cache
  check_case({3, 3, 1, 1000, 64, 128, KVType::f16}, 4);  // one decode row
  check_case({2, 2, 5, 10, 16, 300, KVType::f32}, 5);    // every row reads all
  // The latent attention's absorbed form: 16 q heads over one kv head of the widest head dim
  // (kMaxHeadDim: DeepSeek's 512-wide kv latent then its 64-wide rope key), prefill and decode.
  check_case({16, 1, 40, 300, kMaxHeadDim, 100, KVType::bf16}, 6);
  check_case({16, 1, 1, 500, kMaxHeadDim, 64, KVType::f16}, 7);
  // bf16 inputs: the bf16 dot path's pair layouts (P rounded to bf16 for P V), prefill and decode.
  check_case({4, 2, 70, 300, 64, 100, KVType::f32, DType::bf16, 1e-2}, 8);
  check_case({4, 2, 1, 700, 64, 100, KVType::f32, DType::bf16, 1e-2}, 9);
  // More q heads a kv head than a tile has rows (the absorbed latent's 128): the listed keys
  // staged once for the call, a decode row and a chunk of rows with lists of their own.
  check_case({128, 1, 1, 500, 64, 100, KVType::f16}, 10);
  check_case({80, 1, 3, 6000, 64, 50, KVType::bf16}, 11);
}

// Token-major q and out ([seq, heads, dim], as the runner holds them) over one kv head: the loop
// reads a query's heads in place as its grouped rows; the same values as through copies of
// head-major views, bit for bit, and as the plain twin's.
TEST(TokenSparse, TokenMajorRowsGroupInPlace) {
  const int64_t hq = 16, n = 30, pos0 = 200, d = 64, L = pos0 + n;
  Tensor q = random_tensor(DType::f32, hq, n, d, 11), k = random_tensor(DType::f32, 1, L, d, 12),
         v = random_tensor(DType::f32, 1, L, d, 13);
  PackedKV kv = PackedKV::pack(k.view(), v.view(), 0, 1, true, KVType::f16, KVType::f16);
  TokenSelection sel;
  std::vector<std::vector<int64_t>> lists;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> keys;
    for (int64_t j = (i * 7) % 5; j <= pos0 + i; j += 3 + i % 4) keys.push_back(j);
    lists.push_back(keys);
    sel.add(keys);
  }
  std::vector<float> q_tm(size_t(hq * n * d)), out_tm(q_tm.size());
  const TensorView qt = TensorView::shd(q_tm.data(), DType::f32, hq, n, d),
                   ot = TensorView::shd(out_tm.data(), DType::f32, hq, n, d);
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < n; ++i)
      for (int64_t c = 0; c < d; ++c) qt.set(h, i, c, q.view().get(h, i, c));
  Tensor out(DType::f32, hq, n, d);
  std::vector<float> lse_t(size_t(hq * n)), lse(lse_t.size());
  AttnOptions opt;
  opt.threads = 2;
  opt.q_start = pos0;
  attention_token_sparse(qt, kv, ot, sel, opt, lse_t.data());
  attention_token_sparse(q.view(), kv, out.view(), sel, opt, lse.data());
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < n; ++i) {
      ASSERT_EQ(lse_t[size_t(h * n + i)], lse[size_t(h * n + i)]) << "head " << h << " row " << i;
      const std::vector<double> want =
          plain_row(q, k, v, h, i, lists[size_t(i)], hq, KVType::f16, KVType::f16);
      for (int64_t c = 0; c < d; ++c) {
        ASSERT_EQ(ot.get(h, i, c), out.view().get(h, i, c)) << "head " << h << " row " << i;
        ASSERT_NEAR(ot.get(h, i, c), want[size_t(c)], 2e-5) << "head " << h << " row " << i;
      }
    }
}

// The last n rows of an L-key cache, each listing per_row of its causal keys drawn uniformly.
TokenSelection uniform_lists(int64_t L, int64_t n, int64_t per_row, uint64_t seed) {
  std::mt19937_64 rng(seed);
  TokenSelection sel;
  for (int64_t i = 0; i < n; ++i) {
    std::vector<int64_t> keys(size_t(L - n + i + 1));
    for (size_t j = 0; j < keys.size(); ++j) keys[j] = int64_t(j);
    std::shuffle(keys.begin(), keys.end(), rng);
    keys.resize(size_t(per_row));
    sel.add(keys);
  }
  return sel;
}

// A cache stored as f16, bf16 or q8_0 computes what an f32 cache of its stored values does, bit
// for bit, on both of the gather's paths and every SIMD target: prefill (60 rows of 100 keys
// over 400: the cache is widened once, whole) and decode (one row of 100 or of 12 keys: only
// the listed keys widened, K a key group at a time, many groups holding none at 12). Stats
// report what the prefill call staged: the widened copy (none for f32) and the token-major keys.
TEST(TokenSparse, StoredCacheEqualsAnF32CacheOfItsValues) {
  const int64_t hq = 4, d = 64, L = 400;
  Tensor k = random_tensor(DType::f32, 1, L, d, 21), v = random_tensor(DType::f32, 1, L, d, 22);
  struct Shape {
    int64_t n, per_row;
  };
  test::for_each_target([&] {
    for (KVType t : {KVType::f16, KVType::bf16, KVType::q8_0})
      for (const Shape sh : {Shape{60, 100}, Shape{1, 100}, Shape{1, 12}}) {
        const int64_t n = sh.n;
        Tensor ks(DType::f32, 1, L, d), vs(DType::f32, 1, L, d);
        for (int64_t j = 0; j < L; ++j) {
          kv_round_row(t, k.data_as<float>() + j * d, ks.data_as<float>() + j * d, d);
          kv_round_row(t, v.data_as<float>() + j * d, vs.data_as<float>() + j * d, d);
        }
        PackedKV stored = PackedKV::pack(k.view(), v.view(), 0, 1, true, t, t);
        PackedKV f32 = PackedKV::pack(ks.view(), vs.view(), 0, 1, false);
        Tensor q = random_tensor(DType::f32, hq, n, d, 23);
        const TokenSelection sel = uniform_lists(L, n, sh.per_row, 24);
        AttnOptions opt;
        opt.threads = 2;
        opt.q_start = L - n;
        Tensor out_s(DType::f32, hq, n, d), out_f(DType::f32, hq, n, d);
        std::vector<float> lse_s(size_t(hq * n)), lse_f(lse_s.size());
        Stats st_s, st_f;
        attention_token_sparse(q.view(), stored, out_s.view(), sel, opt, lse_s.data(), &st_s);
        attention_token_sparse(q.view(), f32, out_f.view(), sel, opt, lse_f.data(), &st_f);
        const int64_t k_rows = n == 1 ? 0 : L * d * int64_t(sizeof(float));
        EXPECT_EQ(st_f.staged_bytes, k_rows) << kv_type_name(t) << " rows " << n;
        EXPECT_EQ(st_s.staged_bytes, n == 1 ? 0 : k_rows + int64_t(f32.bytes()))
            << kv_type_name(t) << " rows " << n;
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t i = 0; i < n; ++i) {
            ASSERT_EQ(lse_s[size_t(h * n + i)], lse_f[size_t(h * n + i)])
                << kv_type_name(t) << " rows " << n << " keys " << sh.per_row << " head " << h
                << " row " << i;
            for (int64_t c = 0; c < d; ++c)
              ASSERT_EQ(out_s.view().get(h, i, c), out_f.view().get(h, i, c))
                  << kv_type_name(t) << " rows " << n << " keys " << sh.per_row << " head " << h
                  << " row " << i;
          }
      }
  });
}

// A query with more q heads than a tile's rows (DeepSeek's absorbed latent: 128 over one kv
// head) has its listed keys staged once for the call, where each tile of its rows would gather
// them for itself: the same bits as the same rows in calls of half the heads (tiles of at most
// 64 rows, each gathering), over every stored type, V stored or V the keys, one decode row and
// three rows with lists of their own (over keys enough that the call does not widen the whole
// cache instead), on every SIMD target, at a head dim whose V rows are padded (40 -> 48) and
// one whose are not. Stats report the staged copy: the listed keys' K and V tiles (one tile of
// rows where V is K) and positions.
TEST(TokenSparse, WideGroupsStageTheirKeysOnce) {
  struct Shape {
    int64_t hq, n, L, per_row;
  };
  test::for_each_target([&] {
    for (int64_t d : {64, 40})
      for (KVType t : {KVType::f32, KVType::f16, KVType::bf16, KVType::q8_0})
        for (bool v_is_k : {false, true})
          for (const Shape sh : {Shape{128, 1, 400, 100}, Shape{80, 3, 6000, 50}}) {
            if (t == KVType::q8_0 && d % 32 != 0) continue;
            const int64_t n = sh.n, half = sh.hq / 2, L = sh.L;
            const Tensor k = random_tensor(DType::f32, 1, L, d, 31),
                         v = random_tensor(DType::f32, 1, L, d, 32);
            const PackedKV kv =
                PackedKV::pack(k.view(), v_is_k ? k.view() : v.view(), 0, 1, false, t, t, v_is_k);
            const Tensor q = random_tensor(DType::f32, sh.hq, n, d, 33);
            const TokenSelection sel = uniform_lists(L, n, sh.per_row, 34);
            AttnOptions opt;
            opt.threads = 2;
            opt.q_start = L - n;
            Tensor out(DType::f32, sh.hq, n, d);
            std::vector<float> lse(size_t(sh.hq * n));
            Stats st;
            attention_token_sparse(q.view(), kv, out.view(), sel, opt, lse.data(), &st);
            std::vector<int64_t> listed(sel.keys);
            std::sort(listed.begin(), listed.end());
            const int64_t staged = std::unique(listed.begin(), listed.end()) - listed.begin();
            const int64_t tile_bytes =
                64 * (v_is_k ? d : d + (d + 15) / 16 * 16) * int64_t(sizeof(float));
            EXPECT_EQ(st.staged_bytes,
                      (staged + 63) / 64 * tile_bytes + staged * int64_t(sizeof(int64_t)));
            for (int64_t h0 : {int64_t(0), half}) {
              Tensor qh(DType::f32, half, n, d), oh(DType::f32, half, n, d);
              for (int64_t h = 0; h < half; ++h)
                for (int64_t i = 0; i < n; ++i)
                  for (int64_t c = 0; c < d; ++c)
                    qh.view().set(h, i, c, q.view().get(h0 + h, i, c));
              std::vector<float> lse_h(size_t(half * n));
              Stats st_h;
              attention_token_sparse(qh.view(), kv, oh.view(), sel, opt, lse_h.data(), &st_h);
              EXPECT_EQ(st_h.staged_bytes, 0);
              for (int64_t h = 0; h < half; ++h)
                for (int64_t i = 0; i < n; ++i) {
                  const std::string at = std::string(kv_type_name(t)) + " d " + std::to_string(d) +
                                         (v_is_k ? " v=k" : "") + " heads " +
                                         std::to_string(sh.hq) + " head " + std::to_string(h0 + h) +
                                         " row " + std::to_string(i);
                  ASSERT_EQ(lse[size_t((h0 + h) * n + i)], lse_h[size_t(h * n + i)]) << at;
                  for (int64_t c = 0; c < d; ++c)
                    ASSERT_EQ(out.view().get(h0 + h, i, c), oh.view().get(h, i, c)) << at;
                }
            }
          }
  });
}

// A cache of keys at ascending positions with gaps (a context-parallel rank's: key j at 3j + 1)
// computes what a natural-order cache of the same rows does over the listed keys its rows may
// see: rows at positions 301 and 302 see slots up to 100 (position 301), so a listed slot past
// that is masked, and a row reading every key reads those 101. Keys out of order are refused.
TEST(TokenSparse, KeysAtAscendingPositionsWithGaps) {
  const int64_t hq = 4, hkv = 2, d = 64, L = 200;
  Tensor k = random_tensor(DType::f32, hkv, L, d, 31), v = random_tensor(DType::f32, hkv, L, d, 32);
  std::vector<int64_t> pos(static_cast<size_t>(L));
  for (int64_t j = 0; j < L; ++j) pos[size_t(j)] = 3 * j + 1;
  PackedKV gaps = PackedKV::pack(k.view(), v.view(), 0, 1);
  gaps.clear();
  gaps.append(k.view(), v.view(), pos);
  const PackedKV natural = PackedKV::pack(k.view(), v.view(), 0, 1);
  Tensor q = random_tensor(DType::f32, hq, 2, d, 33);
  std::vector<int64_t> listed;
  for (int64_t j = 0; j < L; j += 7) listed.push_back(j);  // up to slot 196
  std::vector<int64_t> visible;
  for (int64_t j : listed)
    if (j <= 100) visible.push_back(j);
  std::vector<int64_t> seen(101);  // what row 1 (every key it sees) reads: slots 0..100
  for (int64_t j = 0; j <= 100; ++j) seen[size_t(j)] = j;
  TokenSelection sel_gaps, sel_natural;
  sel_gaps.add(listed);
  sel_gaps.add_all();
  sel_natural.add(visible);
  sel_natural.add(seen);
  AttnOptions og;
  og.q_start = 301;  // rows at 301 and 302: slots 0..100 (positions 1..301) visible
  AttnOptions on;
  on.q_start = 300;  // natural order: every listed slot (at most 100) visible
  Tensor out_g(DType::f32, hq, 2, d), out_n(DType::f32, hq, 2, d);
  std::vector<float> lse_g(size_t(hq * 2)), lse_n(lse_g.size());
  attention_token_sparse(q.view(), gaps, out_g.view(), sel_gaps, og, lse_g.data());
  attention_token_sparse(q.view(), natural, out_n.view(), sel_natural, on, lse_n.data());
  for (int64_t h = 0; h < hq; ++h)
    for (int64_t i = 0; i < 2; ++i) {
      EXPECT_FLOAT_EQ(lse_g[size_t(h * 2 + i)], lse_n[size_t(h * 2 + i)]) << h << " " << i;
      for (int64_t c = 0; c < d; ++c)
        ASSERT_NEAR(out_g.view().get(h, i, c), out_n.view().get(h, i, c), 1e-6f)
            << h << " " << i << " " << c;
    }
  std::vector<int64_t> back = pos;
  std::swap(back[0], back[1]);
  PackedKV unordered = PackedKV::pack(k.view(), v.view(), 0, 1);
  unordered.clear();
  unordered.append(k.view(), v.view(), back);
  EXPECT_THROW(attention_token_sparse(q.view(), unordered, out_g.view(), sel_gaps, og), Error);
}

TEST(TokenSparse, RefusesBadSelections) {
  Tensor q = random_tensor(DType::f32, 1, 2, 16, 1), k = random_tensor(DType::f32, 1, 10, 16, 2),
         v = random_tensor(DType::f32, 1, 10, 16, 3);
  PackedKV kv = PackedKV::pack(k.view(), v.view());
  Tensor out(DType::f32, 1, 2, 16);
  TokenSelection one;
  one.add({1, 2});
  EXPECT_THROW(attention_token_sparse(q.view(), kv, out.view(), one), Error);  // 1 row for 2
  TokenSelection outside;
  outside.add({1, 2});
  outside.add({3, 10});
  EXPECT_THROW(attention_token_sparse(q.view(), kv, out.view(), outside), Error);
  TokenSelection dup;
  dup.add({1, 2});
  dup.add({4, 4});
  EXPECT_THROW(attention_token_sparse(q.view(), kv, out.view(), dup), Error);
}

}  // namespace
}  // namespace spattn

// The sliding window (AttnOptions::window, Gemma 3's local layers): the dense kernel runs a
// band of W keys per row, raw and over a PackedKV with queries placed anywhere, against the
// exact reference; the reference itself against plain attention over each row's W keys; the
// work (score entries, key tiles visited) is the band's, not the causal triangle's; and the
// forms that do not run a window refuse it.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/sparse_attention.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

using test::random_tensor;

// Entries of a causal band: row at position p sees min(p + 1, W) keys.
int64_t band_entries(int64_t pos0, int64_t n, int64_t w) {
  int64_t e = 0;
  for (int64_t p = pos0; p < pos0 + n; ++p) e += std::min(p + 1, w);
  return e;
}

TEST(SlidingWindow, ReferenceIsAttentionOverEachRowsLastWKeys) {
  // Plain attention of row i over the keys (i - W, i], computed as full attention of that one
  // query against a slice of k and v: an independent twin of the reference's band.
  const int64_t hq = 2, hkv = 1, L = 50, d = 16, W = 7;
  Tensor q = random_tensor(DType::f32, hq, L, d, 3), k = random_tensor(DType::f32, hkv, L, d, 4),
         v = random_tensor(DType::f32, hkv, L, d, 5);
  Tensor out(DType::f32, hq, L, d);
  AttnOptions opt;
  opt.window = W;
  attention_reference(q, k, v, out, opt);
  for (int64_t i : {0, 3, 6, 7, 30, 49}) {
    const int64_t j0 = std::max<int64_t>(0, i - W + 1), n = i + 1 - j0;
    Tensor one(DType::f32, hq, 1, d);
    AttnOptions full;
    full.causal = false;
    attention_reference(q.view().rows(i, 1), k.view().rows(j0, n), v.view().rows(j0, n), one, full);
    for (int64_t h = 0; h < hq; ++h)
      for (int64_t c = 0; c < d; ++c)
        EXPECT_NEAR(out.view().get(h, i, c), one.view().get(h, 0, c), 1e-6) << i;
  }
}

struct Case {
  int64_t hq, hkv, L, d, w;
};

TEST(SlidingWindow, DenseKernelEqualsReference) {
  for (const Case& c : {Case{4, 2, 300, 32, 1}, Case{4, 2, 300, 32, 64}, Case{2, 1, 517, 64, 100},
                        Case{2, 2, 700, 16, 129}, Case{3, 1, 200, 32, 500}}) {
    SCOPED_TRACE("L " + std::to_string(c.L) + " W " + std::to_string(c.w));
    Tensor q = random_tensor(DType::f32, c.hq, c.L, c.d, 11),
           k = random_tensor(DType::f32, c.hkv, c.L, c.d, 12),
           v = random_tensor(DType::f32, c.hkv, c.L, c.d, 13);
    Tensor out(DType::f32, c.hq, c.L, c.d), ref(DType::f32, c.hq, c.L, c.d);
    std::vector<float> lse(size_t(c.hq * c.L)), lse_ref(lse.size());
    AttnOptions opt;
    opt.window = c.w;
    opt.threads = 2;
    Stats st;
    attention_dense(q, k, v, out, opt, lse.data(), &st);
    attention_reference(q, k, v, ref, opt, lse_ref.data());
    const test::Diff dd = test::diff(out, ref);
    EXPECT_LE(dd.max_abs, 2e-4 * std::max(1.0, dd.ref_max));
    for (size_t i = 0; i < lse.size(); ++i) ASSERT_NEAR(lse[i], lse_ref[i], 1e-3) << i;
    EXPECT_EQ(st.score_entries, c.hq * band_entries(0, c.L, c.w));
    // A window as long as the sequence is plain causal attention.
    if (c.w >= c.L) {
      Tensor causal(DType::f32, c.hq, c.L, c.d);
      AttnOptions plain;
      plain.threads = 2;
      attention_dense(q, k, v, causal, plain);
      EXPECT_TRUE(test::bitwise_equal(out, causal));
    }
  }
}

TEST(SlidingWindow, PackedCacheChunksEqualReference) {
  // A KV cache filled chunk by chunk (a runner's prefill), queries at q_start: each chunk's
  // rows see their own bands, reaching back into earlier chunks.
  const int64_t hq = 4, hkv = 2, L = 640, d = 32, W = 128, chunk = 96;
  Tensor q = random_tensor(DType::f32, hq, L, d, 21), k = random_tensor(DType::f32, hkv, L, d, 22),
         v = random_tensor(DType::f32, hkv, L, d, 23);
  Tensor ref(DType::f32, hq, L, d), out(DType::f32, hq, L, d);
  AttnOptions opt;
  opt.window = W;
  attention_reference(q, k, v, ref, opt);
  PackedKV cache(hkv, d, DType::f32, L);
  Stats st;
  for (int64_t p0 = 0; p0 < L; p0 += chunk) {
    const int64_t n = std::min(chunk, L - p0);
    cache.append(k.view().rows(p0, n), v.view().rows(p0, n));
    AttnOptions a = opt;
    a.q_start = p0;
    attention_dense(q.view().rows(p0, n), cache, out.view().rows(p0, n), a, nullptr, &st);
  }
  const test::Diff dd = test::diff(out, ref);
  EXPECT_LE(dd.max_abs, 2e-4 * std::max(1.0, dd.ref_max));
  EXPECT_EQ(st.score_entries, hq * band_entries(0, L, W));
  // The last chunk's rows need keys from 544 - 127 = 417 on: tiles 6.. of the cache, never the
  // first six. Per (q head, 64-row query tile) at most ceil((W + 63) / 64) + 1 tiles.
  Stats last;
  AttnOptions a = opt;
  a.q_start = L - 64;
  Tensor o64(DType::f32, hq, 64, d);
  attention_dense(q.view().rows(L - 64, 64), cache, o64, a, nullptr, &last);
  EXPECT_LE(last.tiles_visited, hq * 4);
  EXPECT_EQ(last.score_entries, hq * band_entries(L - 64, 64, W));
}

TEST(SlidingWindow, PermutedKeysAreMaskedByPosition) {
  // Keys packed out of order keep their positions: the band is by position.
  const int64_t hq = 2, hkv = 1, L = 200, d = 16, W = 33;
  Tensor q = random_tensor(DType::f32, hq, L, d, 31), k = random_tensor(DType::f32, hkv, L, d, 32),
         v = random_tensor(DType::f32, hkv, L, d, 33);
  Tensor ref(DType::f32, hq, L, d), out(DType::f32, hq, L, d);
  AttnOptions opt;
  opt.window = W;
  attention_reference(q, k, v, ref, opt);
  std::vector<int64_t> order;
  for (int64_t i = L - 1; i >= 0; --i) order.push_back(i);
  PackedKV rev(hkv, d, DType::f32, L);
  rev.append_rows(k, v, order);
  opt.q_start = 0;
  attention_dense(q, rev, out, opt);
  const test::Diff dd = test::diff(out, ref);
  EXPECT_LE(dd.max_abs, 2e-4 * std::max(1.0, dd.ref_max));
}

TEST(SlidingWindow, BadWindowAndFormsWithoutOneAreRefused) {
  Tensor q = random_tensor(DType::f32, 2, 64, 16, 1), k = random_tensor(DType::f32, 1, 64, 16, 2),
         v = random_tensor(DType::f32, 1, 64, 16, 3);
  Tensor out(DType::f32, 2, 64, 16);
  AttnOptions neg;
  neg.window = -1;
  EXPECT_THROW(attention_dense(q, k, v, out, neg), Error);
  AttnOptions full;
  full.window = 8;
  full.causal = false;
  EXPECT_THROW(attention_dense(q, k, v, out, full), Error);
  EXPECT_THROW(attention_reference(q, k, v, out, full), Error);
  AttnOptions w;
  w.window = 8;
  Tensor o1(DType::f32, 2, 1, 16);
  EXPECT_THROW(attention_decode(q.view().rows(63, 1), k, v, o1, w), Error);
  const BlockMask mask = BlockMask::full(2, 64, 64, 64, 64, true);
  EXPECT_THROW(attention_block_sparse(q, k, v, out, mask, w), Error);
}

}  // namespace
}  // namespace spattn

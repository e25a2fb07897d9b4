// attention over keys A u B == merge(attention over A, attention over B).
#include <gtest/gtest.h>

#include <vector>

#include "spattn/attention.hpp"
#include "spattn/error.hpp"
#include "spattn/merge.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

TEST(Merge, UnionOfDisjointKeySetsEqualsMergedParts) {
  // Non-causal attention over keys [0, 300) vs the merge of [0, 123) and [123, 300).
  const int64_t h = 4, hk = 2, lq = 50, lk = 300, split = 123, d = 64;
  Tensor q = test::random_tensor(DType::f32, h, lq, d, 1, 2.0f);
  Tensor k = test::random_tensor(DType::f32, hk, lk, d, 2, 2.0f);
  Tensor v = test::random_tensor(DType::f32, hk, lk, d, 3);
  AttnOptions opt;
  opt.causal = false;
  opt.scale = 0.125f;
  Tensor full(DType::f32, h, lq, d), a(DType::f32, h, lq, d), b(DType::f32, h, lq, d),
      merged(DType::f32, h, lq, d);
  std::vector<float> lse_full(h * lq), lse_a(h * lq), lse_b(h * lq), lse_m(h * lq);
  attention_reference(q, k, v, full, opt, lse_full.data());
  attention_dense(q, k.view().rows(0, split), v.view().rows(0, split), a, opt, lse_a.data());
  attention_dense(q, k.view().rows(split, lk - split), v.view().rows(split, lk - split), b, opt,
                  lse_b.data());
  merge_attention(a, lse_a.data(), b, lse_b.data(), merged, lse_m.data());
  EXPECT_LE(test::diff(merged, full).max_abs, 1e-5);
  for (size_t i = 0; i < lse_m.size(); ++i) EXPECT_NEAR(lse_m[i], lse_full[i], 1e-4);
  // In place (out aliases a) gives the same.
  merge_attention(a, lse_a.data(), b, lse_b.data(), a, lse_a.data());
  EXPECT_LE(test::diff(a, full).max_abs, 1e-5);
}

TEST(Merge, EmptySideContributesNothing) {
  std::vector<float> oa = {1, 2}, ob = {5, 6};
  float la = -INFINITY;
  merge_row(oa.data(), la, ob.data(), 0.5f, 2);
  EXPECT_EQ(oa[0], 5);
  EXPECT_EQ(la, 0.5f);
  merge_row(oa.data(), la, ob.data(), -INFINITY, 2);
  EXPECT_EQ(oa[1], 6);
  EXPECT_EQ(la, 0.5f);
}

TEST(Merge, BadInputRaisesError) {
  Tensor a(DType::f32, 1, 2, 8), b(DType::f32, 1, 3, 8);
  std::vector<float> la(3), lb(3);
  EXPECT_THROW(merge_attention(a, la.data(), b, lb.data(), a, nullptr), Error);
  EXPECT_THROW(merge_attention(a, nullptr, a, lb.data(), a, nullptr), Error);
  la[0] = NAN;
  EXPECT_THROW(merge_attention(a, la.data(), a, lb.data(), a, nullptr), Error);
}

}  // namespace
}  // namespace spattn

// BlockMask: geometry, conversions, entry counting, validation errors, and the block-sparse
// kernel on a mask holding every causal block.
#include <gtest/gtest.h>

#include <random>

#include "masked_reference.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {
namespace {

// Expects `fn` to throw spattn::Error whose message contains `needle`.
template <class Fn>
void expect_error(Fn fn, const std::string& needle) {
  try {
    fn();
    ADD_FAILURE() << "no Error thrown; expected one mentioning '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message '" << e.what() << "' does not mention '" << needle << "'";
  }
}

// A random subset of each query block's causal blocks, as a dense grid.
std::vector<uint8_t> random_grid(const BlockMask& geom, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> g(size_t(geom.heads * geom.n_qb() * geom.n_kb()), 0);
  for (int64_t h = 0; h < geom.heads; ++h)
    for (int64_t qb = 0; qb < geom.n_qb(); ++qb)
      for (int64_t kb = 0; kb < geom.causal_blocks(qb); ++kb)
        g[size_t((h * geom.n_qb() + qb) * geom.n_kb() + kb)] = uint8_t(rng() % 2);
  return g;
}

// Geometries (q_len, kv_len, block_q, block_k): odd lengths and block sizes 32/64/128.
struct Geo {
  int64_t lq, lk, bq, bk;
};
const Geo kGeos[] = {{1, 1, 64, 64},     {63, 63, 64, 64},   {65, 65, 64, 64},
                     {200, 200, 64, 64}, {200, 200, 32, 32}, {200, 200, 128, 64},
                     {65, 200, 64, 128}, {1, 200, 64, 64},   {63, 333, 32, 128}};

TEST(MaskBlockMask, CausalBlocksAreBottomRightAligned) {
  // q_len 65 over kv_len 200: row 63 sits at 198 (keys 0..198: 4 blocks of 64), row 64 at 199.
  BlockMask a(1, 65, 200, 64, 64, true);
  EXPECT_EQ(a.causal_blocks(0), 4);
  EXPECT_EQ(a.causal_blocks(1), 4);
  // Square: query block qb sees blocks 0..qb.
  BlockMask b(1, 200, 200, 64, 64, true);
  EXPECT_EQ(b.causal_blocks(0), 1);
  EXPECT_EQ(b.causal_blocks(3), 4);
  // Query blocks of 128 over key blocks of 32: rows 0..127 see keys 0..127.
  BlockMask c(1, 200, 200, 128, 32, true);
  EXPECT_EQ(c.causal_blocks(0), 4);
  EXPECT_EQ(c.causal_blocks(1), 7);
  BlockMask d(1, 200, 100, 64, 64, false);
  EXPECT_EQ(d.causal_blocks(0), 2);
}

TEST(MaskBlockMask, EntriesCountCausalEntriesOfListedBlocks) {
  for (const Geo& g : kGeos)
    for (bool causal : {true, false}) {
      SCOPED_TRACE(testing::Message() << g.lq << "x" << g.lk << " blocks " << g.bq << "x" << g.bk
                                      << (causal ? " causal" : " full"));
      BlockMask geom(2, g.lq, g.lk, g.bq, g.bk, causal);
      BlockMask m = BlockMask::from_dense(2, g.lq, g.lk, g.bq, g.bk, causal, random_grid(geom, 7));
      int64_t want = 0;
      const auto keep = test::mask_predicate(m);
      for (int64_t h = 0; h < 2; ++h)
        for (int64_t i = 0; i < g.lq; ++i)
          for (int64_t j = 0; j < (causal ? g.lk - g.lq + i + 1 : g.lk); ++j) want += keep(h, i, j);
      EXPECT_EQ(m.entries(), want);
      EXPECT_EQ(BlockMask::full(2, g.lq, g.lk, g.bq, g.bk, causal).entries(),
                2 * attention_entries(g.lq, g.lk, causal));
    }
}

TEST(MaskBlockMask, DenseGridAndListsRoundTrip) {
  BlockMask geom(3, 200, 333, 32, 64, true);
  const std::vector<uint8_t> grid = random_grid(geom, 3);
  BlockMask m = BlockMask::from_dense(3, 200, 333, 32, 64, true, grid);
  EXPECT_EQ(m.to_dense(), grid);
  std::vector<std::vector<int32_t>> lists;
  for (int64_t h = 0; h < 3; ++h)
    for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
      auto r = m.row(h, qb);
      lists.emplace_back(r.begin(), r.end());
    }
  BlockMask n = BlockMask::from_lists(3, 200, 333, 32, 64, true, lists);
  n.validate();
  EXPECT_EQ(n.offsets, m.offsets);
  EXPECT_EQ(n.blocks, m.blocks);
  EXPECT_EQ(n.block_count(), int64_t(m.blocks.size()));
}

// A mask holding every causal block computes dense attention.
TEST(MaskBlockMask, FullMaskGivesDenseResult) {
  for (const Geo& g : kGeos)
    for (bool causal : {true, false}) {
      const std::string what = testing::PrintToString(g.lq) + "x" + std::to_string(g.lk) +
                               " blocks " + std::to_string(g.bq) + "x" + std::to_string(g.bk) +
                               (causal ? " causal" : " full");
      Tensor q = test::random_tensor(DType::f32, 4, g.lq, 32, 1);  // GQA: 4 q heads, 2 kv
      Tensor k = test::random_tensor(DType::f32, 2, g.lk, 32, 2);
      Tensor v = test::random_tensor(DType::f32, 2, g.lk, 32, 3);
      Tensor out(DType::f32, 4, g.lq, 32), ref(DType::f32, 4, g.lq, 32);
      std::vector<float> lse(size_t(4 * g.lq)), lse_ref(size_t(4 * g.lq));
      AttnOptions opt;
      opt.causal = causal;
      Stats st;
      BlockMask m = BlockMask::full(4, g.lq, g.lk, g.bq, g.bk, causal);
      attention_block_sparse(q, k, v, out, m, opt, lse.data(), &st);
      attention_dense(q, k, v, ref, opt, lse_ref.data());
      const test::Diff dd = test::diff(out, ref);
      EXPECT_LE(dd.max_abs, 2e-4 * std::max(1.0, dd.ref_max)) << what;
      for (size_t i = 0; i < lse.size(); ++i)
        ASSERT_NEAR(lse[i], lse_ref[i], 1e-3 * std::max(1.0f, std::abs(lse_ref[i]))) << what;
      EXPECT_EQ(st.score_entries, 4 * attention_entries(g.lq, g.lk, causal)) << what;
      EXPECT_EQ(st.score_entries, m.entries()) << what;
    }
}

// A random mask computes exactly the reference restricted to its blocks.
TEST(MaskBlockMask, RandomMaskMatchesMaskedReference) {
  for (const Geo& g : kGeos) {
    const std::string what = std::to_string(g.lq) + "x" + std::to_string(g.lk) + " blocks " +
                             std::to_string(g.bq) + "x" + std::to_string(g.bk);
    Tensor q = test::random_tensor(DType::f32, 4, g.lq, 32, 4);
    Tensor k = test::random_tensor(DType::f32, 2, g.lk, 32, 5);
    Tensor v = test::random_tensor(DType::f32, 2, g.lk, 32, 6);
    Tensor out(DType::f32, 4, g.lq, 32);
    std::vector<float> lse(size_t(4 * g.lq));
    BlockMask geom(4, g.lq, g.lk, g.bq, g.bk, true);
    BlockMask m = BlockMask::from_dense(4, g.lq, g.lk, g.bq, g.bk, true, random_grid(geom, 11));
    Stats st;
    attention_block_sparse(q, k, v, out, m, {}, lse.data(), &st);
    const test::MaskedRef ref = test::masked_reference(q, k, v, true, test::mask_predicate(m));
    test::expect_matches(out, lse, ref, what);
    EXPECT_EQ(st.score_entries, ref.entries) << what;
  }
}

// Rows [0, 200) in blocks of 64: 4 query blocks; kv 200: key blocks 0..3.
BlockMask two_head_mask(std::vector<std::vector<int32_t>> lists) {
  return BlockMask::from_lists(2, 200, 200, 64, 64, true, lists);
}
const std::vector<std::vector<int32_t>> kGood = {{0}, {0, 1}, {0, 2},    {1, 2, 3},
                                                 {0}, {1},    {0, 1, 2}, {3}};

TEST(MaskValidate, AcceptsAGoodMask) { EXPECT_NO_THROW(two_head_mask(kGood).validate()); }

TEST(MaskValidate, RejectsUnsortedList) {
  auto l = kGood;
  l[6] = {2, 0, 1};  // head 1, query block 2
  expect_error([&] { two_head_mask(l).validate(); }, "head 1 query block 2: block 0 after block 2");
}

TEST(MaskValidate, RejectsRepeatedBlock) {
  auto l = kGood;
  l[3] = {1, 2, 2};
  expect_error([&] { two_head_mask(l).validate(); }, "head 0 query block 3: block 2 listed twice");
}

TEST(MaskValidate, RejectsBlockOutOfRange) {
  auto l = kGood;
  l[7] = {4};
  expect_error([&] { two_head_mask(l).validate(); },
               "head 1 query block 3: block 4 outside [0, 4)");
  l[7] = {-1};
  expect_error([&] { two_head_mask(l).validate(); }, "head 1 query block 3: block -1 outside");
}

TEST(MaskValidate, RejectsNonCausalBlockOnCausalInput) {
  auto l = kGood;
  l[1] = {0, 2};  // query block 1 (rows 64..127) cannot see keys 128..
  expect_error([&] { two_head_mask(l).validate(); }, "head 0 query block 1: block 2 lies after");
  // The same list is fine without causality.
  EXPECT_NO_THROW(BlockMask::from_lists(2, 200, 200, 64, 64, false, l).validate());
  // from_dense checks too.
  BlockMask geom(1, 200, 200, 64, 64, true);
  std::vector<uint8_t> grid(size_t(geom.n_qb() * geom.n_kb()), 0);
  grid[1] = 1;  // query block 0, key block 1
  expect_error([&] { BlockMask::from_dense(1, 200, 200, 64, 64, true, grid); },
               "head 0 query block 0: block 1 lies after");
}

TEST(MaskValidate, RejectsInconsistentOffsets) {
  BlockMask m = two_head_mask(kGood);
  m.offsets.pop_back();
  expect_error([&] { m.validate(); },
               "offsets has 8 entries, expected heads * query blocks + 1 = 9");
  m = two_head_mask(kGood);
  m.offsets[3] = m.offsets[2] - 1;
  expect_error([&] { m.validate(); }, "offsets decrease at head 0 query block 2");
  m = two_head_mask(kGood);
  m.blocks.push_back(0);
  expect_error([&] { m.validate(); }, "but blocks holds");
  m = two_head_mask(kGood);
  m.offsets[0] = 1;
  expect_error([&] { m.validate(); }, "offsets[0] must be 0");
  expect_error([&] { BlockMask::from_lists(2, 200, 200, 64, 64, true, {{0}}); },
               "got 1 lists, expected heads * query blocks = 2 * 4 = 8");
  expect_error(
      [&] {
        BlockMask::from_dense(1, 200, 200, 64, 64, true, {1, 0});
      },
      "grid has 2 cells");
}

TEST(MaskValidate, RejectsBadGeometry) {
  expect_error([] { BlockMask(1, 10, 10, 0, 64, true); }, "block sizes must be > 0, got block_q 0");
  expect_error([] { BlockMask(1, 10, 10, 64, -64, true); },
               "block sizes must be > 0, got block_q 64, block_k -64");
  expect_error([] { BlockMask(0, 10, 10, 64, 64, true); }, "heads must be > 0");
  expect_error([] { BlockMask(1, 0, 10, 64, 64, true); }, "q_len must be > 0");
  expect_error([] { BlockMask(1, 11, 10, 64, 64, true); }, "causal mask needs q_len <= kv_len");
}

// A mask whose block size does not fit the problem is an Error, for the mask and the kernel.
TEST(MaskCheckMatches, RejectsBlockSizeThatDoesNotMatch) {
  Tensor q = test::random_tensor(DType::f32, 2, 200, 32, 1);
  Tensor k = test::random_tensor(DType::f32, 2, 200, 32, 2);
  Tensor out(DType::f32, 2, 200, 32);
  BlockMask m = two_head_mask(kGood);
  EXPECT_NO_THROW(m.check_matches(2, 200, 200, true));
  m.block_q = 32;  // lists were built for 4 query blocks of 64; 32 needs 7
  expect_error([&] { m.check_matches(2, 200, 200, true); }, "block_q 32");
  expect_error([&] { attention_block_sparse(q, k, k, out, m); }, "block_q 32");
  m = two_head_mask(kGood);
  m.block_k = 0;
  expect_error([&] { m.check_matches(2, 200, 200, true); }, "block sizes must be > 0");
  expect_error([&] { attention_block_sparse(q, k, k, out, m); }, "block sizes must be > 0");
}

TEST(MaskCheckMatches, RejectsOtherHeadsLengthsOrCausality) {
  BlockMask m = two_head_mask(kGood);
  expect_error([&] { m.check_matches(4, 200, 200, true); }, "mask has 2 heads, q has 4");
  expect_error([&] { m.check_matches(2, 199, 200, true); }, "mask is for q_len 200, kv_len 200");
  expect_error([&] { m.check_matches(2, 200, 201, true); }, "mask is for q_len 200, kv_len 200");
  expect_error([&] { m.check_matches(2, 200, 200, false); }, "mask is causal but attention is not");
}

}  // namespace
}  // namespace spattn

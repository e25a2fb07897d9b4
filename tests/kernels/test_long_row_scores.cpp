// kernels::long_row_scores (XAttention's estimate product) against a plain double twin: f32
// tiles within f32 rounding of the exact dot products; bf16 tiles exactly the dot products of
// the bf16-rounded rows up to f32 summation; odd row and key counts, rows of 2 to 1024 values,
// a column stride wider than the columns, and any split of the rows or of the columns (at
// multiples of 64) giving the same bits.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "kernels/long_row_scores.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"

namespace spattn::kernels {
namespace {

std::vector<float> random_rows(int64_t n, int64_t w, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> v(size_t(n * w));
  for (float& x : v) x = nd(rng);
  return v;
}

float round_bf16(float x) { return bf16_to_f32(f32_to_bf16(x)); }

TEST(LongRowScores, MatchTheDoubleTwin) {
  struct Shape {
    int64_t rows, keys, cols, w;
  };
  for (const Shape sh : {Shape{1, 1, 1, 2}, Shape{5, 70, 70, 64}, Shape{13, 200, 131, 1024},
                         Shape{128, 65, 64, 256}, Shape{7, 129, 129, 18}}) {
    const std::vector<float> q = random_rows(sh.rows, sh.w, 1), k = random_rows(sh.keys, sh.w, 2);
    for (bool bf16 : {false, true}) {
      const LongRowKeys keys = pack_long_row_keys(k.data(), sh.keys, sh.w, bf16);
      if (bf16) {
        EXPECT_EQ(keys.bf16, long_row_bf16_supported());
      }
      const int64_t lds = sh.cols + 3;
      std::vector<float> s(size_t(sh.rows * lds), -7.0f);
      const float alpha = 0.25f;
      long_row_scores(q.data(), sh.rows, keys, sh.cols, alpha, s.data(), lds);
      for (int64_t r = 0; r < sh.rows; ++r) {
        for (int64_t j = 0; j < sh.cols; ++j) {
          double dot = 0, mag = 0;
          for (int64_t c = 0; c < sh.w; ++c) {
            float a = q[size_t(r * sh.w + c)], b = k[size_t(j * sh.w + c)];
            if (keys.bf16) a = round_bf16(a), b = round_bf16(b);
            dot += double(a) * double(b);
            mag += std::abs(double(a) * double(b));
          }
          ASSERT_NEAR(s[size_t(r * lds + j)], alpha * dot, 1e-5 * alpha * mag + 1e-30)
              << "rows " << sh.rows << " w " << sh.w << " bf16 " << keys.bf16 << " at " << r << ", "
              << j;
        }
        for (int64_t j = sh.cols; j < lds; ++j)
          EXPECT_EQ(s[size_t(r * lds + j)], -7.0f);  // untouched
      }
      // Rows scored in two calls give the same bits as in one.
      if (sh.rows > 1) {
        const int64_t half = sh.rows / 2;
        std::vector<float> t(s.size(), -7.0f);
        long_row_scores(q.data(), half, keys, sh.cols, alpha, t.data(), lds);
        long_row_scores(q.data() + half * sh.w, sh.rows - half, keys, sh.cols, alpha,
                        t.data() + half * lds, lds);
        EXPECT_EQ(std::memcmp(s.data(), t.data(), s.size() * sizeof(float)), 0);
      }
      // Columns scored from a tile boundary on give the same bits as the whole call's.
      for (int64_t first = 64; first < sh.cols; first += 64) {
        std::vector<float> t(s.size(), -7.0f);
        long_row_scores(q.data(), sh.rows, keys, sh.cols - first, alpha, t.data(), lds, first);
        for (int64_t r = 0; r < sh.rows; ++r)
          for (int64_t j = first; j < sh.cols; ++j)
            ASSERT_EQ(t[size_t(r * lds + j - first)], s[size_t(r * lds + j)])
                << "first " << first << " at " << r << ", " << j;
      }
    }
  }
}

// Keys appended into a pack's room write the bytes packing them all at once writes; past the
// room is refused.
TEST(LongRowScores, AppendedKeysEqualPackedAtOnce) {
  const int64_t w = 40, n = 150;
  std::vector<float> k(static_cast<size_t>(n * w));
  std::mt19937_64 rng(3);
  std::normal_distribution<float> nd;
  for (float& x : k) x = nd(rng);
  for (bool bf16 : {false, true}) {
    LongRowKeys grown = pack_long_row_keys(k.data(), 70, w, bf16, 192);
    EXPECT_EQ(grown.tiles, 3);
    append_long_row_keys(grown, k.data(), 71);
    append_long_row_keys(grown, k.data(), n);
    const LongRowKeys once = pack_long_row_keys(k.data(), n, w, bf16, 192);
    ASSERT_EQ(grown.bf16, once.bf16);
    const size_t bytes = size_t(3 * 64 * w) * (once.bf16 ? 2 : 4);
    EXPECT_EQ(std::memcmp(grown.data.get(), once.data.get(), bytes), 0) << bf16;
    EXPECT_THROW(append_long_row_keys(grown, k.data(), 193), Error);
    EXPECT_THROW(append_long_row_keys(grown, k.data(), 100), Error);  // fewer than packed
  }
}

TEST(LongRowScores, BadArgumentsAreNamed) {
  const std::vector<float> k(6, 1.0f);
  EXPECT_THROW(pack_long_row_keys(k.data(), 2, 3, false), Error);  // an odd row length
  const LongRowKeys keys = pack_long_row_keys(k.data(), 3, 2, false);
  std::vector<float> s(16);
  EXPECT_THROW(long_row_scores(k.data(), 1, keys, 4, 1.0f, s.data(), 4), Error);  // cols > keys
  EXPECT_THROW(long_row_scores(k.data(), 1, keys, 3, 1.0f, s.data(), 2), Error);  // lds < cols
  const std::vector<float> k70(140, 1.0f);
  const LongRowKeys keys70 = pack_long_row_keys(k70.data(), 70, 2, false);
  std::vector<float> s70(70);
  EXPECT_THROW(long_row_scores(k70.data(), 1, keys70, 6, 1.0f, s70.data(), 6, 32),
               Error);  // first not at a tile
  EXPECT_THROW(long_row_scores(k70.data(), 1, keys70, 7, 1.0f, s70.data(), 7, 64),
               Error);  // past the keys
}

}  // namespace
}  // namespace spattn::kernels

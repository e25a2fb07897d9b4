// The PNG writer, drawing helpers and the mask figure. Pixels are read back with libpng's own
// reader, so a writer bug cannot hide behind a matching reader bug.
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <random>
#include <string>

#include "png_read.hpp"
#include "spattn/error.hpp"
#include "spattn/image.hpp"
#include "spattn/mask_figure.hpp"
#include "spattn/metrics.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

namespace fs = std::filesystem;

test::TempDir temp_dir() { return test::TempDir("spattn_png"); }

TEST(PngImage, RoundTripKeepsEveryPixel) {
  // Odd sizes, so row strides and filters see no convenient multiple.
  Image img(37, 23);
  std::mt19937 rng(5);
  for (auto& byte : img.pixels) byte = uint8_t(rng());
  const test::TempDir dir = temp_dir();
  const fs::path path = dir / "round.png";
  write_png(img, path.string());
  const test::PngPixels back = test::read_png_rgb(path.string());
  ASSERT_TRUE(back.ok) << back.error;
  EXPECT_EQ(back.width, 37);
  EXPECT_EQ(back.height, 23);
  EXPECT_EQ(back.rgb, img.pixels);
}

TEST(PngImage, BadPathThrowsNamingIt) {
  const test::TempDir dir = temp_dir();
  const Image img(4, 4, {1, 2, 3});
  const std::string missing = (dir / "no_such_dir" / "x.png").string();
  try {
    write_png(img, missing);
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(missing), std::string::npos) << e.what();
  }
  EXPECT_THROW(write_png(img, dir.string()), Error);  // a directory is not a file
}

TEST(PngImage, RejectsBadSizes) {
  EXPECT_THROW(Image(0, 4), Error);
  EXPECT_THROW(Image(4, -1), Error);
  EXPECT_THROW(Image(int64_t(1) << 20, 1), Error);
  Image broken;
  broken.width = broken.height = 2;  // no pixels
  const test::TempDir dir = temp_dir();
  EXPECT_THROW(write_png(broken, (dir / "b.png").string()), Error);
}

TEST(PngImage, FillAndBlitClipAtEdges) {
  Image img(6, 4, {0, 0, 0});
  img.fill_rect(-3, -3, 5, 5, {9, 9, 9});  // covers (0..1, 0..1)
  EXPECT_EQ(img.at(1, 1), (Rgb{9, 9, 9}));
  EXPECT_EQ(img.at(2, 1), (Rgb{0, 0, 0}));
  const Image patch(3, 3, {7, 7, 7});
  img.blit(patch, 4, 2);  // only (4..5, 2..3) lands
  EXPECT_EQ(img.at(5, 3), (Rgb{7, 7, 7}));
  EXPECT_EQ(img.at(3, 3), (Rgb{0, 0, 0}));
}

TEST(PngColormap, MonotoneInLuminance) {
  // Each channel is rounded to 8 bits separately, so at very fine steps one byte of a falling
  // channel (red near the top, blue in the middle) can dip luma by its weight (<= 0.22)
  // alone; anything larger would be a real reversal.
  double prev = luma(colormap_magma(0.0));
  for (int i = 1; i <= 1000; ++i) {
    const double l = luma(colormap_magma(i / 1000.0));
    EXPECT_GE(l, prev - 0.3) << "t = " << i / 1000.0;
    prev = l;
  }
  for (int i = 1; i <= 64; ++i)  // at a coarser step it strictly rises
    EXPECT_GT(luma(colormap_magma(i / 64.0)), luma(colormap_magma((i - 1) / 64.0))) << i;
  EXPECT_LT(luma(colormap_magma(0.0)), 5);
  EXPECT_GT(luma(colormap_magma(1.0)), 240);
  EXPECT_EQ(colormap_magma(-1.0), colormap_magma(0.0));  // clamped
  EXPECT_EQ(colormap_magma(NAN), colormap_magma(0.0));
  EXPECT_EQ(colormap_magma(7.0), colormap_magma(1.0));
}

TEST(PngGrid, MaxPoolKeepsMax) {
  Grid g(7, 10, 0.0f);
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> u(0.0f, 1.0f);
  for (float& x : g.v) x = u(rng);
  g.at(6, 9) = 5.0f;  // a lone spike in the partial corner patch
  const Grid p = max_pool(g, 3, 4);
  ASSERT_EQ(p.rows, 3);
  ASSERT_EQ(p.cols, 3);
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c) {
      float want = -INFINITY;
      for (int64_t y = 3 * r; y < std::min<int64_t>(3 * r + 3, 7); ++y)
        for (int64_t x = 4 * c; x < std::min<int64_t>(4 * c + 4, 10); ++x)
          want = std::max(want, g.at(y, x));
      EXPECT_EQ(p.at(r, c), want) << r << "," << c;
    }
  EXPECT_EQ(p.at(2, 2), 5.0f);
  EXPECT_THROW(max_pool(g, 0, 1), Error);
}

TEST(PngGrid, FitAxisUpscalesSmallAndPoolsLarge) {
  EXPECT_EQ(fit_axis(4).scale, 128);
  EXPECT_EQ(fit_axis(4).pixels(4), 512);
  EXPECT_EQ(fit_axis(128).pixels(128), 512);
  EXPECT_EQ(fit_axis(1000).pixels(1000), 1000);  // up to 1024: one pixel per block
  const AxisFit big = fit_axis(4096);            // 256K tokens / 64
  EXPECT_EQ(big.pool, 4);
  EXPECT_EQ(big.pixels(4096), 1024);
  EXPECT_LE(fit_axis(1025).pixels(1025), 1024);
}

TEST(PngFont, TextStaysInItsBox) {
  Image img(100, 20, {255, 255, 255});
  draw_text(img, 2, 3, "Ab1%", {0, 0, 0}, 2);
  const int64_t w = text_width("Ab1%", 2);
  EXPECT_EQ(w, (6 * 4 - 1) * 2);
  int64_t ink = 0;
  for (int64_t y = 0; y < img.height; ++y)
    for (int64_t x = 0; x < img.width; ++x) {
      if (img.at(x, y) != Rgb{0, 0, 0}) continue;
      ++ink;
      EXPECT_TRUE(x >= 2 && x < 2 + w && y >= 3 && y < 3 + 14) << x << "," << y;
    }
  EXPECT_GT(ink, 40);
}

// A causal 4x4-block grid whose rows sum to 1, heaviest on the diagonal.
BlockMassGrid toy_grid() {
  BlockMassGrid g;
  g.block_q = g.block_k = 64;
  g.q_len = g.kv_len = 256;
  g.n_qb = g.n_kb = 4;
  g.mass = {1.0f, 0,    0,    0,  //
            0.4f, 0.6f, 0,    0,  //
            0.3f, 0.2f, 0.5f, 0,  //
            0.3f, 0.1f, 0.1f, 0.5f};
  return g;
}

TEST(PngFigure, OracleRowsAreTheHeaviestBlocks) {
  const BlockMassGrid g = toy_grid();
  const BlockRows oracle = oracle_topk_rows(g, {1, 1, 2, 9});
  EXPECT_EQ(oracle[0], (std::vector<int32_t>{0}));
  EXPECT_EQ(oracle[1], (std::vector<int32_t>{1}));  // the diagonal (0.6) over block 0
  EXPECT_EQ(oracle[2], (std::vector<int32_t>{0, 2}));
  EXPECT_EQ(oracle[3], (std::vector<int32_t>{0, 1, 2, 3}));  // capped at causal blocks
  EXPECT_NEAR(mass_captured(g, oracle), (1.0 + 0.6 + 0.8 + 1.0) / 4, 1e-6);
  EXPECT_NEAR(block_density(g, oracle), 8.0 / 10.0, 1e-12);
  // With a fixed k the oracle's mass is what metrics.hpp's oracle reports.
  const BlockRows k2 = oracle_topk_rows(g, {2, 2, 2, 2});
  EXPECT_NEAR(mass_captured(g, k2), oracle_topk_mass_k(g, 2), 1e-6);
  // Any other mask with the same budget holds no more.
  const BlockRows other{{0}, {0}, {1, 2}, {1, 2, 3}};
  EXPECT_LT(mass_captured(g, other), mass_captured(g, oracle_topk_rows(g, {1, 1, 2, 3})));
  EXPECT_THROW(mass_captured(g, BlockRows{{0}, {7}, {}, {}}), Error);
  EXPECT_THROW(oracle_topk_rows(g, {1, 1}), Error);
}

TEST(PngFigure, DrawsThreePanelsAtTheGridsScale) {
  const BlockMassGrid g = toy_grid();
  const BlockRows method{{0}, {0, 1}, {2}, {0, 3}};
  const Image img = render_mask_figure(g, method, oracle_topk_rows(g, {1, 2, 1, 2}),
                                       {"toy", "hand-made", "same blocks per row"});
  const int64_t panel = fit_axis(4).pixels(4);
  EXPECT_EQ(img.width, 3 * panel + 2 * 2 + 2 * 16);
  EXPECT_GT(img.height, panel);
  EXPECT_LT(img.height, panel + 250);  // title, headers, legend and colour bar
  const test::TempDir dir = temp_dir();
  const fs::path path = dir / "figure.png";
  write_png(img, path.string());
  const test::PngPixels back = test::read_png_rgb(path.string());
  ASSERT_TRUE(back.ok) << back.error;
  EXPECT_EQ(back.rgb, img.pixels);
}

}  // namespace
}  // namespace spattn

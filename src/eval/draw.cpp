// Colormap, grid painting and composition (see image.hpp); the font is in font5x7.cpp.
#include <algorithm>
#include <array>
#include <cmath>

#include "spattn/error.hpp"
#include "spattn/image.hpp"

namespace spattn {

// matplotlib's magma sampled at 9 evenly spaced points, interpolated linearly in sRGB.
// Every anchor is brighter than the one before and luma is linear in sRGB, so luma rises
// along each segment and hence everywhere.
Rgb colormap_magma(double t) {
  static constexpr std::array<std::array<double, 3>, 9> kAnchors{{{0, 0, 4},
                                                                  {29, 17, 71},
                                                                  {81, 18, 124},
                                                                  {130, 38, 129},
                                                                  {182, 54, 121},
                                                                  {230, 81, 100},
                                                                  {251, 136, 97},
                                                                  {254, 194, 135},
                                                                  {252, 253, 191}}};
  if (!(t > 0)) t = 0;  // NaN too
  if (t > 1) t = 1;
  const double x = t * double(kAnchors.size() - 1);
  const size_t i = std::min(size_t(x), kAnchors.size() - 2);
  const double f = x - double(i);
  auto mix = [&](int c) {
    return uint8_t(std::lround((1 - f) * kAnchors[i][c] + f * kAnchors[i + 1][c]));
  };
  return {mix(0), mix(1), mix(2)};
}

double luma(Rgb c) { return 0.2126 * c.r + 0.7152 * c.g + 0.0722 * c.b; }

Grid max_pool(const Grid& g, int64_t fy, int64_t fx) {
  SPATTN_CHECK(fy >= 1 && fx >= 1, "max_pool: factors must be >= 1, got ", fy, "x", fx);
  SPATTN_CHECK(int64_t(g.v.size()) == g.rows * g.cols, "max_pool: grid ", g.rows, "x", g.cols,
               " holds ", g.v.size(), " values");
  Grid out((g.rows + fy - 1) / fy, (g.cols + fx - 1) / fx, -INFINITY);
  for (int64_t r = 0; r < g.rows; ++r)
    for (int64_t c = 0; c < g.cols; ++c) {
      float& cell = out.at(r / fy, c / fx);
      cell = std::max(cell, g.at(r, c));
    }
  return out;
}

AxisFit fit_axis(int64_t n, int64_t target, int64_t max_px) {
  SPATTN_CHECK(n >= 1 && target >= 1 && max_px >= target, "fit_axis: bad sizes n=", n,
               " target=", target, " max_px=", max_px);
  AxisFit f;
  if (n > max_px) {
    f.pool = (n + max_px - 1) / max_px;
  } else {
    f.scale = std::max<int64_t>(1, target / n);
  }
  return f;
}

Image paint_grid(const Grid& g, AxisFit fy, AxisFit fx, const std::function<Rgb(float)>& colour) {
  const Grid p = (fy.pool > 1 || fx.pool > 1) ? max_pool(g, fy.pool, fx.pool) : g;
  Image img(p.cols * fx.scale, p.rows * fy.scale);
  for (int64_t r = 0; r < p.rows; ++r)
    for (int64_t c = 0; c < p.cols; ++c)
      img.fill_rect(c * fx.scale, r * fy.scale, fx.scale, fy.scale, colour(p.at(r, c)));
  return img;
}

Image hconcat(const std::vector<Image>& parts, int64_t gap, Rgb bg) {
  SPATTN_CHECK(!parts.empty(), "hconcat: no images");
  int64_t w = gap * int64_t(parts.size() - 1), h = 0;
  for (const Image& p : parts) {
    w += p.width;
    h = std::max(h, p.height);
  }
  Image out(w, h, bg);
  int64_t x = 0;
  for (const Image& p : parts) {
    out.blit(p, x, 0);
    x += p.width + gap;
  }
  return out;
}

}  // namespace spattn

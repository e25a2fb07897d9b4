// A small RGB image, a PNG writer and the drawing pieces `spattn mask` composes its figure
// from: a computed colormap, grids of values painted as cells (max-pooled when too large,
// upscaled when small) and a built-in 5x7 bitmap font for labels.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace spattn {

struct Rgb {
  uint8_t r = 0, g = 0, b = 0;
  friend bool operator==(const Rgb&, const Rgb&) = default;
};

// 8-bit RGB, rows top to bottom, 3 bytes per pixel.
struct Image {
  int64_t width = 0, height = 0;
  std::vector<uint8_t> pixels;

  Image() = default;
  // Throws Error unless both sides are in [1, 1 << 15] (PNG allows more; readers don't like it).
  Image(int64_t width, int64_t height, Rgb fill = {});
  Rgb at(int64_t x, int64_t y) const;     // unchecked
  void set(int64_t x, int64_t y, Rgb c);  // unchecked
  // Fills the part of the rectangle that lies inside the image.
  void fill_rect(int64_t x, int64_t y, int64_t w, int64_t h, Rgb c);
  // Copies src with its top-left corner at (x, y), clipped to this image.
  void blit(const Image& src, int64_t x, int64_t y);
};

// Writes an 8-bit RGB PNG; throws Error naming the path (and the OS or libpng reason). A
// failed write leaves no partial file behind.
void write_png(const Image& img, const std::string& path);

// Magma-like colormap: t in [0, 1] from near black through purple and orange to pale yellow,
// luminance rising monotonically, so a grey-scale print still reads low to high. t is clamped.
Rgb colormap_magma(double t);
// Rec. 709 luma of the (gamma-encoded) colour, 0..255: what "monotone in luminance" means.
double luma(Rgb c);

// Row-major grid of values, e.g. one head's (query block, key block) cells.
struct Grid {
  int64_t rows = 0, cols = 0;
  std::vector<float> v;
  Grid() = default;
  Grid(int64_t rows, int64_t cols, float fill)
      : rows(rows), cols(cols), v(size_t(rows * cols), fill) {}
  float& at(int64_t r, int64_t c) { return v[size_t(r * cols + c)]; }
  float at(int64_t r, int64_t c) const { return v[size_t(r * cols + c)]; }
};
// Each output cell is the max over an fy x fx patch (edge patches may be smaller), so a
// single bright cell survives downsampling: a kept block or a heavy hitter never vanishes.
Grid max_pool(const Grid& g, int64_t fy, int64_t fx);

// How a grid of n cells along one axis becomes pixels: max-pool by `pool`, then repeat each
// cell `scale` times. Small grids grow to about target/2..target pixels so blocks are easy to
// see; grids larger than max_px are pooled down to at most max_px.
struct AxisFit {
  int64_t pool = 1, scale = 1;
  int64_t pixels(int64_t n) const { return (n + pool - 1) / pool * scale; }
};
AxisFit fit_axis(int64_t n, int64_t target = 512, int64_t max_px = 1024);

// Paints a grid (after pooling per the fits) with colour(value) per cell.
Image paint_grid(const Grid& g, AxisFit fy, AxisFit fx, const std::function<Rgb(float)>& colour);

// Places images left to right, top-aligned, `gap` pixels of `bg` between them.
Image hconcat(const std::vector<Image>& parts, int64_t gap, Rgb bg);

// Built-in 5x7 font (digits, A-Z, common punctuation; lower case is drawn as upper case and
// anything else as '?'). Each glyph takes 6 x 8 pixels times `scale`, spacing included.
int64_t text_width(std::string_view text, int scale = 1);
inline int64_t text_height(int scale = 1) { return 8 * int64_t(scale); }
void draw_text(Image& img, int64_t x, int64_t y, std::string_view text, Rgb c, int scale = 1);

}  // namespace spattn

// The `spattn mask` figure: oracle rows, captured mass and the three-panel picture.
#include "spattn/mask_figure.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <numeric>

#include "spattn/error.hpp"

namespace spattn {

BlockRows head_rows(const BlockMask& m, int64_t head) {
  BlockRows rows(size_t(m.n_qb()));
  for (int64_t qb = 0; qb < m.n_qb(); ++qb) {
    const auto r = m.row(head, qb);
    rows[size_t(qb)].assign(r.begin(), r.end());
  }
  return rows;
}
namespace {

constexpr Rgb kPaper{255, 255, 255}, kInk{24, 24, 28}, kMuted{96, 96, 104};
// Mask panels use the heat map's ends, so bright means "attended" in every panel.
const Rgb kKept = colormap_magma(1.0), kSkipped = colormap_magma(0.0);
constexpr Rgb kNonCausal{84, 84, 84};  // distinct from both ends of the colormap
constexpr int64_t kMargin = 16, kGap = 2;

void check_rows(const BlockMassGrid& g, const BlockRows& rows, const char* what) {
  SPATTN_CHECK(int64_t(rows.size()) == g.n_qb, what, ": ", rows.size(),
               " query block rows, the mass grid has ", g.n_qb);
  for (size_t qb = 0; qb < rows.size(); ++qb)
    for (int32_t kb : rows[qb])
      SPATTN_CHECK(kb >= 0 && kb < g.n_kb, what, ": query block ", qb, " lists key block ", kb,
                   " outside [0, ", g.n_kb, ")");
}

// Mask cells: 1 kept, 0 skipped causal, -inf not causal (lowest, so max-pooling keeps a
// pooled cell "causal" as long as any block in it is).
Grid mask_grid(const BlockMassGrid& g, const BlockRows& rows) {
  Grid out(g.n_qb, g.n_kb, -INFINITY);
  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    for (int64_t kb = 0; kb < g.causal_blocks(qb); ++kb) out.at(qb, kb) = 0;
    for (int32_t kb : rows[size_t(qb)]) out.at(qb, kb) = 1;
  }
  return out;
}

// Lowest decade of the heat map: the 2nd percentile of positive causal cells, so a few
// near-zero cells do not stretch the scale, kept within [1e-8, 1e-1].
int low_decade(const BlockMassGrid& g) {
  std::vector<float> pos;
  for (int64_t qb = 0; qb < g.n_qb; ++qb)
    for (int64_t kb = 0; kb < g.causal_blocks(qb); ++kb)
      if (const float m = g.mass[size_t(qb * g.n_kb + kb)]; m > 0) pos.push_back(m);
  if (pos.empty()) return -1;
  auto nth = pos.begin() + std::ptrdiff_t(pos.size() / 50);
  std::nth_element(pos.begin(), nth, pos.end());
  return std::clamp(int(std::floor(std::log10(double(*nth)))), -8, -1);
}

Grid log_mass_grid(const BlockMassGrid& g, int lo) {
  Grid out(g.n_qb, g.n_kb, -INFINITY);
  for (int64_t qb = 0; qb < g.n_qb; ++qb)
    for (int64_t kb = 0; kb < g.causal_blocks(qb); ++kb) {
      const float m = g.mass[size_t(qb * g.n_kb + kb)];
      out.at(qb, kb) = m > 0 ? std::max(float(lo), std::log10(m)) : float(lo);
    }
  return out;
}

// Text size of a figure: font scale 2 (16 px lines), 3 once panels reach 900 px, so labels
// stay readable when a big figure is shown shrunk. Every other size follows from it.
struct Style {
  int scale = 2;
  int64_t line() const { return 8 * scale; }    // one text line
  int64_t swatch() const { return 7 * scale; }  // legend squares, colour bar height
  int64_t space() const { return 3 * scale; }   // between lines
};

// Draws text at the style's scale when it fits `width`, else smaller, else cut short with "..".
void draw_fitted(Image& img, int64_t x, int64_t y, int64_t width, std::string text, Rgb c,
                 int max_scale) {
  for (int s = max_scale; s > 1; --s)
    if (text_width(text, s) <= width) return draw_text(img, x, y, text, c, s);
  const size_t fits = size_t(std::max<int64_t>(0, (width + 1) / 6));
  if (text.size() > fits) text = text.substr(0, fits >= 2 ? fits - 2 : 0) + "..";
  draw_text(img, x, y, text, c, 1);
}

std::string percent(double f) { return fmt::format("{:.1f}%", 100.0 * f); }

// Label, description and numbers above a panel: 3 lines and 3 spaces.
void draw_header(Image& img, const Style& st, int64_t x, int64_t y, int64_t width,
                 const std::string& label, const std::string& about, const std::string& numbers) {
  // Drawn twice, 1 px apart: a bold label without a second font.
  draw_fitted(img, x, y, width - 1, label, kInk, st.scale);
  draw_fitted(img, x + 1, y, width - 1, label, kInk, st.scale);
  y += st.line() + st.space();
  draw_fitted(img, x, y, width, about, kMuted, st.scale);
  y += st.line() + st.space();
  draw_fitted(img, x, y, width, numbers, kInk, st.scale);
}

// Swatches explaining the mask colours, under the mask panels.
void draw_legend(Image& img, const Style& st, int64_t x, int64_t y) {
  const std::pair<Rgb, const char*> items[] = {
      {kKept, "kept"}, {kSkipped, "skipped"}, {kNonCausal, "not causal"}};
  const int64_t sw = st.swatch();
  for (const auto& [colour, name] : items) {
    img.fill_rect(x, y, sw, sw, kInk);  // a 1 px frame so the pale swatch shows on paper
    img.fill_rect(x + 1, y + 1, sw - 2, sw - 2, colour);
    draw_text(img, x + sw + st.space(), y, name, kInk, st.scale);
    x += sw + st.space() + text_width(name, st.scale) + 3 * st.space();
  }
}

// Colour bar for decades lo..0 with a tick per decade. Labels are placed from the top decade
// down and one that would touch its right neighbour is left out, so narrow bars stay legible.
// Takes swatch() + 3 * scale + line() pixels of height.
void draw_colour_bar(Image& img, const Style& st, int64_t x, int64_t y, int64_t width, int lo) {
  const int64_t bar = st.swatch(), tick = st.scale * 2;
  for (int64_t i = 0; i < width; ++i)
    img.fill_rect(x + i, y, 1, bar,
                  colormap_magma(double(i) / double(std::max<int64_t>(1, width - 1))));
  int64_t free_right = x + width;  // labels must end left of this
  for (int d = 0; d >= lo; --d) {
    const int64_t tx = x + std::lround(double(d - lo) / double(-lo) * double(width - 1));
    img.fill_rect(tx, y + bar, 1, tick, kInk);
    const std::string label = d == 0 ? "1" : fmt::format("1e{}", d);
    const int64_t w = text_width(label, st.scale);
    const int64_t lx = std::clamp(tx - w / 2, x, x + width - w);
    if (lx + w > free_right) continue;
    draw_text(img, lx, y + bar + tick + st.scale, label, kInk, st.scale);
    free_right = lx - 2 * st.space();
  }
}

}  // namespace

BlockRows oracle_topk_rows(const BlockMassGrid& g, const std::vector<int64_t>& k) {
  SPATTN_CHECK(int64_t(k.size()) == g.n_qb, "oracle_topk_rows: ", k.size(), " budgets for ", g.n_qb,
               " query blocks");
  BlockRows rows(size_t(g.n_qb));
  std::vector<int32_t> order;
  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    SPATTN_CHECK(k[size_t(qb)] >= 0, "oracle_topk_rows: negative budget ", k[size_t(qb)],
                 " for query block ", qb);
    const int64_t n = g.causal_blocks(qb), keep = std::min(k[size_t(qb)], n);
    order.resize(size_t(n));
    std::iota(order.begin(), order.end(), 0);
    const float* m = &g.mass[size_t(qb * g.n_kb)];
    std::partial_sort(order.begin(), order.begin() + keep, order.end(),
                      [&](int32_t a, int32_t b) { return m[a] != m[b] ? m[a] > m[b] : a < b; });
    rows[size_t(qb)].assign(order.begin(), order.begin() + keep);
    std::sort(rows[size_t(qb)].begin(), rows[size_t(qb)].end());
  }
  return rows;
}

double mass_captured(const BlockMassGrid& g, const BlockRows& rows) {
  check_rows(g, rows, "mass_captured");
  double total = 0;
  int64_t counted = 0;
  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    if (g.causal_blocks(qb) == 0) continue;
    for (int32_t kb : rows[size_t(qb)]) total += g.mass[size_t(qb * g.n_kb + kb)];
    ++counted;
  }
  return counted ? total / double(counted) : 1.0;
}

double block_density(const BlockMassGrid& g, const BlockRows& rows) {
  check_rows(g, rows, "block_density");
  int64_t kept = 0, causal = 0;
  for (int64_t qb = 0; qb < g.n_qb; ++qb) {
    const int64_t n = g.causal_blocks(qb);
    causal += n;
    for (int32_t kb : rows[size_t(qb)]) kept += kb < n;
  }
  return causal ? double(kept) / double(causal) : 0.0;
}

Image render_mask_figure(const BlockMassGrid& g, const BlockRows& method, const BlockRows& oracle,
                         const MaskFigureText& text) {
  check_rows(g, method, "method mask");
  check_rows(g, oracle, "oracle mask");
  const AxisFit fy = fit_axis(g.n_qb), fx = fit_axis(g.n_kb);
  const int lo = low_decade(g);
  auto mask_colour = [](float v) { return v > 0.5f ? kKept : v == 0.0f ? kSkipped : kNonCausal; };
  auto mass_colour = [lo](float v) {
    return std::isinf(v) ? kNonCausal : colormap_magma((double(v) - lo) / double(-lo));
  };
  const std::vector<Image> panels{paint_grid(mask_grid(g, method), fy, fx, mask_colour),
                                  paint_grid(mask_grid(g, oracle), fy, fx, mask_colour),
                                  paint_grid(log_mass_grid(g, lo), fy, fx, mass_colour)};
  const int64_t pw = panels[0].width, ph = panels[0].height;
  const Image row = hconcat(panels, kGap, kPaper);
  const Style st{pw >= 900 ? 3 : 2};

  // Heights first (the header and the strip below depend only on the style), then drawing.
  const int64_t header_y = kMargin + st.line() + 2 * st.space();
  const int64_t header_h = 3 * st.line() + 3 * st.space();
  const int64_t panel_y = header_y + header_h + st.space();
  const int64_t below_y = panel_y + ph + 2 * st.space();
  const int64_t bar_h = st.swatch() + 3 * st.scale + st.line();
  const int64_t note_y = below_y + bar_h + 2 * st.space();
  Image img(row.width + 2 * kMargin, note_y + st.line() + kMargin, kPaper);
  draw_fitted(img, kMargin, kMargin, row.width, text.title, kInk, st.scale);

  auto numbers = [&](const BlockRows& r) {
    return fmt::format("density {}  mass {:.4f}", percent(block_density(g, r)),
                       mass_captured(g, r));
  };
  const int64_t x0 = kMargin, x1 = x0 + pw + kGap, x2 = x1 + pw + kGap;
  draw_header(img, st, x0, header_y, pw, "method", text.method, numbers(method));
  draw_header(img, st, x1, header_y, pw, "oracle top-k", text.oracle_rule, numbers(oracle));
  draw_header(img, st, x2, header_y, pw, "block mass (log)",
              fmt::format("{}x{} blocks", g.block_q, g.block_k),
              fmt::format("{} x {} grid", g.n_qb, g.n_kb));
  img.blit(row, kMargin, panel_y);

  draw_legend(img, st, x0, below_y);
  draw_colour_bar(img, st, x2, below_y, pw, lo);
  std::string note = "rows: query blocks, first at top. columns: key blocks.";
  if (fy.pool > 1 || fx.pool > 1)
    note += fmt::format(" each cell: max over {}x{} blocks.", fy.pool, fx.pool);
  draw_fitted(img, kMargin, note_y, 2 * pw + kGap, note, kMuted, st.scale);
  return img;
}

}  // namespace spattn

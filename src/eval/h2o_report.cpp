// The heavy-hitter analysis (spattn/h2o_report.hpp): sink share, Jaccard stability, figure.
#include "spattn/h2o_report.hpp"

#include <fmt/format.h>

#include <algorithm>

#include "spattn/error.hpp"

namespace spattn {

double jaccard(std::span<const int64_t> a, std::span<const int64_t> b) {
  if (a.empty() && b.empty()) return 1.0;
  size_t i = 0, j = 0, both = 0;
  while (i < a.size() && j < b.size()) {
    if (a[i] == b[j])
      ++both, ++i, ++j;
    else if (a[i] < b[j])
      ++i;
    else
      ++j;
  }
  return double(both) / double(a.size() + b.size() - both);
}

std::vector<int64_t> h2o_heavy_set(const H2OTraceLayer& t, size_t chunk, int64_t head) {
  SPATTN_CHECK(chunk < t.chunks.size() && head >= 0 && head < t.heads, "h2o: chunk ", chunk,
               " head ", head, " outside the trace (", t.chunks.size(), " chunks, ", t.heads,
               " heads)");
  const auto& c = t.chunks[chunk];
  const int64_t local_begin = std::max(c.begin, c.end - t.local);  // Local_c
  const auto& m = c.memory[size_t(head)];
  return {m.begin(), std::lower_bound(m.begin(), m.end(), local_begin)};
}

namespace {

struct Acc {
  double sum = 0, min = 1;
  int64_t n = 0;
  void add(double x) { sum += x, min = std::min(min, x), ++n; }
  MeanMin get() const { return {n ? sum / double(n) : 0.0, n ? min : 0.0, n}; }
};

}  // namespace

H2OLayerStats h2o_layer_stats(const H2OTraceLayer& t, int64_t sink, const H2OTraceLayer* other) {
  SPATTN_CHECK(sink >= 1, "h2o: the sink must be at least 1 token, got ", sink);
  if (other) {
    bool same = other->heads == t.heads && other->chunks.size() == t.chunks.size();
    for (size_t c = 0; same && c < t.chunks.size(); ++c)
      same = other->chunks[c].begin == t.chunks[c].begin && other->chunks[c].end == t.chunks[c].end;
    SPATTN_CHECK(same, "h2o: layer ", t.layer,
                 " of the two traces differs in heads or chunk "
                 "boundaries (",
                 t.heads, " heads, ", t.chunks.size(), " chunks against ", other->heads, ", ",
                 other->chunks.size(),
                 "); compare runs of one length, -b "
                 "and -ub");
  }
  H2OLayerStats s;
  s.layer = t.layer;
  Acc cons, heads, cmp;
  int64_t first = 0, all = 0;
  std::vector<std::vector<int64_t>> cur(size_t(t.heads)), prev;
  for (size_t c = 0; c < t.chunks.size(); ++c) {
    for (int64_t h = 0; h < t.heads; ++h) {
      const auto& m = t.chunks[c].memory[size_t(h)];
      first += !m.empty() && m.front() == 0;
      // Every one of 0 .. sink-1 present: the first `sink` entries are exactly those.
      all += int64_t(m.size()) >= sink && m[size_t(sink - 1)] == sink - 1;
      cur[size_t(h)] = h2o_heavy_set(t, c, h);
      if (!prev.empty()) cons.add(jaccard(prev[size_t(h)], cur[size_t(h)]));
      if (other) cmp.add(jaccard(cur[size_t(h)], h2o_heavy_set(*other, c, h)));
    }
    for (int64_t a = 0; a < t.heads; ++a)
      for (int64_t b = a + 1; b < t.heads; ++b) heads.add(jaccard(cur[size_t(a)], cur[size_t(b)]));
    prev = cur;
  }
  s.sets = int64_t(t.chunks.size()) * t.heads;
  s.sink_first = s.sets ? double(first) / double(s.sets) : 0.0;
  s.sink_all = s.sets ? double(all) / double(s.sets) : 0.0;
  s.consecutive = cons.get();
  s.heads = heads.get();
  s.compare = cmp.get();
  return s;
}

namespace {

constexpr Rgb kPaper{255, 255, 255}, kInk{24, 24, 28}, kMuted{96, 96, 104};
constexpr Rgb kHeavy{24, 24, 28}, kLocal{236, 120, 36}, kDropped{214, 214, 220},
    kUnseen{255, 255, 255};
// Cell states, ordered so that max-pooling shows the most important one in a pixel.
constexpr float kStUnseen = 0, kStDropped = 1, kStLocal = 2, kStHeavy = 3;
constexpr int64_t kMargin = 16, kScale = 2;

Rgb state_colour(float v) {
  return v >= kStHeavy ? kHeavy : v >= kStLocal ? kLocal : v >= kStDropped ? kDropped : kUnseen;
}

}  // namespace

Image h2o_figure(const H2OTraceLayer& t, int64_t max_width) {
  SPATTN_CHECK(!t.chunks.empty(), "h2o: layer ", t.layer,
               " has no memory sets to draw (a "
               "prompt of one chunk builds none)");
  const int64_t n_rows = int64_t(t.chunks.size());
  const AxisFit fx = fit_axis(t.tokens, std::min<int64_t>(512, max_width), max_width);
  AxisFit fy;
  fy.scale = std::clamp<int64_t>(160 / n_rows, 2, 12);
  const int64_t panel_w = fx.pixels(t.tokens), panel_h = fy.pixels(n_rows);
  const int64_t line = 8 * kScale, space = 3 * kScale;
  const std::string title = fmt::format("LAYER {}: CHUNKED_H2O S={} L={} H={}, {} TOKENS", t.layer,
                                        t.chunk, t.local, t.heavy, t.tokens);
  const std::string about = fmt::format(
      "ROW C: MEMORY SET M_C AFTER CHUNK C (TOP: C=0), X: POSITION, {} PER PIXEL", fx.pool);
  const int64_t width =
      std::max({panel_w, text_width(title, kScale), text_width(about, 1)}) + 2 * kMargin;
  const int64_t head_h = line + space + panel_h + 2 * space;
  const int64_t height = kMargin + 2 * (line + space) + t.heads * head_h + line + kMargin;
  Image img(width, height, kPaper);
  int64_t y = kMargin;
  draw_text(img, kMargin, y, title, kInk, kScale);
  draw_text(img, kMargin + 1, y, title, kInk, kScale);
  y += line + space;
  draw_text(img, kMargin, y, about, kMuted, 1);
  y += line + space;
  // Pooled while filled (a cell per pixel column, the most important state of its positions):
  // the work and memory follow the figure's size, not the token count a file claims.
  const int64_t pool = fx.pool, cols = (t.tokens + pool - 1) / pool;
  AxisFit fx_cells;
  fx_cells.scale = fx.scale;
  for (int64_t h = 0; h < t.heads; ++h) {
    Grid g(n_rows, cols, kStUnseen);
    for (int64_t c = 0; c < n_rows; ++c) {
      const auto& ch = t.chunks[size_t(c)];
      const int64_t local_begin = std::max(ch.begin, ch.end - t.local);
      for (int64_t x = 0; x < (ch.end + pool - 1) / pool; ++x) g.at(c, x) = kStDropped;
      for (int64_t j : ch.memory[size_t(h)]) {
        float& cell = g.at(c, j / pool);
        cell = std::max(cell, j >= local_begin ? kStLocal : kStHeavy);
      }
    }
    draw_text(img, kMargin, y, fmt::format("HEAD {}", h), kInk, kScale);
    y += line + space;
    img.fill_rect(kMargin - 1, y - 1, panel_w + 2, panel_h + 2, kMuted);  // a 1 px frame
    img.blit(paint_grid(g, fy, fx_cells, state_colour), kMargin, y);
    y += panel_h + 2 * space;
  }
  int64_t x = kMargin;
  for (const auto& [colour, name] :
       {std::pair{kHeavy, "HEAVY HITTER"}, std::pair{kLocal, "LOCAL"},
        std::pair{kDropped, "DROPPED"}, std::pair{kUnseen, "NOT YET SEEN"}}) {
    img.fill_rect(x, y, line, line, kInk);
    img.fill_rect(x + 1, y + 1, line - 2, line - 2, colour);
    draw_text(img, x + line + space, y, name, kInk, kScale);
    x += line + 2 * space + text_width(name, kScale) + 3 * space;
  }
  return img;
}

}  // namespace spattn

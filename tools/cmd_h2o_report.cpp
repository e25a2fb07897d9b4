// `spattn h2o-report DIR [--compare DIR2] -o OUT`: the heavy-hitter analysis of a trace that
// `spattn run --attn chunked_h2o --h2o-trace DIR` wrote ("Chunked Sparse Attention for Prefill
// Optimization", Task 8.4). Draws OUT/layerN.png per layer (heads stacked, a row per chunk)
// and prints a Markdown table per layer: the share of memory sets that hold the sink (position
// 0, and all of the first --sink positions) and the mean and lowest Jaccard similarity of the
// heavy-hitter sets between consecutive chunks, between heads, and against DIR2 (another run:
// 1.0 when deterministic; or another prompt of the same length).
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <string>

#include "cli.hpp"
#include "spattn/error.hpp"
#include "spattn/h2o_report.hpp"

namespace spattn::cli {
namespace {

struct H2OReportOptions {
  std::string dir, compare, out;
  int64_t sink = 4;
};

std::string cell(const MeanMin& m) {
  return m.n ? fmt::format("{:.3f} / {:.3f}", m.mean, m.min) : std::string("-");
}

void run_h2o_report(const H2OReportOptions& o) {
  const std::vector<H2OTraceLayer> a = read_h2o_trace(o.dir);
  std::vector<H2OTraceLayer> b;
  if (!o.compare.empty()) {
    b = read_h2o_trace(o.compare);
    SPATTN_CHECK(b.size() == a.size(), "--compare: '", o.compare, "' holds ", b.size(),
                 " layers, '", o.dir, "' ", a.size());
  }
  if (!o.out.empty()) {
    std::filesystem::create_directories(o.out);
    for (const H2OTraceLayer& t : a)
      write_png(h2o_figure(t),
                (std::filesystem::path(o.out) / fmt::format("layer{}.png", t.layer)).string());
  }
  const H2OTraceLayer& t0 = a.front();
  fmt::print(
      "trace {}: {} layers, {} heads, {} tokens, S = {}, L = {}, H = {}, {} memory sets "
      "per head and layer\n",
      o.dir, a.size(), t0.heads, t0.tokens, t0.chunk, t0.local, t0.heavy, t0.chunks.size());
  if (!o.compare.empty()) fmt::print("compared with {}\n", o.compare);
  fmt::print("Jaccard of heavy-hitter sets (M_c without the local window), mean / lowest\n\n");
  fmt::print(
      "| layer | sets | holding pos 0 | holding pos 0..{} | J consecutive chunks | "
      "J between heads |{}\n",
      o.sink - 1, o.compare.empty() ? "" : " J vs --compare |");
  fmt::print("|---|---|---|---|---|---|{}\n", o.compare.empty() ? "" : "---|");
  double first = 0, all = 0;
  int64_t sets = 0;
  for (size_t l = 0; l < a.size(); ++l) {
    SPATTN_CHECK(b.empty() || b[l].layer == a[l].layer, "--compare: layer ", b[l].layer,
                 " stands where '", o.dir, "' has layer ", a[l].layer);
    const H2OLayerStats s = h2o_layer_stats(a[l], o.sink, b.empty() ? nullptr : &b[l]);
    fmt::print("| {} | {} | {:.1f}% | {:.1f}% | {} | {} |{}\n", s.layer, s.sets, 100 * s.sink_first,
               100 * s.sink_all, cell(s.consecutive), cell(s.heads),
               b.empty() ? "" : " " + cell(s.compare) + " |");
    first += s.sink_first * double(s.sets), all += s.sink_all * double(s.sets), sets += s.sets;
  }
  fmt::print(
      "\nsink share over all {} memory sets: {:.1f}% hold position 0, {:.1f}% hold all "
      "of positions 0..{}\n",
      sets, 100 * first / double(sets), 100 * all / double(sets), o.sink - 1);
  if (!o.out.empty()) fmt::print("wrote {}/layer*.png\n", o.out);
}

}  // namespace

void add_h2o_report_command(CLI::App& root) {
  auto o = std::make_shared<H2OReportOptions>();
  CLI::App* cmd = root.add_subcommand(
      "h2o-report", "heavy-hitter analysis of a chunked_h2o trace (spattn run --h2o-trace)");
  cmd->add_option("dir", o->dir, "trace directory (layerN.h2o files)")->required();
  cmd->add_option("--compare", o->compare,
                  "a second trace (another run or prompt of the same length, -b, -ub)");
  cmd->add_option("-o,--out", o->out, "directory for the per-layer PNGs (layerN.png)");
  cmd->add_option("--sink", o->sink, "the first tokens counted as the attention sink")
      ->capture_default_str();
  cmd->callback([o] { run_h2o_report(*o); });
}

}  // namespace spattn::cli

// `spattn search`: MMInference's offline pattern search (Algorithm 4) on one calibration
// sample, a generated workload or a --qkv dump; writes the per-head plan that
// `--method mminference:plan=FILE` runs.
#include <fmt/format.h>

#include <memory>
#include <string>

#include "cli.hpp"
#include "core/threading.hpp"
#include "spattn/error.hpp"
#include "spattn/mminference.hpp"
#include "spattn/modality.hpp"

namespace spattn::cli {
namespace {

struct SearchOptions {
  ProblemOptions problem;
  std::string out;
  bool quiet = false;
};

void run_search(const SearchOptions& o) {
  SPATTN_CHECK(!o.out.empty(), "--out is required (the plan file to write)");
  const Problem p = load_problem(o.problem);
  MMSearchOptions so;
  so.frame_stride = p.opt.modality ? p.opt.modality->frame_tokens : 0;
  so.threads = resolve_threads(o.problem.threads);
  so.verbose = !o.quiet;
  const MMPlan plan = mm_search(p.q, p.k, p.v, p.opt, so);
  save_mm_plan(plan, o.out);
  fmt::print("wrote {} ({} heads, frame stride {}) from {}\n", o.out, plan.heads,
             plan.frame_stride, p.source);
  for (size_t h = 0; h < plan.layers[0].size(); ++h) {
    const MMHeadPlan& x = plan.layers[0][h];
    fmt::print("  head {:>3}: {:<15} boundary {:<4} recall {:.4f}  cost {:.3f} of the A-shape budget\n",
               h, mm_pattern_name(x.pattern), mm_boundary_name(x.boundary), x.recall, x.cost);
  }
}

}  // namespace

void add_search_command(CLI::App& root) {
  auto o = std::make_shared<SearchOptions>();
  o->problem.heads = 8;
  o->problem.seq = 32768;
  CLI::App* cmd = root.add_subcommand(
      "search", "MMInference's per-head pattern search; writes a plan for mminference:plan=FILE");
  add_problem_options(*cmd, o->problem);
  cmd->add_option("--out", o->out, "plan file to write (JSON)");
  cmd->add_flag("--quiet", o->quiet, "no per-head lines on stderr");
  cmd->callback([o] { run_search(*o); });
}

}  // namespace spattn::cli

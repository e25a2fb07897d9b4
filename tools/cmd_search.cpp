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
  double recall = 0;  // --recall R: the recall rule (0: the budget rule)
};

void run_search(const SearchOptions& o) {
  SPATTN_CHECK(!o.out.empty(), "--out is required (the plan file to write)");
  const Problem p = load_problem(o.problem);
  MMSearchOptions so;
  so.frame_stride = p.opt.modality ? p.opt.modality->frame_tokens : 0;
  so.threads = resolve_threads(o.problem.threads);
  so.verbose = !o.quiet;
  so.recall_target = o.recall;
  const MMPlan plan = mm_search(p.q, p.k, p.v, p.opt, so);
  save_mm_plan(plan, o.out);
  fmt::print("wrote {} ({} heads, frame stride {}) from {}\n", o.out, plan.heads, plan.frame_stride,
             p.source);
  double sum = 0;
  int flagged = 0;
  for (size_t h = 0; h < plan.layers[0].size(); ++h) {
    const MMHeadPlan& x = plan.layers[0][h];
    fmt::print(
        "  head {:>3}: {:<15} boundary {:<4} recall {:.4f}  cost {:.3f} of the A-shape "
        "budget{}  ({})\n",
        h, mm_pattern_name(x.pattern), mm_boundary_name(x.boundary), x.recall, x.cost,
        x.flagged ? "  FLAGGED" : "", x.reason);
    sum += x.recall, flagged += x.flagged;
  }
  fmt::print("mean output recall {:.4f} over {} heads{}\n", sum / double(plan.layers[0].size()),
             plan.layers[0].size(),
             o.recall > 0 ? fmt::format("; {} flagged below {:.4g}", flagged, o.recall) : "");
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
  cmd->add_option("--recall", o->recall,
                  "per head the cheapest candidate reaching this output recall, whatever its "
                  "cost, else the best one, flagged (0: the best recall within the A-shape "
                  "budget)")
      ->capture_default_str();
  cmd->callback([o] { run_search(*o); });
}

}  // namespace spattn::cli

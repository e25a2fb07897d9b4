// `spattn mask`: runs one mask-building method, then draws one head's block mask beside the
// oracle top-k mask with the same number of blocks per query block and the true block-mass
// heat map, so where a method's budget goes (and where the mass really is) can be seen at once.
#include <fmt/format.h>

#include <filesystem>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "cli.hpp"
#include "spattn/error.hpp"
#include "spattn/mask_figure.hpp"
#include "spattn/masks.hpp"
#include "spattn/method.hpp"
#include "spattn/metrics.hpp"

namespace spattn::cli {
namespace {

struct MaskOptions {
  ProblemOptions problem;
  std::string method;
  int64_t head = 0;
  int64_t topk = 0;                 // 0: as many blocks per query block as the method kept
  bool budget_from_method = false;  // the default, spelled out; excludes --topk
  std::string out;
};

// Checked before any work: a typo in the directory should not cost a minute of attention.
void check_out_dir(const std::string& out) {
  namespace fs = std::filesystem;
  const fs::path dir = fs::path(out).parent_path();
  std::error_code ec;
  SPATTN_CHECK(dir.empty() || fs::is_directory(dir, ec), "--out: directory '", dir.string(),
               "' does not exist");
}

void run_mask(const MaskOptions& o) {
  const std::unique_ptr<Method> method = make_method(o.method);
  check_out_dir(o.out);
  const Problem p = load_problem(o.problem);
  SPATTN_CHECK(o.head >= 0 && o.head < p.q.heads(), "--head must be in [0, ", p.q.heads(),
               "), got ", o.head);
  Progress progress("mask");
  progress.update("running " + o.method);
  MethodReport report;
  {
    const Tensor out(DType::f32, p.q.heads(), p.q.seq(), p.q.dim());
    report = method->run(p.q, p.k, p.v, out, p.opt);
  }
  // Token-level or permuted patterns (grid, mminference) report coverage only: draw the blocks
  // it touches. A full coverage (dense) has nothing to draw.
  BlockMask from_coverage;
  const BlockMask* mask = report.mask.get();
  if (!mask && report.coverage && !dynamic_cast<const FullCoverage*>(report.coverage.get())) {
    progress.update("rounding the coverage to blocks");
    from_coverage = coverage_block_mask(*report.coverage, p.q.heads(), p.q.seq(), p.k.seq());
    mask = &from_coverage;
  }
  SPATTN_CHECK(mask, "method '", method->name(),
               "' builds no block mask to draw; use a mask-building method such as "
               "vertical_slash or a_shape");
  mask->check_matches(p.q.heads(), p.q.seq(), p.k.seq(), p.opt.causal);
  SPATTN_CHECK(mask->block_k % kKeyBlock == 0, "method '", method->name(), "' uses key blocks of ",
               mask->block_k, "; block mass is measured in multiples of ", kKeyBlock);

  progress.update("measuring block mass");
  const BlockMassGrid g = block_mass(p.q, p.k, p.v, o.head, mask->block_q, mask->block_k, p.opt);
  const BlockRows method_rows = head_rows(*mask, o.head);
  std::vector<int64_t> budget(size_t(g.n_qb), o.topk);
  if (o.topk == 0)
    for (size_t qb = 0; qb < budget.size(); ++qb) budget[qb] = int64_t(method_rows[qb].size());
  const BlockRows oracle_rows = oracle_topk_rows(g, budget);

  progress.update("drawing");
  MaskFigureText text;
  text.title = fmt::format("{}, seq {}, head {} of {}, {}{}", p.source, p.k.seq(), o.head,
                           p.q.heads(), dtype_name(p.q.dtype()), p.opt.causal ? ", causal" : "");
  text.method = o.method;
  text.oracle_rule =
      o.topk ? fmt::format("top {} blocks per row", o.topk) : "same blocks per row as method";
  const Image img = render_mask_figure(g, method_rows, oracle_rows, text);
  write_png(img, o.out);
  progress.done();

  // Block numbers are this head's; sparsity is over all heads, as `spattn bench` reports it.
  fmt::print(
      "head {}: {} keeps {:.1f}% of causal blocks (all heads: sparsity {:.1f}%), mass "
      "captured {:.4f}; oracle top-k ({}) {:.1f}%, {:.4f}; wrote {} ({}x{})\n",
      o.head, o.method, 100 * block_density(g, method_rows), 100 * report.stats.sparsity(),
      mass_captured(g, method_rows), o.topk ? fmt::format("k={}", o.topk) : "same budget",
      100 * block_density(g, oracle_rows), mass_captured(g, oracle_rows), o.out, img.width,
      img.height);
}

}  // namespace

void add_mask_command(CLI::App& root) {
  auto o = std::make_shared<MaskOptions>();
  CLI::App* cmd = root.add_subcommand(
      "mask", "draw one head's block mask beside the oracle top-k mask and the block mass (PNG)");
  add_problem_options(*cmd, o->problem);
  cmd->add_option("--method", o->method, "mask-building method, NAME[:key=value,...]")
      ->required()
      ->allow_extra_args(false);
  cmd->add_option("--head", o->head, "query head to draw")->capture_default_str();
  auto* from_method =
      cmd->add_flag("--budget-from-method", o->budget_from_method,
                    "oracle keeps as many blocks per query block as the method (default)");
  cmd->add_option("--topk", o->topk, "oracle keeps K blocks per query block instead")
      ->check(CLI::PositiveNumber)
      ->excludes(from_method);
  cmd->add_option("--out", o->out, "PNG file to write")->required();
  cmd->callback([o] { run_mask(*o); });
}

}  // namespace spattn::cli

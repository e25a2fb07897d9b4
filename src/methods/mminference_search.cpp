// MMInference's offline pattern search ("MMInference: Modality-Aware Permutation Sparse
// Attention", section 3.3, Algorithm 4, Appendix A and C.5): per q head, every Table 3
// candidate, and on a mixed-modality sample each A-shape and vertical-slash candidate also as a
// Q-boundary and a 2D-boundary head, runs on our kernels against dense on one calibration
// sample. See mm_search in spattn/mminference.hpp for the rule.
//
// Kernel-aware and deterministic: a candidate's cost is the work our kernel did for it, key
// tiles visited (each a 64-key tile against up to 64 rows), times a per-form factor (1.25 for
// vertical-slash, whose vertical lines are gathered 64 at a time; the bound on its cost
// per entry). Counted, not timed, so the same input always gives the same plan.
#include <cmath>
#include <cstdio>
#include <optional>

#include "spattn/error.hpp"
#include "spattn/mminference.hpp"
#include "spattn/modality.hpp"

namespace spattn {

namespace {

constexpr double kGatherFactor = 1.25;

std::vector<MMHeadPlan> table3_candidates() {
  std::vector<MMHeadPlan> c;
  const bool g[6][3] = {{true, false, false}, {false, true, false}, {false, false, true},
                        {true, true, false},  {false, true, true},  {true, true, true}};
  for (const auto& x : g) {
    MMHeadPlan h;
    h.pattern = MMPattern::grid;
    h.hline = x[0], h.vline = x[1], h.slash = x[2];
    h.max_stride = 1024;
    c.push_back(h);
  }
  for (int64_t local : {1024, 2048, 4096}) {
    MMHeadPlan h;
    h.pattern = MMPattern::a_shape;
    h.sink = 128, h.local = local;
    c.push_back(h);
  }
  const int64_t vs[9][2] = {{1000, 1024}, {1000, 2048}, {2000, 2048}, {1000, 3096}, {2000, 3096},
                            {1000, 4096}, {2000, 4096}, {3500, 200},  {1000, 2500}};
  for (const auto& x : vs) {
    MMHeadPlan h;
    h.pattern = MMPattern::vertical_slash;
    h.vertical = x[0], h.slash_size = x[1];
    c.push_back(h);
  }
  return c;
}

// The boundary step's candidates (Algorithm 4, inter-modality search): each A-shape and
// vertical-slash candidate again as a Q-boundary and a 2D-boundary head. Only where the sample
// has two or more modalities: with one, q is the same index as none. K-boundary is not a
// separate candidate: it runs exactly as none (see MMBoundary) and would only tie with it.
std::vector<MMHeadPlan> with_boundaries(const std::vector<MMHeadPlan>& intra) {
  std::vector<MMHeadPlan> c = intra;
  for (MMBoundary b : {MMBoundary::q, MMBoundary::two_d})
    for (MMHeadPlan h : intra)
      if (h.pattern != MMPattern::grid) {
        h.boundary = b;
        c.push_back(h);
      }
  return c;
}

// Vertical-slash's own kernel gathers its vertical lines; boundary heads run on the row-groups
// kernel, which packs a piece's columns as ordinary key tiles.
double kernel_cost(const MMHeadPlan& h, const Stats& st) {
  const bool gathers = h.pattern == MMPattern::vertical_slash &&
                       (h.boundary == MMBoundary::none || h.boundary == MMBoundary::k);
  return double(st.tiles_visited) * (gathers ? kGatherFactor : 1.0);
}

// 1 - ||o - ref|| / ||ref|| over one head.
double output_recall(const TensorView& o, const TensorView& ref) {
  double num = 0, den = 0;
  for (int64_t s = 0; s < o.seq; ++s)
    for (int64_t c = 0; c < o.dim; ++c) {
      const double a = o.get(0, s, c), b = ref.get(0, s, c);
      num += (a - b) * (a - b);
      den += b * b;
    }
  return den > 0 ? 1.0 - std::sqrt(num / den) : 1.0;
}

}  // namespace

std::optional<MMHeadPlan> mm_pick(const std::vector<MMHeadPlan>& measured, double recall_target) {
  SPATTN_CHECK(recall_target >= 0 && recall_target <= 1,
               "search: the recall target must be in "
               "(0, 1] (0: the budget rule), got ",
               recall_target);
  const MMHeadPlan* best = nullptr;      // budget rule: best recall within budget
  const MMHeadPlan* cheapest = nullptr;  // recall rule: cheapest reaching the target
  const MMHeadPlan* top = nullptr;       // recall rule: best recall overall
  for (const MMHeadPlan& c : measured) {
    if (recall_target == 0) {
      if (c.cost <= 1.0 && (!best || c.recall > best->recall)) best = &c;
      continue;
    }
    if (c.recall >= recall_target && (!cheapest || c.cost < cheapest->cost)) cheapest = &c;
    if (!top || c.recall > top->recall) top = &c;
  }
  MMHeadPlan pick;
  char why[160];
  if (recall_target == 0) {
    if (!best) return std::nullopt;
    pick = *best;
    std::snprintf(why, sizeof why, "best recall within the A-shape budget (1k sink + 4k local)");
  } else if (cheapest) {
    pick = *cheapest;
    std::snprintf(why, sizeof why, "cheapest candidate reaching recall %.4g", recall_target);
  } else if (top) {
    pick = *top;
    pick.flagged = true;
    std::snprintf(why, sizeof why, "no candidate reaches recall %.4g: the best recall",
                  recall_target);
  } else {
    return std::nullopt;
  }
  pick.reason = why;
  return pick;
}

MMPlan mm_search(const TensorView& q, const TensorView& k, const TensorView& v,
                 const AttnOptions& opt, const MMSearchOptions& so) {
  SPATTN_CHECK(opt.causal, "search: needs causal attention");
  SPATTN_CHECK(so.recall_target >= 0 && so.recall_target <= 1,
               "search: the recall target must "
               "be in (0, 1] (0: the budget rule), got ",
               so.recall_target);
  SPATTN_CHECK(so.frame_stride >= 0, "search: frame_stride must be >= 0, got ", so.frame_stride);
  SPATTN_CHECK(q.heads % k.heads == 0, "search: q heads (", q.heads,
               ") must be a multiple of kv heads (", k.heads, ")");
  AttnOptions o = opt;
  o.threads = so.threads;
  const int64_t group = q.heads / k.heads;
  Tensor dense(DType::f32, q.heads, q.seq, q.dim), out(DType::f32, 1, q.seq, q.dim);
  attention_dense(q, k, v, dense, o);
  o.check_finite = false;
  MMHeadPlan budget_shape;
  budget_shape.pattern = MMPattern::a_shape;
  budget_shape.sink = 1024,
  budget_shape.local = 4096;  // Appendix C.5's target: 1k global + 4k local
  const bool mixed = so.boundaries && opt.modality && opt.modality->num_modalities() >= 2;
  if (opt.modality) opt.modality->validate(k.seq);
  const std::vector<MMHeadPlan> cands =
      mixed ? with_boundaries(table3_candidates()) : table3_candidates();
  MMPlan plan;
  plan.heads = q.heads;
  plan.frame_stride = so.frame_stride;
  plan.layers.emplace_back();
  for (int64_t h = 0; h < q.heads; ++h) {
    const TensorView qh = q.head_range(h, 1), kh = k.head_range(h / group, 1),
                     vh = v.head_range(h / group, 1), ref = dense.view().head_range(h, 1);
    Stats bst;
    mm_run_head(budget_shape, so.frame_stride, qh, kh, vh, out, o, nullptr, &bst);
    const double budget = kernel_cost(budget_shape, bst);
    std::vector<MMHeadPlan> measured;
    for (const MMHeadPlan& c : cands) {
      Stats st;
      mm_run_head(c, so.frame_stride, qh, kh, vh, out, o, nullptr, &st);
      MMHeadPlan m = c;
      m.cost = kernel_cost(c, st) / budget;
      // Over budget, the budget rule never looks at its recall: not computed (as before).
      m.recall = so.recall_target == 0 && m.cost > 1.0 ? 0.0 : output_recall(out, ref);
      measured.push_back(m);
    }
    std::optional<MMHeadPlan> pick = mm_pick(measured, so.recall_target);
    MMHeadPlan best;
    if (pick) {
      best = *pick;
    } else {  // nothing fits (a short sample): the budget pattern itself
      best = budget_shape;
      mm_run_head(best, so.frame_stride, qh, kh, vh, out, o, nullptr, &bst);
      best.recall = output_recall(out, ref), best.cost = 1.0;
      best.reason = "no candidate within the A-shape budget: the budget pattern itself";
    }
    if (so.measured) so.measured->push_back(std::move(measured));
    if (so.verbose)
      std::fprintf(
          stderr, "search: head %lld: %s, boundary %s (recall %.4f, cost %.3f of budget%s)\n",
          static_cast<long long>(h), mm_pattern_name(best.pattern), mm_boundary_name(best.boundary),
          best.recall, best.cost, best.flagged ? ", FLAGGED" : "");
    plan.layers[0].push_back(best);
  }
  return plan;
}

}  // namespace spattn

// MMInference's search with a recall target (`spattn search --recall R`): per head the
// cheapest candidate reaching R, whatever its cost, else the best one, flagged; the plan says
// why. On a tiny video workload where the cheapest candidate misses R and a costlier one
// reaches it; the rule itself on measured lists made up by hand; the reason and the flag
// through the plan file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>

#include "spattn/error.hpp"
#include "spattn/mminference.hpp"
#include "spattn/workload.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

MMHeadPlan measured(MMPattern p, double recall, double cost) {
  MMHeadPlan h;
  h.pattern = p;
  h.recall = recall, h.cost = cost;
  return h;
}

TEST(SearchRecall, RuleOnMeasuredCandidates) {
  const std::vector<MMHeadPlan> m = {measured(MMPattern::grid, 0.80, 0.2),
                                     measured(MMPattern::a_shape, 0.90, 0.9),
                                     measured(MMPattern::vertical_slash, 0.97, 1.6),
                                     measured(MMPattern::vertical_slash, 0.99, 2.4)};
  // Budget rule: the best within cost 1.
  auto p = mm_pick(m, 0);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->pattern, MMPattern::a_shape);
  EXPECT_FALSE(p->flagged);
  EXPECT_NE(p->reason.find("within the A-shape budget"), std::string::npos) << p->reason;
  // Recall 0.95: the cheapest reaching it (1.6), not the best (2.4), over budget allowed.
  p = mm_pick(m, 0.95);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->cost, 1.6);
  EXPECT_FALSE(p->flagged);
  EXPECT_NE(p->reason.find("cheapest candidate reaching recall 0.95"), std::string::npos)
      << p->reason;
  // Recall 0.85: a cheaper one reaches it.
  EXPECT_EQ(mm_pick(m, 0.85)->cost, 0.9);
  // Nothing reaches 0.995: the best recall, flagged.
  p = mm_pick(m, 0.995);
  ASSERT_TRUE(p);
  EXPECT_EQ(p->recall, 0.99);
  EXPECT_TRUE(p->flagged);
  EXPECT_NE(p->reason.find("no candidate reaches recall 0.995"), std::string::npos) << p->reason;
  // Nothing within budget: none (the search runs the budget pattern).
  EXPECT_FALSE(mm_pick({measured(MMPattern::grid, 0.9, 1.1)}, 0));
  EXPECT_THROW(mm_pick(m, 1.5), Error);
  EXPECT_THROW(mm_pick(m, -0.1), Error);
}

TEST(SearchRecall, TinyWorkloadCheapestMissesCostlierReaches) {
  WorkloadConfig cfg;
  cfg.kind = WorkloadKind::video;
  cfg.seq = 2048;
  cfg.heads = 2;
  cfg.dim = 32;
  cfg.seed = 3;
  cfg.frame_tokens = 64;
  const Workload w = make_workload(cfg);
  MMSearchOptions so;
  so.frame_stride = 64;
  so.boundaries = false;
  // First every candidate's recall and cost (the budget rule's run measures all of them when
  // they fit; the recall run below measures every one).
  std::vector<std::vector<MMHeadPlan>> all;
  so.recall_target = 1.0;
  so.measured = &all;
  (void)mm_search(w.q, w.k, w.v, {}, so);
  ASSERT_EQ(all.size(), 2u);
  // Head 0: a target between the cheapest candidate's recall and the best recall, so the
  // cheapest misses it and some costlier one reaches it.
  const auto& m = all[0];
  const MMHeadPlan* cheapest = &m[0];
  double best = 0;
  for (const MMHeadPlan& c : m) {
    if (c.cost < cheapest->cost) cheapest = &c;
    best = std::max(best, c.recall);
  }
  ASSERT_LT(cheapest->recall, best) << "the workload must make the cheapest candidate worse";
  const double target = 0.5 * (cheapest->recall + best);
  std::vector<std::vector<MMHeadPlan>> again;
  so.recall_target = target;
  so.measured = &again;
  const MMPlan plan = mm_search(w.q, w.k, w.v, {}, so);
  const MMHeadPlan& h = plan.layers[0][0];
  EXPECT_GE(h.recall, target);
  EXPECT_GT(h.cost, cheapest->cost);
  EXPECT_FALSE(h.flagged);
  // No candidate that reaches the target is cheaper than the pick.
  for (const MMHeadPlan& c : again[0])
    if (c.recall >= target) {
      EXPECT_GE(c.cost, h.cost);
    }
  // Deterministic: the same measurements as the first run.
  ASSERT_EQ(again[0].size(), m.size());
  for (size_t i = 0; i < m.size(); ++i) {
    EXPECT_EQ(again[0][i].recall, m[i].recall);
    EXPECT_EQ(again[0][i].cost, m[i].cost);
  }
  // The reason and the flag survive the plan file.
  MMPlan flagged = plan;
  flagged.layers[0][1].flagged = true;
  const test::TempDir dir("spattn_search_recall");
  const std::string path = dir.file("plan.json");
  save_mm_plan(flagged, path);
  const MMPlan back = load_mm_plan(path);
  EXPECT_EQ(back.layers[0][0].reason, h.reason);
  EXPECT_FALSE(back.layers[0][0].flagged);
  EXPECT_TRUE(back.layers[0][1].flagged);
  EXPECT_THROW(mm_plan_from_json(R"({"format": "spattn.mminference_plan", "version": 1,
      "heads": 1, "frame_stride": 0, "layers": [[{"pattern": "a_shape", "sink": 1, "local": 2,
      "boundary": "none", "flagged": "yes"}]]})",
                                 "p"),
               Error);
}

}  // namespace
}  // namespace spattn

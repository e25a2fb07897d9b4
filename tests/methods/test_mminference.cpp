// MMInference's plan files, the mminference method against each head's own pattern, and the
// search: deterministic, round-tripping, and refusing bad plans with errors that name them.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "masked_reference.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/mminference.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

MMPlan three_head_plan() {
  MMPlan p;
  p.heads = 3;
  p.frame_stride = 64;
  MMHeadPlan g, a, vs;
  g.pattern = MMPattern::grid;
  g.hline = false, g.vline = true, g.slash = true, g.max_stride = 256;
  a.pattern = MMPattern::a_shape;
  a.sink = 64, a.local = 128;
  vs.pattern = MMPattern::vertical_slash;
  vs.vertical = 50, vs.slash_size = 60;
  p.layers = {{g, a, vs}};
  return p;
}

TEST(MMInferencePlan, RoundTrips) {
  const MMPlan p = three_head_plan();
  const std::string text = mm_plan_to_json(p);
  const MMPlan back = mm_plan_from_json(text, "test");
  EXPECT_EQ(mm_plan_to_json(back), text);
  ASSERT_EQ(back.layers.size(), 1u);
  EXPECT_EQ(back.layers[0][0].pattern, MMPattern::grid);
  EXPECT_FALSE(back.layers[0][0].hline);
  EXPECT_EQ(back.layers[0][1].local, 128);
  EXPECT_EQ(back.layers[0][2].slash_size, 60);
}

void expect_plan_error(const std::string& text, const std::string& mention) {
  try {
    mm_plan_from_json(text, "plan.json");
    ADD_FAILURE() << "accepted: " << text;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
  }
}

TEST(MMInferencePlan, BadPlansRaiseErrors) {
  const test::TempDir dir("spattn_mm");
  std::string good = mm_plan_to_json(three_head_plan());
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = good;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  expect_plan_error("{", "not valid JSON");
  expect_plan_error("[]", "object");
  expect_plan_error(replace("\"pattern\": \"grid\"", "\"pattern\": \"tri_shape\""),
                    "unknown pattern 'tri_shape'");
  expect_plan_error(replace("\"boundary\": \"none\"", "\"boundary\": \"diagonal\""),
                    "unknown boundary");
  expect_plan_error(replace("\"heads\": 3", "\"heads\": 4"), "has 3 heads");
  expect_plan_error(replace("\"local\": 128", "\"loc\": 128"), "missing field 'local'");
  expect_plan_error(replace("\"max_stride\": 256", "\"max_stride\": 0"), "max_stride");
  expect_plan_error(replace("\"hline\": false", "\"hline\": 0"), "'hline' must be true or false");
  expect_plan_error(replace("\"format\": \"spattn.mminference_plan\"", "\"format\": \"x\""),
                    "format");
  expect_plan_error(replace("\"layers\": [", "\"lay\": ["), "missing field 'layers'");
  EXPECT_THROW(load_mm_plan(dir.file("does_not_exist.json")), Error);
}

// Each head of the method equals its pattern run alone on that head, and its coverage is the
// pattern's; a plan for another head count is an error at run time.
TEST(MMInference, EachHeadRunsItsOwnPattern) {
  const test::TempDir dir("spattn_mm");
  const std::string path = dir.file("plan3.json");
  save_mm_plan(three_head_plan(), path);
  auto m = make_method("mminference:plan=" + path);
  const int64_t lk = 512, d = 32;
  Tensor q = test::random_tensor(DType::f32, 3, lk, d, 1, 1.5f),
         k = test::random_tensor(DType::f32, 3, lk, d, 2, 1.5f),
         v = test::random_tensor(DType::f32, 3, lk, d, 3);
  Tensor out(DType::f32, 3, lk, d);
  std::vector<float> lse(size_t(3 * lk));
  const MethodReport r = m->run(q, k, v, out, {}, lse.data());
  const MMPlan plan = three_head_plan();
  for (int64_t h = 0; h < 3; ++h) {
    Tensor one(DType::f32, 1, lk, d);
    std::vector<float> lse1(static_cast<size_t>(lk));
    auto cov = mm_run_head(plan.layers[0][size_t(h)], plan.frame_stride, q.view().head_range(h, 1),
                           k.view().head_range(h, 1), v.view().head_range(h, 1), one, {},
                           lse1.data(), nullptr);
    for (int64_t i = 0; i < lk; ++i) {
      ASSERT_EQ(test::coverage_keys(*r.coverage, h, i), test::coverage_keys(*cov, 0, i))
          << h << " " << i;
      ASSERT_EQ(lse[size_t(h * lk + i)], lse1[size_t(i)]);
      for (int64_t c = 0; c < d; ++c) ASSERT_EQ(out.view().get(h, i, c), one.view().get(0, i, c));
      // and the output is exact attention over the covered keys
      if (i % 37 == 0) {
        const auto want = test::row_over_keys(q, k, v, h, i, test::coverage_keys(*cov, 0, i));
        for (int64_t c = 0; c < d; ++c) ASSERT_NEAR(out.view().get(h, i, c), want[size_t(c)], 1e-4);
      }
    }
  }
  Tensor q2 = test::random_tensor(DType::f32, 2, lk, d, 1), out2(DType::f32, 2, lk, d);
  EXPECT_THROW(m->run(q2, k.view().head_range(0, 2), v.view().head_range(0, 2), out2, {}), Error);
  EXPECT_THROW(make_method("mminference"), Error);
  EXPECT_THROW(make_method("mminference:plan=" + path + ",layer=1"), Error);
}

// Same input, same plan; the plan file round-trips through save/load; a searched plan runs.
TEST(MMInferenceSearch, DeterministicAndRoundTrips) {
  const test::TempDir dir("spattn_mm");
  WorkloadConfig cfg;
  cfg.kind = WorkloadKind::video;
  cfg.seq = 4096;
  cfg.heads = 2;
  cfg.dim = 64;
  cfg.seed = 5;
  cfg.frame_tokens = 64;
  const Workload w = make_workload(cfg);
  MMSearchOptions so;
  so.frame_stride = 64;
  const MMPlan a = mm_search(w.q, w.k, w.v, {}, so), b = mm_search(w.q, w.k, w.v, {}, so);
  EXPECT_EQ(mm_plan_to_json(a), mm_plan_to_json(b));
  const std::string path = dir.file("searched.json");
  save_mm_plan(a, path);
  EXPECT_EQ(mm_plan_to_json(load_mm_plan(path)), mm_plan_to_json(a));
  for (const MMHeadPlan& h : a.layers[0]) {
    EXPECT_LE(h.cost, 1.0);
    EXPECT_GT(h.recall, 0.5);
  }
  auto m = make_method("mminference:plan=" + path);
  Tensor out(DType::f32, 2, cfg.seq, cfg.dim);
  const MethodReport r = m->run(w.q, w.k, w.v, out, {});
  EXPECT_GT(r.stats.score_entries, 0);
  ASSERT_EQ(r.per_head.at("pattern").size(), 2u);
  for (size_t h = 0; h < 2; ++h)
    EXPECT_EQ(r.per_head.at("pattern")[h], double(int(a.layers[0][h].pattern)));
}

}  // namespace
}  // namespace spattn

// MMInference's Q-boundary and 2D-boundary heads against the exact reference restricted to the
// same entries (a plain predicate written from the pieces' rule, not from pair_plan), entry for
// entry: odd lengths, a vision run cut by the end, GQA, f32 and bf16, causal, rows that are the
// last rows of a longer key sequence. Then plans naming boundaries, boundary=off, and the
// search's boundary step.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "masked_reference.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/mminference.hpp"
#include "spattn/modality_boundary.hpp"
#include "spattn/modality_heads.hpp"
#include "spattn/workload.hpp"
#include "test_util.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

// text [0, 50), vision 4 frames of 40 [50, 210), text [210, 289), vision [289, lk) (cut).
ModalityLayout test_layout(int64_t lk) {
  ModalityLayout l;
  l.frame_tokens = 40;
  l.ids.assign(size_t(lk), 0);
  for (int64_t j = 0; j < lk; ++j)
    if ((j >= 50 && j < 210) || j >= 289) l.ids[size_t(j)] = 1;
  return l;
}

// The rule, written plainly: a row of the piece's query modality sits in a tile of at most 64
// consecutive such rows; it keeps key j <= its position when j is of the piece's key modality
// and j is a column, or lies on a diagonal o of the tile: pos(first) - o <= j <= pos(last) - o.
test::EntryPredicate pieces_predicate(std::vector<std::vector<ModalityPairIndex>> per_head,
                                      const ModalityLayout& l, int64_t lq) {
  const int64_t lk = int64_t(l.ids.size());
  // Per piece, per row: the tile's first and last position (-1: not a row of the piece).
  struct Span {
    int64_t p0 = -1, p1 = -1;
  };
  auto spans = std::make_shared<std::vector<std::vector<std::vector<Span>>>>();
  for (const auto& pieces : per_head) {
    spans->emplace_back();
    for (const ModalityPairIndex& p : pieces) {
      std::vector<Span> s(static_cast<size_t>(lq));
      int64_t start = -1, n = 0;
      for (int64_t i = 0; i <= lq; ++i) {
        const bool in = i < lq && l.ids[size_t(lk - lq + i)] == p.q_modality;
        if (in && start >= 0 && n < 64) {
          ++n;
          continue;
        }
        if (start >= 0)
          for (int64_t r = start; r < start + n; ++r)
            s[size_t(r)] = {lk - lq + start, lk - lq + start + n - 1};
        start = in ? i : -1;
        n = in ? 1 : 0;
      }
      spans->back().push_back(std::move(s));
    }
  }
  return [=, ids = l.ids](int64_t h, int64_t i, int64_t j) {
    const auto& pieces = per_head[size_t(h)];
    for (size_t x = 0; x < pieces.size(); ++x) {
      const ModalityPairIndex& p = pieces[x];
      const Span sp = (*spans)[size_t(h)][x][size_t(i)];
      if (sp.p0 < 0) continue;
      if (p.k_modality != kAnyModality && ids[size_t(j)] != p.k_modality) continue;
      if (std::find(p.columns.begin(), p.columns.end(), j) != p.columns.end()) return true;
      for (int64_t o : p.offsets)
        if (j >= sp.p0 - o && j <= sp.p1 - o) return true;
    }
    return false;
  };
}

MMPlan boundary_plan() {
  MMPlan p;
  p.heads = 4;
  MMHeadPlan vs_q, a_2d, vs_2d, a_q;
  vs_q.pattern = vs_2d.pattern = MMPattern::vertical_slash;
  vs_q.vertical = vs_2d.vertical = 12;
  vs_q.slash_size = vs_2d.slash_size = 30;
  a_2d.pattern = a_q.pattern = MMPattern::a_shape;
  a_2d.sink = a_q.sink = 7;
  a_2d.local = a_q.local = 45;
  vs_q.boundary = a_q.boundary = MMBoundary::q;
  vs_2d.boundary = a_2d.boundary = MMBoundary::two_d;
  p.layers = {{vs_q, a_2d, vs_2d, a_q}};
  return p;
}

// The pieces a plan head builds, rebuilt here from the public builders.
std::vector<ModalityPairIndex> head_pieces(const MMHeadPlan& hp, const TensorView& q,
                                           const TensorView& k, const ModalityLayout& l) {
  const bool split = hp.boundary == MMBoundary::two_d;
  if (hp.pattern == MMPattern::a_shape) return a_shape_pairs(l, q.seq, hp.sink, hp.local, split);
  VerticalSlashConfig c;
  c.vertical_size = hp.vertical, c.slash_size = hp.slash_size;
  return vertical_slash_pairs(q, k, l, c, {}, split);
}

void check_boundary_heads(DType t, int64_t lq, int64_t lk, int64_t d) {
  const std::string what = std::string(t == DType::f32 ? "f32" : "bf16") + " lq " +
                           std::to_string(lq) + " lk " + std::to_string(lk);
  SCOPED_TRACE(what);
  const MMPlan plan = boundary_plan();
  const test::TempDir dir("spattn_mmb");
  const std::string path = dir.file("plan.json");
  save_mm_plan(plan, path);
  auto m = make_method("mminference:plan=" + path);
  Tensor q = test::random_tensor(t, 4, lq, d, 21, 1.5f),
         k = test::random_tensor(t, 2, lk, d, 22, 1.5f), v = test::random_tensor(t, 2, lk, d, 23);
  Tensor out(DType::f32, 4, lq, d);
  std::vector<float> lse(size_t(4 * lq));
  AttnOptions opt;
  opt.modality = std::make_shared<const ModalityLayout>(test_layout(lk));
  const MethodReport r = m->run(q, k, v, out, opt, lse.data());
  std::vector<std::vector<ModalityPairIndex>> per_head;
  for (int64_t h = 0; h < 4; ++h)
    per_head.push_back(head_pieces(plan.layers[0][size_t(h)], q.view().head_range(h, 1),
                                   k.view().head_range(h / 2, 1), *opt.modality));
  const auto keep = pieces_predicate(per_head, *opt.modality, lq);
  const test::MaskedRef ref = test::masked_reference(q, k, v, true, keep);
  EXPECT_EQ(r.stats.score_entries, ref.entries);
  EXPECT_LT(ref.entries, 4 * attention_entries(lq, lk, true));  // sparse, not dense
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      std::vector<int64_t> want;
      for (int64_t j = 0; j <= lk - lq + i; ++j)
        if (keep(h, i, j)) want.push_back(j);
      ASSERT_FALSE(want.empty()) << "head " << h << " row " << i;  // every row sees itself
      ASSERT_EQ(test::coverage_keys(*r.coverage, h, i), want) << "head " << h << " row " << i;
    }
  ASSERT_EQ(r.per_head.at("boundary"), (std::vector<double>{2, 3, 3, 2}));
  if (t == DType::f32) {
    test::expect_matches(out, lse, ref, what);
    return;
  }
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < lq; ++i) {
      ASSERT_NEAR(lse[size_t(h * lq + i)], ref.lse[size_t(h * lq + i)], 2e-2) << h << " " << i;
      for (int64_t x = 0; x < d; ++x)
        ASSERT_NEAR(out.view().get(h, i, x), ref.out[size_t((h * lq + i) * d + x)], 2e-2)
            << "head " << h << " row " << i << " dim " << x;
    }
}

TEST(BoundaryHeads, EqualMaskedReferenceEntryForEntry) {
  for (DType t : {DType::f32, DType::bf16}) {
    check_boundary_heads(t, 389, 389, 64);
    check_boundary_heads(t, 261, 389, 32);
  }
}

// The pieces themselves: Q-boundary pieces take every key and each modality's rows once; 2D
// pieces take one key modality each, columns of that modality only, all pairs present.
TEST(BoundaryHeads, PiecesCoverTheirModalities) {
  const ModalityLayout l = test_layout(389);
  Tensor q = test::random_tensor(DType::f32, 1, 389, 32, 1),
         k = test::random_tensor(DType::f32, 1, 389, 32, 2);
  VerticalSlashConfig c;
  c.vertical_size = 10, c.slash_size = 20;
  const auto qb = vertical_slash_pairs(q, k, l, c, {}, false);
  ASSERT_EQ(qb.size(), 2u);
  for (const auto& p : qb) EXPECT_EQ(p.k_modality, kAnyModality);
  const auto td = vertical_slash_pairs(q, k, l, c, {}, true);
  ASSERT_EQ(td.size(), 4u);
  for (const auto& p : td) {
    EXPECT_NE(p.k_modality, kAnyModality);
    for (int64_t j : p.columns) EXPECT_EQ(l.ids[size_t(j)], p.k_modality);
    EXPECT_EQ(p.offsets.front(), 0);  // the diagonal is forced
  }
  // A-shape Q-boundary: the video rows' sink is the video's own first tokens.
  const auto aq = a_shape_pairs(l, 389, 3, 10, false);
  ASSERT_EQ(aq.size(), 2u);
  EXPECT_EQ(aq[1].columns, (std::vector<int64_t>{50, 51, 52}));
  // Bad pieces name the problem.
  ModalityPairIndex bad = td[0];
  bad.columns = {60};  // a vision key in a text-keyed piece
  EXPECT_THROW(pair_plan(bad, l, 389), Error);
  bad = td[0];
  bad.offsets = {3, 1};
  EXPECT_THROW(pair_plan(bad, l, 389), Error);
  EXPECT_THROW(a_shape_pairs(l, 389, 3, 0, true), Error);
  EXPECT_THROW(vertical_slash_pairs(q, k, test_layout(388), c, {}, true), Error);
}

// Which rows and keys each piece's estimate reads (the rule the host's and the device's
// estimates share): the query modality's last min(last_q, rows) rows, and every key (Q) or the
// key modality's keys (2D); queries at the end of a longer cache.
TEST(BoundaryHeads, EachPieceEstimatesFromItsModalitysLastRowsAndItsKeys) {
  const ModalityLayout l = test_layout(389);
  const int64_t lq = 300, off = 389 - lq;
  VerticalSlashConfig c;
  c.vertical_size = 10, c.slash_size = 20;
  for (bool split : {false, true}) {
    std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> seen;
    const auto pieces = vertical_slash_pairs(
        l, lq, c, split, [&](const std::vector<int64_t>& rows, const std::vector<int64_t>& keys) {
          seen.emplace_back(rows, keys);
          VerticalSlashIndex x;
          x.heads = 1;
          x.columns = {{keys.front()}};
          x.offsets = {{0}};
          return x;
        });
    ASSERT_EQ(seen.size(), split ? 4u : 2u);
    ASSERT_EQ(pieces.size(), seen.size());
    for (size_t i = 0; i < seen.size(); ++i) {
      const auto& [rows, keys] = seen[i];
      const uint8_t mq = pieces[i].q_modality, mk = pieces[i].k_modality;
      std::vector<int64_t> want_rows, want_keys;
      for (int64_t r = 0; r < lq; ++r)
        if (l.ids[size_t(off + r)] == mq) want_rows.push_back(r);
      want_rows.erase(want_rows.begin(),
                      want_rows.end() - std::min<std::ptrdiff_t>(ptrdiff_t(want_rows.size()), 64));
      for (int64_t j = 0; j < 389; ++j)
        if (mk == kAnyModality || l.ids[size_t(j)] == mk) want_keys.push_back(j);
      EXPECT_EQ(rows, want_rows) << "piece " << i;
      EXPECT_EQ(keys, want_keys) << "piece " << i;
      EXPECT_EQ(mk == kAnyModality, !split);
      EXPECT_EQ(pieces[i].columns, (std::vector<int64_t>{want_keys.front()}));
    }
  }
  // An estimate that answers for another head count is refused, not read.
  EXPECT_THROW(vertical_slash_pairs(l, lq, c, false,
                                    [](const std::vector<int64_t>&, const std::vector<int64_t>&) {
                                      return VerticalSlashIndex{};
                                    }),
               Error);
}

TEST(BoundaryPlan, RoundTripsAndRefusesBadBoundaries) {
  const MMPlan p = boundary_plan();
  const std::string text = mm_plan_to_json(p);
  EXPECT_NE(text.find("\"boundary\": \"2d\""), std::string::npos);
  EXPECT_NE(text.find("\"boundary\": \"q\""), std::string::npos);
  const MMPlan back = mm_plan_from_json(text, "t");
  EXPECT_EQ(mm_plan_to_json(back), text);
  EXPECT_EQ(back.layers[0][1].boundary, MMBoundary::two_d);
  auto replace = [&](const std::string& from, const std::string& to) {
    std::string s = text;
    const size_t at = s.find(from);
    EXPECT_NE(at, std::string::npos) << from;
    return s.replace(at, from.size(), to);
  };
  auto expect_error = [](const std::string& t, const std::string& mention) {
    try {
      mm_plan_from_json(t, "plan.json");
      ADD_FAILURE() << "accepted: " << t;
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(mention), std::string::npos) << e.what();
    }
  };
  expect_error(replace("\"boundary\": \"2d\"", "\"boundary\": \"3d\""), "unknown boundary '3d'");
  expect_error(replace("\"boundary\": \"q\"", "\"bound\": \"q\""), "missing field 'boundary'");
  expect_error(replace("\"boundary\": \"q\"", "\"boundary\": 2"), "boundary");
  // A grid head with a q or 2d boundary is refused, naming it.
  MMPlan g = p;
  g.layers[0][0].pattern = MMPattern::grid;
  g.layers[0][0].boundary = MMBoundary::none;
  std::string gt = mm_plan_to_json(g);
  const size_t at = gt.find("\"boundary\": \"none\"");
  ASSERT_NE(at, std::string::npos);
  expect_error(gt.replace(at, 18, "\"boundary\": \"q\""), "not implemented for grid");
  // k is a name plans may hold.
  EXPECT_EQ(mm_plan_from_json(replace("\"boundary\": \"q\"", "\"boundary\": \"k\""), "t")
                .layers[0][0]
                .boundary,
            MMBoundary::k);
}

// boundary=off runs the same patterns as No-Boundary heads: equal to a plan written with none.
TEST(BoundaryPlan, OffRunsThePlanWithoutBoundaries) {
  const test::TempDir dir("spattn_mmb");
  const std::string path = dir.file("b.json"), none_path = dir.file("n.json");
  MMPlan p = boundary_plan();
  save_mm_plan(p, path);
  for (auto& h : p.layers[0]) h.boundary = MMBoundary::none;
  save_mm_plan(p, none_path);
  auto off = make_method("mminference:plan=" + path + ",boundary=off");
  auto none = make_method("mminference:plan=" + none_path);
  const int64_t lk = 389, d = 32;
  Tensor q = test::random_tensor(DType::f32, 4, lk, d, 1),
         k = test::random_tensor(DType::f32, 2, lk, d, 2),
         v = test::random_tensor(DType::f32, 2, lk, d, 3);
  Tensor o1(DType::f32, 4, lk, d), o2(DType::f32, 4, lk, d);
  AttnOptions opt;
  opt.modality = std::make_shared<const ModalityLayout>(test_layout(lk));
  const MethodReport r1 = off->run(q, k, v, o1, opt), r2 = none->run(q, k, v, o2, opt);
  EXPECT_EQ(r1.stats.score_entries, r2.stats.score_entries);
  EXPECT_EQ(r1.per_head.at("boundary"), (std::vector<double>{0, 0, 0, 0}));
  for (int64_t h = 0; h < 4; ++h)
    for (int64_t i = 0; i < lk; ++i)
      for (int64_t c = 0; c < d; ++c) ASSERT_EQ(o1.view().get(h, i, c), o2.view().get(h, i, c));
  EXPECT_THROW(make_method("mminference:plan=" + path + ",boundary=maybe"), Error);
}

// The boundary step: on a mixed sample the search may pick boundaries; its best recall is at
// least the intra-only search's (a superset of candidates under the same budget); same input,
// same plan; the plan records and round-trips the boundary.
TEST(BoundarySearchSlow, DeterministicAndNoWorseThanIntraOnly) {
  WorkloadConfig cfg;
  cfg.kind = WorkloadKind::mixed;
  cfg.seq = 3072;
  cfg.heads = 2;
  cfg.kv_heads = 1;
  cfg.dim = 32;
  cfg.frame_tokens = 64;
  cfg.seed = 9;
  const Workload w = make_workload(cfg);
  ASSERT_EQ(w.layout.num_modalities(), 2);
  AttnOptions opt;
  opt.modality = std::make_shared<const ModalityLayout>(w.layout);
  MMSearchOptions so;
  so.frame_stride = 64;
  const MMPlan a = mm_search(w.q, w.k, w.v, opt, so), b = mm_search(w.q, w.k, w.v, opt, so);
  EXPECT_EQ(mm_plan_to_json(a), mm_plan_to_json(b));
  EXPECT_EQ(mm_plan_to_json(mm_plan_from_json(mm_plan_to_json(a), "t")), mm_plan_to_json(a));
  so.boundaries = false;
  const MMPlan intra = mm_search(w.q, w.k, w.v, opt, so);
  for (size_t h = 0; h < 2; ++h) {
    EXPECT_EQ(intra.layers[0][h].boundary, MMBoundary::none);
    EXPECT_GE(a.layers[0][h].recall, intra.layers[0][h].recall) << "head " << h;
    EXPECT_LE(a.layers[0][h].cost, 1.0);
  }
}

}  // namespace
}  // namespace spattn

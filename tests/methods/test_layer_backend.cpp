// The runner's per-layer attention (src/methods/layer_backend.hpp) as the registry builds it:
// what each row can do, the errors that name what cannot, and the session's reading of it.
#include <gtest/gtest.h>

#include <unistd.h>

#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "methods/registry.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

// Two layers, 2 q heads over 1 kv head, a 64-token vocabulary: made once.
const model::Model& tiny_model() {
  static const model::Model m = [] {
    ModelShape shape;
    shape.layers = 2;
    shape.dim = 32;
    shape.heads = 2;
    shape.kv_heads = 1;
    shape.ffn = 64;
    shape.vocab = 64;
    shape.seed = 5;
    const test::TempDir dir("spattn_layer_backend");
    const std::filesystem::path p = dir / "m.gguf";
    make_model(p.string(), shape);
    model::Model model = model::load_model(p.string());
    std::filesystem::remove(p);
    return model;
  }();
  return m;
}

TEST(LayerBackend, RegistryRowsSayWhatEachMethodDoes) {
  const MethodInfo dense = method_info("dense");
  EXPECT_TRUE(dense.prefills && dense.decodes && dense.context_parallel &&
              dense.decode_context_parallel);
  const MethodInfo quest = method_info("quest");
  EXPECT_FALSE(quest.prefills);
  EXPECT_TRUE(quest.decodes);
  EXPECT_FALSE(quest.context_parallel);
  EXPECT_TRUE(method_info("blasst").decodes);
  EXPECT_TRUE(method_info("chunked_h2o").context_parallel);
  EXPECT_FALSE(method_info("momo").decodes);
  EXPECT_FALSE(method_info("xattention").context_parallel);
  // Every method of the default comparison runs as a prefill; the catalog says the same.
  for (const MethodInfo& i : method_catalog()) EXPECT_TRUE(i.prefills) << i.name;
  EXPECT_NE(error_of([] { method_info("nosuch"); }).find("unknown method 'nosuch'"),
            std::string::npos);
}

TEST(LayerBackend, WhatAMethodCannotDoIsANamedError) {
  const BackendContext ctx;
  EXPECT_NE(error_of([] { make_method("quest"); }).find("give it to --attn-decode"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              make_prefill_backend(parse_method_spec("quest"), ctx);
            }).find("quest is a decode method"),
            std::string::npos);
  EXPECT_NE(error_of([&] { make_decode_backend(parse_method_spec("momo"), ctx); })
                .find("--attn-decode: momo has no decode form (decode methods: dense, blasst, "
                      "quest and dsa)"),
            std::string::npos);
  BackendContext cp;
  cp.cp = true;
  EXPECT_NE(error_of([&] { make_prefill_backend(parse_method_spec("tri_shape"), cp); })
                .find("--cp: --attn tri_shape is not context-parallel (" +
                      context_parallel_names() + " are)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              make_decode_backend(parse_method_spec("quest"), cp);
            }).find("--cp: --attn-decode quest is not context-parallel (dense and dsa are)"),
            std::string::npos);
  EXPECT_NE(error_of([&] {
              make_prefill_backend(parse_method_spec("chunked_h2o:local=4"), ctx);
            }).find("takes its sizes from -b, -ub"),
            std::string::npos);
}

TEST(LayerBackend, CapabilitiesTellTheSessionWhatToKeep) {
  BackendContext ctx;
  ctx.q_heads = ctx.kv_heads = 2;
  ctx.dim = 16;
  ctx.n_ctx = 256;
  std::shared_ptr<void> shared;
  ctx.shared = &shared;
  const BackendCaps dense = make_prefill_backend(parse_method_spec("dense"), ctx)->capabilities();
  EXPECT_TRUE(dense.rows_independent && dense.ring_gather);
  EXPECT_FALSE(dense.raw_keys || dense.stateful);
  const BackendCaps method =
      make_prefill_backend(parse_method_spec("tri_shape"), ctx)->capabilities();
  EXPECT_TRUE(method.raw_keys);
  EXPECT_FALSE(method.rows_independent);
  const auto h2o = make_prefill_backend(parse_method_spec("chunked_h2o"), ctx);
  EXPECT_TRUE(h2o->capabilities().stateful);
  EXPECT_EQ(h2o->capabilities().ring_grid, ctx.n_ubatch);
  EXPECT_NE(shared, nullptr);  // the layers' one batch scratch
  ctx.layer = 2;
  const BackendCaps q =
      make_decode_backend(parse_method_spec("quest:page=32"), ctx)->capabilities();
  EXPECT_TRUE(q.sparse_decode && q.reads_pages);
  EXPECT_EQ(q.quest_page, 32);
}

// A session reads its layers from the backends: layer_attention() names them, prefill_ran()
// says what a prompt's global layers ran (chunked_h2o on a prompt of one chunk runs dense).
TEST(LayerBackend, SessionReportsItsBackends) {
  const model::Model& m = tiny_model();
  model::SessionOptions so;
  so.n_ctx = 256;
  so.n_batch = 64;
  so.n_ubatch = 32;
  so.attn = "chunked_h2o";
  so.h2o_local = so.h2o_heavy = 8;
  so.attn_decode = "quest:dense_layers=1";
  model::Session s(m, so);
  const std::vector<model::LayerAttention> la = s.layer_attention();
  ASSERT_EQ(la.size(), 2u);
  EXPECT_EQ(la[0].prefill, "chunked_h2o");
  EXPECT_EQ(la[0].decode, "dense");
  EXPECT_EQ(la[1].decode, "quest:dense_layers=1");
  std::vector<int32_t> t(40);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t(i % 60);
  s.prefill(std::span(t).first(20), nullptr, 0);
  EXPECT_EQ(s.prefill_ran(), "dense");
  s.reset();
  s.prefill(t, nullptr, 0);
  EXPECT_EQ(s.prefill_ran(), "chunked_h2o");
  EXPECT_EQ(s.reuse_point(30), 0);  // no state kept (h2o_keep 0)
  model::SessionOptions d = so;
  d.attn = "dense";
  model::Session dense(m, d);
  dense.prefill(t, nullptr, 0);
  EXPECT_EQ(dense.reuse_point(30), 30);  // a dense prefill goes on from any prefix
}

// A method added as one file and one registry row (sliding_window) reaches the runner: with a
// window that covers the prompt it computes dense's bits (the same kernel, no key outside the
// band), with a short one other logits; its rows are their own queries' (a prefix reusable);
// its spec names the layers' prefill.
TEST(LayerBackend, ANewMethodReachesTheRunner) {
  const model::Model& m = tiny_model();
  model::SessionOptions so;
  so.n_ctx = 256;
  so.n_ubatch = 32;
  std::vector<int32_t> t(100);
  for (size_t i = 0; i < t.size(); ++i) t[i] = int32_t((i * 7) % 60);
  const auto logits = [&](const std::string& attn) {
    model::SessionOptions o = so;
    o.attn = attn;
    model::Session s(m, o);
    std::vector<float> out(size_t(100 * 64));
    s.prefill(t, out.data(), 0);
    EXPECT_EQ(s.layer_attention()[0].prefill, attn);
    EXPECT_EQ(s.reuse_point(50), 50);
    return out;
  };
  const std::vector<float> dense = logits("dense");
  EXPECT_EQ(logits("sliding_window:window=100"), dense);
  EXPECT_NE(logits("sliding_window:window=8"), dense);
  EXPECT_NE(error_of([] { make_method("sliding_window:window=0"); }).find("window"),
            std::string::npos);
  EXPECT_TRUE(method_info("sliding_window").context_parallel);
}

}  // namespace
}  // namespace spattn

// Session state as a server drives it: a prefill after decode sees the decoded tokens in
// every prefill mode; a call that fails part-way leaves the session exactly as it was; and
// truncate and fork give the state a prefill of the kept tokens alone gives.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <thread>
#include <unistd.h>

#include "model/kv_cache.hpp"
#include "packed_kv_state.hpp"
#include "spattn/calibration.hpp"
#include "spattn/error.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace spattn::model {
namespace {

namespace fs = std::filesystem;

// A made-up 3-layer llama model (GQA, head dim 16), written once per test process.
const Model& small_model() {
  static const Model m = [] {
    ModelShape s;
    s.layers = 3;
    s.dim = 64;
    s.heads = 4;
    s.kv_heads = 2;
    s.ffn = 96;
    s.vocab = 300;
    s.seed = 11;
    const test::TempDir dir("spattn_session_state");
    const fs::path p = dir / "m.gguf";
    spattn::make_model(p.string(), s);
    Model model = load_model(p.string());
    fs::remove(p);
    return model;
  }();
  return m;
}

std::vector<int32_t> tokens(int64_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<int32_t> t;
  for (int64_t i = 0; i < n; ++i) t.push_back(int32_t(rng() % 300));
  return t;
}

// a_shape at its defaults (sink 128, local 4096) keeps every key of these short prompts: a
// library method through the runner's method path that computes dense attention.
constexpr const char* kExactMethod = "a_shape";

SessionOptions opts(const std::string& attn = "dense") {
  SessionOptions so;
  so.n_ctx = 400;
  so.n_batch = 64;
  so.n_ubatch = 32;
  so.attn = attn;
  so.h2o_local = 8;
  so.h2o_heavy = 400;  // every earlier token stays in memory: chunked_h2o is dense here
  so.threads = 2;
  return so;
}

constexpr size_t V = 300;

// "" when the two sessions hold the same tokens: every layer's packed bytes, positions and
// raw rows.
std::string cache_difference(const Session& a, const Session& b) {
  const KVCache &x = a.cache(), &y = b.cache();
  if (a.n_past() != b.n_past() || x.size() != y.size())
    return "n_past " + std::to_string(a.n_past()) + " vs " + std::to_string(b.n_past());
  for (int64_t l = 0; l < x.n_layer(); ++l) {
    if (x.staged() || y.staged()) return "rows staged outside a call";
    const std::string d = test::packed_kv_difference(x.packed(l), y.packed(l));
    if (!d.empty()) return "layer " + std::to_string(l) + ": " + d;
    if (x.has_raw() != y.has_raw()) return "raw rows kept by one only";
    if (x.has_raw())
      for (const auto& [p, q] :
           {std::pair(x.raw_k(l), y.raw_k(l)), std::pair(x.raw_v(l), y.raw_v(l))})
        for (int64_t h = 0; h < p.heads; ++h)
          if (std::memcmp(p.ptr(h, 0), q.ptr(h, 0), size_t(p.seq * p.dim) * 4) != 0)
            return "layer " + std::to_string(l) + ": raw rows";
  }
  return "";
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
}

// ---- Prefill, decode N, prefill again: the second prefill sees the decoded tokens. ----

struct ModeCase {
  const char* name;
  const char* attn;
};
void PrintTo(const ModeCase& c, std::ostream* os) { *os << c.name; }

class PrefillAfterDecode : public ::testing::TestWithParam<ModeCase> {};

// The second prefill's logits equal those of one prefill of every token (chunks fall
// differently, so to float tolerance). In method mode the method used to read keys of its
// own that decode never wrote: zeros at the decoded positions.
TEST_P(PrefillAfterDecode, EqualsOnePrefillOfTheSameTokens) {
  const ModeCase c = GetParam();
  const int64_t a = 70, n_dec = 5, b = 45, n = a + n_dec + b;
  const auto t = tokens(n, 3);
  Session split(small_model(), opts(c.attn));
  split.prefill(std::span(t).first(size_t(a)), nullptr, 0);
  std::vector<float> one(V);
  for (int64_t i = a; i < a + n_dec; ++i) split.decode(t[size_t(i)], one.data());
  std::vector<float> got(size_t(b * V));
  split.prefill(std::span(t).subspan(size_t(a + n_dec)), got.data(), 0);
  EXPECT_EQ(split.n_past(), n);

  Session whole(small_model(), opts(c.attn));
  std::vector<float> want(size_t(b * V));
  whole.prefill(t, want.data(), a + n_dec);
  double scale = 0, worst = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    scale = std::max(scale, double(std::abs(want[i])));
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
  }
  EXPECT_GT(scale, 0.5);
  EXPECT_LT(worst, 1e-4 * scale) << c.name << ": worst logit difference " << worst << " of "
                                 << scale;
}

INSTANTIATE_TEST_SUITE_P(Modes, PrefillAfterDecode,
                         ::testing::Values(ModeCase{"dense", "dense"},
                                           ModeCase{"chunked_h2o", "chunked_h2o"},
                                           ModeCase{"method_exact", kExactMethod},
                                           ModeCase{"method_a_shape", "a_shape:sink=64,local=512"}),
                         [](const auto& info) { return std::string(info.param.name); });

// ---- A call that fails leaves the session as it was. ----

// A tap that throws at the model's last layer once the rows reach `from` (a layer failing
// after every layer before it has appended its rows).
void fail_last_layer_from(Session& s, int64_t from) {
  s.set_qkv_tap(2,
                [from](int64_t, int64_t pos0, int64_t n, const float*, const float*, const float*) {
                  if (pos0 + n > from) throw Error("test: layer 2 fails");
                });
}

// Then both sessions compute the same next results, bit for bit.
void expect_same_next_results(Session& a, Session& b, const std::vector<int32_t>& more) {
  std::vector<float> la(V), lb(V);
  a.decode(more[0], la.data());
  b.decode(more[0], lb.data());
  EXPECT_TRUE(same_bits(la, lb)) << "decode after the failed call";
  const auto rest = std::span(more).subspan(1);
  std::vector<float> pa(rest.size() * V), pb(rest.size() * V);
  a.prefill(rest, pa.data(), 0);
  b.prefill(rest, pb.data(), 0);
  EXPECT_TRUE(same_bits(pa, pb)) << "prefill after the failed call";
  EXPECT_EQ(cache_difference(a, b), "");
}

TEST(SessionState, PrefillFailingInItsLastLayerChangesNothing) {
  const auto t = tokens(300, 5), more = tokens(40, 6);
  for (const std::string mode : {"dense", kExactMethod}) {
    Session s(small_model(), opts(mode)), twin(small_model(), opts(mode));
    for (Session* x : {&s, &twin}) {
      x->prefill(std::span(t).first(100), nullptr, 0);
      x->decode(t[100], nullptr);
    }
    const Timings before = s.timings();
    // Chunks of 32 from position 101: the first two commit to every layer, the third fails.
    fail_last_layer_from(s, 101 + 64);
    std::vector<float> logits(100 * V);
    EXPECT_THROW(s.prefill(std::span(t).subspan(101, 100), logits.data(), 0), Error);
    EXPECT_EQ(s.n_past(), 101);
    EXPECT_EQ(cache_difference(s, twin), "");
    EXPECT_EQ(s.timings().prefill_tokens, before.prefill_tokens);
    EXPECT_EQ(s.timings().prefill_stats.score_entries, before.prefill_stats.score_entries);
    s.set_qkv_tap(2, nullptr);
    expect_same_next_results(s, twin, more);
  }
}

// Each decoded token's time in order, summing to decode's totals; a failed step adds none, and
// reset_timings empties them.
TEST(SessionState, TimingsKeepEachDecodedTokensTime) {
  const auto t = tokens(60, 11);
  Session s(small_model(), opts(kExactMethod));
  s.prefill(std::span(t).first(50), nullptr, 0);
  for (int64_t i = 50; i < 55; ++i) s.decode(t[size_t(i)], nullptr);
  Timings a = s.timings();
  ASSERT_EQ(a.decode_token_ms.size(), 5u);
  ASSERT_EQ(a.decode_token_attn_ms.size(), 5u);
  double ms = 0, attn = 0;
  for (size_t i = 0; i < 5; ++i) {
    EXPECT_GT(a.decode_token_attn_ms[i], 0.0) << i;
    EXPECT_LE(a.decode_token_attn_ms[i], a.decode_token_ms[i]) << i;
    ms += a.decode_token_ms[i], attn += a.decode_token_attn_ms[i];
  }
  EXPECT_NEAR(ms, a.decode_ms, 1e-9 * a.decode_ms);
  EXPECT_NEAR(attn, a.decode_attn_ms, 1e-9 * a.decode_attn_ms);
  fail_last_layer_from(s, 0);
  EXPECT_THROW(s.decode(t[55], nullptr), Error);
  EXPECT_EQ(s.timings().decode_token_ms, a.decode_token_ms);
  EXPECT_EQ(s.timings().decode_tokens, 5);
  s.reset_timings();
  EXPECT_TRUE(s.timings().decode_token_ms.empty());
  EXPECT_TRUE(s.timings().decode_token_attn_ms.empty());
}

TEST(SessionState, DecodeFailingInItsLastLayerChangesNothing) {
  const auto t = tokens(80, 7), more = tokens(10, 8);
  Session s(small_model(), opts()), twin(small_model(), opts());
  s.prefill(t, nullptr, 0);
  twin.prefill(t, nullptr, 0);
  fail_last_layer_from(s, 0);
  std::vector<float> logits(V);
  EXPECT_THROW(s.decode(5, logits.data()), Error);
  EXPECT_EQ(s.n_past(), 80);
  EXPECT_EQ(cache_difference(s, twin), "");
  s.set_qkv_tap(2, nullptr);
  expect_same_next_results(s, twin, more);
}

// chunked_h2o's layers carry memory sets and scores from batch to batch: a prompt failing in
// its third batch leaves them, and the cache, as a fresh session's.
TEST(SessionState, ChunkedH2OPromptFailingLeavesAFreshSession) {
  const auto t = tokens(200, 9);
  SessionOptions so = opts("chunked_h2o");
  so.h2o_heavy = 16;  // a memory smaller than the prompt: the layer state matters
  Session s(small_model(), so), fresh(small_model(), so);
  fail_last_layer_from(s, 128);
  EXPECT_THROW(s.prefill(t, nullptr, 0), Error);
  EXPECT_EQ(s.n_past(), 0);
  EXPECT_EQ(cache_difference(s, fresh), "");
  EXPECT_EQ(s.timings().prefill_tokens, 0);
  s.set_qkv_tap(2, nullptr);
  std::vector<float> a(200 * V), b(200 * V);
  s.prefill(t, a.data(), 0);
  fresh.prefill(t, b.data(), 0);
  EXPECT_TRUE(same_bits(a, b));
  EXPECT_EQ(cache_difference(s, fresh), "");
}

// The progress callback (what `spattn serve` streams): after each layer of each -ub chunk
// (each -b batch with chunked_h2o) with the tokens done so far; one that throws (a client gone) rolls the
// prefill back like any failure, and the same logits follow.
TEST(SessionState, PrefillProgressReportsEachPieceAndMayCancel) {
  const auto t = tokens(150, 4);
  for (const std::string mode : {"dense", "chunked_h2o"}) {
    Session s(small_model(), opts(mode)), fresh(small_model(), opts(mode));
    std::vector<int64_t> seen;
    std::vector<float> a(V), b(V);
    s.prefill(t, a.data(), 149, [&](int64_t done, int64_t total) {
      EXPECT_EQ(total, 150);
      seen.push_back(done);
    });
    // After each of the 3 layers of each piece, its tokens in proportion (rounded down).
    const std::vector<int64_t> want =
        mode == "dense"
            ? std::vector<int64_t>{10, 21, 32, 42, 53, 64, 74, 85, 96, 106, 117, 128, 135, 142, 150}
            : std::vector<int64_t>{21, 42, 64, 85, 106, 128, 135, 142, 150};
    EXPECT_EQ(seen, want);
    s.reset();
    struct Gone {};
    int calls = 0;
    EXPECT_THROW(s.prefill(t, a.data(), 149,
                           [&](int64_t, int64_t) {
                             if (++calls == 2) throw Gone{};
                           }),
                 Gone);
    EXPECT_EQ(s.n_past(), 0);
    EXPECT_EQ(cache_difference(s, fresh), "");
    s.prefill(t, a.data(), 149);
    fresh.prefill(t, b.data(), 149);
    EXPECT_TRUE(same_bits(a, b));
  }
}

// The natural failure: a calibrated BLASST target the last layer cannot reach at the length a
// chunk brings, raised inside the method after that layer appended its rows.
TEST(SessionState, CalibratedTargetOutOfReachInTheLastLayerChangesNothing) {
  Calibration law;
  law.alpha = 1e-2;
  law.beta = 5.0;
  law.gamma = 0.0;
  law.fit_min = 0.2;
  law.fit_max = 0.8;
  law.lengths = {64, 512};
  law.reach = {{64, 0.9}, {512, 0.9}};
  law.order = BlasstOrder::local_first;
  law.source = "test";
  law.points = 10;
  law.samples = 1;
  law.heads = 4;
  law.kv_heads = 2;
  law.dim = 16;
  law.dtype = "f32";
  Calibration file = law;
  for (int64_t l = 0; l < 3; ++l) {
    Calibration e = law;
    e.layer = l;
    // Layer 2 reaches 30% up to 256 keys: 0.9 at 64 falling to 0 at 512, linear in ln L.
    if (l == 2) e.reach = {{64, 0.9}, {512, 0.0}};
    file.layers.push_back(e);
  }
  const test::TempDir dir("spattn_session_reach");
  const std::string path = dir.file("calib.json");
  save_calibration(path, file);
  const SessionOptions so = opts("blasst:sparsity=0.3,calib=" + path);
  const auto t = tokens(300, 10), more = tokens(30, 11);
  Session s(small_model(), so), twin(small_model(), so);
  for (Session* x : {&s, &twin}) {
    x->prefill(std::span(t).first(150), nullptr, 0);
    x->decode(t[150], nullptr);
  }
  // Chunks end at 183, 215, 247 (within reach), then 279: layer 2 refuses.
  std::string err;
  try {
    s.prefill(std::span(t).subspan(151, 140), nullptr, 0);
  } catch (const Error& e) {
    err = e.what();
  }
  EXPECT_NE(err.find("out of reach at length 279 for layer 2"), std::string::npos) << err;
  EXPECT_EQ(s.n_past(), 151);
  EXPECT_EQ(cache_difference(s, twin), "");
  expect_same_next_results(s, twin, more);
}

// ---- truncate and fork: the state a prefill of the kept tokens alone gives. ----

// Truncated at a chunk boundary (so the kept rows were computed exactly as a prefill of them
// alone computes them), a session holds the bytes that prefill gives and continues alike.
TEST(SessionState, TruncateEqualsAPrefillOfTheKeptTokens) {
  const auto t = tokens(120, 12), more = tokens(20, 13);
  for (const std::string mode : {"dense", kExactMethod}) {
    Session s(small_model(), opts(mode)), kept(small_model(), opts(mode));
    s.prefill(std::span(t).first(100), nullptr, 0);
    s.decode(t[100], nullptr);
    s.truncate(64);
    kept.prefill(std::span(t).first(64), nullptr, 0);
    EXPECT_EQ(cache_difference(s, kept), "");
    expect_same_next_results(s, kept, more);
    EXPECT_THROW(s.truncate(s.n_past() + 1), Error);
    EXPECT_THROW(s.truncate(-1), Error);
    s.truncate(0);
    EXPECT_EQ(s.n_past(), 0);
    EXPECT_EQ(cache_difference(s, Session(small_model(), opts(mode))), "");
  }
}

// A fork holds its source's first n tokens and then goes its own way: the source is unchanged
// by what the fork does, and the other way round.
TEST(SessionState, ForkCopiesThePrefixAndIsIndependent) {
  const auto t = tokens(120, 14), more = tokens(20, 15), other = tokens(20, 16);
  for (const std::string mode : {"dense", kExactMethod}) {
    Session s(small_model(), opts(mode)), twin(small_model(), opts(mode)),
        kept(small_model(), opts(mode));
    for (Session* x : {&s, &twin}) {
      x->prefill(std::span(t).first(100), nullptr, 0);
      x->decode(t[100], nullptr);
    }
    kept.prefill(std::span(t).first(64), nullptr, 0);
    Session f = s.fork(64), all = s.fork();
    EXPECT_EQ(cache_difference(f, kept), "");
    EXPECT_EQ(cache_difference(all, twin), "");
    std::vector<float> x(V), y(V);
    all.decode(other[0], x.data());  // the whole fork moves on; the source does not
    s.decode(other[1], y.data());
    twin.decode(other[1], x.data());
    EXPECT_TRUE(same_bits(x, y));
    expect_same_next_results(f, kept, more);
    expect_same_next_results(s, twin, more);
    EXPECT_THROW(s.fork(s.n_past() + 1), Error);
  }
  // chunked_h2o: a fork of no tokens runs the prompt from position 0 as a fresh session does.
  Session h(small_model(), opts("chunked_h2o")), fresh(small_model(), opts("chunked_h2o"));
  h.prefill(std::span(t).first(100), nullptr, 0);
  Session f = h.fork(0);
  std::vector<float> a(100 * V), b(100 * V);
  f.prefill(std::span(t).first(100), a.data(), 0);
  fresh.prefill(std::span(t).first(100), b.data(), 0);
  EXPECT_TRUE(same_bits(a, b));
}

// A server runs sessions side by side over one model: a session and its fork (sharing the
// per-layer methods), on two threads at once, compute what each computes alone.
TEST(SessionState, ASessionAndItsForkRunAtOnce) {
  const auto t = tokens(200, 17);
  auto run = [&](Session& s, int64_t from) {
    std::vector<float> out(60 * V), one(V);
    s.prefill(std::span(t).subspan(size_t(from), 60), out.data(), 0);
    for (int i = 0; i < 4; ++i) {
      s.decode(t[size_t(from + 60 + i)], one.data());
      out.insert(out.end(), one.begin(), one.end());
    }
    return out;
  };
  for (const std::string mode : {"dense", kExactMethod}) {
    Session base(small_model(), opts(mode));
    base.prefill(std::span(t).first(40), nullptr, 0);
    Session a = base.fork(), b = base.fork(), a_alone = base.fork(), b_alone = base.fork();
    const auto want_a = run(a_alone, 40), want_b = run(b_alone, 100);
    std::vector<float> got_a, got_b;
    std::thread ta([&] { got_a = run(a, 40); }), tb([&] { got_b = run(b, 100); });
    ta.join();
    tb.join();
    EXPECT_TRUE(same_bits(got_a, want_a));
    EXPECT_TRUE(same_bits(got_b, want_b));
  }
}

// ---- The cache on its own. ----

TEST(KVCache, StagedRowsCommitOrRollBackTogether) {
  KVCache c(3, 2, 16, 100, DType::f32, true);
  Tensor k(DType::f32, 2, 10, 16), v(DType::f32, 2, 10, 16);
  for (int64_t l = 0; l < 3; ++l) c.append(l, k, v, 1);
  c.commit();
  EXPECT_EQ(c.size(), 10);
  c.append(0, k, v, 1);
  EXPECT_TRUE(c.staged());
  EXPECT_THROW(c.commit(), Error);  // layers 1 and 2 lack the rows
  EXPECT_EQ(c.size(), 10);
  EXPECT_THROW(c.truncate(5), Error);
  EXPECT_THROW(c.fork(), Error);
  c.rollback();
  EXPECT_FALSE(c.staged());
  EXPECT_EQ(c.layer_size(0), 10);
  EXPECT_EQ(c.raw_k(0).seq, 10);
  EXPECT_THROW(c.append(3, k, v, 1), Error);
  Tensor k3(DType::f32, 3, 10, 16);
  EXPECT_THROW(c.append(0, k3, k3, 1), Error);
  EXPECT_EQ(c.layer_size(0), 10);
  EXPECT_THROW(c.truncate(11), Error);
  EXPECT_THROW(KVCache(3, 2, 16, 100, DType::f32, false).raw_k(0), Error);
  // Quest's page summaries in the layers a list marks; a list of the wrong length is refused.
  const KVCache q(3, 2, 16, 100, DType::f32, false, KVType::f32, KVType::f32, 16, QuestSums::i8,
                  {false, true, true});
  EXPECT_FALSE(q.has_pages(0));
  EXPECT_TRUE(q.has_pages(2));
  EXPECT_THROW(q.pages(0), Error);
  EXPECT_THROW(KVCache(3, 2, 16, 100, DType::f32, false, KVType::f32, KVType::f32, 16,
                       QuestSums::i8, {true, true}),
               Error);
}

}  // namespace
}  // namespace spattn::model

// chunked_h2o under prefix reuse: a session that keeps its layers' state at chunk boundaries
// and goes on from the longest kept one computes, bit for bit, what one fresh prefill of the
// whole prompt computes (the same -b / -ub; from a boundary inside a logical batch too,
// finishing that batch where the fresh prefill does: the gemma3 test), on stories260K's real attention
// with a memory set small enough that chunked_h2o is far from dense. Going on without that
// state (dense from the kept prefix, what the session did before it kept any) does not.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <random>
#include <fstream>
#include <iterator>
#include <sstream>

#include "assets.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "spattn/tokenizer.hpp"
#include "temp_dir.hpp"

namespace spattn::model {
namespace {

struct Fixture {
  std::shared_ptr<const gguf::File> file;
  Model model;
  std::vector<int32_t> text;  // held-out source, tokenized
};

// stories260K and 300 tokens of held-out code, or null when the models folder is absent.
const Fixture* fixture() {
  static const std::unique_ptr<Fixture> f = []() -> std::unique_ptr<Fixture> {
    const std::string path = test::model_file("stories260K.gguf"),
                      text = test::model_file("code-heldout.txt");
    if (path.empty() || text.empty()) return nullptr;
    auto file = std::make_shared<const gguf::File>(gguf::File::open(path));
    std::ifstream in(text, std::ios::binary);
    std::string s((std::istreambuf_iterator<char>(in)), {});
    s.resize(4000);
    std::vector<int32_t> t = Tokenizer::from_gguf(*file).encode(s);
    t.resize(300);
    return std::unique_ptr<Fixture>(new Fixture{file, load_model(file), std::move(t)});
  }();
  return f.get();
}

constexpr size_t kVocab = 512;  // stories260K's

SessionOptions h2o_opts(int64_t keep = 4) {
  SessionOptions so;
  so.n_ctx = 1024;
  so.n_batch = 64;
  so.n_ubatch = 32;
  so.attn = "chunked_h2o";
  so.h2o_local = 8;
  so.h2o_heavy = 16;  // a memory of 24 tokens: far from dense
  so.h2o_keep = keep;
  so.threads = 2;
  return so;
}

// The second turn: the first 195 tokens of the first prompt, then 25 others.
std::vector<int32_t> second_prompt(const std::vector<int32_t>& t) {
  std::vector<int32_t> p(t.begin(), t.begin() + 195);
  p.insert(p.end(), t.begin() + 250, t.begin() + 275);
  return p;
}

// The logits of every row from `from` of a fresh prefill of the whole prompt.
std::vector<float> fresh_logits(const Model& m, const std::vector<int32_t>& p, int64_t from) {
  Session s(m, h2o_opts());
  std::vector<float> lg(size_t(int64_t(p.size()) - from) * size_t(m.config().n_vocab));
  s.prefill(p, lg.data(), from);
  return lg;
}

// A session after the first turn: a 200-token prompt (batches end at 64, 128, 192, 200;
// chunks every 32 within them) and three decoded tokens.
Session first_turn(const Model& m, const std::vector<int32_t>& t, int64_t keep = 4) {
  Session s(m, h2o_opts(keep));
  s.prefill(std::span(t).first(200), nullptr, 0);
  std::vector<float> lg(size_t(m.config().n_vocab));
  for (int i = 0; i < 3; ++i) s.decode(t[size_t(200 + i)], lg.data());
  return s;
}

// The second turn's logits from `keep` on, prefilled on from keep.
std::vector<float> go_on(Session& s, const std::vector<int32_t>& p, int64_t keep) {
  s.truncate(keep);
  std::vector<float> lg(size_t(int64_t(p.size()) - keep) * kVocab);
  s.prefill(std::span(p).subspan(size_t(keep)), lg.data(), 0);
  return lg;
}

bool same_bits(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

TEST(H2OPrefixReuseReal, GoesOnFromTheLongestKeptBoundaryBitForBit) {
  const Fixture* f = fixture();
  if (!f) SPATTN_MISSING_ASSET("stories260K.gguf or code-heldout.txt in " << test::models_dir());
  ASSERT_EQ(f->model.config().n_vocab, kVocab);
  const auto p = second_prompt(f->text);
  Session s = first_turn(f->model, f->text);
  // The common prefix is 195 tokens; the kept boundaries below it 64, 128, 192 (the chunk
  // ends 32 keys into a batch are off Phase 1's 64-key tiles: not kept).
  EXPECT_EQ(s.reuse_point(195), 192);
  EXPECT_EQ(s.reuse_point(191), 128);
  EXPECT_EQ(s.reuse_point(159), 128);
  EXPECT_EQ(s.reuse_point(63), 0);
  EXPECT_EQ(s.reuse_point(s.n_past()), 192);  // the prompt's end built no memory set
  EXPECT_THROW(s.reuse_point(s.n_past() + 1), Error);
  EXPECT_GT(s.memory().h2o_state, 0u);
  const std::vector<float> got = go_on(s, p, 192);
  EXPECT_TRUE(same_bits(got, fresh_logits(f->model, p, 192)));
  // The state kept at 192 survives going on from it (a third turn may reuse it again).
  EXPECT_EQ(s.reuse_point(s.n_past()), 192);
  const std::vector<float> again = go_on(s, p, 128);
  EXPECT_TRUE(same_bits(again, fresh_logits(f->model, p, 128)));
  // Going on from 128 passed 192 again and kept it.
  EXPECT_EQ(s.reuse_point(s.n_past()), 192);
}

// A fork at a kept boundary goes on as the session would; h2o_keep bounds what is kept.
TEST(H2OPrefixReuseReal, ForkAndKeepBound) {
  const Fixture* f = fixture();
  if (!f) SPATTN_MISSING_ASSET("stories260K.gguf or code-heldout.txt in " << test::models_dir());
  const auto p = second_prompt(f->text);
  const Session s = first_turn(f->model, f->text);
  Session fk = s.fork(128);
  EXPECT_EQ(fk.reuse_point(128), 128);
  std::vector<float> lg(size_t(p.size() - 128) * kVocab);
  fk.prefill(std::span(p).subspan(128), lg.data(), 0);
  EXPECT_TRUE(same_bits(lg, fresh_logits(f->model, p, 128)));
  EXPECT_EQ(s.reuse_point(195), 192);  // the source keeps its own
  const Session one = first_turn(f->model, f->text, 1);
  EXPECT_EQ(one.reuse_point(195), 192);
  EXPECT_EQ(one.reuse_point(191), 0);
  const Session none = first_turn(f->model, f->text, 0);
  EXPECT_EQ(none.reuse_point(195), 0);
}

// Without the kept state (h2o_keep = 0, as before it was kept; or a prefix that is not a kept
// boundary) the prefill after the prefix runs dense and its logits are not the fresh ones:
// the bitwise test above can fail.
TEST(H2OPrefixReuseReal, WithoutTheKeptStateTheResultDiffers) {
  const Fixture* f = fixture();
  if (!f) SPATTN_MISSING_ASSET("stories260K.gguf or code-heldout.txt in " << test::models_dir());
  const auto p = second_prompt(f->text);
  Session none = first_turn(f->model, f->text, 0);
  const std::vector<float> want = fresh_logits(f->model, p, 192);
  const std::vector<float> got = go_on(none, p, 192);
  ASSERT_EQ(got.size(), want.size());
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, double(std::abs(got[i] - want[i])));
  EXPECT_GT(worst, 1e-2) << "dense from 192 should differ from chunked_h2o's fresh prefill";
  Session s = first_turn(f->model, f->text);
  const std::vector<float> off = go_on(s, p, 195);  // not a boundary: dense from 195
  EXPECT_FALSE(same_bits(off, fresh_logits(f->model, p, 195)));
}

// gemma3: the sliding-window layers run their band, not chunked_h2o, and keep their (fresh)
// state at every kept boundary; going on from a chunk boundary inside a logical batch is still
// bit for bit a fresh prefill. A made-up model: 6 layers (five of window 24, one global).
// Chunk ends are kept where they fall on Phase 1's key tiles (a multiple of 64 keys into their
// batch): with -ub 40 the ends inside a batch of 80 are not, and reuse goes back to the batch's.
TEST(H2OPrefixReuse, Gemma3GoesOnFromAChunkBoundaryBitForBit) {
  ModelShape sh;
  sh.arch = "gemma3";
  sh.layers = 6;
  sh.dim = 64;
  sh.heads = 4;
  sh.kv_heads = 2;
  sh.head_dim = 16;
  sh.vocab = 300;
  sh.sliding_window = 24;
  sh.seed = 5;
  const test::TempDir dir("spattn_h2o_gemma3");
  const std::filesystem::path path = dir / "m.gguf";
  make_model(path.string(), sh);
  const Model m = load_model(path.string());
  std::filesystem::remove(path);
  std::mt19937_64 rng(9);
  std::vector<int32_t> t(300);
  for (int32_t& x : t) x = int32_t(rng() % 300);
  const int64_t V = m.config().n_vocab;
  SessionOptions so = h2o_opts();
  so.n_batch = 128;
  so.n_ubatch = 64;
  Session s(m, so);
  s.prefill(std::span(t).first(250), nullptr, 0);  // chunk ends 64, 128, 192 (250: the end)
  ASSERT_EQ(s.reuse_point(249), 192);              // inside the batch [128, 256)
  ASSERT_EQ(s.reuse_point(191), 128);
  ASSERT_EQ(s.reuse_point(127), 64);  // inside the batch [0, 128)
  for (int64_t keep : {192, 64}) {
    s.truncate(keep);
    std::vector<float> got(size_t((300 - keep) * V)), want(got.size());
    s.prefill(std::span(t).subspan(size_t(keep)), got.data(), 0);
    Session fresh(m, so);
    fresh.prefill(t, want.data(), keep);
    EXPECT_TRUE(same_bits(got, want)) << "from " << keep;
  }
  so.n_batch = 80;
  so.n_ubatch = 40;
  Session off(m, so);
  off.prefill(std::span(t).first(250), nullptr, 0);  // batch ends 80, 160, 240; chunk ends 40 on
  EXPECT_EQ(off.reuse_point(239), 160);
  EXPECT_EQ(off.reuse_point(199), 160) << "200 is 40 keys into its batch: not kept";
}

}  // namespace
}  // namespace spattn::model

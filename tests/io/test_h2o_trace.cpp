// The heavy-hitter analysis ("Chunked Sparse Attention for Prefill Optimization", Task 8.4):
// traces recorded by a session on a made-up model, their file format (round trip; truncated,
// garbage and inconsistent files refused with an Error naming the file), Jaccard and sink
// share against sets planted by hand, the figure, and `spattn run --h2o-trace` +
// `spattn h2o-report` from the command line.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <random>

#include "cli_run.hpp"
#include "png_read.hpp"
#include "spattn/error.hpp"
#include "spattn/h2o_report.hpp"
#include "spattn/h2o_trace.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

namespace fs = std::filesystem;

test::TempDir temp_dir(const std::string& what) { return test::TempDir("spattn_h2o_" + what); }

ModelShape small_shape() {
  ModelShape s;
  s.layers = 2;
  s.dim = 64;
  s.heads = 4;
  s.kv_heads = 2;
  s.ffn = 96;
  s.vocab = 300;
  s.seed = 5;
  return s;
}

const model::Model& small_model() {
  static const model::Model m = [] {
    const test::TempDir dir = temp_dir("model");
    const fs::path p = dir / "m.gguf";
    make_model(p.string(), small_shape());
    model::Model model = model::load_model(p.string());
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

model::SessionOptions h2o_options() {
  model::SessionOptions so;
  so.n_ctx = 256;
  so.n_batch = 64;
  so.n_ubatch = 32;
  so.attn = "chunked_h2o";
  so.h2o_local = 8;
  so.h2o_heavy = 12;  // smaller than the prompt: the scores choose
  so.threads = 2;
  return so;
}

// Every layer's trace of one prefill of `prompt`, through the file format.
std::vector<H2OTraceLayer> traced_prefill(const std::vector<int32_t>& prompt) {
  const model::SessionOptions so = h2o_options();
  model::Session s(small_model(), so);
  std::vector<ChunkedH2OTrace> rec;
  s.set_h2o_traces(&rec);
  s.prefill(prompt, nullptr, 0);
  ChunkedH2OParams p;
  p.chunk = so.n_ubatch, p.batch = so.n_batch, p.local = so.h2o_local, p.heavy = so.h2o_heavy;
  std::vector<H2OTraceLayer> out;
  for (size_t l = 0; l < rec.size(); ++l) {
    const H2OTraceLayer t = h2o_trace_layer(rec[l], int64_t(l), 4, int64_t(prompt.size()), p);
    const std::string b = h2o_trace_to_bytes(t);
    out.push_back(
        h2o_trace_from_bytes({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, "t"));
  }
  return out;
}

TEST(H2OTrace, SamePromptTwiceGivesJaccardOneAnotherPromptLess) {
  const auto prompt = tokens(150, 1);
  const auto a = traced_prefill(prompt), b = traced_prefill(prompt),
             c = traced_prefill(tokens(150, 2));
  ASSERT_EQ(a.size(), 2u);
  for (size_t l = 0; l < a.size(); ++l) {
    // 150 tokens in chunks of 32: M_c after chunks 0..3 (the 5th, the prompt's last, builds none).
    ASSERT_EQ(a[l].chunks.size(), 4u);
    for (const auto& ch : a[l].chunks)
      for (const auto& m : ch.memory) EXPECT_EQ(m.size(), 8u + 12u);  // L + H
    const H2OLayerStats same = h2o_layer_stats(a[l], 4, &b[l]);
    EXPECT_EQ(same.compare.n, 4 * 4);
    EXPECT_EQ(same.compare.mean, 1.0);
    EXPECT_EQ(same.compare.min, 1.0);
    const H2OLayerStats other = h2o_layer_stats(a[l], 4, &c[l]);
    EXPECT_LT(other.compare.mean, 1.0) << "layer " << l;
    EXPECT_GT(other.compare.mean, 0.0) << "layer " << l;
  }
}

// Two heads, three chunks of 16 tokens, L = 4, H = 4, sets chosen by hand.
H2OTraceLayer planted() {
  H2OTraceLayer t;
  t.layer = 3, t.heads = 2, t.tokens = 60, t.chunk = 16, t.local = 4, t.heavy = 4;
  // Heavy sets (local windows 12..15, 28..31, 44..47 added):
  //   head 0: {0,1,2,3}  {0,1,2,20}   {0,1,20,21}
  //   head 1: {0,1,5,6}  {5,6,16,17}  {5,6,16,17}
  auto set = [](std::vector<int64_t> heavy, int64_t end) {
    for (int64_t j = end - 4; j < end; ++j) heavy.push_back(j);
    return heavy;
  };
  t.chunks.push_back({0, 16, {set({0, 1, 2, 3}, 16), set({0, 1, 5, 6}, 16)}});
  t.chunks.push_back({16, 32, {set({0, 1, 2, 20}, 32), set({5, 6, 16, 17}, 32)}});
  t.chunks.push_back({32, 48, {set({0, 1, 20, 21}, 48), set({5, 6, 16, 17}, 48)}});
  return t;
}

TEST(H2OTrace, PlantedSetsGiveTheirJaccardAndSinkShare) {
  EXPECT_EQ(jaccard(std::vector<int64_t>{}, std::vector<int64_t>{}), 1.0);
  EXPECT_EQ(jaccard(std::vector<int64_t>{1, 2, 3}, std::vector<int64_t>{2, 3, 4}), 0.5);
  EXPECT_EQ(jaccard(std::vector<int64_t>{1}, std::vector<int64_t>{}), 0.0);
  const H2OTraceLayer t = planted();
  EXPECT_EQ(h2o_heavy_set(t, 1, 0), (std::vector<int64_t>{0, 1, 2, 20}));
  const H2OLayerStats s = h2o_layer_stats(t, 2);
  EXPECT_EQ(s.sets, 6);
  EXPECT_DOUBLE_EQ(s.sink_first, 4.0 / 6.0);  // head 1 drops position 0 after chunk 0
  EXPECT_DOUBLE_EQ(s.sink_all, 4.0 / 6.0);    // and 0, 1 go together here
  // Consecutive: head 0: 3/5, 3/5; head 1: 2/6, 4/4.
  EXPECT_EQ(s.consecutive.n, 4);
  EXPECT_DOUBLE_EQ(s.consecutive.mean, (0.6 + 0.6 + 2.0 / 6.0 + 1.0) / 4);
  EXPECT_DOUBLE_EQ(s.consecutive.min, 2.0 / 6.0);
  // Between heads per chunk: 2/6, 0/8, 0/8.
  EXPECT_EQ(s.heads.n, 3);
  EXPECT_DOUBLE_EQ(s.heads.mean, (2.0 / 6.0) / 3);
  EXPECT_DOUBLE_EQ(s.heads.min, 0.0);
  EXPECT_EQ(s.compare.n, 0);
  // Against a copy with one head-0 set changed: {0,1,2,3} -> {0,1,2,9} (3/5 there, 1 elsewhere).
  H2OTraceLayer u = t;
  u.chunks[0].memory[0][3] = 9;
  std::sort(u.chunks[0].memory[0].begin(), u.chunks[0].memory[0].end());
  const H2OLayerStats c = h2o_layer_stats(t, 2, &u);
  EXPECT_EQ(c.compare.n, 6);
  EXPECT_DOUBLE_EQ(c.compare.mean, (5 + 0.6) / 6);
  EXPECT_DOUBLE_EQ(c.compare.min, 0.6);
  // Other chunk boundaries cannot be compared position for position.
  u.chunks.pop_back();
  EXPECT_THROW(h2o_layer_stats(t, 2, &u), Error);
}

std::string bytes_of(const H2OTraceLayer& t) { return h2o_trace_to_bytes(t); }
H2OTraceLayer parse(const std::string& b) {
  return h2o_trace_from_bytes({reinterpret_cast<const uint8_t*>(b.data()), b.size()}, "x.h2o");
}
void expect_refused(const std::string& b, const std::string& what) {
  try {
    parse(b);
    ADD_FAILURE() << "accepted: " << what;
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("x.h2o: "), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find(what), std::string::npos) << e.what();
  }
}

TEST(H2OTrace, FileRoundTripsAndRefusesTruncatedGarbageAndInconsistentBytes) {
  const H2OTraceLayer t = planted();
  const std::string b = bytes_of(t);
  const H2OTraceLayer r = parse(b);
  EXPECT_EQ(r.layer, 3);
  ASSERT_EQ(r.chunks.size(), 3u);
  for (size_t c = 0; c < 3; ++c) EXPECT_EQ(r.chunks[c].memory, t.chunks[c].memory);
  // Every truncation is refused (the last set must end the file exactly).
  for (size_t n = 0; n < b.size(); ++n) EXPECT_THROW(parse(b.substr(0, n)), Error) << n;
  expect_refused(b.substr(0, 9), "truncated at byte 1 (reading heads)");
  expect_refused(b.substr(0, b.size() - 1), "cannot fit in the 7 bytes left");
  expect_refused(b + '\0', "bytes after the last memory set");
  expect_refused("GARBAGE!" + b.substr(8), "no 'SPH2OTR1' magic");
  expect_refused(b.substr(0, 8) + std::string(12, char(0xff)), "not a varint below 2^63");
  H2OTraceLayer bad = t;
  bad.chunks[1].memory[1] = {5, 5, 16, 17, 28, 29, 30, 31};  // repeated position: gap -1 wraps
  expect_refused(bytes_of(bad), "position");
  bad = t;
  bad.chunks[1].memory[0] = {0, 1, 2, 20, 28, 29, 30, 40};  // after the chunk's end
  expect_refused(bytes_of(bad), "is not before the chunk's end 32");
  bad = t;
  bad.chunks[2].begin = 33;  // a gap between chunks
  expect_refused(bytes_of(bad), "consecutive from 0");
  bad = t;
  bad.chunks[0].memory[0] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9};  // more than L + H
  expect_refused(bytes_of(bad), "memory set size is 10, above its limit 8");
  bad = t;
  bad.local = 20;  // L > S
  expect_refused(bytes_of(bad), "bad header");
  // Random bytes after a valid magic: refused, never a crash.
  std::mt19937 rng(3);
  for (int i = 0; i < 200; ++i) {
    std::string g = b.substr(0, 8);
    for (int j = 0; j < 40; ++j) g.push_back(char(rng()));
    EXPECT_THROW(parse(g), Error);
  }
}

TEST(H2OTrace, TwoPromptsInOneRecordAreRefused) {
  ChunkedH2OTrace rec;
  rec.chunk_begin = {0, 16, 0, 16};
  rec.inter = {0, 1, 0, 1};
  rec.memory.assign(4, std::vector<std::vector<int64_t>>(1, std::vector<int64_t>{0}));
  ChunkedH2OParams p;
  p.chunk = 16, p.local = 1, p.heavy = 0;
  EXPECT_THROW(h2o_trace_layer(rec, 0, 1, 32, p), Error);
}

TEST(H2OTrace, FigureStacksHeadsAndMarksHeavyHitters) {
  const H2OTraceLayer t = planted();
  const Image img = h2o_figure(t);
  EXPECT_GT(img.height, img.width / 4);
  // Some pixel of each colour class: heavy (ink), local (orange).
  bool heavy = false, local = false;
  for (int64_t y = 0; y < img.height; ++y)
    for (int64_t x = 0; x < img.width; ++x) {
      const Rgb c = img.at(x, y);
      local |= c == Rgb{236, 120, 36};
      heavy |= c == Rgb{24, 24, 28};
    }
  EXPECT_TRUE(heavy);
  EXPECT_TRUE(local);
  // A file may claim 2^40 tokens: the figure's work follows its pixels, not that count.
  H2OTraceLayer huge = t;
  huge.tokens = int64_t(1) << 40;
  const Image h = h2o_figure(parse(bytes_of(huge)));
  EXPECT_LE(h.width, 1024 + 64);
}

TEST(H2OTrace, RunTraceThenReportFromTheCommandLine) {
  const test::TempDir d = temp_dir("cli");
  make_model((d / "m.gguf").string(), small_shape());
  std::string prompt;
  for (int i = 0; i < 60; ++i) prompt += "tok" + std::to_string(i) + " ";
  { std::ofstream(d / "p.txt") << prompt; }
  fs::create_directories(d / "t1");
  fs::create_directories(d / "t2");
  for (const char* dir : {"t1", "t2"}) {
    const auto r =
        test::run_spattn("run -m " + (d / "m.gguf").string() + " -f " + (d / "p.txt").string() +
                             " -n 0 -c 512 --max-prompt 300 -b 128 -ub 64 "
                             "--attn chunked_h2o --h2o-local 16 --h2o-heavy 16 "
                             "--h2o-trace " +
                             (d / dir).string(),
                         d);
    ASSERT_EQ(r.code(), 0) << r.err;
  }
  ASSERT_TRUE(fs::exists(d / "t1" / "layer1.h2o"));
  auto r = test::run_spattn("h2o-report " + (d / "t1").string() + " --compare " +
                                (d / "t2").string() + " -o " + (d / "png").string(),
                            d);
  ASSERT_EQ(r.code(), 0) << r.err;
  EXPECT_NE(r.out.find("| 1 | "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("1.000 / 1.000 |\n"), std::string::npos) << r.out;  // vs --compare
  const test::PngPixels png = test::read_png_rgb((d / "png" / "layer0.png").string());
  EXPECT_TRUE(png.ok) << png.error;
  // Bad input exits 2 with the file named: garbage, no trace, no chunked_h2o.
  { std::ofstream(d / "t2" / "layer0.h2o") << "junk"; }
  r = test::run_spattn("h2o-report " + (d / "t2").string(), d);
  EXPECT_EQ(r.code(), 2);
  EXPECT_NE(r.err.find("layer0.h2o: not a heavy-hitter trace"), std::string::npos) << r.err;
  r = test::run_spattn("h2o-report " + (d / "png").string(), d);
  EXPECT_EQ(r.code(), 2);
  EXPECT_NE(r.err.find("no layer*.h2o files"), std::string::npos) << r.err;
  r = test::run_spattn(
      "run -m " + (d / "m.gguf").string() + " -p hi -n 0 --h2o-trace " + (d / "t1").string(), d);
  EXPECT_EQ(r.code(), 2);
  EXPECT_NE(r.err.find("--h2o-trace needs --attn chunked_h2o"), std::string::npos) << r.err;
}

}  // namespace
}  // namespace spattn

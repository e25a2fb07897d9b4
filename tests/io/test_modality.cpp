// ModalityLayout (segments, validation), load_modality from .npy and .safetensors (every bad
// input raising spattn::Error that names it), the workloads' layouts, and `--modality` in the
// CLI (exit 2 on each bad input, the layout reaching the methods on good input).
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"
#include "spattn/method.hpp"
#include "spattn/modality.hpp"
#include "spattn/workload.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using spattn::Error;
using spattn::ModalityLayout;

class Modality : public ::testing::Test {
 protected:
  const spattn::test::TempDir dir{"spattn_modality"};
  std::string file(const std::string& name) const { return (dir / name).string(); }
};

template <class F>
void expect_error(F&& f, const std::string& needle, int line) {
  try {
    f();
    ADD_FAILURE() << "line " << line << ": expected spattn::Error containing '" << needle << "'";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "line " << line << ": '" << e.what() << "' does not mention '" << needle << "'";
  }
}
#define EXPECT_MODALITY_ERROR(stmt, needle) expect_error([&] { (void)(stmt); }, needle, __LINE__)

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
}

// A .npy file with `descr` and `shape` holding `data`, padded as numpy pads.
std::string npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += char(1);
  out += char(0);
  out += char(h.size() & 0xff);
  out += char(h.size() >> 8);
  return out + h + data;
}

// Little-endian bytes of `values` as `bytes`-wide integers.
std::string ints(const std::vector<int64_t>& values, int bytes) {
  std::string s;
  for (int64_t v : values)
    for (int b = 0; b < bytes; ++b) s += char((uint64_t(v) >> (8 * b)) & 0xff);
  return s;
}

// A .safetensors file with one tensor `name` and optional metadata JSON.
std::string safetensors(const std::string& name, const std::string& dtype, int64_t n,
                        const std::string& data, const std::string& metadata = "") {
  std::string json = "{";
  if (!metadata.empty()) json += "\"__metadata__\":" + metadata + ",";
  json += "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" + std::to_string(n) +
          "],\"data_offsets\":[0," + std::to_string(data.size()) + "]}}";
  std::string out;
  for (int i = 0; i < 8; ++i) out += char((uint64_t(json.size()) >> (8 * i)) & 0xff);
  return out + json + data;
}

ModalityLayout layout(std::vector<uint8_t> ids, int64_t frame) {
  ModalityLayout m;
  m.ids = std::move(ids);
  m.frame_tokens = frame;
  return m;
}

TEST(ModalityLayout, SegmentsAreMaximalRuns) {
  const ModalityLayout m = layout({0, 0, 1, 1, 1, 1, 0, 2, 2}, 2);
  const auto s = m.segments();
  ASSERT_EQ(s.size(), 4u);
  EXPECT_EQ(s[0].begin, 0);
  EXPECT_EQ(s[0].end, 2);
  EXPECT_EQ(s[1].begin, 2);
  EXPECT_EQ(s[1].end, 6);
  EXPECT_EQ(s[1].modality, 1);
  EXPECT_EQ(s[2].modality, 0);
  EXPECT_EQ(s[3].begin, 7);
  EXPECT_EQ(s[3].end, 9);
  EXPECT_EQ(s[3].modality, 2);
  EXPECT_EQ(m.num_modalities(), 3);
  EXPECT_NO_THROW(m.validate(9));
  EXPECT_TRUE(ModalityLayout{}.segments().empty());
  EXPECT_EQ(ModalityLayout{}.num_modalities(), 0);
  EXPECT_EQ(spattn::uniform_modality(5).segments().size(), 1u);
}

TEST(ModalityLayout, ValidateNamesEachProblem) {
  EXPECT_MODALITY_ERROR(layout({0, 1, 1}, 0).validate(4), "3 ids given for a sequence of 4");
  EXPECT_MODALITY_ERROR(layout({0, 16, 1}, 0).validate(3), "unknown id 16 at token 1");
  EXPECT_MODALITY_ERROR(layout({0, 1}, -2).validate(2), "frame_tokens must be >= 0");
  // A vision run of 3 tokens inside the sequence with frames of 2.
  EXPECT_MODALITY_ERROR(layout({0, 1, 1, 1, 0}, 2).validate(5),
                        "frame_tokens 2 does not divide the vision run [1, 4)");
  // Runs of other modalities are not framed; a run that ends the sequence may stop mid-frame.
  EXPECT_NO_THROW(layout({0, 2, 2, 2, 1, 1, 0, 1, 1, 1}, 2).validate(10));
  EXPECT_NO_THROW(layout({0, 1, 1, 1}, 0).validate(4));  // no frame size: nothing to divide
}

TEST_F(Modality, NpyRoundTripAndEveryIntType) {
  const std::vector<uint8_t> ids = {0, 0, 1, 1, 1, 1, 0, 2};
  spattn::write_modality_npy(file("m.npy"), ids);
  ModalityLayout m = spattn::load_modality(file("m.npy"), 2);
  EXPECT_EQ(m.ids, ids);
  EXPECT_EQ(m.frame_tokens, 2);
  EXPECT_EQ(spattn::load_modality(file("m.npy")).frame_tokens, 0);
  const std::vector<int64_t> wide(ids.begin(), ids.end());
  for (const auto& [descr, bytes] : std::vector<std::pair<std::string, int>>{{"|i1", 1},
                                                                             {"<i2", 2},
                                                                             {"<u2", 2},
                                                                             {"<i4", 4},
                                                                             {"=u4", 4},
                                                                             {"<i8", 8},
                                                                             {"<u8", 8},
                                                                             {"|b1", 1}}) {
    const std::vector<int64_t> v = descr == "|b1" ? std::vector<int64_t>{0, 1, 1, 0} : wide;
    write_bytes(file("t.npy"), npy(descr, "(1, " + std::to_string(v.size()) + ")", ints(v, bytes)));
    m = spattn::load_modality(file("t.npy"));
    EXPECT_EQ(std::vector<int64_t>(m.ids.begin(), m.ids.end()), v) << descr;
  }
}

TEST_F(Modality, NpyBadInputsAreNamed) {
  write_bytes(file("f.npy"), npy("<f4", "(3,)", std::string(12, '\0')));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("f.npy")), "'<f4' is not an integer type");
  write_bytes(file("neg.npy"), npy("|i1", "(3,)", ints({0, -1, 1}, 1)));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("neg.npy")),
                        "unknown modality id -1 at token 1");
  write_bytes(file("big.npy"), npy("<i4", "(3,)", ints({0, 1, 300}, 4)));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("big.npy")),
                        "unknown modality id 300 at token 2");
  write_bytes(file("huge.npy"), npy("<u8", "(1,)", std::string(8, '\xff')));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("huge.npy")), "unknown modality id");
  write_bytes(file("2d.npy"), npy("|u1", "(2, 3)", std::string(6, '\0')));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("2d.npy")), "expected (seq,) or (1, seq)");
  write_bytes(file("short.npy"), npy("<i4", "(4,)", ints({0, 1}, 4)));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("short.npy")), "only 8 bytes follow");
  write_bytes(file("be.npy"), npy(">i4", "(1,)", ints({1}, 4)));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("be.npy")), "not an integer type");
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("absent.npy")), "no such file");
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("f.npy"), -5), "frame_tokens must be >= 0");
}

TEST_F(Modality, SafetensorsTensorAndMetadata) {
  write_bytes(file("m.safetensors"), safetensors("modality", "I32", 6, ints({0, 1, 1, 1, 1, 0}, 4),
                                                 "{\"frame_tokens\":\"2\",\"other\":\"x\"}"));
  ModalityLayout m = spattn::load_modality(file("m.safetensors"));
  EXPECT_EQ(m.ids, (std::vector<uint8_t>{0, 1, 1, 1, 1, 0}));
  EXPECT_EQ(m.frame_tokens, 2);
  EXPECT_NO_THROW(m.validate(6));
  EXPECT_EQ(spattn::load_modality(file("m.safetensors"), 2).frame_tokens, 2);
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("m.safetensors"), 4),
                        "frame_tokens 4 given, but the file's metadata says 2");
  // Without metadata the frame size is the caller's, or 0.
  write_bytes(file("plain.safetensors"), safetensors("modality", "U8", 3, ints({0, 1, 2}, 1)));
  EXPECT_EQ(spattn::load_modality(file("plain.safetensors")).frame_tokens, 0);
  EXPECT_EQ(spattn::load_modality(file("plain.safetensors"), 3).frame_tokens, 3);
}

TEST_F(Modality, SafetensorsBadInputsAreNamed) {
  write_bytes(file("f.safetensors"), safetensors("modality", "F32", 2, std::string(8, '\0')));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("f.safetensors")),
                        "'F32' is not an integer type");
  write_bytes(file("n.safetensors"), safetensors("ids", "I32", 2, ints({0, 1}, 4)));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("n.safetensors")), "no tensor named 'modality'");
  write_bytes(file("u.safetensors"), safetensors("modality", "I64", 2, ints({0, 99}, 8)));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("u.safetensors")), "unknown modality id 99");
  write_bytes(file("s.safetensors"), safetensors("modality", "I32", 3, ints({0, 1}, 4)));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("s.safetensors")), "size mismatch");
  write_bytes(file("meta.safetensors"),
              safetensors("modality", "U8", 2, ints({0, 1}, 1), "{\"frame_tokens\":\"-3\"}"));
  EXPECT_MODALITY_ERROR(spattn::load_modality(file("meta.safetensors")),
                        "frame_tokens must be a non-negative integer, got '-3'");
}

TEST(ModalityWorkload, VideoAndMixedExposeTheirLayout) {
  spattn::WorkloadConfig c;
  c.seq = 1000;  // not a whole number of frames: the video run is cut by the end
  c.heads = 1;
  c.dim = 32;
  c.frame_tokens = 64;
  c.kind = spattn::WorkloadKind::video;
  const spattn::Workload v = spattn::make_workload(c);
  EXPECT_EQ(v.layout.frame_tokens, 64);
  ASSERT_EQ(v.layout.segments().size(), 1u);
  EXPECT_EQ(v.layout.segments()[0].modality, spattn::kVisionModality);
  EXPECT_NO_THROW(v.layout.validate(1000));
  c.kind = spattn::WorkloadKind::mixed;
  c.seq = 4096;
  const spattn::Workload m = spattn::make_workload(c);
  EXPECT_EQ(m.layout.num_modalities(), 2);
  for (const auto& s : m.layout.segments()) {
    if (s.modality == spattn::kVisionModality && s.end < 4096) {
      EXPECT_EQ((s.end - s.begin) % 64, 0);
    }
  }
  c.kind = spattn::WorkloadKind::text;
  const spattn::Workload t = spattn::make_workload(c);
  EXPECT_EQ(t.layout.frame_tokens, 0);
  EXPECT_EQ(t.layout.num_modalities(), 1);
}

// `frame` in a spec is the run's frame size (MMInference Table 2's SF settings).
TEST(ModalityMethods, FrameSizedSpecsResolveAtRunTime) {
  spattn::WorkloadConfig c;
  c.kind = spattn::WorkloadKind::video;
  c.seq = 512;
  c.heads = 1;
  c.dim = 32;
  c.frame_tokens = 128;
  const spattn::Workload w = spattn::make_workload(c);
  spattn::AttnOptions opt;
  opt.modality = std::make_shared<const ModalityLayout>(w.layout);
  for (const std::string name : {"sf_fixed", "sf_strided"}) {
    const auto by_frame = spattn::make_method(name + ":local=frame,vline_stride=frame");
    const auto by_number = spattn::make_method(name + ":local=128,vline_stride=128");
    spattn::Tensor out(spattn::DType::f32, 1, 512, 32);
    const spattn::MethodReport a = by_frame->run(w.q, w.k, w.v, out, opt);
    const spattn::MethodReport b = by_number->run(w.q, w.k, w.v, out, opt);
    ASSERT_TRUE(a.mask && b.mask);
    EXPECT_EQ(a.mask->blocks, b.mask->blocks) << name;
    EXPECT_EQ(a.stats.score_entries, b.stats.score_entries) << name;
    EXPECT_MODALITY_ERROR(by_frame->run(w.q, w.k, w.v, out, spattn::AttnOptions{}),
                          "=frame needs the tokens per frame");
    opt.modality = std::make_shared<const ModalityLayout>(spattn::uniform_modality(512));
    EXPECT_MODALITY_ERROR(by_frame->run(w.q, w.k, w.v, out, opt), "=frame needs");
    opt.modality = std::make_shared<const ModalityLayout>(w.layout);
  }
  EXPECT_MODALITY_ERROR(spattn::make_method("sf_fixed:local=frames"), "is not an integer");
}

// ---------------------------------------------------------------------------------- CLI

class ModalityCli : public Modality {
 protected:
  std::string qkv;
  void SetUp() override {
    spattn::Tensor q(spattn::DType::f32, 1, 128, 32), k(spattn::DType::f32, 1, 128, 32),
        v(spattn::DType::f32, 1, 128, 32);
    for (spattn::Tensor* t : {&q, &k, &v})
      for (int64_t i = 0; i < t->numel(); ++i) t->data_as<float>()[i] = float((i * 37) % 11) * 0.1f;
    qkv = file("qkv.safetensors");
    spattn::write_safetensors(qkv, {{"q", q}, {"k", k}, {"v", v}});
  }
  spattn::test::CliRun run(const std::string& modality_args) {
    fs::create_directories(dir / "run");
    return spattn::test::run_spattn(
        "bench --repeat 1 --method dense --json --qkv " + qkv + " " + modality_args, dir / "run");
  }
  void expect_exit2(const std::string& args, const std::string& mention) {
    const auto r = run(args);
    ASSERT_TRUE(r.exited()) << r.err;
    EXPECT_EQ(r.code(), 2) << r.err;
    EXPECT_NE(r.err.find(mention), std::string::npos) << r.err;
  }
};

TEST_F(ModalityCli, GoodFileIsAccepted) {
  std::vector<uint8_t> ids(128, 0);
  for (int j = 32; j < 96; ++j) ids[size_t(j)] = 1;
  spattn::write_modality_npy(file("m.npy"), ids);
  const auto r = run("--modality " + file("m.npy") + " --frame-tokens 16");
  ASSERT_EQ(r.code(), 0) << r.err;
  const auto j = nlohmann::json::parse(r.out);
  EXPECT_EQ(j.at("config").at("modality"), file("m.npy"));
  EXPECT_EQ(j.at("config").at("frame_tokens"), 16);
}

TEST_F(ModalityCli, EachBadInputExits2) {
  spattn::write_modality_npy(file("short.npy"), std::vector<uint8_t>(100, 0));
  expect_exit2("--modality " + file("short.npy"), "100 ids given for a sequence of 128");
  write_bytes(file("f.npy"), npy("<f4", "(128,)", std::string(512, '\0')));
  expect_exit2("--modality " + file("f.npy"), "not an integer type");
  std::vector<int64_t> bad(128, 0);
  bad[7] = 42;
  write_bytes(file("id.npy"), npy("<i4", "(128,)", ints(bad, 4)));
  expect_exit2("--modality " + file("id.npy"), "unknown modality id 42 at token 7");
  std::vector<uint8_t> ids(128, 0);
  for (int j = 10; j < 30; ++j) ids[size_t(j)] = 1;  // 20 vision tokens, frames of 16
  spattn::write_modality_npy(file("frame.npy"), ids);
  expect_exit2("--modality " + file("frame.npy") + " --frame-tokens 16",
               "frame_tokens 16 does not divide the vision run [10, 30)");
  expect_exit2("--frame-tokens 16", "--frame-tokens with --qkv needs --modality");
  const auto r = spattn::test::run_spattn(
      "bench --repeat 1 --method dense --seq 128 --workload text --frame-tokens 16", dir);
  EXPECT_EQ(r.code(), 2) << r.err;
  EXPECT_NE(r.err.find("video and mixed"), std::string::npos) << r.err;
}

}  // namespace

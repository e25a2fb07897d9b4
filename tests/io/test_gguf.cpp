// GGUF reader and writer: round trips of every value type and tensor type, versions 2 and 3,
// alignment; every hostile-file case (each raises spattn::Error naming the problem); every
// truncation of a valid file; and the real model files when the models folder is present.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <string>
#include <vector>

#include <unistd.h>

#include "assets.hpp"
#include "spattn/dtype.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using spattn::gguf::File;
using spattn::gguf::GgmlType;
using spattn::gguf::ValueType;
using spattn::gguf::Writer;
using Bytes = std::vector<uint8_t>;

File parse(const Bytes& b) { return File::from_memory(b.data(), b.size(), "t.gguf"); }

// Parsing `b` must throw spattn::Error whose message contains `needle`.
void expect_bad(const Bytes& b, const std::string& needle) {
  try {
    parse(b);
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const spattn::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos)
        << "message: " << e.what() << "\nexpected to contain: " << needle;
  }
}

template <class F>
void expect_error(F&& f, const std::string& needle) {
  try {
    f();
    ADD_FAILURE() << "no error; expected one containing '" << needle << "'";
  } catch (const spattn::Error& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

size_t find(const Bytes& b, const std::string& s) {
  for (size_t i = 0; i + s.size() <= b.size(); ++i)
    if (std::memcmp(b.data() + i, s.data(), s.size()) == 0) return i;
  ADD_FAILURE() << "'" << s << "' not in the file";
  return 0;
}
template <class T>
void poke(Bytes& b, size_t at, T v) {
  std::memcpy(b.data() + at, &v, sizeof v);
}

// A small valid file: one metadata key, tensors "ta" f32 [4, 2] and "tb" f32 [8].
struct Small {
  std::vector<float> a{1, 2, 3, 4, 5, 6, 7, 8}, b{9, 10, 11, 12, 13, 14, 15, 16};
  Bytes bytes() const {
    Writer w;
    w.set("general.architecture", "llama");
    w.add_tensor("ta", GgmlType::f32, {4, 2}, a.data());
    w.add_tensor("tb", GgmlType::f32, {8}, b.data());
    return w.bytes();
  }
};
// Byte positions in a tensor info: the name, then n_dims, ne[], type, offset.
size_t ne_at(const Bytes& f, const std::string& name) { return find(f, name) + name.size() + 4; }
size_t type_at(const Bytes& f, const std::string& name, int n_dims) {
  return ne_at(f, name) + 8 * n_dims;
}
size_t offset_at(const Bytes& f, const std::string& name, int n_dims) {
  return type_at(f, name, n_dims) + 4;
}

TEST(Gguf, EveryValueTypeRoundTrips) {
  for (uint32_t version : {2u, 3u}) {
    Writer w;
    w.set_version(version);
    w.set("u8", uint8_t(200));
    w.set("i8", int8_t(-100));
    w.set("u16", uint16_t(60000));
    w.set("i16", int16_t(-30000));
    w.set("u32", uint32_t(4000000000u));
    w.set("i32", int32_t(-2000000000));
    w.set("u64", uint64_t(1) << 63);
    w.set("i64", int64_t(-5));
    w.set("f32", 1.5f);
    w.set("f64", 2.25);
    w.set("yes", true);
    w.set("no", false);
    w.set("str", "h\xc3\xa9llo");
    w.set("empty", "");
    w.set("strs", std::vector<std::string>{"a", "", "\xe2\x96\x81x"});
    w.set("floats", std::vector<float>{0.5f, -1.0f});
    w.set("doubles", std::vector<double>{3.0});
    w.set("ints", std::vector<int32_t>{-1, 7});
    w.set("uints", std::vector<uint32_t>{1, 2, 3});
    w.set("longs", std::vector<int64_t>{-9});
    w.set("bytes", std::vector<uint8_t>{});
    w.set("bools", std::vector<bool>{true, false});
    const Bytes b = w.bytes();
    const File f = parse(b);
    EXPECT_EQ(f.version(), version);
    EXPECT_EQ(f.keys().size(), 22u);
    EXPECT_EQ(f.keys().front(), "u8");
    EXPECT_EQ(f.get_uint("u8"), 200u);
    EXPECT_EQ(f.get_int("i8"), -100);
    EXPECT_EQ(f.get_uint("u16"), 60000u);
    EXPECT_EQ(f.get_int("i16"), -30000);
    EXPECT_EQ(f.get_uint("u32"), 4000000000u);
    EXPECT_EQ(f.get_int("i32"), -2000000000);
    EXPECT_EQ(f.get_uint("u64"), uint64_t(1) << 63);
    EXPECT_EQ(f.get_int("i64"), -5);
    EXPECT_EQ(f.get_float("f32"), 1.5);
    EXPECT_EQ(f.get_float("f64"), 2.25);
    EXPECT_TRUE(f.get_bool("yes"));
    EXPECT_FALSE(f.get_bool("no"));
    EXPECT_EQ(f.get_string("str"), "h\xc3\xa9llo");
    EXPECT_EQ(f.get_string("empty"), "");
    EXPECT_EQ(f.get_string_array("strs"), (std::vector<std::string>{"a", "", "\xe2\x96\x81x"}));
    EXPECT_EQ(f.get_float_array("floats"), (std::vector<float>{0.5f, -1.0f}));
    EXPECT_EQ(f.get_float_array("doubles"), (std::vector<float>{3.0f}));
    EXPECT_EQ(f.get_int_array("ints"), (std::vector<int64_t>{-1, 7}));
    EXPECT_EQ(f.get_int_array("uints"), (std::vector<int64_t>{1, 2, 3}));
    EXPECT_EQ(f.get_int_array("longs"), (std::vector<int64_t>{-9}));
    EXPECT_TRUE(f.get_int_array("bytes").empty());
    EXPECT_EQ(f.array_type_of("bools"), ValueType::boolean);
    EXPECT_EQ(f.array_size("strs"), 3u);
    EXPECT_EQ(f.type_of("u16"), ValueType::u16);
    EXPECT_EQ(f.describe("u32"), "4000000000");
    EXPECT_EQ(f.describe("strs"), "[string x 3]");
    EXPECT_TRUE(f.tensors().empty());
  }
}

TEST(Gguf, GettersNameKeyAndTypeWhenWrong) {
  Writer w;
  w.set("neg", int32_t(-3));
  w.set("s", "x");
  w.set("big", uint64_t(1) << 63);
  w.set("ints", std::vector<int32_t>{1});
  const Bytes b = w.bytes();
  const File f = parse(b);
  expect_error([&] { f.get_uint("missing.key"); }, "missing metadata key 'missing.key'");
  expect_error([&] { f.get_uint("neg"); }, "'neg' is -3, expected a non-negative integer");
  expect_error([&] { f.get_uint("s"); }, "'s' is string, expected an integer");
  expect_error([&] { f.get_string("neg"); }, "'neg' is i32, expected string");
  expect_error([&] { f.get_float("s"); }, "'s' is string, expected f32 or f64");
  expect_error([&] { f.get_bool("s"); }, "expected bool");
  expect_error([&] { f.get_int("big"); }, "does not fit in int64");
  expect_error([&] { f.get_string_array("ints"); },
               "'ints' is array of i32, expected an array of string");
  expect_error([&] { f.get_float_array("ints"); }, "expected an array of f32 or f64");
  expect_error([&] { f.get_int_array("s"); }, "expected an array of integers");
  expect_error([&] { f.tensor("nope"); }, "missing tensor 'nope'");
  EXPECT_EQ(f.find_tensor("nope"), nullptr);
}

TEST(Gguf, TensorsOfEveryTypeRoundTripAtEveryAlignment) {
  std::vector<float> x(64 * 3);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(float(i)) * 3.0f;
  for (uint32_t alignment : {1u, 8u, 32u, 64u}) {
    for (uint32_t version : {2u, 3u}) {
      Writer w;
      w.set_version(version);
      std::vector<Bytes> stored;
      const GgmlType types[] = {GgmlType::f32, GgmlType::f16, GgmlType::bf16, GgmlType::q8_0};
      for (GgmlType t : types) {
        Bytes d(spattn::gguf::row_bytes(t, 64) * 3);
        for (int r = 0; r < 3; ++r)
          spattn::gguf::quantize_row(t, x.data() + 64 * r,
                                     d.data() + r * spattn::gguf::row_bytes(t, 64), 64);
        stored.push_back(std::move(d));
        w.add_tensor(std::string("w.") + spattn::gguf::type_name(t), t, {64, 3},
                     stored.back().data());
      }
      w.add_tensor("odd", GgmlType::f32, {3}, x.data());  // 12 bytes: the next needs padding
      w.add_tensor("after", GgmlType::f16, {1, 1, 1, 2}, stored[1].data());
      const Bytes b = w.bytes(alignment);
      const File f = parse(b);
      EXPECT_EQ(f.alignment(), alignment);
      EXPECT_EQ(f.data_offset() % alignment, 0u);
      ASSERT_EQ(f.tensors().size(), 6u);
      for (size_t i = 0; i < 4; ++i) {
        const File::Tensor& t = f.tensors()[i];
        EXPECT_EQ(t.type, types[i]);
        EXPECT_EQ(t.ne, (std::vector<int64_t>{64, 3}));
        EXPECT_EQ(t.nrows(), 3);
        ASSERT_EQ(t.nbytes, stored[i].size());
        EXPECT_EQ(std::memcmp(t.data, stored[i].data(), t.nbytes), 0);
        EXPECT_EQ((t.data - b.data()) % alignment, 0);
        std::vector<float> back(64 * 3);
        for (int r = 0; r < 3; ++r)
          spattn::gguf::dequantize_row(t.type, t.data + r * t.nbytes / 3, back.data() + 64 * r, 64);
        const float tol = types[i] == GgmlType::f32    ? 0.0f
                          : types[i] == GgmlType::q8_0 ? 0.03f
                                                       : 0.02f;
        for (size_t j = 0; j < x.size(); ++j) ASSERT_NEAR(back[j], x[j], tol) << j;
      }
      EXPECT_EQ(f.tensor("odd").nbytes, 12u);
      EXPECT_EQ(f.tensor("after").ne, (std::vector<int64_t>{1, 1, 1, 2}));
    }
  }
}

TEST(Gguf, Q8_0MatchesGgmlLayoutByHand) {
  // One block: d = max|x| / 127 stored as f16, then round(x / d) as int8.
  std::vector<float> x(32, 0.0f);
  x[0] = 1.27f;
  x[1] = -0.5f;
  uint8_t blk[34];
  spattn::gguf::quantize_row(GgmlType::q8_0, x.data(), blk, 32);
  uint16_t h;
  std::memcpy(&h, blk, 2);
  EXPECT_EQ(h, spattn::f32_to_f16(0.01f));
  EXPECT_EQ(int8_t(blk[2]), 127);
  EXPECT_EQ(int8_t(blk[3]), -50);
  expect_error([&] { spattn::gguf::dequantize_row(GgmlType::q8_0, blk, x.data(), 31); },
               "not a multiple of 32");
}

TEST(Gguf, WriterRejectsBadTensors) {
  Writer w;
  float x[4] = {};
  expect_error([&] { w.add_tensor("", GgmlType::f32, {4}, x); }, "name is empty");
  expect_error([&] { w.add_tensor("a", GgmlType::f32, {}, x); }, "has no dimensions");
  expect_error([&] { w.add_tensor("a", GgmlType::q8_0, {4}, x); },
               "whole number of 32-value blocks");
  expect_error([&] { w.add_tensor("a", GgmlType::f32, {4, 0}, x); }, "dimension 1 is 0");
  w.add_tensor("a", GgmlType::f32, {4}, x);
  expect_error([&] { w.add_tensor("a", GgmlType::f32, {4}, x); }, "duplicate tensor 'a'");
  expect_error([&] { w.bytes(3); }, "not a power of two");
  expect_error([&] { w.set_version(1); }, "version must be 2 or 3");
}

TEST(Gguf, FileOnDiskIsMappedAndNamed) {
  const spattn::test::TempDir dir("spattn_gguf_disk");
  const fs::path p = dir / "t.gguf";
  Small s;
  Writer w;
  w.set("general.architecture", "llama");
  w.add_tensor("ta", GgmlType::f32, {4, 2}, s.a.data());
  w.write(p.string(), 64);
  File f = File::open(p.string());
  File moved = std::move(f);
  EXPECT_EQ(moved.get_string("general.architecture"), "llama");
  const File::Tensor& t = moved.tensor("ta");
  EXPECT_EQ(std::memcmp(t.data, s.a.data(), 32), 0);
  EXPECT_EQ(parse(w.bytes(64)).data_offset(), moved.data_offset());
  fs::remove(p);
  expect_error([&] { File::open(p.string()); }, "cannot open");
  expect_error([&] { File::open(dir.string()); }, "not a regular file");
  const fs::path e = dir / "empty.gguf";
  { std::ofstream(e.string()).flush(); }
  expect_error([&] { File::open(e.string()); }, "too small to be a GGUF file");
}

// ---- Hostile files: one test per kind of lie ----

TEST(GgufHostile, BadMagic) {
  Bytes b = Small().bytes();
  b[0] = 'X';
  expect_bad(b, "bad magic 'XGUF'");
  expect_bad(Bytes{'G', 'G'}, "too small");
}

TEST(GgufHostile, UnknownVersions) {
  Bytes b = Small().bytes();
  poke<uint32_t>(b, 4, 1);
  expect_bad(b, "GGUF version 1 is not supported");
  poke<uint32_t>(b, 4, 4);
  expect_bad(b, "unknown GGUF version 4");
  poke<uint32_t>(b, 4, 0x03000000);
  expect_bad(b, "big-endian");
}

TEST(GgufHostile, HugeCounts) {
  Bytes b = Small().bytes();
  poke<uint64_t>(b, 8, uint64_t(1) << 60);
  expect_bad(b, "tensor count 1152921504606846976 is larger than the file can hold");
  b = Small().bytes();
  poke<uint64_t>(b, 16, ~uint64_t(0));
  expect_bad(b, "metadata count 18446744073709551615 is larger than the file can hold");
  b = Small().bytes();
  poke<uint64_t>(b, 16, 2);  // one more key than there is: reads into the tensor infos
  expect_bad(b, "t.gguf");
}

TEST(GgufHostile, StringLengthPastTheEnd) {
  Bytes b = Small().bytes();
  poke<uint64_t>(b, 24, uint64_t(1) << 40);  // the first key's length
  expect_bad(b, "metadata key: string length 1099511627776 runs past the end of the file");
  b = Small().bytes();
  poke<uint64_t>(b, find(b, "llama") - 8, 1u << 20);  // the value's length
  expect_bad(b, "string value: string length 1048576 runs past the end");
  b = Small().bytes();
  poke<uint64_t>(b, find(b, "ta") - 8, ~uint64_t(0));  // a tensor name's length
  expect_bad(b, "tensor name: string length 18446744073709551615 runs past the end");
}

TEST(GgufHostile, HugeArrayCounts) {
  Writer w;
  w.set("arr", std::vector<int32_t>{1, 2});
  w.set("strs", std::vector<std::string>{"a"});
  Bytes b = w.bytes();
  poke<uint64_t>(b, find(b, "arr") + 3 + 4 + 4, uint64_t(1) << 62);
  expect_bad(b, "array 'arr' of 4611686018427387904 i32 runs past the end of the file");
  b = w.bytes();
  poke<uint64_t>(b, find(b, "strs") + 4 + 4 + 4, uint64_t(1) << 61);
  expect_bad(b, "array 'strs' of 2305843009213693952 string runs past the end");
}

TEST(GgufHostile, NestedArraysAndUnknownValueTypes) {
  Writer w;
  Bytes nested;
  for (uint32_t v : {uint32_t(ValueType::array), uint32_t(0), uint32_t(0)})  // elem type array
    for (int i = 0; i < 4; ++i) nested.push_back(uint8_t(v >> (8 * i)));
  w.set_raw("nest", ValueType::array, nested);
  expect_bad(w.bytes(), "array 'nest' holds arrays (nested arrays are not supported)");
  Writer w2;
  w2.set("k", uint32_t(1));
  Bytes b = w2.bytes();
  poke<uint32_t>(b, find(b, "k") + 1, 13);
  expect_bad(b, "metadata key 'k' has unknown value type 13");
  Writer w3;
  w3.set("a", std::vector<int32_t>{1});
  b = w3.bytes();
  poke<uint32_t>(b, find(b, "a") + 1 + 4, 99);
  expect_bad(b, "array 'a' has unknown element type 99");
}

TEST(GgufHostile, DuplicatesAndEmptyNames) {
  Writer w;
  w.set("aa", uint32_t(1));
  w.set("ab", uint32_t(2));
  Bytes b = w.bytes();
  b[find(b, "ab") + 1] = 'a';
  expect_bad(b, "duplicate metadata key 'aa'");
  Small s;
  b = s.bytes();
  b[find(b, "tb") + 1] = 'a';
  expect_bad(b, "duplicate tensor 'ta'");
  b = s.bytes();
  poke<uint64_t>(b, 24, 0);  // first key empty: the old key bytes then read as its type
  expect_bad(b, "metadata key 0 is empty");
}

TEST(GgufHostile, BadAlignment) {
  Writer w;
  w.set("general.alignment", uint32_t(48));
  expect_bad(w.bytes(), "general.alignment 48 is not a power of two");
  w.set("general.alignment", uint32_t(0));
  expect_bad(w.bytes(), "general.alignment 0 is not a power of two");
  w.set("general.alignment", uint64_t(32));
  expect_bad(w.bytes(), "'general.alignment' is u64, expected u32");
}

TEST(GgufHostile, MisalignedAndOverlappingData) {
  Small s;
  Bytes b = s.bytes();
  poke<uint64_t>(b, offset_at(b, "tb", 1), 4);
  expect_bad(b, "tensor 'tb': data offset 4 is misaligned (general.alignment 32)");
  b = s.bytes();
  poke<uint64_t>(b, offset_at(b, "tb", 1), 0);
  expect_bad(b, "runs into tensor");
}

TEST(GgufHostile, ShapeProductOverflows) {
  Small s;
  Bytes b = s.bytes();
  poke<uint64_t>(b, ne_at(b, "ta"), uint64_t(1) << 40);
  poke<uint64_t>(b, ne_at(b, "ta") + 8, uint64_t(1) << 40);
  expect_bad(b, "tensor 'ta': the product of its shape overflows");
  b = s.bytes();
  poke<uint64_t>(b, ne_at(b, "ta"), ~uint64_t(0));
  expect_bad(b, "tensor 'ta' dimension 0 = 18446744073709551615 is too large");
  b = s.bytes();
  poke<uint32_t>(b, find(b, "ta") + 2, 5);
  expect_bad(b, "tensor 'ta' has 5 dimensions (1 to 4 allowed)");
  b = s.bytes();
  poke<uint64_t>(b, ne_at(b, "ta"), uint64_t(1) << 30);  // fits, but not in the file
  expect_bad(b, "truncated: tensor 'ta' (f32 [1073741824, 2], 8589934592 bytes) needs bytes");
}

TEST(GgufHostile, TruncatedTensorData) {
  Bytes b = Small().bytes();
  b.resize(b.size() - 1);
  expect_bad(b,
             "truncated: tensor 'tb' (f32 [8], 32 bytes) needs bytes [32, 64) of the data "
             "section, which holds 63");
}

TEST(GgufHostile, UnknownTensorTypes) {
  Small s;
  Bytes b = s.bytes();
  // q4_K is a ggml type, but 'ta' has rows of 4 values: not whole 256-value blocks.
  poke<uint32_t>(b, type_at(b, "ta", 2), 12);
  expect_bad(b, "row length 4 is not a multiple of q4_K's block of 256");
  poke<uint32_t>(b, type_at(b, "ta", 2), 4);  // q4_2: removed from ggml
  expect_bad(b, "tensor 'ta' [4, 2] has unknown type 4 (ggml's former q4_2, removed");
  poke<uint32_t>(b, type_at(b, "ta", 2), 1000);
  expect_bad(b, "unknown type 1000");
  Writer w;
  std::vector<uint8_t> q(34 * 2);
  w.add_tensor("q", GgmlType::q8_0, {64}, q.data());
  b = w.bytes();
  poke<uint64_t>(b, ne_at(b, "q"), 48);
  expect_bad(b, "row length 48 is not a multiple of q8_0's block of 32");
}

TEST(GgufHostile, EveryTruncationIsAnErrorNotACrash) {
  Writer w;
  w.set("general.architecture", "llama");
  w.set("arr", std::vector<std::string>{"x", "yz"});
  w.set("f", std::vector<float>{1, 2});
  std::vector<float> a(8, 1.0f);
  w.add_tensor("ta", GgmlType::f32, {8}, a.data());
  const Bytes full = w.bytes();
  EXPECT_NO_THROW(parse(full));
  for (size_t n = 0; n < full.size(); ++n) {
    const Bytes cut(full.begin(), full.begin() + n);
    EXPECT_THROW(parse(cut), spattn::Error) << "cut at " << n;
  }
}

// ---- The real files ----

TEST(GgufReal, CodeTiny8k) {
  const std::string path = spattn::test::model_file("code-tiny-8k.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("code-tiny-8k.gguf in " << spattn::test::models_dir());
  const File f = File::open(path);
  EXPECT_EQ(f.version(), 3u);
  EXPECT_EQ(f.get_string("general.architecture"), "llama");
  EXPECT_EQ(f.get_uint("llama.block_count"), 8u);
  EXPECT_EQ(f.get_uint("llama.embedding_length"), 384u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count"), 6u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(f.get_uint("llama.feed_forward_length"), 1024u);
  EXPECT_EQ(f.get_uint("llama.context_length"), 8192u);
  EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(f.array_size("tokenizer.ggml.tokens"), 4096u);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);  // tied head
  const File::Tensor& emb = f.tensor("token_embd.weight");
  EXPECT_EQ(emb.ne, (std::vector<int64_t>{384, 4096}));
  EXPECT_EQ(emb.type, GgmlType::f16);
  EXPECT_EQ(f.tensor("blk.0.attn_k.weight").ne, (std::vector<int64_t>{384, 128}));
  EXPECT_EQ(f.tensor("blk.7.attn_norm.weight").type, GgmlType::f32);
  std::vector<float> row(384);
  spattn::gguf::dequantize_row(emb.type, emb.data, row.data(), 384);
  for (float v : row) ASSERT_TRUE(std::isfinite(v));
}

TEST(GgufReal, CodeSmall32k) {
  const std::string path = spattn::test::model_file("code-small-32k.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("code-small-32k.gguf in " << spattn::test::models_dir());
  const File f = File::open(path);
  EXPECT_EQ(f.get_uint("llama.block_count"), 6u);
  EXPECT_EQ(f.get_uint("llama.embedding_length"), 512u);
  EXPECT_EQ(f.get_uint("llama.attention.head_count"), 4u);  // head dim 512 / 4 = 128
  EXPECT_EQ(f.get_uint("llama.attention.head_count_kv"), 2u);
  EXPECT_EQ(f.get_uint("llama.feed_forward_length"), 1376u);
  EXPECT_EQ(f.get_uint("llama.context_length"), 32768u);
  EXPECT_EQ(f.get_float("llama.rope.freq_base"), 500000.0);
  EXPECT_EQ(f.find_tensor("output.weight"), nullptr);
  EXPECT_EQ(f.tensor("blk.5.attn_k.weight").ne, (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(f.tensor("blk.5.ffn_down.weight").type, GgmlType::f16);
}

TEST(GgufReal, Stories260kAndVocabularies) {
  const std::string stories = spattn::test::model_file("stories260K.gguf");
  if (stories.empty()) SPATTN_MISSING_ASSET("stories260K.gguf in " << spattn::test::models_dir());
  const File s = File::open(stories);
  EXPECT_EQ(s.get_uint("llama.block_count"), 5u);
  EXPECT_EQ(s.get_uint("llama.embedding_length"), 64u);
  EXPECT_EQ(s.array_size("tokenizer.ggml.tokens"), 512u);
  EXPECT_EQ(s.tensor("output.weight").type, GgmlType::f32);
  const File spm = File::open(spattn::test::model_file("ggml-vocab-llama-spm.gguf"));
  EXPECT_TRUE(spm.tensors().empty());
  EXPECT_EQ(spm.get_string("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(spm.get_string_array("tokenizer.ggml.tokens").size(), 32000u);
  EXPECT_EQ(spm.get_float_array("tokenizer.ggml.scores").size(), 32000u);
  const File gpt2 = File::open(spattn::test::model_file("ggml-vocab-gpt-2.gguf"));
  EXPECT_EQ(gpt2.get_string("tokenizer.ggml.model"), "gpt2");
  EXPECT_EQ(gpt2.array_size("tokenizer.ggml.tokens"), 50257u);
  EXPECT_GT(gpt2.array_size("tokenizer.ggml.merges"), 40000u);
}

}  // namespace

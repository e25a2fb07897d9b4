// Bad quantized tensors: a type that disagrees with the bytes its tensor was given, a file that
// ends inside a quantized block, type ids ggml does not define (removed ones included), and
// weight types the runner cannot multiply. Each is a spattn::Error naming the tensor, the type
// and the value or byte count, from the reader (in memory and on disk), from the model loader,
// and from `spattn run` (exit 2, the message on stderr).
#include <gtest/gtest.h>

#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#include "cli_run.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/model_maker.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using spattn::gguf::File;
using spattn::gguf::GgmlType;
using spattn::gguf::Writer;
using Bytes = std::vector<uint8_t>;

// Where the tensor info of `name` keeps its type id: after the length-prefixed name, n_dims
// and the dimensions.
size_t type_offset(const Bytes& b, const std::string& name) {
  Bytes key(8);
  const uint64_t len = name.size();
  std::memcpy(key.data(), &len, 8);
  key.insert(key.end(), name.begin(), name.end());
  for (size_t i = 0; i + key.size() <= b.size(); ++i)
    if (std::memcmp(b.data() + i, key.data(), key.size()) == 0) {
      uint32_t n_dims;
      std::memcpy(&n_dims, b.data() + i + key.size(), 4);
      return i + key.size() + 4 + 8 * size_t(n_dims);
    }
  ADD_FAILURE() << "no tensor info for '" << name << "'";
  return 0;
}
void set_type(Bytes& b, const std::string& name, uint32_t type) {
  const size_t at = type_offset(b, name);
  std::memcpy(b.data() + at, &type, 4);
}

std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const spattn::Error& e) {
    return e.what();
  }
  return "(no error)";
}

// The message must hold every one of `parts`.
void expect_all(const std::string& message, const std::vector<std::string>& parts) {
  for (const std::string& p : parts)
    EXPECT_NE(message.find(p), std::string::npos) << "message: " << message << "\nmissing: " << p;
}

// This test's folder, with the bytes of a file written into it.
struct TempDir : spattn::test::TempDir {
  TempDir() : spattn::test::TempDir("spattn_quant_bad") {}
  fs::path write(const std::string& name, const Bytes& b) const {
    const fs::path p = path() / name;
    std::ofstream(p, std::ios::binary)
        .write(reinterpret_cast<const char*>(b.data()), std::streamsize(b.size()));
    return p;
  }
};

// The same bytes must fail with the same message parsed in memory and opened from disk.
std::string reader_error(const Bytes& b, const TempDir& dir, const std::string& file) {
  const std::string in_memory = error_of([&] { File::from_memory(b.data(), b.size(), "x.gguf"); });
  const fs::path p = dir.write(file, b);
  const std::string on_disk = error_of([&] { File::open(p.string()); });
  EXPECT_EQ(on_disk, p.string() + in_memory.substr(std::string("x.gguf").size()));
  return in_memory;
}

// Quantized bytes of `n` N(0,1)-ish values (a fixed pattern) in type t.
Bytes quantized(GgmlType t, int64_t n) {
  std::vector<float> x(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) x[size_t(i)] = std::sin(0.37f * float(i)) * 1.5f;
  Bytes q(spattn::gguf::row_bytes(t, n));
  spattn::gguf::quantize_row(t, x.data(), q.data(), n);
  return q;
}

// Two tensors, "w" of type t and shape [n], then "next" f32 [32].
Bytes two_tensors(GgmlType t, int64_t n, const Bytes& w_bytes) {
  static const std::vector<float> next(32, 1.0f);
  Writer w;
  w.set("general.architecture", "llama");
  w.add_tensor("w", t, {n}, w_bytes.data());
  w.add_tensor("next", GgmlType::f32, {32}, next.data());
  return w.bytes();
}

TEST(QuantBadInput, TypeThatClaimsFewerBytesThanItsData) {
  TempDir dir;
  // f32 data labelled f16: the type says 128 bytes, the data runs 256 to the next tensor.
  std::vector<float> x(64, 0.5f);
  Bytes f32(reinterpret_cast<const uint8_t*>(x.data()),
            reinterpret_cast<const uint8_t*>(x.data()) + 256);
  Bytes b = two_tensors(GgmlType::f32, 64, f32);
  set_type(b, "w", uint32_t(GgmlType::f16));
  expect_all(reader_error(b, dir, "f16.gguf"),
             {"tensor 'w' (f16 [64], 128 bytes)", "128 unused bytes", "tensor 'next'",
              "does not match its 256 bytes of data"});
  // q8_0 data labelled q4_0: 36 bytes claimed, 68 (96 with padding) given.
  b = two_tensors(GgmlType::q8_0, 64, quantized(GgmlType::q8_0, 64));
  set_type(b, "w", uint32_t(GgmlType::q4_0));
  expect_all(reader_error(b, dir, "q4_0.gguf"),
             {"tensor 'w' (q4_0 [64], 36 bytes)", "32 unused bytes",
              "does not match its 96 bytes of data"});
}

// Empty tensors (a dimension of 0) take no space: laid out as ggml lays them out (at the end of
// the data before them) they pass, and one that claims none of the data it was given is blamed.
TEST(QuantBadInput, EmptyTensorsAndTheGapCheck) {
  TempDir dir;
  const std::vector<float> x(8, 1.0f);
  Writer w;
  w.add_tensor("a", GgmlType::f32, {8}, x.data());
  w.add_tensor("e", GgmlType::f32, {8}, x.data());
  w.add_tensor("c", GgmlType::f32, {8}, x.data());
  const Bytes full = w.bytes();
  // e at a's end with shape [0]: its 32 bytes are then unused before c.
  Bytes b = full;
  const uint64_t zero = 0;
  std::memcpy(b.data() + type_offset(b, "e") - 8, &zero, 8);
  expect_all(reader_error(b, dir, "empty.gguf"),
             {"tensor 'e' (f32 [0], 0 bytes) at data offset 32 is followed by 32 unused bytes "
              "before tensor 'c'"});
  // As ggml lays it out: e empty at 32, c also at 32, e's 32 bytes gone from the file.
  const size_t data_at = File::from_memory(full.data(), full.size()).data_offset();
  const uint64_t thirty_two = 32;
  std::memcpy(b.data() + type_offset(b, "c") + 4, &thirty_two, 8);
  b.erase(b.begin() + std::ptrdiff_t(data_at + 32), b.begin() + std::ptrdiff_t(data_at + 64));
  const File f = File::from_memory(b.data(), b.size());
  EXPECT_EQ(f.tensor("e").nbytes, 0u);
  EXPECT_EQ(f.tensor("e").offset, 32u);
  EXPECT_EQ(f.tensor("c").offset, 32u);
}

TEST(QuantBadInput, TypeThatClaimsMoreBytesThanItsData) {
  TempDir dir;
  // q4_0 data labelled q8_0: the type says 68 bytes, only 64 lie before the next tensor.
  Bytes b = two_tensors(GgmlType::q4_0, 64, quantized(GgmlType::q4_0, 64));
  set_type(b, "w", uint32_t(GgmlType::q8_0));
  expect_all(reader_error(b, dir, "q8_0.gguf"),
             {"tensor 'w' (q8_0 [64], 68 bytes)", "runs into tensor 'next'",
              "does not match its 64 bytes of data"});
  // The last tensor: f16 data labelled f32 needs more than the file holds.
  Writer w;
  const Bytes h = quantized(GgmlType::f16, 64);
  w.add_tensor("last", GgmlType::f16, {64}, h.data());
  b = w.bytes();
  set_type(b, "last", uint32_t(GgmlType::f32));
  expect_all(reader_error(b, dir, "f32.gguf"),
             {"truncated: tensor 'last' (f32 [64], 256 bytes)", "which holds 128"});
}

// A file that ends inside a quantized block: at every byte of the last tensor's data short of
// its end the reader says which block the file ends in (or that it ends on a block boundary,
// short of the tensor's size).
TEST(QuantBadInput, FileEndingInsideAQuantizedBlock) {
  TempDir dir;
  for (GgmlType t : {GgmlType::q4_K, GgmlType::q8_0, GgmlType::iq4_xs, GgmlType::q6_K}) {
    const int64_t bs = spattn::gguf::block_size(t), bb = spattn::gguf::block_bytes(t);
    Writer w;
    const Bytes q = quantized(t, 2 * bs);
    w.add_tensor("blk.0.ffn_down.weight", t, {2 * bs}, q.data());
    const Bytes full = w.bytes();
    const File ok = File::from_memory(full.data(), full.size());
    const size_t start = ok.data_offset();
    ASSERT_EQ(full.size(), start + size_t(2 * bb));
    for (size_t cut = start; cut < full.size(); ++cut) {
      const Bytes b(full.begin(), full.begin() + std::ptrdiff_t(cut));
      const std::string m = error_of([&] { File::from_memory(b.data(), b.size(), "x.gguf"); });
      const size_t held = cut - start;
      const std::string label = std::string(spattn::gguf::type_name(t)) + " [" +
                                std::to_string(2 * bs) + "], " + std::to_string(2 * bb) + " bytes";
      expect_all(m, {"truncated: tensor 'blk.0.ffn_down.weight' (" + label + ")",
                     "which holds " + std::to_string(held)});
      if (held % size_t(bb) != 0)
        expect_all(m, {"the file ends inside its " + std::string(spattn::gguf::type_name(t)) +
                       " block " + std::to_string(held / size_t(bb)) + " of 2 (" +
                       std::to_string(bb) + " bytes each)"});
    }
    // One cut on disk too (mid-block 1).
    const Bytes b(full.begin(), full.end() - bb / 2);
    expect_all(reader_error(b, dir, "cut.gguf"), {"block 1 of 2"});
  }
}

TEST(QuantBadInput, UnknownAndRemovedTypeIds) {
  TempDir dir;
  Bytes good = two_tensors(GgmlType::q8_0, 64, quantized(GgmlType::q8_0, 64));
  struct Case {
    uint32_t id;
    std::string says;
  };
  for (const Case& c : {Case{99, "unknown type 99 (not a ggml type)"},
                        Case{4, "unknown type 4 (ggml's former q4_2, removed from ggml and GGUF)"},
                        Case{5, "unknown type 5 (ggml's former q4_3, removed"},
                        Case{31, "unknown type 31 (ggml's former q4_0_4_4, removed"},
                        Case{43, "unknown type 43 (not a ggml type)"},
                        Case{0xFFFFFFFFu, "unknown type 4294967295 (not a ggml type)"}}) {
    Bytes b = good;
    set_type(b, "w", c.id);
    expect_all(reader_error(b, dir, "t" + std::to_string(c.id) + ".gguf"),
               {"tensor 'w' [64] has " + c.says});
  }
}

// ---- through the model loader and the command line ----

// A made-up model (weights of `type`, f32 norms) as bytes.
Bytes model_bytes(const TempDir& dir, GgmlType type = GgmlType::f16) {
  spattn::ModelShape s;
  s.layers = 1, s.dim = 64, s.heads = 2, s.kv_heads = 1, s.ffn = 64, s.vocab = 300;
  s.type = type;
  const fs::path p = dir.path() / "model.gguf";
  spattn::make_model(p.string(), s);
  std::ifstream in(p, std::ios::binary);
  return Bytes(std::istreambuf_iterator<char>(in), {});
}

// The loader's message and `spattn run`'s for the same file: exit 2, stderr holds `parts`.
std::string loader_error(const Bytes& b, const TempDir& dir, const std::string& file,
                         const std::vector<std::string>& parts) {
  const fs::path p = dir.write(file, b);
  const std::string m = error_of([&] { spattn::model::load_model(p.string()); });
  expect_all(m, parts);
  const spattn::test::CliRun r =
      spattn::test::run_spattn("run -m " + p.string() + " -p hi -n 1", dir.path());
  EXPECT_TRUE(r.exited()) << "spattn run died on " << file << ": " << r.err;
  EXPECT_EQ(r.code(), 2) << file << ": " << r.err;
  expect_all(r.err, parts);
  EXPECT_NE(r.err.find("spattn: error: "), std::string::npos) << r.err;
  return m;
}

TEST(QuantBadInput, ModelLoaderAndCliRefuseBadWeights) {
  TempDir dir;
  const Bytes good = model_bytes(dir);
  // The good file loads (so each failure below is the one change's doing).
  EXPECT_NO_THROW(spattn::model::load_model((dir.path() / "model.gguf").string()));

  // i16 and i32 are ggml types the reader accepts but ggml cannot multiply: f16 data relabelled
  // i16 (same size), f32 norm relabelled i32 (same size).
  Bytes b = good;
  set_type(b, "blk.0.attn_q.weight", uint32_t(GgmlType::i16));
  loader_error(b, dir, "i16.gguf",
               {"model: tensor blk.0.attn_q.weight has type i16 ([64, 64] = 4096 values in 8192 "
                "bytes), which ggml's CPU backend cannot multiply"});
  b = good;
  set_type(b, "blk.0.attn_norm.weight", uint32_t(GgmlType::i32));
  loader_error(b, dir, "i32.gguf",
               {"model: tensor blk.0.attn_norm.weight has type i32 (64 values in 256 bytes), "
                "which has no f32 conversion"});

  // The reader's errors reach the loader and the command line unchanged.
  for (uint32_t id : {99u, 4u, 0xFFFFFFFFu}) {
    b = good;
    set_type(b, "blk.0.ffn_up.weight", id);
    loader_error(b, dir, "t" + std::to_string(id) + ".gguf",
                 {"tensor 'blk.0.ffn_up.weight' [64, 64] has unknown type " + std::to_string(id)});
  }
  b = good;
  set_type(b, "blk.0.ffn_up.weight", uint32_t(GgmlType::f32));  // 16384 bytes claimed, 8192 given
  loader_error(b, dir, "f32.gguf",
               {"tensor 'blk.0.ffn_up.weight' (f32 [64, 64], 16384 bytes)", "runs into tensor",
                "does not match its 8192 bytes of data"});
  b = good;
  set_type(b, "blk.0.ffn_up.weight", uint32_t(GgmlType::q8_0));  // 4352 bytes claimed
  loader_error(b, dir, "q8_0.gguf",
               {"tensor 'blk.0.ffn_up.weight' (q8_0 [64, 64], 4352 bytes)", "unused bytes",
                "does not match its 8192 bytes of data"});
}

TEST(QuantBadInput, TruncatedQuantizedModelThroughTheCli) {
  TempDir dir;
  Bytes b = model_bytes(dir, GgmlType::q8_0);
  const File f = File::from_memory(b.data(), b.size());
  // The tensor whose data ends the file, cut 10 bytes into its last block.
  const File::Tensor* last = &f.tensors()[0];
  for (const auto& t : f.tensors())
    if (t.offset > last->offset) last = &t;
  ASSERT_EQ(last->type, GgmlType::q8_0);
  const std::string name = last->name;
  const size_t blocks = last->nbytes / 34;
  b.resize(f.data_offset() + last->offset + last->nbytes - 34 + 10);
  loader_error(b, dir, "cut.gguf",
               {"truncated: tensor '" + name + "' (q8_0 ",
                "the file ends inside its q8_0 block " + std::to_string(blocks - 1) + " of " +
                    std::to_string(blocks) + " (34 bytes each)"});
}

}  // namespace

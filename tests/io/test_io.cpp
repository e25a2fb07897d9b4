// Tests for src/io: .npy and .safetensors round trips, every hostile-file case we know of
// (each must raise spattn::Error naming the problem), load_qkv, and a truncate/flip fuzz pass
// that must never crash (the sanitizer build is what makes that check meaningful).
#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/io.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using spattn::DType;
using spattn::Layout;
using spattn::Tensor;
using spattn::TensorView;

using spattn::test::TempDir;

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(bytes.data(), std::streamsize(bytes.size()));
  ASSERT_TRUE(out.good()) << path;
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

// Runs `f`, which must throw spattn::Error whose message contains `needle`.
template <class F>
void expect_error(F&& f, const std::string& needle, const char* file, int line) {
  try {
    f();
    ADD_FAILURE_AT(file, line) << "expected spattn::Error containing \"" << needle
                               << "\", but nothing was thrown";
  } catch (const spattn::Error& e) {
    if (std::string(e.what()).find(needle) == std::string::npos)
      ADD_FAILURE_AT(file, line) << "error message \"" << e.what() << "\" does not contain \""
                                 << needle << "\"";
  }
}
#define EXPECT_IO_ERROR(stmt, needle) \
  expect_error([&] { (void)(stmt); }, needle, __FILE__, __LINE__)

// A tensor of random bit patterns: round trips must preserve bits, not just values.
Tensor random_tensor(DType t, int64_t h, int64_t s, int64_t d, uint32_t seed) {
  Tensor x(t, h, s, d);
  std::mt19937 rng(seed);
  auto* p = static_cast<unsigned char*>(x.data());
  for (size_t i = 0; i < x.nbytes(); ++i) p[i] = static_cast<unsigned char>(rng());
  return x;
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.heads() == b.heads() && a.seq() == b.seq() &&
         a.dim() == b.dim() && std::memcmp(a.data(), b.data(), a.nbytes()) == 0;
}

// Element-wise bit comparison of a tensor against any view of the same dtype.
bool same_bits(const Tensor& a, const TensorView& v) {
  if (a.dtype() != v.dtype || a.heads() != v.heads || a.seq() != v.seq || a.dim() != v.dim)
    return false;
  const size_t item = spattn::dtype_size(v.dtype);
  for (int64_t h = 0; h < v.heads; ++h)
    for (int64_t s = 0; s < v.seq; ++s)
      for (int64_t d = 0; d < v.dim; ++d)
        if (std::memcmp(a.view().ptr(h, s, d), v.ptr(h, s, d), item) != 0) return false;
  return true;
}

// A .npy file from a raw header dict and data; pads like numpy does.
std::string npy_bytes(const std::string& dict, const std::string& data, int major = 1) {
  const size_t pre = major == 1 ? 10 : 12;
  std::string h = dict;
  while ((pre + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += char(major);
  out += char(0);
  for (size_t i = 0; i < pre - 8; ++i) out += char((h.size() >> (8 * i)) & 0xff);
  return out + h + data;
}

std::string npy_dict(const std::string& descr, const std::string& shape, bool fortran = false) {
  return "{'descr': '" + descr + "', 'fortran_order': " + (fortran ? "True" : "False") +
         ", 'shape': " + shape + ", }";
}

// A .safetensors file from raw JSON text and data.
std::string st_bytes(const std::string& json, const std::string& data) {
  std::string out;
  for (int i = 0; i < 8; ++i) out += char((uint64_t(json.size()) >> (8 * i)) & 0xff);
  return out + json + data;
}

std::string raw(const Tensor& t) {
  return std::string(static_cast<const char*>(t.data()), t.nbytes());
}

const DType kDTypes[] = {DType::f32, DType::bf16, DType::f16};

// ----------------------------------------------------------------------------------- .npy

TEST(Npy, RoundTripEachDType) {
  TempDir tmp;
  for (DType t : kDTypes) {
    SCOPED_TRACE(spattn::dtype_name(t));
    Tensor x = random_tensor(t, 3, 17, 8, 1);
    spattn::write_npy(tmp.file("x.npy"), x);
    EXPECT_TRUE(same_bits(spattn::read_npy(tmp.file("x.npy")), x));
  }
}

TEST(Npy, WritesNumpyCompatibleHeader) {
  TempDir tmp;
  spattn::write_npy(tmp.file("a.npy"), random_tensor(DType::f32, 2, 5, 4, 2));
  spattn::write_npy(tmp.file("b.npy"), random_tensor(DType::bf16, 2, 5, 4, 2));
  spattn::write_npy(tmp.file("c.npy"), random_tensor(DType::f16, 2, 5, 4, 2));
  const std::string a = read_bytes(tmp.file("a.npy"));
  EXPECT_EQ(a.substr(0, 8), std::string("\x93NUMPY\x01\x00", 8));
  EXPECT_EQ(a.size(), 128u + 2 * 5 * 4 * 4);  // data starts 64-byte aligned, as numpy writes it
  EXPECT_EQ(a[127], '\n');
  EXPECT_NE(a.find("{'descr': '<f4', 'fortran_order': False, 'shape': (2, 5, 4), }"),
            std::string::npos);
  EXPECT_NE(read_bytes(tmp.file("b.npy")).find("'descr': '<V2'"), std::string::npos);
  EXPECT_NE(read_bytes(tmp.file("c.npy")).find("'descr': '<f2'"), std::string::npos);
}

TEST(Npy, WriteStridedShdViewReadsBackAsHsd) {
  TempDir tmp;
  for (DType t : kDTypes) {
    SCOPED_TRACE(spattn::dtype_name(t));
    // A [seq, heads, dim] buffer seen through a strided view; the file must hold [h, s, d].
    Tensor buf = random_tensor(t, 1, 9 * 4, 8, 3);  // 9 positions x 4 heads x 8 dims
    TensorView v = TensorView::shd(buf.data(), t, 4, 9, 8);
    spattn::write_npy(tmp.file("v.npy"), v);
    EXPECT_TRUE(same_bits(spattn::read_npy(tmp.file("v.npy")), v));
    // Sub-views (rows, heads) write only what they cover.
    TensorView sub = v.rows(2, 5).head_range(1, 2);
    spattn::write_npy(tmp.file("sub.npy"), sub);
    EXPECT_TRUE(same_bits(spattn::read_npy(tmp.file("sub.npy")), sub));
  }
}

TEST(Npy, WriteViewWithNonUnitDimStride) {
  TempDir tmp;
  Tensor buf = random_tensor(DType::bf16, 2, 3, 8, 4);
  TensorView v = buf.view();
  v.dim = 4;
  v.stride_dim = 2;  // every other element
  spattn::write_npy(tmp.file("s.npy"), v);
  EXPECT_TRUE(same_bits(spattn::read_npy(tmp.file("s.npy")), v));
}

TEST(Npy, ReadShdLayoutTransposes) {
  TempDir tmp;
  for (DType t : kDTypes) {
    SCOPED_TRACE(spattn::dtype_name(t));
    const char* descr = t == DType::f32 ? "<f4" : t == DType::f16 ? "<f2" : "<V2";
    Tensor disk = random_tensor(t, 1, 6 * 3, 4, 5);  // on disk: [s=6, h=3, d=4]
    write_bytes(tmp.file("x.npy"), npy_bytes(npy_dict(descr, "(6, 3, 4)"), raw(disk)));
    Tensor x = spattn::read_npy(tmp.file("x.npy"), Layout::shd);
    EXPECT_EQ(x.heads(), 3);
    EXPECT_EQ(x.seq(), 6);
    EXPECT_TRUE(same_bits(x, TensorView::shd(disk.data(), t, 3, 6, 4)));
    // The same bytes read as hsd are [h=6, s=3, d=4] untouched.
    Tensor y = spattn::read_npy(tmp.file("x.npy"), Layout::hsd);
    EXPECT_EQ(y.heads(), 6);
    EXPECT_EQ(std::memcmp(y.data(), disk.data(), disk.nbytes()), 0);
  }
}

TEST(Npy, RanksTwoAndFour) {
  TempDir tmp;
  Tensor data = random_tensor(DType::f32, 1, 5, 4, 6);
  write_bytes(tmp.file("r2.npy"), npy_bytes(npy_dict("<f4", "(5, 4)"), raw(data)));
  Tensor r2 = spattn::read_npy(tmp.file("r2.npy"), Layout::shd);  // layout is moot for one head
  EXPECT_EQ(r2.heads(), 1);
  EXPECT_TRUE(same_bits(r2, data));
  write_bytes(tmp.file("r4.npy"), npy_bytes(npy_dict("<f4", "(1, 5, 1, 4)"), raw(data)));
  Tensor r4 = spattn::read_npy(tmp.file("r4.npy"), Layout::shd);  // [1, s=5, h=1, d=4]
  EXPECT_EQ(r4.seq(), 5);
  EXPECT_TRUE(same_bits(r4, data));
}

TEST(Npy, AcceptsHeaderVariants) {
  TempDir tmp;
  Tensor f32 = random_tensor(DType::f32, 2, 3, 4, 7);
  Tensor b16 = random_tensor(DType::bf16, 2, 3, 4, 7);
  Tensor f16 = random_tensor(DType::f16, 2, 3, 4, 7);
  struct Case {
    std::string header;
    const Tensor* data;
    int major;
  } cases[] = {
      {npy_dict("<f4", "(2, 3, 4)"), &f32, 2},
      {npy_dict("<f4", "(2, 3, 4)"), &f32, 3},
      {npy_dict("=f4", "(2,3,4)"), &f32, 1},
      {npy_dict("=f2", "(2, 3, 4,)"), &f16, 1},
      {npy_dict("bfloat16", "(2, 3, 4)"), &b16, 1},
      {npy_dict("|V2", "(2, 3, 4)"), &b16, 1},
      {"{\"shape\": (2L, 3L, 4L), \"fortran_order\": False, \"descr\": \"<f4\"}", &f32, 1},
      {"{ 'descr' : '<f2' ,\n 'fortran_order' : False , 'shape' : ( 2 , 3 , 4 ) }", &f16, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    write_bytes(tmp.file("h.npy"), npy_bytes(c.header, raw(*c.data), c.major));
    EXPECT_TRUE(same_bits(spattn::read_npy(tmp.file("h.npy")), *c.data));
  }
}

TEST(Npy, ToleratesTrailingBytesLikeNumpy) {
  TempDir tmp;
  Tensor x = random_tensor(DType::f32, 1, 2, 4, 8);
  write_bytes(tmp.file("t.npy"), npy_bytes(npy_dict("<f4", "(2, 4)"), raw(x) + "junk"));
  EXPECT_TRUE(same_bits(spattn::read_npy(tmp.file("t.npy")), x));
}

TEST(Npy, MissingFile) {
  TempDir tmp;
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("nope.npy")), "nope.npy: no such file");
  EXPECT_IO_ERROR(spattn::read_npy(tmp.string()), "not a regular file");
}

TEST(Npy, EmptyFile) {
  TempDir tmp;
  write_bytes(tmp.file("e.npy"), "");
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("e.npy")), "e.npy: empty file");
}

TEST(Npy, BadMagic) {
  TempDir tmp;
  std::string bytes = npy_bytes(npy_dict("<f4", "(1, 4)"), std::string(16, '\0'));
  bytes[1] = 'X';
  write_bytes(tmp.file("m.npy"), bytes);
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("m.npy")), "not a .npy file (bad magic");
}

TEST(Npy, UnsupportedVersion) {
  TempDir tmp;
  std::string bytes = npy_bytes(npy_dict("<f4", "(1, 4)"), std::string(16, '\0'));
  bytes[6] = 4;
  write_bytes(tmp.file("v.npy"), bytes);
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("v.npy")), "unsupported .npy version 4.0");
}

TEST(Npy, TruncatedHeader) {
  TempDir tmp;
  const std::string bytes = npy_bytes(npy_dict("<f4", "(1, 4)"), std::string(16, '\0'));
  write_bytes(tmp.file("a.npy"), bytes.substr(0, 5));
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("a.npy")), "truncated header");
  write_bytes(tmp.file("b.npy"), bytes.substr(0, 9));  // half of the u16 length
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("b.npy")), "truncated header");
}

TEST(Npy, HeaderLengthPastEof) {
  TempDir tmp;
  std::string bytes = npy_bytes(npy_dict("<f4", "(1, 4)"), std::string(16, '\0'));
  write_bytes(tmp.file("h.npy"), bytes.substr(0, 40));  // header cut mid-dict
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("h.npy")),
                  "h.npy: header length 118 runs past the end of the file (only 30 bytes");
  std::string v2 = npy_bytes(npy_dict("<f4", "(1, 4)"), std::string(16, '\0'), 2);
  v2[8] = v2[9] = v2[10] = v2[11] = '\xff';  // u32 length 4 GiB
  write_bytes(tmp.file("h2.npy"), v2);
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("h2.npy")), "runs past the end of the file");
}

TEST(Npy, TruncatedData) {
  TempDir tmp;
  spattn::write_npy(tmp.file("full.npy"), random_tensor(DType::f32, 4, 8, 16, 9));
  const std::string bytes = read_bytes(tmp.file("full.npy"));
  write_bytes(tmp.file("q.npy"), bytes.substr(0, bytes.size() - 1));
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("q.npy")),
                  "q.npy: header says shape (4, 8, 16) = 2048 bytes of <f4 but only 2047 bytes "
                  "follow");
}

TEST(Npy, LyingShape) {
  TempDir tmp;
  write_bytes(tmp.file("q.npy"),
              npy_bytes(npy_dict("<f4", "(4, 1024, 128)"), std::string(1000, '\0')));
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("q.npy")),
                  "q.npy: header says shape (4, 1024, 128) = 2097152 bytes of <f4 but only 1000 "
                  "bytes follow");
}

TEST(Npy, HugeShapeOverflows) {
  TempDir tmp;
  write_bytes(tmp.file("o.npy"), npy_bytes(npy_dict("<f4", "(4611686018427387904, 4, 2)"), ""));
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("o.npy")), "byte size overflows 64 bits");
  write_bytes(tmp.file("o2.npy"), npy_bytes(npy_dict("<f4", "(99999999999999999999, 4, 2)"), ""));
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("o2.npy")), "a dimension that fits in 64 bits");
}

TEST(Npy, UnsupportedDescr) {
  TempDir tmp;
  for (const char* d : {"<f8", "<i4", "|u1", "|f4", "<V4", "float16", "|O"}) {
    SCOPED_TRACE(d);
    write_bytes(tmp.file("d.npy"), npy_bytes(npy_dict(d, "(2, 2)"), std::string(64, '\0')));
    EXPECT_IO_ERROR(spattn::read_npy(tmp.file("d.npy")),
                    std::string("unsupported dtype '") + d + "'");
  }
}

TEST(Npy, BigEndian) {
  TempDir tmp;
  write_bytes(tmp.file("b.npy"), npy_bytes(npy_dict(">f4", "(2, 2)"), std::string(16, '\0')));
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("b.npy")), "big-endian data ('>f4')");
}

TEST(Npy, FortranOrder) {
  TempDir tmp;
  write_bytes(tmp.file("f.npy"), npy_bytes(npy_dict("<f4", "(2, 2)", true), std::string(16, '\0')));
  EXPECT_IO_ERROR(spattn::read_npy(tmp.file("f.npy")), "fortran_order is True");
}

TEST(Npy, MalformedDict) {
  TempDir tmp;
  struct Case {
    const char* header;
    const char* needle;
  } cases[] = {
      {"", "expected '{' opening the header dict"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), ", "expected a quoted key"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)", "expected ',' or '}'"},
      {"{'descr': '<f4', 'fortran_order': False}", "missing key 'shape'"},
      {"{'fortran_order': False, 'shape': (2, 2)}", "missing key 'descr'"},
      {"{'descr': '<f4', 'shape': (2, 2)}", "missing key 'fortran_order'"},
      {"{'descr': '<f4', 'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)}",
       "duplicate key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2), 'x': 1}", "unknown key 'x'"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 2)}", "True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': [2, 2]}", "a tuple '(...)'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -2)}", "non-negative integer"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2 2)}", "',' or ')'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 2)} x", "end of header"},
      {"{'descr': '<f4\", 'fortran_order': False, 'shape': (2, 2)}", "malformed .npy header"},
      {"{'descr': '<f\\4', 'fortran_order': False, 'shape': (2, 2)}", "without escapes"},
      {"{'descr': [('a', '<f4')], 'fortran_order': False, 'shape': (2, 2)}",
       "a quoted dtype string"},
      {"{descr: '<f4', 'fortran_order': False, 'shape': (2, 2)}", "a quoted key"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.header);
    write_bytes(tmp.file("m.npy"), npy_bytes(c.header, std::string(16, '\0')));
    EXPECT_IO_ERROR(spattn::read_npy(tmp.file("m.npy")), c.needle);
    EXPECT_IO_ERROR(spattn::read_npy(tmp.file("m.npy")), "m.npy: malformed .npy header");
  }
}

TEST(Npy, RankAndZeroDimRules) {
  TempDir tmp;
  struct Case {
    const char* shape;
    const char* needle;
  } cases[] = {
      {"(16,)", "has rank 1"},
      {"()", "has rank 0"},
      {"(1, 1, 2, 2, 1)", "has rank 5"},
      {"(2, 2, 1, 2)", "needs a leading batch dimension of 1"},
      {"(2, 0, 2)", "zero or negative dimension"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.shape);
    write_bytes(tmp.file("r.npy"), npy_bytes(npy_dict("<f4", c.shape), std::string(64, '\0')));
    EXPECT_IO_ERROR(spattn::read_npy(tmp.file("r.npy")), c.needle);
  }
}

TEST(Npy, WriteRejectsEmptyTensorAndBadPath) {
  TempDir tmp;
  Tensor empty(DType::f32, 2, 0, 4);
  EXPECT_IO_ERROR(spattn::write_npy(tmp.file("e.npy"), empty), "every dimension must be > 0");
  EXPECT_IO_ERROR(spattn::write_npy(tmp.file("no/such/dir/x.npy"), Tensor(DType::f32, 1, 1, 1)),
                  "cannot open for writing");
}

// --------------------------------------------------------------------------- .safetensors

TEST(Safetensors, RoundTripMixedDTypesAndStridedView) {
  TempDir tmp;
  Tensor a = random_tensor(DType::f32, 2, 7, 8, 10);
  Tensor b = random_tensor(DType::bf16, 3, 5, 4, 11);
  Tensor c = random_tensor(DType::f16, 1, 9, 16, 12);
  Tensor buf = random_tensor(DType::bf16, 1, 6 * 2, 8, 13);
  TensorView shd = TensorView::shd(buf.data(), DType::bf16, 2, 6, 8);
  spattn::write_safetensors(tmp.file("x.safetensors"),
                            {{"a", a}, {"b", b}, {"c", c}, {"shd", shd}});
  auto m = spattn::read_safetensors(tmp.file("x.safetensors"));
  ASSERT_EQ(m.size(), 4u);
  EXPECT_TRUE(same_bits(m["a"], a));
  EXPECT_TRUE(same_bits(m["b"], b));
  EXPECT_TRUE(same_bits(m["c"], c));
  EXPECT_TRUE(same_bits(m["shd"], shd));
}

TEST(Safetensors, HeaderIsPaddedAndReadable) {
  TempDir tmp;
  spattn::write_safetensors(tmp.file("p.safetensors"),
                            {{"q", random_tensor(DType::bf16, 2, 3, 4, 14)}});
  const std::string bytes = read_bytes(tmp.file("p.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(bytes[i]);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes.size(), 8 + n + 2 * 3 * 4 * 2);
  const std::string header = bytes.substr(8, n);
  EXPECT_NE(header.find("\"dtype\":\"BF16\""), std::string::npos) << header;
  EXPECT_NE(header.find("\"shape\":[2,3,4]"), std::string::npos) << header;
  EXPECT_NE(header.find("\"data_offsets\":[0,48]"), std::string::npos) << header;
}

TEST(Safetensors, ReadShdLayoutRanksAndMetadata) {
  TempDir tmp;
  Tensor disk = random_tensor(DType::f16, 1, 5 * 3, 4, 15);  // [s=5, h=3, d=4]
  const std::string json =
      "{\"__metadata__\": {\"format\": \"pt\"},"
      " \"x\": {\"dtype\": \"F16\", \"shape\": [5, 3, 4], \"data_offsets\": [0, 120]},"
      " \"y\": {\"dtype\": \"F16\", \"shape\": [1, 5, 3, 4], \"data_offsets\": [120, 240]},"
      " \"z\": {\"dtype\": \"F16\", \"shape\": [15, 4], \"data_offsets\": [240, 360]}}";
  write_bytes(tmp.file("s.safetensors"), st_bytes(json, raw(disk) + raw(disk) + raw(disk)));
  auto m = spattn::read_safetensors(tmp.file("s.safetensors"), Layout::shd);
  ASSERT_EQ(m.size(), 3u);
  const TensorView want = TensorView::shd(disk.data(), DType::f16, 3, 5, 4);
  EXPECT_TRUE(same_bits(m["x"], want));
  EXPECT_TRUE(same_bits(m["y"], want));
  EXPECT_EQ(m["z"].heads(), 1);
  EXPECT_TRUE(same_bits(m["z"], TensorView::hsd(disk.data(), DType::f16, 1, 15, 4)));
}

TEST(Safetensors, EmptyFileAndMissingFile) {
  TempDir tmp;
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("no.safetensors")), "no such file");
  write_bytes(tmp.file("e.safetensors"), "");
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("e.safetensors")), "empty file");
  write_bytes(tmp.file("s.safetensors"), "abc");
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("s.safetensors")), "truncated header");
}

TEST(Safetensors, HeaderSizePastEof) {
  TempDir tmp;
  std::string bytes = st_bytes("{}", "");
  bytes[0] = 3;  // claims 3 bytes of JSON, 2 follow
  write_bytes(tmp.file("n.safetensors"), bytes);
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("n.safetensors")),
                  "header size 3 runs past the end of the file (only 2 bytes follow)");
  // A .npy (or any other file) read as safetensors: its first 8 bytes make a huge N.
  spattn::write_npy(tmp.file("x.npy"), Tensor(DType::f32, 1, 1, 1));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("x.npy")), "runs past the end of the file");
}

TEST(Safetensors, MalformedJson) {
  TempDir tmp;
  write_bytes(tmp.file("j.safetensors"), st_bytes("{\"a\": {\"dtype\": ", ""));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("j.safetensors")),
                  "j.safetensors: malformed JSON header");
  write_bytes(tmp.file("k.safetensors"), st_bytes("[1, 2]", ""));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("k.safetensors")),
                  "JSON header must be an object");
}

TEST(Safetensors, MissingFieldsAndWrongTypes) {
  TempDir tmp;
  struct Case {
    const char* entry;
    const char* needle;
  } cases[] = {
      {"[]", "tensor 'x': entry is not a JSON object"},
      {"{\"shape\": [2], \"data_offsets\": [0, 8]}", "tensor 'x': missing field 'dtype'"},
      {"{\"dtype\": \"F32\", \"data_offsets\": [0, 8]}", "missing field 'shape'"},
      {"{\"dtype\": \"F32\", \"shape\": [2]}", "missing field 'data_offsets'"},
      {"{\"dtype\": 32, \"shape\": [2], \"data_offsets\": [0, 8]}", "'dtype' must be a string"},
      {"{\"dtype\": \"F32\", \"shape\": \"2\", \"data_offsets\": [0, 8]}",
       "'shape' must be an array"},
      {"{\"dtype\": \"F32\", \"shape\": [-2], \"data_offsets\": [0, 8]}",
       "'shape' must hold non-negative integers"},
      {"{\"dtype\": \"F32\", \"shape\": [2.5], \"data_offsets\": [0, 8]}",
       "'shape' must hold non-negative integers"},
      {"{\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0]}",
       "'data_offsets' must be an array [begin, end]"},
      {"{\"dtype\": \"F32\", \"shape\": [2], \"data_offsets\": [0, \"8\"]}",
       "'data_offsets' must hold non-negative integers"},
      {"{\"dtype\": \"F32\", \"shape\": [9223372036854775808], \"data_offsets\": [0, 8]}",
       "is too large"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.entry);
    write_bytes(tmp.file("f.safetensors"),
                st_bytes(std::string("{\"x\": ") + c.entry + "}", std::string(8, '\0')));
    EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("f.safetensors")), c.needle);
  }
}

std::string st_entry(const std::string& dtype, const std::string& shape, uint64_t begin,
                     uint64_t end) {
  return "{\"dtype\": \"" + dtype + "\", \"shape\": " + shape + ", \"data_offsets\": [" +
         std::to_string(begin) + ", " + std::to_string(end) + "]}";
}

TEST(Safetensors, DeeplyNestedJsonIsRejectedWithoutRecursion) {
  TempDir tmp;
  // Error messages must not serialize hostile containers (deep nesting would overflow the stack).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  write_bytes(
      tmp.file("d.safetensors"),
      st_bytes("{\"x\": {\"dtype\": \"F32\", \"shape\": " + deep + ", \"data_offsets\": [0, 0]}}",
               ""));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("d.safetensors")),
                  "'shape' must hold non-negative integers, got an array of 1 elements");
}

TEST(Safetensors, OffsetsOutOfRange) {
  TempDir tmp;
  write_bytes(tmp.file("o.safetensors"),
              st_bytes("{\"x\": " + st_entry("F32", "[2, 4]", 0, 64) + "}", std::string(32, '\0')));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("o.safetensors")),
                  "tensor 'x': data_offsets [0, 64] out of range: the data section holds only 32 "
                  "bytes");
}

TEST(Safetensors, BeginAfterEnd) {
  TempDir tmp;
  write_bytes(tmp.file("b.safetensors"),
              st_bytes("{\"x\": " + st_entry("F32", "[2, 4]", 32, 0) + "}", std::string(32, '\0')));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("b.safetensors")),
                  "data_offsets [32, 0] has begin > end");
}

TEST(Safetensors, SizeMismatch) {
  TempDir tmp;
  write_bytes(
      tmp.file("s.safetensors"),
      st_bytes("{\"x\": " + st_entry("BF16", "[2, 4]", 0, 32) + "}", std::string(32, '\0')));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("s.safetensors")),
                  "tensor 'x': size mismatch: shape (2, 4) of BF16 needs 16 bytes but "
                  "data_offsets [0, 32] span 32");
}

TEST(Safetensors, OverlappingRangesRejected) {
  TempDir tmp;
  write_bytes(tmp.file("o.safetensors"),
              st_bytes("{\"x\": " + st_entry("F32", "[2, 2]", 0, 16) +
                           ", \"y\": " + st_entry("F32", "[2, 2]", 8, 24) + "}",
                       std::string(32, '\0')));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("o.safetensors")),
                  "tensors 'x' and 'y' have overlapping data_offsets [0, 16] and [8, 24]");
}

TEST(Safetensors, UnsupportedDtypeNamed) {
  TempDir tmp;
  write_bytes(tmp.file("u.safetensors"),
              st_bytes("{\"x\": " + st_entry("F64", "[2, 2]", 0, 32) + "}", std::string(32, '\0')));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("u.safetensors")),
                  "tensor 'x': unsupported dtype 'F64' (expected F32, BF16 or F16)");
}

TEST(Safetensors, HugeShapeOverflows) {
  TempDir tmp;
  write_bytes(tmp.file("h.safetensors"),
              st_bytes("{\"x\": " + st_entry("F32", "[4611686018427387904, 2, 2]", 0, 32) + "}",
                       std::string(32, '\0')));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("h.safetensors")), "overflows 64 bits");
}

TEST(Safetensors, RankRules) {
  TempDir tmp;
  write_bytes(tmp.file("r.safetensors"),
              st_bytes("{\"x\": " + st_entry("F32", "[8]", 0, 32) + "}", std::string(32, '\0')));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("r.safetensors")),
                  "tensor 'x': shape (8,) has rank 1");
  write_bytes(tmp.file("z.safetensors"),
              st_bytes("{\"x\": " + st_entry("F32", "[2, 0, 2]", 0, 0) + "}", ""));
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("z.safetensors")),
                  "zero or negative dimension");
}

TEST(Safetensors, WriteRejectsBadNames) {
  TempDir tmp;
  Tensor t(DType::f32, 1, 1, 1);
  EXPECT_IO_ERROR(spattn::write_safetensors(tmp.file("w.safetensors"), {{"a", t}, {"a", t}}),
                  "tensor 'a': duplicate tensor name");
  EXPECT_IO_ERROR(spattn::write_safetensors(tmp.file("w.safetensors"), {{"__metadata__", t}}),
                  "reserved");
  EXPECT_IO_ERROR(spattn::write_safetensors(tmp.file("w.safetensors"), {{"", t}}),
                  "must not be empty");
}

// ------------------------------------------------------------------------------ load_qkv

TEST(Io, ParseLayout) {
  EXPECT_EQ(spattn::parse_layout("hsd"), Layout::hsd);
  EXPECT_EQ(spattn::parse_layout("shd"), Layout::shd);
  EXPECT_IO_ERROR(spattn::parse_layout("sdh"), "unknown layout 'sdh' (expected hsd or shd)");
}

struct Qkv3 {
  Tensor q, k, v;
  Qkv3(DType t = DType::bf16)
      : q(random_tensor(t, 4, 8, 16, 20)),
        k(random_tensor(t, 2, 12, 16, 21)),
        v(random_tensor(t, 2, 12, 16, 22)) {}
};

void expect_same(const spattn::QKV& got, const Qkv3& want) {
  EXPECT_TRUE(same_bits(got.q, want.q));
  EXPECT_TRUE(same_bits(got.k, want.k));
  EXPECT_TRUE(same_bits(got.v, want.v));
}

TEST(Io, LoadQkvFromSafetensorsDirectoryAndPrefix) {
  TempDir tmp;
  Qkv3 x;
  spattn::write_safetensors(tmp.file("qkv.safetensors"), {{"q", x.q}, {"k", x.k}, {"v", x.v}});
  expect_same(spattn::load_qkv(tmp.file("qkv.safetensors")), x);

  fs::create_directories(tmp.file("dir"));
  spattn::write_npy(tmp.file("dir/q.npy"), x.q);
  spattn::write_npy(tmp.file("dir/k.npy"), x.k);
  spattn::write_npy(tmp.file("dir/v.npy"), x.v);
  expect_same(spattn::load_qkv(tmp.file("dir")), x);

  spattn::write_npy(tmp.file("run1_q.npy"), x.q);
  spattn::write_npy(tmp.file("run1_k.npy"), x.k);
  spattn::write_npy(tmp.file("run1_v.npy"), x.v);
  expect_same(spattn::load_qkv(tmp.file("run1_")), x);
}

TEST(Io, LoadQkvShdLayout) {
  TempDir tmp;
  Tensor disk = random_tensor(DType::f32, 1, 6 * 2, 4, 23);  // [s=6, h=2, d=4]
  const std::string e = "{\"dtype\": \"F32\", \"shape\": [6, 2, 4], \"data_offsets\": ";
  write_bytes(tmp.file("s.safetensors"), st_bytes("{\"q\": " + e + "[0, 192]}, \"k\": " + e +
                                                      "[192, 384]}, \"v\": " + e + "[384, 576]}}",
                                                  raw(disk) + raw(disk) + raw(disk)));
  spattn::QKV x = spattn::load_qkv(tmp.file("s.safetensors"), Layout::shd);
  const TensorView want = TensorView::shd(disk.data(), DType::f32, 2, 6, 4);
  EXPECT_TRUE(same_bits(x.q, want));
  EXPECT_TRUE(same_bits(x.v, want));
}

TEST(Io, LoadQkvIgnoresUnrelatedTensors) {
  TempDir tmp;
  Qkv3 x(DType::f16);
  spattn::write_safetensors(tmp.file("a.safetensors"), {{"q", x.q}, {"k", x.k}, {"v", x.v}});
  // Append an I64 tensor the loader does not support: fine for load_qkv, not for read_safetensors.
  std::string json = "{\"q\": " + st_entry("F16", "[4, 8, 16]", 0, 1024) +
                     ", \"k\": " + st_entry("F16", "[2, 12, 16]", 1024, 1792) +
                     ", \"v\": " + st_entry("F16", "[2, 12, 16]", 1792, 2560) +
                     ", \"pos\": " + st_entry("I64", "[8]", 2560, 2624) + "}";
  write_bytes(tmp.file("b.safetensors"),
              st_bytes(json, raw(x.q) + raw(x.k) + raw(x.v) + std::string(64, '\0')));
  expect_same(spattn::load_qkv(tmp.file("b.safetensors")), x);
  EXPECT_IO_ERROR(spattn::read_safetensors(tmp.file("b.safetensors")),
                  "tensor 'pos': unsupported dtype 'I64'");
}

TEST(Io, LoadQkvMissingTensor) {
  TempDir tmp;
  Qkv3 x;
  spattn::write_safetensors(tmp.file("qk.safetensors"), {{"q", x.q}, {"k", x.k}, {"w", x.v}});
  EXPECT_IO_ERROR(spattn::load_qkv(tmp.file("qk.safetensors")),
                  "qk.safetensors: no tensor named 'v' (tensors in file: 'k', 'q', 'w')");
}

TEST(Io, LoadQkvMissingNpy) {
  TempDir tmp;
  Qkv3 x;
  fs::create_directories(tmp.file("dir"));
  spattn::write_npy(tmp.file("dir/q.npy"), x.q);
  spattn::write_npy(tmp.file("dir/v.npy"), x.v);
  EXPECT_IO_ERROR(spattn::load_qkv(tmp.file("dir")),
                  "k.npy not found (expected q.npy, k.npy and "
                  "v.npy in directory");
  spattn::write_npy(tmp.file("p_q.npy"), x.q);
  EXPECT_IO_ERROR(spattn::load_qkv(tmp.file("p_")), "p_k.npy not found");
  EXPECT_IO_ERROR(spattn::load_qkv(tmp.file("p_")), "taken as the prefix");
  EXPECT_IO_ERROR(spattn::load_qkv(tmp.file("p_q.npy")), "is a single .npy file");
}

TEST(Io, LoadQkvDtypeMismatch) {
  TempDir tmp;
  Qkv3 x;
  Tensor k32 = Tensor::copy_of(x.k, DType::f32);
  spattn::write_npy(tmp.file("m_q.npy"), x.q);
  spattn::write_npy(tmp.file("m_k.npy"), k32);
  spattn::write_npy(tmp.file("m_v.npy"), x.v);
  EXPECT_IO_ERROR(spattn::load_qkv(tmp.file("m_")),
                  "m_k.npy is f32 but " + tmp.file("m_q.npy") + " is bf16");
  spattn::write_safetensors(tmp.file("m.safetensors"), {{"q", x.q}, {"k", x.k}, {"v", k32}});
  EXPECT_IO_ERROR(spattn::load_qkv(tmp.file("m.safetensors")),
                  "m.safetensors: tensor 'v' is f32 but");
}

// ---------------------------------------------------------------------------------- fuzz

// Each read of a damaged file must either succeed or throw spattn::Error; anything else (a
// different exception, a crash, an ASan report) fails the test.
template <class Read>
void fuzz_file(const std::string& path, const std::string& valid, size_t header_end, Read read) {
  int serial = 0, ok = 0, failed = 0;
  auto attempt = [&](const std::string& bytes) {
    // A fresh name each time: rewriting one file with O_TRUNC makes ext4 flush it on close
    // (auto_da_alloc), which costs milliseconds per attempt.
    const std::string file = path + "." + std::to_string(serial++);
    write_bytes(file, bytes);
    try {
      read(file);
      ++ok;
    } catch (const spattn::Error&) {
      ++failed;
    }
    fs::remove(file);
  };
  for (size_t cut = 0; cut < header_end; ++cut) attempt(valid.substr(0, cut));
  for (size_t cut = header_end; cut < valid.size(); cut += 7) attempt(valid.substr(0, cut));
  std::mt19937 rng(1234);
  for (int iter = 0; iter < 500; ++iter) {
    std::string bytes = valid;
    const int flips = 1 + int(rng() % 3);
    for (int f = 0; f < flips; ++f) bytes[rng() % header_end] = char(rng());
    attempt(bytes);
  }
  // Both outcomes must occur, or the harness is not exercising the parser at all.
  EXPECT_GT(ok, 0);
  EXPECT_GT(failed, 0);
}

TEST(Npy, FuzzTruncateAndFlipNeverCrashes) {
  TempDir tmp;
  spattn::write_npy(tmp.file("valid.npy"), random_tensor(DType::f32, 2, 3, 4, 30));
  const std::string valid = read_bytes(tmp.file("valid.npy"));
  fuzz_file(tmp.file("f.npy"), valid, 64,
            [](const std::string& p) { spattn::read_npy(p, Layout::shd); });
}

TEST(Safetensors, FuzzTruncateAndFlipNeverCrashes) {
  TempDir tmp;
  spattn::write_safetensors(tmp.file("valid.safetensors"),
                            {{"q", random_tensor(DType::bf16, 2, 3, 4, 31)},
                             {"k", random_tensor(DType::f32, 1, 3, 4, 32)}});
  const std::string valid = read_bytes(tmp.file("valid.safetensors"));
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | static_cast<unsigned char>(valid[i]);
  fuzz_file(tmp.file("f.safetensors"), valid, size_t(8 + n),
            [](const std::string& p) { spattn::read_safetensors(p, Layout::shd); });
}

}  // namespace

// save_qkv writes where load_qkv reads: one .safetensors file, a directory, or a prefix.
TEST(SaveQkv, RoundTripsThroughEachForm) {
  TempDir tmp;
  const Tensor q = random_tensor(DType::f16, 4, 9, 8, 1), k = random_tensor(DType::f16, 2, 9, 8, 2),
               v = random_tensor(DType::f16, 2, 9, 8, 3);
  for (const std::string& where : {tmp.file("x.safetensors"), tmp.string(), tmp.file("p_")}) {
    spattn::save_qkv(where, q, k, v);
    const spattn::QKV x = spattn::load_qkv(where);
    EXPECT_TRUE(same_bits(x.q, q)) << where;
    EXPECT_TRUE(same_bits(x.k, k)) << where;
    EXPECT_TRUE(same_bits(x.v, v)) << where;
  }
}

TEST(SaveQkv, BadArgumentsAreErrors) {
  TempDir tmp;
  const Tensor a = random_tensor(DType::f32, 2, 4, 8, 1),
               b = random_tensor(DType::bf16, 2, 4, 8, 2);
  EXPECT_IO_ERROR(spattn::save_qkv(tmp.file("x.safetensors"), a, b, a), "dtypes must match");
  EXPECT_IO_ERROR(spattn::save_qkv(tmp.file("q.npy"), a, a, a), "single .npy");
  EXPECT_IO_ERROR(spattn::save_qkv("", a, a, a), "empty path");
  EXPECT_IO_ERROR(spattn::save_qkv(tmp.file("no/such/dir/p_"), a, a, a), "no/such/dir");
}

// .npy reader and writer (format versions 1.0, 2.0 and 3.0).
//
// Layout on disk: the magic "\x93NUMPY", a major and minor version byte, the header length
// (u16 little-endian for 1.0, u32 for 2.0 and 3.0), then a Python dict literal such as
//   {'descr': '<f4', 'fortran_order': False, 'shape': (4, 1024, 128), }
// padded with spaces and a newline, then the raw C-order data.
//
// The header dict is parsed by the small hand-written parser below, which understands exactly
// the three keys numpy writes; it is deliberately not a general Python literal evaluator.
//
// dtypes: '<f4' and '<f2' ('=' accepted too: native is little-endian here), and bf16 as '<V2'
// (ml_dtypes' bfloat16 saved by np.save; '|V2' and '=V2' too, byte order is meaningless for
// raw void bytes) or the name 'bfloat16'. write_npy writes bf16 as '<V2': numpy loads that as
// raw 2-byte voids, so view it with `arr.view(ml_dtypes.bfloat16)` on the Python side.
#include <array>
#include <cstring>
#include <string_view>

#include "io/io_common.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"

namespace spattn {
namespace {

constexpr std::array<char, 6> kMagic = {'\x93', 'N', 'U', 'M', 'P', 'Y'};
// numpy itself refuses headers over 10000 bytes by default; anything near this limit is not a
// header numpy wrote, and the cap keeps a hostile length from driving a huge allocation.
constexpr uint64_t kMaxHeaderLen = 1 << 20;

struct NpyHeader {
  std::string descr;
  bool fortran_order = false;
  std::vector<int64_t> shape;
};

// Header text for error messages: numpy's padding trimmed, non-printable bytes escaped, long
// text cut short.
std::string printable(std::string_view s) {
  while (!s.empty() && (s.back() == ' ' || s.back() == '\n')) s.remove_suffix(1);
  std::string out;
  for (size_t i = 0; i < s.size() && out.size() < 160; ++i) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    if (c >= 0x20 && c < 0x7f) {
      out += char(c);
    } else {
      static const char* hex = "0123456789abcdef";
      out += "\\x";
      out += hex[c >> 4];
      out += hex[c & 15];
    }
  }
  if (out.size() >= 160) out += "...";
  return out;
}

// Recursive-descent parser for the header dict. Accepts single or double quoted strings
// without escapes, True/False, and tuples of non-negative decimal integers (with Python 2's
// optional 'L' suffix), plus the whitespace and trailing commas Python allows.
class HeaderParser {
 public:
  HeaderParser(std::string_view text, const std::string& path) : s_(text), path_(path) {}

  NpyHeader parse() {
    NpyHeader h;
    bool seen_descr = false, seen_fortran = false, seen_shape = false;
    expect('{', "'{' opening the header dict");
    while (true) {
      skip_ws();
      if (eat('}')) break;
      const size_t key_pos = i_;
      std::string key = parse_string("a quoted key or '}'");
      expect(':', "':' after key");
      if (key == "descr") {
        mark_seen(seen_descr, key, key_pos);
        h.descr = parse_string("a quoted dtype string for 'descr'");
      } else if (key == "fortran_order") {
        mark_seen(seen_fortran, key, key_pos);
        h.fortran_order = parse_bool();
      } else if (key == "shape") {
        mark_seen(seen_shape, key, key_pos);
        h.shape = parse_tuple();
      } else {
        i_ = key_pos;
        bad("one of 'descr', 'fortran_order', 'shape' (unknown key '" + key + "')");
      }
      skip_ws();
      if (eat(',')) continue;
      expect('}', "',' or '}' after a value");
      break;
    }
    skip_ws();  // numpy pads the dict with spaces and a final newline
    if (i_ != s_.size()) bad("end of header after '}'");
    if (!seen_descr) missing("descr");
    if (!seen_fortran) missing("fortran_order");
    if (!seen_shape) missing("shape");
    return h;
  }

 private:
  [[noreturn]] void bad(const std::string& expected) {
    detail::fail(path_, ": malformed .npy header: expected ", expected, " at byte ", i_,
                 " of header \"", printable(s_), "\"");
  }
  [[noreturn]] void missing(const char* key) {
    detail::fail(path_, ": malformed .npy header: missing key '", key, "' in \"", printable(s_),
                 "\"");
  }
  void mark_seen(bool& seen, const std::string& key, size_t pos) {
    if (seen) {
      i_ = pos;
      bad("each key once (duplicate key '" + key + "')");
    }
    seen = true;
  }
  void skip_ws() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r'))
      ++i_;
  }
  bool eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) {
      ++i_;
      return true;
    }
    return false;
  }
  void expect(char c, const char* what) {
    skip_ws();
    if (!eat(c)) bad(what);
  }
  std::string parse_string(const char* what) {
    skip_ws();
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) bad(what);
    const char quote = s_[i_++];
    const size_t begin = i_;
    while (i_ < s_.size() && s_[i_] != quote) {
      unsigned char c = static_cast<unsigned char>(s_[i_]);
      // No valid key or descr needs escapes or control characters.
      if (c == '\\' || c < 0x20 || c >= 0x7f) bad("a plain ASCII string without escapes");
      ++i_;
    }
    if (i_ >= s_.size()) bad("a closing quote");
    return std::string(s_.substr(begin, i_++ - begin));
  }
  bool parse_bool() {
    skip_ws();
    if (s_.substr(i_, 4) == "True") return i_ += 4, true;
    if (s_.substr(i_, 5) == "False") return i_ += 5, false;
    bad("True or False for 'fortran_order'");
  }
  std::vector<int64_t> parse_tuple() {
    std::vector<int64_t> dims;
    expect('(', "a tuple '(...)' for 'shape'");
    while (true) {
      skip_ws();
      if (eat(')')) break;
      if (dims.size() >= 32) bad("at most 32 dimensions in 'shape'");  // numpy's own limit
      dims.push_back(parse_int());
      skip_ws();
      if (eat(',')) continue;
      expect(')', "',' or ')' in 'shape'");
      break;
    }
    return dims;
  }
  int64_t parse_int() {
    skip_ws();
    if (i_ >= s_.size() || s_[i_] < '0' || s_[i_] > '9')
      bad("a non-negative integer dimension in 'shape'");
    int64_t v = 0;
    while (i_ < s_.size() && s_[i_] >= '0' && s_[i_] <= '9') {
      if (__builtin_mul_overflow(v, int64_t(10), &v) ||
          __builtin_add_overflow(v, int64_t(s_[i_] - '0'), &v))
        bad("a dimension that fits in 64 bits");
      ++i_;
    }
    eat('L');  // Python 2 long literal, as old numpy wrote it
    return v;
  }

  std::string_view s_;
  const std::string& path_;
  size_t i_ = 0;
};

DType parse_descr(const std::string& descr, const std::string& path) {
  if (descr == "bfloat16") return DType::bf16;
  if (descr.size() == 3) {
    const char order = descr[0];
    const std::string_view type = std::string_view(descr).substr(1);
    SPATTN_CHECK(order != '>', path, ": big-endian data ('", descr,
                 "') is not supported; save it little-endian, e.g. arr.astype('<", type, "')");
    if ((type == "f4" || type == "f2") && (order == '<' || order == '='))
      return type == "f4" ? DType::f32 : DType::f16;
    if (type == "V2" && (order == '<' || order == '|' || order == '=')) return DType::bf16;
  }
  detail::fail(path, ": unsupported dtype '", descr,
               "' (expected '<f4', '<f2', or bf16 as '<V2' / 'bfloat16')");
}

const char* descr_of(DType t) {
  switch (t) {
    case DType::f32: return "<f4";
    case DType::f16: return "<f2";
    case DType::bf16: return "<V2";
  }
  return "?";
}

uint32_t read_le(const unsigned char* p, int nbytes) {
  uint32_t v = 0;
  for (int i = nbytes - 1; i >= 0; --i) v = (v << 8) | p[i];
  return v;
}

// Reads the preamble and header dict; leaves `in` at the first data byte and sets `avail` to
// the bytes that follow it.
NpyHeader read_header(std::ifstream& in, uint64_t size, const std::string& path, uint64_t& avail) {
  SPATTN_CHECK(size > 0, path, ": empty file");

  // Preamble: magic, version, then the header length whose width depends on the version.
  unsigned char pre[12];
  SPATTN_CHECK(size >= 8, path, ": truncated header: file is only ", size,
               " bytes, too short for the .npy magic and version");
  io::read_exact(in, pre, 8, path);
  SPATTN_CHECK(std::memcmp(pre, kMagic.data(), kMagic.size()) == 0, path,
               ": not a .npy file (bad magic: expected \\x93NUMPY, got \"",
               printable(std::string_view(reinterpret_cast<char*>(pre), 6)), "\")");
  const int major = pre[6], minor = pre[7];
  SPATTN_CHECK(major >= 1 && major <= 3 && minor == 0, path, ": unsupported .npy version ", major,
               ".", minor, " (expected 1.0, 2.0 or 3.0)");
  const int len_bytes = major == 1 ? 2 : 4;
  const uint64_t data_start_min = 8 + len_bytes;
  SPATTN_CHECK(size >= data_start_min, path, ": truncated header: file is only ", size,
               " bytes, too short for the header length field");
  io::read_exact(in, pre + 8, len_bytes, path);
  const uint64_t header_len = read_le(pre + 8, len_bytes);
  SPATTN_CHECK(header_len <= size - data_start_min, path, ": header length ", header_len,
               " runs past the end of the file (only ", size - data_start_min,
               " bytes follow the preamble)");
  SPATTN_CHECK(header_len <= kMaxHeaderLen, path, ": header length ", header_len,
               " is implausibly large (limit ", kMaxHeaderLen, ")");

  std::string text(header_len, '\0');
  io::read_exact(in, text.data(), header_len, path);
  NpyHeader h = HeaderParser(text, path).parse();
  SPATTN_CHECK(!h.fortran_order, path,
               ": fortran_order is True; only C-order arrays are supported "
               "(save np.ascontiguousarray(arr))");
  avail = size - data_start_min - header_len;
  return h;
}

// Checks that the header's shape of `itemsize`-byte elements fits in the `avail` bytes.
uint64_t data_bytes(const NpyHeader& h, uint64_t itemsize, uint64_t avail,
                    const std::string& path) {
  uint64_t nbytes = 0;
  SPATTN_CHECK(io::checked_nbytes(h.shape, itemsize, nbytes), path, ": header says shape ",
               io::shape_str(h.shape), " of ", h.descr, ", whose byte size overflows 64 bits");
  SPATTN_CHECK(nbytes <= avail, path, ": header says shape ", io::shape_str(h.shape), " = ", nbytes,
               " bytes of ", h.descr, " but only ", avail, " bytes follow");
  return nbytes;
}

// Integer descrs: '<i4', '|u1', '=i8', ..., and '|b1' (bool) as unsigned bytes.
bool int_descr(const std::string& descr, io::IntType& t) {
  if (descr.size() != 3 || descr[0] == '>') return false;
  const char order = descr[0], kind = descr[1], width = descr[2];
  if (order != '<' && order != '|' && order != '=') return false;
  if (kind != 'i' && kind != 'u' && kind != 'b') return false;
  if (width != '1' && width != '2' && width != '4' && width != '8') return false;
  if (kind == 'b' && width != '1') return false;
  t.itemsize = width - '0';
  t.is_signed = kind == 'i';
  return true;
}

}  // namespace

Tensor read_npy(const std::string& path, Layout layout) {
  uint64_t size = 0, avail = 0;
  std::ifstream in = io::open_for_read(path, size);
  const NpyHeader h = read_header(in, size, path, avail);
  const DType dtype = parse_descr(h.descr, path);
  const io::Shape3 s3 = io::to_hsd(h.shape, layout, path);
  data_bytes(h, dtype_size(dtype), avail, path);
  // Trailing bytes after the array are tolerated, as np.load does.
  return io::read_array(in, dtype, s3, layout, path);
}

namespace io {

IntArray read_npy_ints(const std::string& path) {
  uint64_t size = 0, avail = 0;
  std::ifstream in = open_for_read(path, size);
  const NpyHeader h = read_header(in, size, path, avail);
  IntType t;
  SPATTN_CHECK(int_descr(h.descr, t), path, ": dtype '", h.descr,
               "' is not an integer type (expected a little-endian int or bool array, e.g. "
               "'<i4', '|u1', '|b1')");
  const uint64_t nbytes = data_bytes(h, uint64_t(t.itemsize), avail, path);
  std::vector<char> buf(nbytes);
  read_exact(in, buf.data(), nbytes, path);
  return {decode_ints(buf.data(), nbytes / uint64_t(t.itemsize), t), h.shape, {}};
}

}  // namespace io

namespace {

// Opens `path` and writes a version 1.0 preamble and header for a C-order array.
std::ofstream begin_npy(const std::string& path, const char* descr,
                        const std::vector<int64_t>& shape) {
  std::string header = std::string("{'descr': '") + descr +
                       "', 'fortran_order': False, 'shape': " + io::shape_str(shape) + ", }";
  // Like numpy: pad with spaces and end with '\n' so the data starts on a 64-byte boundary.
  const size_t preamble = 10;  // version 1.0: magic, 2 version bytes, u16 length
  const size_t total = (preamble + header.size() + 1 + 63) / 64 * 64;
  header.append(total - preamble - header.size() - 1, ' ');
  header += '\n';
  SPATTN_CHECK(header.size() <= 0xffff, path,
               ": .npy header too long");  // cannot happen: rank <= 3

  std::ofstream out = io::open_for_write(path);
  out.write(kMagic.data(), kMagic.size());
  const char version_and_len[4] = {1, 0, char(header.size() & 0xff), char(header.size() >> 8)};
  out.write(version_and_len, 4);
  out.write(header.data(), std::streamsize(header.size()));
  return out;
}

}  // namespace

void write_npy(const std::string& path, const TensorView& t) {
  io::check_writable(t, path);
  std::ofstream out = begin_npy(path, descr_of(t.dtype), {t.heads, t.seq, t.dim});
  io::write_hsd(out, t);
  io::finish_write(out, path);
}

namespace io {

void write_npy_u8(const std::string& path, const std::vector<uint8_t>& values) {
  std::ofstream out = begin_npy(path, "|u1", {int64_t(values.size())});
  out.write(reinterpret_cast<const char*>(values.data()), std::streamsize(values.size()));
  finish_write(out, path);
}

}  // namespace io

}  // namespace spattn

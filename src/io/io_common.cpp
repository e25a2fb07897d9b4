#include "io/io_common.hpp"

#include <bit>
#include <cstring>
#include <filesystem>
#include <limits>
#include <system_error>

#include "spattn/error.hpp"

namespace spattn::io {

// Both formats store little-endian data and we copy it straight into memory.
static_assert(std::endian::native == std::endian::little, "spattn io assumes a little-endian host");

namespace fs = std::filesystem;

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(shape[i]);
  }
  if (shape.size() == 1) s += ",";
  return s + ")";
}

Shape3 to_hsd(const std::vector<int64_t>& shape, Layout layout, const std::string& what) {
  for (int64_t d : shape)
    SPATTN_CHECK(d > 0, what, ": shape ", shape_str(shape), " has a zero or negative dimension");
  std::vector<int64_t> s = shape;
  if (s.size() == 4) {
    SPATTN_CHECK(s[0] == 1, what, ": rank-4 shape ", shape_str(shape),
                 " needs a leading batch dimension of 1");
    s.erase(s.begin());
  }
  if (s.size() == 2) return {1, s[0], s[1]};
  SPATTN_CHECK(s.size() == 3, what, ": shape ", shape_str(shape), " has rank ", shape.size(),
               "; expected 2 [seq, dim], 3 or 4 [1, ...]");
  if (layout == Layout::shd) return {s[1], s[0], s[2]};
  return {s[0], s[1], s[2]};
}

bool checked_nbytes(const std::vector<int64_t>& shape, uint64_t itemsize, uint64_t& out) {
  int64_t n = int64_t(itemsize);
  for (int64_t d : shape) {
    if (d < 0 || __builtin_mul_overflow(n, d, &n)) return false;
  }
  out = uint64_t(n);
  return true;
}

std::ifstream open_for_read(const std::string& path, uint64_t& file_size) {
  std::error_code ec;
  fs::file_status st = fs::status(path, ec);
  // status() reports a missing file as not_found without an error; ec is set for the rest
  // (permission denied on a parent directory, a symlink loop, ...).
  SPATTN_CHECK(!ec || st.type() == fs::file_type::not_found, path,
               ": cannot access: ", ec.message());
  SPATTN_CHECK(fs::exists(st), path, ": no such file");
  SPATTN_CHECK(fs::is_regular_file(st), path, ": not a regular file");
  file_size = fs::file_size(path, ec);
  SPATTN_CHECK(!ec, path, ": cannot get file size: ", ec.message());
  std::ifstream in(path, std::ios::binary);
  SPATTN_CHECK(in.is_open(), path, ": cannot open for reading");
  return in;
}

void read_exact(std::ifstream& in, void* dst, uint64_t nbytes, const std::string& what) {
  SPATTN_CHECK(nbytes <= uint64_t(std::numeric_limits<std::streamsize>::max()), what, ": read of ",
               nbytes, " bytes is too large");
  in.read(static_cast<char*>(dst), std::streamsize(nbytes));
  SPATTN_CHECK(in && uint64_t(in.gcount()) == nbytes, what, ": short read (wanted ", nbytes,
               " bytes, got ", in.gcount(), "); was the file changed while reading?");
}

Tensor read_array(std::ifstream& in, DType dtype, Shape3 shape, Layout layout,
                  const std::string& what) {
  Tensor t(dtype, shape.heads, shape.seq, shape.dim);
  if (layout == Layout::hsd || shape.heads == 1) {  // disk order is already [h, s, d]
    read_exact(in, t.data(), t.nbytes(), what);
    return t;
  }
  // [s, h, d] on disk: read one sequence position (all heads) at a time and scatter it, so
  // the transpose needs only one row of scratch instead of a second full copy.
  const size_t row = size_t(shape.dim) * dtype_size(dtype);
  std::vector<char> buf(row * size_t(shape.heads));
  TensorView v = t.view();
  for (int64_t s = 0; s < shape.seq; ++s) {
    read_exact(in, buf.data(), buf.size(), what);
    for (int64_t h = 0; h < shape.heads; ++h) std::memcpy(v.ptr(h, s), buf.data() + h * row, row);
  }
  return t;
}

void write_hsd(std::ofstream& out, const TensorView& t) {
  const size_t item = dtype_size(t.dtype);
  if (t.is_hsd_contiguous()) {
    out.write(static_cast<const char*>(t.data), std::streamsize(size_t(t.numel()) * item));
    return;
  }
  std::vector<char> row(size_t(t.dim) * item);
  for (int64_t h = 0; h < t.heads; ++h)
    for (int64_t s = 0; s < t.seq; ++s) {
      if (t.stride_dim == 1) {
        std::memcpy(row.data(), t.ptr(h, s), row.size());
      } else {
        for (int64_t d = 0; d < t.dim; ++d)
          std::memcpy(row.data() + d * item, t.ptr(h, s, d), item);
      }
      out.write(row.data(), std::streamsize(row.size()));
    }
}

void check_writable(const TensorView& t, const std::string& what) {
  SPATTN_CHECK(t.heads > 0 && t.seq > 0 && t.dim > 0, what, ": cannot write tensor ", t.shape_str(),
               ": every dimension must be > 0 (readers reject empty arrays)");
  SPATTN_CHECK(t.data != nullptr, what, ": cannot write tensor ", t.shape_str(),
               ": data pointer is null");
}

std::ofstream open_for_write(const std::string& path) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SPATTN_CHECK(out.is_open(), path, ": cannot open for writing");
  return out;
}

void finish_write(std::ofstream& out, const std::string& path) {
  out.flush();
  SPATTN_CHECK(out.good(), path, ": write failed (disk full?)");
  out.close();
  SPATTN_CHECK(!out.fail(), path, ": write failed on close");
}

std::vector<int64_t> decode_ints(const char* bytes, uint64_t n, IntType t) {
  std::vector<int64_t> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    const char* p = bytes + i * uint64_t(t.itemsize);
    switch (t.itemsize * (t.is_signed ? 1 : -1)) {
      case 1: out[i] = *reinterpret_cast<const int8_t*>(p); break;
      case -1: out[i] = *reinterpret_cast<const uint8_t*>(p); break;
      case 2: {
        int16_t x;
        std::memcpy(&x, p, 2);
        out[i] = x;
        break;
      }
      case -2: {
        uint16_t x;
        std::memcpy(&x, p, 2);
        out[i] = x;
        break;
      }
      case 4: {
        int32_t x;
        std::memcpy(&x, p, 4);
        out[i] = x;
        break;
      }
      case -4: {
        uint32_t x;
        std::memcpy(&x, p, 4);
        out[i] = x;
        break;
      }
      case 8: {
        int64_t x;
        std::memcpy(&x, p, 8);
        out[i] = x;
        break;
      }
      default: {
        uint64_t x;
        std::memcpy(&x, p, 8);
        out[i] = x > uint64_t(INT64_MAX) ? INT64_MAX : int64_t(x);
      }
    }
  }
  return out;
}

}  // namespace spattn::io

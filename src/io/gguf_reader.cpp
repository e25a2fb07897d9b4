// GGUF reader. Layout (little-endian), as the GGUF specification in ggml's docs gives it:
//   magic "GGUF", u32 version, u64 tensor_count, u64 metadata_kv_count,
//   metadata_kv_count x { string key, u32 value_type, value },
//   tensor_count x { string name, u32 n_dims, u64 ne[n_dims], u32 type, u64 offset },
//   padding to general.alignment, then the tensor data (offsets relative to its start).
// A string is a u64 length and that many bytes (no terminator); an array is a u32 element
// type, a u64 count and the elements.
//
// The file is hostile until proven otherwise: every length and count is checked against the
// bytes left before anything is allocated or read, so no header can make the reader allocate
// more than the file's own size or read outside it.
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <bit>
#include <cerrno>
#include <cstring>
#include <limits>
#include <map>
#include <sstream>

#include "spattn/error.hpp"
#include "spattn/gguf.hpp"

namespace spattn::gguf {

static_assert(std::endian::native == std::endian::little, "GGUF is read in place: little-endian");

namespace {

constexpr uint32_t kMagic = 0x46554747;  // "GGUF" read as a little-endian u32
constexpr uint32_t kDefaultAlignment = 32;
constexpr uint32_t kMaxDims = 4;  // GGML_MAX_DIMS

size_t scalar_size(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::boolean: return 1;
    case ValueType::u16:
    case ValueType::i16: return 2;
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::f32: return 4;
    case ValueType::u64:
    case ValueType::i64:
    case ValueType::f64: return 8;
    case ValueType::string:
    case ValueType::array: break;  // not fixed-size
  }
  return 0;
}

bool is_integer(ValueType t) {
  switch (t) {
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::u16:
    case ValueType::i16:
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::u64:
    case ValueType::i64: return true;
    case ValueType::f32:
    case ValueType::f64:
    case ValueType::boolean:
    case ValueType::string:
    case ValueType::array: break;
  }
  return false;
}

bool known_value_type(uint32_t t) { return t <= uint32_t(ValueType::f64); }

// The type id as a label, with ggml's name where it has one.
std::string ggml_type_label(uint32_t t) {
  std::string s = "type " + std::to_string(t);
  if (is_known_type(t)) s += std::string(" (") + type_name(GgmlType(t)) + ")";
  return s;
}

// Ids ggml once used and has removed (its enum keeps them as comments): files that still carry
// them come from old converters, and saying so beats a bare "unknown".
const char* removed_ggml_type(uint32_t t) {
  switch (t) {
    case 4: return "q4_2";
    case 5: return "q4_3";
    case 31: return "q4_0_4_4";
    case 32: return "q4_0_4_8";
    case 33: return "q4_0_8_8";
    case 36: return "iq4_nl_4_4";
    case 37: return "iq4_nl_4_8";
    case 38: return "iq4_nl_8_8";
    default: return nullptr;
  }
}

std::string shape_label(const std::vector<int64_t>& ne) {
  std::string s = "[";
  for (size_t d = 0; d < ne.size(); ++d) s += (d ? ", " : "") + std::to_string(ne[d]);
  return s + "]";
}

// "q4_K [512, 2], 576 bytes": what a tensor's type and shape say its data is.
std::string tensor_label(const File::Tensor& t) {
  return std::string(type_name(t.type)) + " " + shape_label(t.ne) + ", " +
         std::to_string(t.nbytes) + " bytes";
}

// Raw integer of any integer type at p, as (negative?, magnitude) via int128-free logic.
struct IntValue {
  bool negative = false;
  uint64_t magnitude = 0;
};
IntValue read_int(ValueType t, const uint8_t* p) {
  auto load = [&](auto v) {
    std::memcpy(&v, p, sizeof v);
    return v;
  };
  IntValue r;
  auto from_signed = [&](int64_t v) {
    r.negative = v < 0;
    r.magnitude = v < 0 ? uint64_t(0) - uint64_t(v) : uint64_t(v);
  };
  switch (t) {
    case ValueType::u8: r.magnitude = load(uint8_t{}); break;
    case ValueType::u16: r.magnitude = load(uint16_t{}); break;
    case ValueType::u32: r.magnitude = load(uint32_t{}); break;
    case ValueType::u64: r.magnitude = load(uint64_t{}); break;
    case ValueType::i8: from_signed(load(int8_t{})); break;
    case ValueType::i16: from_signed(load(int16_t{})); break;
    case ValueType::i32: from_signed(load(int32_t{})); break;
    case ValueType::i64: from_signed(load(int64_t{})); break;
    case ValueType::f32:
    case ValueType::f64:
    case ValueType::boolean:
    case ValueType::string:
    case ValueType::array: break;  // not integers: callers check is_integer first
  }
  return r;
}

double read_float(ValueType t, const uint8_t* p) {
  if (t == ValueType::f32) {
    float f;
    std::memcpy(&f, p, 4);
    return f;
  }
  double d;
  std::memcpy(&d, p, 8);
  return d;
}

}  // namespace

struct MetaValue {
  ValueType type = ValueType::u8;
  ValueType elem = ValueType::u8;  // arrays only
  uint64_t count = 0;              // arrays only
  const uint8_t* data = nullptr;   // scalar payload, or the first element of an array
  std::string_view str;            // strings
};

struct File::Impl {
  std::string name;
  const uint8_t* base = nullptr;
  size_t size = 0;
  bool mapped = false;
  uint32_t version = 0;
  uint32_t alignment = kDefaultAlignment;
  size_t data_offset = 0;
  std::map<std::string, MetaValue, std::less<>> kv;
  std::vector<std::string> order;
  std::vector<File::Tensor> tensors;
  std::map<std::string, size_t, std::less<>> by_name;

  ~Impl() {
    if (mapped && base) munmap(const_cast<uint8_t*>(base), size);
  }

  [[noreturn]] void fail_at(size_t pos, const std::string& msg) const {
    detail::fail(name, ": ", msg, " (at byte ", pos, " of ", size, ")");
  }

  const MetaValue& get(std::string_view key) const {
    auto it = kv.find(key);
    if (it == kv.end()) detail::fail(name, ": missing metadata key '", key, "'");
    return it->second;
  }
  [[noreturn]] void mistyped(std::string_view key, const MetaValue& v, const char* wanted) const {
    std::string have = value_type_name(v.type);
    if (v.type == ValueType::array) have += std::string(" of ") + value_type_name(v.elem);
    detail::fail(name, ": metadata key '", key, "' is ", have, ", expected ", wanted);
  }

  void parse();
};

namespace {

// Bounds-checked reading position in the file.
class Cursor {
 public:
  explicit Cursor(const File::Impl& f) : f_(f) {}
  size_t pos() const { return pos_; }
  size_t left() const { return f_.size - pos_; }
  const uint8_t* base_at() const { return f_.base + pos_; }

  const uint8_t* take(uint64_t n, const char* what) {
    if (n > left()) {
      std::ostringstream os;
      os << "truncated: " << what << " needs " << n << " bytes, only " << left() << " left";
      f_.fail_at(pos_, os.str());
    }
    const uint8_t* p = f_.base + pos_;
    pos_ += size_t(n);
    return p;
  }
  template <class T>
  T read(const char* what) {
    T v;
    std::memcpy(&v, take(sizeof(T), what), sizeof(T));
    return v;
  }
  std::string_view string(const char* what) {
    const size_t at = pos_;
    const uint64_t len = read<uint64_t>(what);
    if (len > left()) {
      std::ostringstream os;
      os << what << ": string length " << len << " runs past the end of the file (" << left()
         << " bytes left)";
      f_.fail_at(at, os.str());
    }
    return {reinterpret_cast<const char*>(take(len, what)), size_t(len)};
  }

 private:
  const File::Impl& f_;
  size_t pos_ = 0;
};

std::string printable(std::string_view s) {
  std::string out;
  for (char c : s.substr(0, 80)) out += (c >= 0x20 && c < 0x7f) ? c : '?';
  if (s.size() > 80) out += "...";
  return out;
}

}  // namespace

void File::Impl::parse() {
  Cursor c(*this);
  if (size < 4) fail_at(0, "too small to be a GGUF file");
  const uint32_t magic = c.read<uint32_t>("magic");
  if (magic != kMagic) {
    std::string got(reinterpret_cast<const char*>(base), 4);
    detail::fail(name, ": bad magic '", printable(got), "' (not a GGUF file; expected 'GGUF')");
  }
  version = c.read<uint32_t>("version");
  if (version == 1) detail::fail(name, ": GGUF version 1 is not supported (only 2 and 3)");
  if (version != 2 && version != 3) {
    const bool swapped = __builtin_bswap32(version) == 2 || __builtin_bswap32(version) == 3;
    detail::fail(name, ": unknown GGUF version ", version,
                 swapped ? " (a big-endian file? only little-endian is supported)"
                         : " (only 2 and 3 are supported)");
  }
  const uint64_t n_tensors = c.read<uint64_t>("tensor count");
  const uint64_t n_kv = c.read<uint64_t>("metadata count");
  // Smallest possible entries: a key/value is an 8-byte length, a 4-byte type and at least one
  // byte of value; a tensor info is an 8-byte name length, a u32 n_dims, one u64 dimension, a
  // u32 type and a u64 offset. A count the remaining bytes cannot hold is a lie.
  if (n_kv > c.left() / 13)
    fail_at(c.pos(),
            "metadata count " + std::to_string(n_kv) + " is larger than the file can hold");
  if (n_tensors > c.left() / 32)
    fail_at(c.pos(),
            "tensor count " + std::to_string(n_tensors) + " is larger than the file can hold");

  for (uint64_t i = 0; i < n_kv; ++i) {
    const size_t at = c.pos();
    const std::string_view key = c.string("metadata key");
    if (key.empty()) fail_at(at, "metadata key " + std::to_string(i) + " is empty");
    if (kv.count(key)) fail_at(at, "duplicate metadata key '" + printable(key) + "'");
    const std::string k(key);
    MetaValue v;
    const size_t type_at = c.pos();
    const uint32_t t = c.read<uint32_t>("value type");
    if (!known_value_type(t))
      fail_at(type_at,
              "metadata key '" + printable(key) + "' has unknown value type " + std::to_string(t));
    v.type = ValueType(t);
    if (v.type == ValueType::string) {
      v.str = c.string("string value");
    } else if (v.type == ValueType::array) {
      const size_t et_at = c.pos();
      const uint32_t et = c.read<uint32_t>("array element type");
      if (!known_value_type(et))
        fail_at(et_at,
                "array '" + printable(key) + "' has unknown element type " + std::to_string(et));
      v.elem = ValueType(et);
      if (v.elem == ValueType::array)
        fail_at(et_at,
                "array '" + printable(key) + "' holds arrays (nested arrays are not supported)");
      v.count = c.read<uint64_t>("array length");
      const size_t min_size = v.elem == ValueType::string ? 8 : scalar_size(v.elem);
      if (v.count > c.left() / min_size)
        fail_at(c.pos(), "array '" + printable(key) + "' of " + std::to_string(v.count) + " " +
                             value_type_name(v.elem) + " runs past the end of the file");
      if (v.elem == ValueType::string) {
        // Checked here, read again on demand (get_string_views): a 128K-token vocabulary and
        // its 280K merges would otherwise hold 6.5 MB of views for the file's lifetime.
        v.data = c.base_at();
        for (uint64_t j = 0; j < v.count; ++j) c.string("array string");
      } else {
        v.data = c.take(v.count * min_size, "array data");
      }
    } else {
      v.data = c.take(scalar_size(v.type), "metadata value");
    }
    kv.emplace(k, std::move(v));
    order.push_back(k);
  }

  if (auto it = kv.find("general.alignment"); it != kv.end()) {
    const MetaValue& a = it->second;
    if (a.type != ValueType::u32) mistyped("general.alignment", a, "u32");
    std::memcpy(&alignment, a.data, 4);
    if (alignment == 0 || !std::has_single_bit(alignment))
      detail::fail(name, ": general.alignment ", alignment, " is not a power of two");
  }

  tensors.reserve(size_t(n_tensors));
  for (uint64_t i = 0; i < n_tensors; ++i) {
    const size_t at = c.pos();
    Tensor ti;
    ti.name = std::string(c.string("tensor name"));
    if (ti.name.empty()) fail_at(at, "tensor " + std::to_string(i) + " has an empty name");
    const std::string tn = "tensor '" + printable(ti.name) + "'";
    if (by_name.count(ti.name)) fail_at(at, "duplicate " + tn);
    const uint32_t n_dims = c.read<uint32_t>("tensor n_dims");
    if (n_dims == 0 || n_dims > kMaxDims)
      fail_at(at, tn + " has " + std::to_string(n_dims) + " dimensions (1 to 4 allowed)");
    for (uint32_t d = 0; d < n_dims; ++d) {
      const uint64_t ne = c.read<uint64_t>("tensor dimension");
      if (ne > uint64_t(std::numeric_limits<int64_t>::max()))
        fail_at(at, tn + " dimension " + std::to_string(d) + " = " + std::to_string(ne) +
                        " is too large");
      ti.ne.push_back(int64_t(ne));
    }
    const size_t type_at = c.pos();
    const uint32_t t = c.read<uint32_t>("tensor type");
    if (!is_known_type(t)) {
      const char* removed = removed_ggml_type(t);
      fail_at(type_at, tn + " " + shape_label(ti.ne) + " has unknown " + ggml_type_label(t) +
                           (removed ? std::string(" (ggml's former ") + removed +
                                          ", removed from ggml and GGUF)"
                                    : std::string(" (not a ggml type)")));
    }
    ti.type = GgmlType(t);
    ti.offset = c.read<uint64_t>("tensor offset");
    if (ti.ne[0] % block_size(ti.type) != 0)
      fail_at(at, tn + ": row length " + std::to_string(ti.ne[0]) + " is not a multiple of " +
                      type_name(ti.type) + "'s block of " + std::to_string(block_size(ti.type)));
    // bytes = ne0 / block * block_bytes * ne1 * ne2 * ne3, every step checked for overflow.
    uint64_t nbytes = uint64_t(ti.ne[0] / block_size(ti.type));
    bool overflow = __builtin_mul_overflow(nbytes, uint64_t(block_bytes(ti.type)), &nbytes);
    for (size_t d = 1; d < ti.ne.size(); ++d)
      overflow = overflow || __builtin_mul_overflow(nbytes, uint64_t(ti.ne[d]), &nbytes);
    uint64_t n_el = 1;
    for (int64_t ne : ti.ne)
      overflow = overflow || __builtin_mul_overflow(n_el, uint64_t(ne), &n_el);
    if (overflow || n_el > uint64_t(std::numeric_limits<int64_t>::max()))
      fail_at(at, tn + ": the product of its shape overflows");
    if (ti.offset % alignment != 0)
      fail_at(at, tn + ": data offset " + std::to_string(ti.offset) +
                      " is misaligned (general.alignment " + std::to_string(alignment) + ")");
    ti.nbytes = size_t(nbytes);
    by_name.emplace(ti.name, tensors.size());
    tensors.push_back(std::move(ti));
  }

  // The data section starts at the next multiple of the alignment after the tensor infos.
  const uint64_t end_of_infos = c.pos();
  const uint64_t data_start = (end_of_infos + alignment - 1) / alignment * alignment;
  data_offset = size_t(data_start);
  if (tensors.empty()) return;  // vocabulary-only files may end without padding
  if (data_start > size)
    fail_at(size,
            "truncated: the tensor data section would start at byte " + std::to_string(data_start));
  const uint64_t data_size = size - data_start;
  std::vector<size_t> idx(tensors.size());
  for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
  std::sort(idx.begin(), idx.end(), [&](size_t a, size_t b) {
    return tensors[a].offset != tensors[b].offset ? tensors[a].offset < tensors[b].offset
                                                  : tensors[a].nbytes < tensors[b].nbytes;
  });
  const Tensor* before = nullptr;  // of the tensors so far, the one whose data ends last
  for (size_t k = 0; k < idx.size(); ++k) {
    Tensor& t = tensors[idx[k]];
    if (t.offset > data_size || t.nbytes > data_size - t.offset) {
      // Where the file ends inside a block of a quantized type, say which block.
      std::string inside;
      const uint64_t bb = uint64_t(block_bytes(t.type));
      if (block_size(t.type) > 1 && t.offset < data_size && (data_size - t.offset) % bb != 0)
        inside = "; the file ends inside its " + std::string(type_name(t.type)) + " block " +
                 std::to_string((data_size - t.offset) / bb) + " of " +
                 std::to_string(t.nbytes / bb) + " (" + std::to_string(bb) + " bytes each)";
      detail::fail(name, ": truncated: tensor '", printable(t.name), "' (", tensor_label(t),
                   ") needs bytes [", t.offset, ", ", t.offset + t.nbytes,
                   ") of the data section, which holds ", data_size, inside);
    }
    if (before && t.nbytes > 0) {
      const Tensor& p = *before;
      // The earlier tensor's type says it runs into this one: its type or shape disagrees
      // with the space its data was given.
      if (p.offset + p.nbytes > t.offset)
        detail::fail(name, ": tensor '", printable(p.name), "' (", tensor_label(p),
                     ") at data offset ", p.offset, " runs into tensor '", printable(t.name),
                     "' at data offset ", t.offset, ": its type or shape does not match its ",
                     t.offset - p.offset, " bytes of data");
      // The earlier tensor's type says it ends well before the next one starts. Writers lay
      // tensors out back to back, each padded to the alignment (ggml's own reader requires
      // exactly that), so a gap of a whole alignment unit or more means the type or shape
      // claims fewer bytes than the data has (f32 data labelled f16, say), which would be read
      // as garbage. The last tensor's space is not bounded this way: files may end unpadded.
      const uint64_t padded_end = (p.offset + p.nbytes + alignment - 1) / alignment * alignment;
      if (t.offset > padded_end)
        detail::fail(name, ": tensor '", printable(p.name), "' (", tensor_label(p),
                     ") at data offset ", p.offset, " is followed by ", t.offset - padded_end,
                     " unused bytes before tensor '", printable(t.name), "' at data offset ",
                     t.offset, ": its type or shape does not match its ", t.offset - p.offset,
                     " bytes of data");
    }
    // An empty tensor sits where the data before it ends (ggml lays it out so), so it may
    // take the place of the one ending last: a gap after it is then blamed on it.
    if (!before || t.offset + t.nbytes >= before->offset + before->nbytes) before = &t;
    t.data = base + data_start + t.offset;
  }
}

File::File(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
File::File(File&&) noexcept = default;
File& File::operator=(File&&) noexcept = default;
File::~File() = default;

File File::open(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  impl->name = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) detail::fail(path, ": cannot open: ", std::strerror(errno));
  struct stat st;
  if (fstat(fd, &st) != 0) {
    const int e = errno;
    ::close(fd);
    detail::fail(path, ": cannot stat: ", std::strerror(e));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    detail::fail(path, ": not a regular file");
  }
  impl->size = size_t(st.st_size);
  if (impl->size < 4) {
    ::close(fd);
    detail::fail(path, ": too small to be a GGUF file (", impl->size, " bytes)");
  }
  void* p = mmap(nullptr, impl->size, PROT_READ, MAP_PRIVATE, fd, 0);
  const int e = errno;
  ::close(fd);
  if (p == MAP_FAILED) detail::fail(path, ": cannot map: ", std::strerror(e));
  impl->base = static_cast<const uint8_t*>(p);
  impl->mapped = true;
  impl->parse();
  return File(std::move(impl));
}

File File::from_memory(const void* data, size_t size, std::string name) {
  auto impl = std::make_unique<Impl>();
  impl->name = std::move(name);
  impl->base = static_cast<const uint8_t*>(data);
  impl->size = data ? size : 0;
  impl->parse();
  return File(std::move(impl));
}

const std::string& File::name() const { return impl_->name; }
uint32_t File::version() const { return impl_->version; }
uint32_t File::alignment() const { return impl_->alignment; }
size_t File::data_offset() const { return impl_->data_offset; }

bool File::has(std::string_view key) const { return impl_->kv.find(key) != impl_->kv.end(); }
std::vector<std::string> File::keys() const { return impl_->order; }
ValueType File::type_of(std::string_view key) const { return impl_->get(key).type; }

ValueType File::array_type_of(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (v.type != ValueType::array) impl_->mistyped(key, v, "an array");
  return v.elem;
}
uint64_t File::array_size(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (v.type != ValueType::array) impl_->mistyped(key, v, "an array");
  return v.count;
}

std::string File::get_string(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (v.type != ValueType::string) impl_->mistyped(key, v, "string");
  return std::string(v.str);
}

uint64_t File::get_uint(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (!is_integer(v.type)) impl_->mistyped(key, v, "an integer");
  const IntValue x = read_int(v.type, v.data);
  if (x.negative)
    detail::fail(impl_->name, ": metadata key '", key, "' is -", x.magnitude,
                 ", expected a non-negative integer");
  return x.magnitude;
}

int64_t File::get_int(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (!is_integer(v.type)) impl_->mistyped(key, v, "an integer");
  const IntValue x = read_int(v.type, v.data);
  if (!x.negative && x.magnitude > uint64_t(std::numeric_limits<int64_t>::max()))
    detail::fail(impl_->name, ": metadata key '", key, "' = ", x.magnitude,
                 " does not fit in int64");
  return x.negative ? int64_t(uint64_t(0) - x.magnitude) : int64_t(x.magnitude);
}

double File::get_float(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (v.type != ValueType::f32 && v.type != ValueType::f64) impl_->mistyped(key, v, "f32 or f64");
  return read_float(v.type, v.data);
}

bool File::get_bool(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (v.type != ValueType::boolean) impl_->mistyped(key, v, "bool");
  return v.data[0] != 0;
}

std::vector<std::string_view> File::get_string_views(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (v.type != ValueType::array || v.elem != ValueType::string)
    impl_->mistyped(key, v, "an array of string");
  // Every length and byte was bounds-checked when the file was parsed.
  std::vector<std::string_view> out;
  out.reserve(size_t(v.count));
  const uint8_t* p = v.data;
  for (uint64_t j = 0; j < v.count; ++j) {
    uint64_t len;
    std::memcpy(&len, p, 8);
    out.emplace_back(reinterpret_cast<const char*>(p + 8), size_t(len));
    p += 8 + len;
  }
  return out;
}

std::vector<std::string> File::get_string_array(std::string_view key) const {
  std::vector<std::string> out;
  for (std::string_view s : get_string_views(key)) out.emplace_back(s);
  return out;
}

std::vector<float> File::get_float_array(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (v.type != ValueType::array || (v.elem != ValueType::f32 && v.elem != ValueType::f64))
    impl_->mistyped(key, v, "an array of f32 or f64");
  std::vector<float> out(size_t(v.count));
  const size_t es = scalar_size(v.elem);
  for (size_t i = 0; i < out.size(); ++i) out[i] = float(read_float(v.elem, v.data + i * es));
  return out;
}

std::vector<int64_t> File::get_int_array(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  if (v.type != ValueType::array || !is_integer(v.elem))
    impl_->mistyped(key, v, "an array of integers");
  std::vector<int64_t> out(size_t(v.count));
  const size_t es = scalar_size(v.elem);
  for (size_t i = 0; i < out.size(); ++i) {
    const IntValue x = read_int(v.elem, v.data + i * es);
    if (!x.negative && x.magnitude > uint64_t(std::numeric_limits<int64_t>::max()))
      detail::fail(impl_->name, ": metadata key '", key, "' element ", i, " = ", x.magnitude,
                   " does not fit in int64");
    out[i] = x.negative ? int64_t(uint64_t(0) - x.magnitude) : int64_t(x.magnitude);
  }
  return out;
}

std::string File::describe(std::string_view key) const {
  const MetaValue& v = impl_->get(key);
  std::ostringstream os;
  switch (v.type) {
    case ValueType::string: os << '"' << printable(v.str) << '"'; break;
    case ValueType::array: os << '[' << value_type_name(v.elem) << " x " << v.count << ']'; break;
    case ValueType::boolean: os << (v.data[0] ? "true" : "false"); break;
    case ValueType::f32:
    case ValueType::f64: os << read_float(v.type, v.data); break;
    case ValueType::u8:
    case ValueType::i8:
    case ValueType::u16:
    case ValueType::i16:
    case ValueType::u32:
    case ValueType::i32:
    case ValueType::u64:
    case ValueType::i64: {
      const IntValue x = read_int(v.type, v.data);
      os << (x.negative ? "-" : "") << x.magnitude;
    }
  }
  return os.str();
}

int64_t File::Tensor::nelements() const {
  int64_t n = 1;
  for (int64_t d : ne) n *= d;  // checked not to overflow when the file was opened
  return n;
}
int64_t File::Tensor::nrows() const {
  int64_t n = 1;
  for (size_t d = 1; d < ne.size(); ++d) n *= ne[d];
  return n;
}

const std::vector<File::Tensor>& File::tensors() const { return impl_->tensors; }

const File::Tensor* File::find_tensor(std::string_view name) const {
  auto it = impl_->by_name.find(name);
  return it == impl_->by_name.end() ? nullptr : &impl_->tensors[it->second];
}

const File::Tensor& File::tensor(std::string_view name) const {
  const Tensor* t = find_tensor(name);
  if (!t) detail::fail(impl_->name, ": missing tensor '", name, "'");
  return *t;
}

}  // namespace spattn::gguf

// .safetensors reader and writer.
//
// Layout: a u64 little-endian header size N, N bytes of JSON, then the data section. The JSON
// maps each tensor name to {"dtype", "shape", "data_offsets": [begin, end]} with offsets
// relative to the start of the data section; an optional "__metadata__" entry of strings is kept
// for the integer reader (load_modality reads its frame size there) and otherwise ignored.
//
// Validation: every entry must be well formed and lie inside the data section; overlapping
// byte ranges are rejected (no writer produces them, and aliasing tensors are almost always a
// corrupted header). Gaps between tensors and trailing bytes are tolerated. Dtype, rank and
// size rules apply to the tensors actually loaded: read_safetensors loads all of them, the
// subset reader behind load_qkv only the ones asked for, so a file may carry other tensors
// (an I64 position-id tensor, say) next to q, k and v.
#include <algorithm>
#include <set>

#include <nlohmann/json.hpp>

#include "io/io_common.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"

namespace spattn {
namespace {

using nlohmann::json;

// The reference implementation refuses headers over 100 MB; so do we, so that a hostile N
// cannot make us buffer and parse an enormous JSON blob.
constexpr uint64_t kMaxHeaderLen = 100'000'000;

struct Entry {
  std::string name;
  std::string dtype;
  std::vector<int64_t> shape;
  uint64_t begin = 0, end = 0;
};

struct Header {
  std::vector<Entry> entries;
  uint64_t data_start = 0;  // absolute file offset of the data section
  uint64_t data_len = 0;
  std::map<std::string, std::string> metadata;  // "__metadata__": strings (and whole numbers)
};

// A short description of a JSON value for error messages. Containers are only named, not
// printed: a hostile header can nest them deeply enough to blow the recursive serializer's
// stack, or make the message megabytes long.
std::string dump(const json& j) {
  if (j.is_array()) return "an array of " + std::to_string(j.size()) + " elements";
  if (j.is_object()) return "an object";
  std::string s = j.dump(-1, ' ', false, json::error_handler_t::replace);
  return s.size() > 80 ? s.substr(0, 80) + "..." : s;
}

uint64_t as_uint(const json& j, const std::string& what, const char* field) {
  // nlohmann stores non-negative integers as unsigned; negatives and floats fail here.
  SPATTN_CHECK(j.is_number_unsigned(), what, ": '", field,
               "' must hold non-negative integers, got ", dump(j));
  return j.get<uint64_t>();
}

const json& field(const json& entry, const char* key, const std::string& what) {
  auto it = entry.find(key);
  SPATTN_CHECK(it != entry.end(), what, ": missing field '", key, "'");
  return *it;
}

Entry parse_entry(const std::string& name, const json& v, const std::string& path) {
  const std::string what = path + ": tensor '" + name + "'";
  SPATTN_CHECK(v.is_object(), what, ": entry is not a JSON object");
  Entry e;
  e.name = name;

  const json& dtype = field(v, "dtype", what);
  SPATTN_CHECK(dtype.is_string(), what, ": 'dtype' must be a string, got ", dump(dtype));
  e.dtype = dtype.get<std::string>();

  const json& shape = field(v, "shape", what);
  SPATTN_CHECK(shape.is_array(), what, ": 'shape' must be an array, got ", dump(shape));
  for (const json& d : shape) {
    const uint64_t u = as_uint(d, what, "shape");
    SPATTN_CHECK(u <= uint64_t(INT64_MAX), what, ": dimension ", u, " in 'shape' is too large");
    e.shape.push_back(int64_t(u));
  }

  const json& offs = field(v, "data_offsets", what);
  SPATTN_CHECK(offs.is_array() && offs.size() == 2, what,
               ": 'data_offsets' must be an array [begin, end], got ", dump(offs));
  e.begin = as_uint(offs[0], what, "data_offsets");
  e.end = as_uint(offs[1], what, "data_offsets");
  return e;
}

// Offsets must be ordered, inside the data section, and must not overlap each other.
void check_offsets(std::vector<Entry>& entries, uint64_t data_len, const std::string& path) {
  for (const Entry& e : entries) {
    SPATTN_CHECK(e.begin <= e.end, path, ": tensor '", e.name, "': data_offsets [", e.begin, ", ",
                 e.end, "] has begin > end");
    SPATTN_CHECK(e.end <= data_len, path, ": tensor '", e.name, "': data_offsets [", e.begin, ", ",
                 e.end, "] out of range: the data section holds only ", data_len, " bytes");
  }
  std::sort(entries.begin(), entries.end(),
            [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  const Entry* prev = nullptr;
  for (const Entry& e : entries) {
    if (e.begin == e.end) continue;  // empty ranges cannot overlap anything
    SPATTN_CHECK(!prev || prev->end <= e.begin, path, ": tensors '", prev ? prev->name : "",
                 "' and '", e.name, "' have overlapping data_offsets [", prev ? prev->begin : 0,
                 ", ", prev ? prev->end : 0, "] and [", e.begin, ", ", e.end, "]");
    prev = &e;
  }
}

Header read_header(std::ifstream& in, uint64_t size, const std::string& path) {
  SPATTN_CHECK(size > 0, path, ": empty file");
  SPATTN_CHECK(size >= 8, path, ": truncated header: file is only ", size,
               " bytes, too short for the 8-byte header size");
  unsigned char nbuf[8];
  io::read_exact(in, nbuf, 8, path);
  uint64_t n = 0;
  for (int i = 7; i >= 0; --i) n = (n << 8) | nbuf[i];
  SPATTN_CHECK(n <= size - 8, path, ": header size ", n, " runs past the end of the file (only ",
               size - 8, " bytes follow); is this a .safetensors file?");
  SPATTN_CHECK(n <= kMaxHeaderLen, path, ": header size ", n, " exceeds the ", kMaxHeaderLen,
               "-byte limit");

  std::string text(n, '\0');
  io::read_exact(in, text.data(), n, path);
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    detail::fail(path, ": malformed JSON header: ", e.what());
  }
  SPATTN_CHECK(j.is_object(), path, ": JSON header must be an object, got ", j.type_name());

  Header h;
  h.data_start = 8 + n;
  h.data_len = size - h.data_start;
  for (const auto& [name, v] : j.items()) {
    if (name == "__metadata__") {
      if (v.is_object())
        for (const auto& [key, value] : v.items()) {
          if (value.is_string())
            h.metadata[key] = value.get<std::string>();
          else if (value.is_number_integer())
            h.metadata[key] = value.dump();
        }
      continue;
    }
    h.entries.push_back(parse_entry(name, v, path));
  }
  check_offsets(h.entries, h.data_len, path);
  return h;
}

DType dtype_of(const Entry& e, const std::string& what) {
  if (e.dtype == "F32") return DType::f32;
  if (e.dtype == "BF16") return DType::bf16;
  if (e.dtype == "F16") return DType::f16;
  detail::fail(what, ": unsupported dtype '", e.dtype, "' (expected F32, BF16 or F16)");
}

const char* st_name(DType t) {
  switch (t) {
    case DType::f32: return "F32";
    case DType::bf16: return "BF16";
    case DType::f16: return "F16";
  }
  return "?";
}

Tensor load_entry(std::ifstream& in, const Header& h, const Entry& e, Layout layout,
                  const std::string& path) {
  const std::string what = path + ": tensor '" + e.name + "'";
  const DType dtype = dtype_of(e, what);
  const io::Shape3 s3 = io::to_hsd(e.shape, layout, what);
  uint64_t nbytes = 0;
  SPATTN_CHECK(io::checked_nbytes(e.shape, dtype_size(dtype), nbytes), what, ": shape ",
               io::shape_str(e.shape), " of ", e.dtype, " has a byte size that overflows 64 bits");
  SPATTN_CHECK(nbytes == e.end - e.begin, what, ": size mismatch: shape ", io::shape_str(e.shape),
               " of ", e.dtype, " needs ", nbytes, " bytes but data_offsets [", e.begin, ", ",
               e.end, "] span ", e.end - e.begin);
  in.seekg(std::streamoff(h.data_start + e.begin));
  SPATTN_CHECK(in.good(), what, ": seek to data failed");
  return io::read_array(in, dtype, s3, layout, what);
}

std::string names_of(const Header& h) {
  std::vector<std::string> names;
  for (const Entry& e : h.entries) names.push_back("'" + e.name + "'");
  std::sort(names.begin(), names.end());
  std::string s;
  for (const std::string& n : names) s += (s.empty() ? "" : ", ") + n;
  return s.empty() ? "none" : s;
}

}  // namespace

namespace io {

std::map<std::string, Tensor> read_safetensors_subset(const std::string& path, Layout layout,
                                                      const std::vector<std::string>& names) {
  uint64_t size = 0;
  std::ifstream in = open_for_read(path, size);
  const Header h = read_header(in, size, path);
  std::map<std::string, Tensor> out;
  for (const std::string& name : names) {
    auto it = std::find_if(h.entries.begin(), h.entries.end(),
                           [&](const Entry& e) { return e.name == name; });
    SPATTN_CHECK(it != h.entries.end(), path, ": no tensor named '", name,
                 "' (tensors in file: ", names_of(h), ")");
    out[name] = load_entry(in, h, *it, layout, path);
  }
  return out;
}

IntArray read_safetensors_ints(const std::string& path, const std::string& name) {
  uint64_t size = 0;
  std::ifstream in = open_for_read(path, size);
  const Header h = read_header(in, size, path);
  auto it = std::find_if(h.entries.begin(), h.entries.end(),
                         [&](const Entry& e) { return e.name == name; });
  SPATTN_CHECK(it != h.entries.end(), path, ": no tensor named '", name,
               "' (tensors in file: ", names_of(h), ")");
  const Entry& e = *it;
  const std::string what = path + ": tensor '" + name + "'";
  static const std::map<std::string, IntType> kTypes = {
      {"I8", {1, true}},   {"U8", {1, false}},  {"BOOL", {1, false}},
      {"I16", {2, true}},  {"U16", {2, false}}, {"I32", {4, true}},
      {"U32", {4, false}}, {"I64", {8, true}},  {"U64", {8, false}}};
  const auto t = kTypes.find(e.dtype);
  SPATTN_CHECK(t != kTypes.end(), what, ": dtype '", e.dtype,
               "' is not an integer type (expected I8, U8, I16, U16, I32, U32, I64, U64 or BOOL)");
  uint64_t nbytes = 0;
  SPATTN_CHECK(checked_nbytes(e.shape, uint64_t(t->second.itemsize), nbytes), what, ": shape ",
               shape_str(e.shape), " of ", e.dtype, " has a byte size that overflows 64 bits");
  SPATTN_CHECK(nbytes == e.end - e.begin, what, ": size mismatch: shape ", shape_str(e.shape),
               " of ", e.dtype, " needs ", nbytes, " bytes but data_offsets [", e.begin, ", ",
               e.end, "] span ", e.end - e.begin);
  in.seekg(std::streamoff(h.data_start + e.begin));
  SPATTN_CHECK(in.good(), what, ": seek to data failed");
  std::vector<char> buf(nbytes);
  read_exact(in, buf.data(), nbytes, what);
  return {decode_ints(buf.data(), nbytes / uint64_t(t->second.itemsize), t->second), e.shape,
          h.metadata};
}

}  // namespace io

std::map<std::string, Tensor> read_safetensors(const std::string& path, Layout layout) {
  uint64_t size = 0;
  std::ifstream in = io::open_for_read(path, size);
  const Header h = read_header(in, size, path);
  std::map<std::string, Tensor> out;
  for (const Entry& e : h.entries) out[e.name] = load_entry(in, h, e, layout, path);
  return out;
}

void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, TensorView>>& tensors) {
  json header = json::object();
  std::set<std::string> seen;
  uint64_t offset = 0;
  for (const auto& [name, t] : tensors) {
    const std::string what = path + ": tensor '" + name + "'";
    SPATTN_CHECK(!name.empty(), path, ": tensor names must not be empty");
    SPATTN_CHECK(name != "__metadata__", what, ": name is reserved for metadata");
    SPATTN_CHECK(seen.insert(name).second, what, ": duplicate tensor name");
    io::check_writable(t, what);
    const uint64_t nbytes = uint64_t(t.numel()) * dtype_size(t.dtype);
    header[name] = {{"dtype", st_name(t.dtype)},
                    {"shape", {t.heads, t.seq, t.dim}},
                    {"data_offsets", {offset, offset + nbytes}}};
    offset += nbytes;
  }
  std::string text;
  try {
    text = header.dump();
  } catch (const json::exception& e) {  // e.g. a tensor name that is not valid UTF-8
    detail::fail(path, ": cannot encode header: ", e.what());
  }
  // Pad with spaces to a multiple of 8, as the reference implementation does, so the data
  // section starts 8-byte aligned for readers that map the file.
  text.append((8 - text.size() % 8) % 8, ' ');

  std::ofstream out = io::open_for_write(path);
  char nbuf[8];
  uint64_t n = text.size();
  for (char& c : nbuf) c = char(n & 0xff), n >>= 8;
  out.write(nbuf, 8);
  out.write(text.data(), std::streamsize(text.size()));
  for (const auto& [name, t] : tensors) io::write_hsd(out, t);
  io::finish_write(out, path);
}

}  // namespace spattn

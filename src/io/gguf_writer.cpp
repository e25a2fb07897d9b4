// GGUF writer: metadata in insertion order, tensor infos, padding to the alignment, then the
// tensor data (each tensor at an aligned offset). See gguf_reader.cpp for the layout.
#include <cstring>
#include <fstream>

#include "spattn/error.hpp"
#include "spattn/gguf.hpp"

namespace spattn::gguf {

namespace {

void put_bytes(std::vector<uint8_t>& out, const void* p, size_t n) {
  // resize + memcpy rather than insert(): GCC 12 warns falsely about insert of small spans.
  const size_t at = out.size();
  out.resize(at + n);
  if (n) std::memcpy(out.data() + at, p, n);
}
template <class T>
void put(std::vector<uint8_t>& out, T v) {
  put_bytes(out, &v, sizeof v);
}
void put_string(std::vector<uint8_t>& out, std::string_view s) {
  put<uint64_t>(out, s.size());
  put_bytes(out, s.data(), s.size());
}

template <class T>
std::vector<uint8_t> scalar_payload(T v) {
  std::vector<uint8_t> p;
  put(p, v);
  return p;
}
template <class T>
std::vector<uint8_t> array_payload(ValueType elem, const std::vector<T>& v) {
  std::vector<uint8_t> p;
  put<uint32_t>(p, uint32_t(elem));
  put<uint64_t>(p, v.size());
  for (const T& x : v) put(p, x);
  return p;
}

}  // namespace

struct Writer::Impl {
  uint32_t version = 3;
  struct KV {
    std::string key;
    ValueType type;
    std::vector<uint8_t> payload;  // everything after the u32 value type
  };
  std::vector<KV> kv;
  struct T {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;
    RowFill fill;
    size_t row_bytes = 0;
    int64_t rows = 0;
  };
  std::vector<T> tensors;

  void set(std::string key, ValueType type, std::vector<uint8_t> payload) {
    for (KV& e : kv)
      if (e.key == key) {
        e.type = type;
        e.payload = std::move(payload);
        return;
      }
    kv.push_back({std::move(key), type, std::move(payload)});
  }
};

Writer::Writer() : impl_(std::make_unique<Impl>()) {}
Writer::~Writer() = default;
Writer::Writer(Writer&&) noexcept = default;
Writer& Writer::operator=(Writer&&) noexcept = default;

void Writer::set_version(uint32_t v) {
  SPATTN_CHECK(v == 2 || v == 3, "gguf writer: version must be 2 or 3, got ", v);
  impl_->version = v;
}

void Writer::set(std::string k, uint8_t v) {
  impl_->set(std::move(k), ValueType::u8, scalar_payload(v));
}
void Writer::set(std::string k, int8_t v) {
  impl_->set(std::move(k), ValueType::i8, scalar_payload(v));
}
void Writer::set(std::string k, uint16_t v) {
  impl_->set(std::move(k), ValueType::u16, scalar_payload(v));
}
void Writer::set(std::string k, int16_t v) {
  impl_->set(std::move(k), ValueType::i16, scalar_payload(v));
}
void Writer::set(std::string k, uint32_t v) {
  impl_->set(std::move(k), ValueType::u32, scalar_payload(v));
}
void Writer::set(std::string k, int32_t v) {
  impl_->set(std::move(k), ValueType::i32, scalar_payload(v));
}
void Writer::set(std::string k, uint64_t v) {
  impl_->set(std::move(k), ValueType::u64, scalar_payload(v));
}
void Writer::set(std::string k, int64_t v) {
  impl_->set(std::move(k), ValueType::i64, scalar_payload(v));
}
void Writer::set(std::string k, float v) {
  impl_->set(std::move(k), ValueType::f32, scalar_payload(v));
}
void Writer::set(std::string k, double v) {
  impl_->set(std::move(k), ValueType::f64, scalar_payload(v));
}
void Writer::set(std::string k, bool v) {
  impl_->set(std::move(k), ValueType::boolean, scalar_payload(uint8_t(v ? 1 : 0)));
}
void Writer::set(std::string k, std::string v) {
  std::vector<uint8_t> p;
  put_string(p, v);
  impl_->set(std::move(k), ValueType::string, std::move(p));
}
void Writer::set(std::string k, const char* v) { set(std::move(k), std::string(v)); }

void Writer::set(std::string k, const std::vector<std::string>& v) {
  std::vector<uint8_t> p;
  put<uint32_t>(p, uint32_t(ValueType::string));
  put<uint64_t>(p, v.size());
  for (const std::string& s : v) put_string(p, s);
  impl_->set(std::move(k), ValueType::array, std::move(p));
}
void Writer::set(std::string k, const std::vector<float>& v) {
  impl_->set(std::move(k), ValueType::array, array_payload(ValueType::f32, v));
}
void Writer::set(std::string k, const std::vector<double>& v) {
  impl_->set(std::move(k), ValueType::array, array_payload(ValueType::f64, v));
}
void Writer::set(std::string k, const std::vector<int32_t>& v) {
  impl_->set(std::move(k), ValueType::array, array_payload(ValueType::i32, v));
}
void Writer::set(std::string k, const std::vector<uint32_t>& v) {
  impl_->set(std::move(k), ValueType::array, array_payload(ValueType::u32, v));
}
void Writer::set(std::string k, const std::vector<int64_t>& v) {
  impl_->set(std::move(k), ValueType::array, array_payload(ValueType::i64, v));
}
void Writer::set(std::string k, const std::vector<uint8_t>& v) {
  impl_->set(std::move(k), ValueType::array, array_payload(ValueType::u8, v));
}
void Writer::set(std::string k, const std::vector<bool>& v) {
  std::vector<uint8_t> b(v.begin(), v.end());
  impl_->set(std::move(k), ValueType::array, array_payload(ValueType::boolean, b));
}
void Writer::set_raw(std::string k, ValueType type, std::vector<uint8_t> payload) {
  impl_->set(std::move(k), type, std::move(payload));
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne,
                        const void* data) {
  SPATTN_CHECK(data != nullptr, "gguf writer: tensor '", name, "' has no data");
  const auto* base = static_cast<const uint8_t*>(data);
  SPATTN_CHECK(!ne.empty(), "gguf writer: tensor '", name, "' has no dimensions");
  const size_t rb = row_bytes(type, ne[0]);
  add_tensor(std::move(name), type, std::move(ne),
             [base, rb](int64_t row, uint8_t* dst) { std::memcpy(dst, base + row * rb, rb); });
}

void Writer::add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, RowFill fill) {
  SPATTN_CHECK(!name.empty(), "gguf writer: tensor name is empty");
  SPATTN_CHECK(ne.size() >= 1 && ne.size() <= 4, "gguf writer: tensor '", name, "' has ", ne.size(),
               " dimensions (1 to 4 allowed)");
  for (const auto& t : impl_->tensors)
    SPATTN_CHECK(t.name != name, "gguf writer: duplicate tensor '", name, "'");
  int64_t rows = 1;
  for (size_t d = 0; d < ne.size(); ++d) {
    SPATTN_CHECK(ne[d] >= 1, "gguf writer: tensor '", name, "' dimension ", d, " is ", ne[d]);
    if (d) rows *= ne[d];
  }
  const size_t rb = row_bytes(type, ne[0]);
  impl_->tensors.push_back({std::move(name), type, std::move(ne), std::move(fill), rb, rows});
}

namespace {

// Everything before the data section, and each tensor's offset within it.
std::vector<uint8_t> header(const Writer::Impl& w, uint32_t alignment,
                            std::vector<uint64_t>& offsets) {
  std::vector<uint8_t> out;
  put_bytes(out, "GGUF", 4);
  put<uint32_t>(out, w.version);
  put<uint64_t>(out, w.tensors.size());
  bool has_alignment = false;
  for (const auto& e : w.kv) has_alignment = has_alignment || e.key == "general.alignment";
  const bool add_alignment = !has_alignment && alignment != 32;
  put<uint64_t>(out, w.kv.size() + (add_alignment ? 1 : 0));
  for (const auto& e : w.kv) {
    put_string(out, e.key);
    put<uint32_t>(out, uint32_t(e.type));
    put_bytes(out, e.payload.data(), e.payload.size());
  }
  if (add_alignment) {
    put_string(out, "general.alignment");
    put<uint32_t>(out, uint32_t(ValueType::u32));
    put<uint32_t>(out, alignment);
  }
  uint64_t off = 0;
  offsets.clear();
  for (const auto& t : w.tensors) {
    put_string(out, t.name);
    put<uint32_t>(out, uint32_t(t.ne.size()));
    for (int64_t d : t.ne) put<uint64_t>(out, uint64_t(d));
    put<uint32_t>(out, uint32_t(t.type));
    put<uint64_t>(out, off);
    offsets.push_back(off);
    off += (uint64_t(t.row_bytes) * uint64_t(t.rows) + alignment - 1) / alignment * alignment;
  }
  out.resize((out.size() + alignment - 1) / alignment * alignment, 0);
  return out;
}

}  // namespace

std::vector<uint8_t> Writer::bytes(uint32_t alignment) const {
  SPATTN_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "gguf writer: alignment ",
               alignment, " is not a power of two");
  std::vector<uint64_t> offsets;
  std::vector<uint8_t> out = header(*impl_, alignment, offsets);
  const size_t data_start = out.size();
  for (size_t i = 0; i < impl_->tensors.size(); ++i) {
    const auto& t = impl_->tensors[i];
    out.resize(data_start + offsets[i] + t.row_bytes * size_t(t.rows), 0);
    for (int64_t r = 0; r < t.rows; ++r)
      t.fill(r, out.data() + data_start + offsets[i] + size_t(r) * t.row_bytes);
  }
  return out;
}

void Writer::write(const std::string& path, uint32_t alignment) const {
  SPATTN_CHECK(alignment > 0 && (alignment & (alignment - 1)) == 0, "gguf writer: alignment ",
               alignment, " is not a power of two");
  std::vector<uint64_t> offsets;
  const std::vector<uint8_t> head = header(*impl_, alignment, offsets);
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  SPATTN_CHECK(out.is_open(), path, ": cannot open for writing");
  out.write(reinterpret_cast<const char*>(head.data()), std::streamsize(head.size()));
  uint64_t written = 0;  // bytes of the data section so far
  std::vector<uint8_t> row;
  for (size_t i = 0; i < impl_->tensors.size(); ++i) {
    const auto& t = impl_->tensors[i];
    if (offsets[i] > written) {
      const std::vector<char> pad(size_t(offsets[i] - written), 0);
      out.write(pad.data(), std::streamsize(pad.size()));
      written = offsets[i];
    }
    row.assign(t.row_bytes, 0);
    for (int64_t r = 0; r < t.rows; ++r) {
      t.fill(r, row.data());
      out.write(reinterpret_cast<const char*>(row.data()), std::streamsize(row.size()));
    }
    written += uint64_t(t.row_bytes) * uint64_t(t.rows);
  }
  out.flush();
  SPATTN_CHECK(bool(out), path, ": write failed (disk full?)");
}

}  // namespace spattn::gguf

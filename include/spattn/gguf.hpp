// GGUF files (the format llama.cpp loads models from), versions 2 and 3: a memory-mapped
// reader and a writer.
//
// The reader treats the file as hostile: every count, length, offset and shape is checked
// against the bytes that are really there before it is used, and anything wrong raises
// spattn::Error naming the file and the problem. Tensor data is never copied: Tensor::data
// points into the mapping, which lives as long as the File.
#pragma once
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace spattn::gguf {

// ggml tensor types, numbered as ggml numbers them. The reader accepts every type ggml defines
// (sizes from ggml's own type table); ids ggml removed or never used are rejected naming them.
// Which types a model may use is the model loader's rule (model.hpp).
// A table: rows grouped by hand, not one field a line.
// clang-format off
enum class GgmlType : uint32_t {
  f32 = 0, f16 = 1, q4_0 = 2, q4_1 = 3, q5_0 = 6, q5_1 = 7, q8_0 = 8, q8_1 = 9,
  q2_K = 10, q3_K = 11, q4_K = 12, q5_K = 13, q6_K = 14, q8_K = 15,
  iq2_xxs = 16, iq2_xs = 17, iq3_xxs = 18, iq1_s = 19, iq4_nl = 20, iq3_s = 21, iq2_s = 22,
  iq4_xs = 23, i8 = 24, i16 = 25, i32 = 26, i64 = 27, f64 = 28, iq1_m = 29, bf16 = 30,
  tq1_0 = 34, tq2_0 = 35, mxfp4 = 39,
};
// clang-format on
bool is_known_type(uint32_t id);    // a type ggml defines (with a block size)
const char* type_name(GgmlType t);  // ggml's name: "f32", "q8_0", "q4_K", "iq4_xs", ...
// Elements per block and bytes per block (q8_0: 32 values in 34 bytes; f32: 1 value, 4 bytes).
int64_t block_size(GgmlType t);
int64_t block_bytes(GgmlType t);
// Bytes of one row of `n` elements; throws if n is not a whole number of blocks.
size_t row_bytes(GgmlType t, int64_t n);

// Metadata value types, numbered as in the GGUF specification.
// A table: rows grouped by hand, not one field a line.
// clang-format off
enum class ValueType : uint32_t {
  u8 = 0, i8 = 1, u16 = 2, i16 = 3, u32 = 4, i32 = 5, f32 = 6, boolean = 7,
  string = 8, array = 9, u64 = 10, i64 = 11, f64 = 12,
};
// clang-format on
const char* value_type_name(ValueType t);  // "u32", "string", "array", ...

class File {
 public:
  // Maps `path` read-only and parses it; throws Error naming the problem.
  static File open(const std::string& path);
  // Parses `size` bytes at `data` in place (the fuzz target and tests use it). The bytes are
  // not copied: they must outlive the File. `name` prefixes error messages.
  static File from_memory(const void* data, size_t size, std::string name = "<memory>");

  File(File&&) noexcept;
  File& operator=(File&&) noexcept;
  File(const File&) = delete;
  File& operator=(const File&) = delete;
  ~File();

  const std::string& name() const;  // the path, for messages
  uint32_t version() const;
  uint32_t alignment() const;  // general.alignment, or 32
  size_t data_offset() const;  // where the tensor data section starts in the file

  bool has(std::string_view key) const;
  std::vector<std::string> keys() const;                // in file order
  ValueType type_of(std::string_view key) const;        // throws if absent
  ValueType array_type_of(std::string_view key) const;  // element type; throws if not an array
  uint64_t array_size(std::string_view key) const;      // throws if not an array

  // Typed getters: throw Error naming the key and its type when absent or mistyped.
  std::string get_string(std::string_view key) const;
  uint64_t get_uint(std::string_view key) const;  // any integer type with a value >= 0
  int64_t get_int(std::string_view key) const;    // any integer type that fits in int64
  double get_float(std::string_view key) const;   // f32 or f64
  bool get_bool(std::string_view key) const;
  std::vector<std::string> get_string_array(std::string_view key) const;
  std::vector<std::string_view> get_string_views(std::string_view key) const;  // into the map
  std::vector<float> get_float_array(std::string_view key) const;              // f32/f64 elements
  std::vector<int64_t> get_int_array(std::string_view key) const;              // integer elements
  // One-line rendering of any value ("4096", "\"llama\"", "[string x 4096]"), for dumps.
  std::string describe(std::string_view key) const;

  struct Tensor {
    std::string name;
    GgmlType type;
    std::vector<int64_t> ne;  // ne[0] is the fastest-varying dimension, as in ggml
    const uint8_t* data;      // into the mapping
    size_t nbytes;
    uint64_t offset;  // relative to data_offset()
    int64_t nelements() const;
    int64_t nrows() const;  // product of ne[1..]
  };
  const std::vector<Tensor>& tensors() const;
  const Tensor* find_tensor(std::string_view name) const;  // nullptr if absent
  const Tensor& tensor(std::string_view name) const;       // throws naming it

  struct Impl;

 private:
  explicit File(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Converts `n` elements of type `t` at `src` to f32 (n whole blocks; ggml's decoder). Throws
// for types ggml cannot convert (integer types).
void dequantize_row(GgmlType t, const uint8_t* src, float* dst, int64_t n);
// Converts `n` f32 values to type `t` as ggml quantizes them (q8_0: d = max|x| / 127). Throws
// for types that need an importance matrix or have no quantizer.
void quantize_row(GgmlType t, const float* src, uint8_t* dst, int64_t n);

// Builds a GGUF file. Values and tensors are written in the order they were added.
class Writer {
 public:
  Writer();
  ~Writer();
  Writer(Writer&&) noexcept;
  Writer& operator=(Writer&&) noexcept;

  void set_version(uint32_t v);  // 2 or 3 (default 3)

  // Scalars: the value type follows the C++ type (uint8_t -> u8, int32_t -> i32, float ->
  // f32, double -> f64, bool -> bool, ...). Setting a key twice replaces the value.
  void set(std::string key, uint8_t v);
  void set(std::string key, int8_t v);
  void set(std::string key, uint16_t v);
  void set(std::string key, int16_t v);
  void set(std::string key, uint32_t v);
  void set(std::string key, int32_t v);
  void set(std::string key, uint64_t v);
  void set(std::string key, int64_t v);
  void set(std::string key, float v);
  void set(std::string key, double v);
  void set(std::string key, bool v);
  void set(std::string key, std::string v);
  void set(std::string key, const char* v);
  // Arrays.
  void set(std::string key, const std::vector<std::string>& v);
  void set(std::string key, const std::vector<float>& v);
  void set(std::string key, const std::vector<double>& v);
  void set(std::string key, const std::vector<int32_t>& v);
  void set(std::string key, const std::vector<uint32_t>& v);
  void set(std::string key, const std::vector<int64_t>& v);
  void set(std::string key, const std::vector<uint8_t>& v);
  void set(std::string key, const std::vector<bool>& v);
  // Any value from raw payload bytes (tests build odd and hostile values with it).
  void set_raw(std::string key, ValueType type, std::vector<uint8_t> payload);

  // A tensor whose bytes (row_bytes(type, ne[0]) * rows) are at `data`; they are read when
  // write() runs, so they must stay alive until then.
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, const void* data);
  // A tensor generated row by row at write time (the model maker writes big models this way
  // without holding them in memory): fill(row, dst) writes row `row`'s bytes.
  using RowFill = std::function<void(int64_t row, uint8_t* dst)>;
  void add_tensor(std::string name, GgmlType type, std::vector<int64_t> ne, RowFill fill);

  void write(const std::string& path, uint32_t alignment = 32) const;
  std::vector<uint8_t> bytes(uint32_t alignment = 32) const;  // the whole file in memory

  struct Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace spattn::gguf

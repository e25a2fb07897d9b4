// Pieces shared by the .npy and .safetensors readers and writers (private to src/io).
// Every reader treats the file as hostile: sizes from headers are checked against the
// real file size before anything is allocated or read.
#pragma once
#include <cstdint>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "spattn/io.hpp"
#include "spattn/tensor.hpp"

namespace spattn::io {

// [heads, seq, dim] of an array after applying the rank rules and the layout.
struct Shape3 {
  int64_t heads = 0, seq = 0, dim = 0;
};

// "(4, 1024, 128)", the way numpy prints shapes; used in error messages.
std::string shape_str(const std::vector<int64_t>& shape);

// Rank 2 [seq, dim] is one head; rank 3 is [h, s, d] (hsd) or [s, h, d] (shd); rank 4 needs a
// leading 1. Zero dims are rejected. `what` prefixes the error ("q.npy" or "x.st: tensor 'q'").
Shape3 to_hsd(const std::vector<int64_t>& shape, Layout layout, const std::string& what);

// product(shape) * itemsize, or false when it does not fit in int64 (a lying header).
bool checked_nbytes(const std::vector<int64_t>& shape, uint64_t itemsize, uint64_t& out);

// Opens `path` for binary reading and returns its size; throws Error naming the path if it
// does not exist, is a directory, or cannot be opened.
std::ifstream open_for_read(const std::string& path, uint64_t& file_size);

// Reads `nbytes` from `in` into `dst`; throws naming `what` if the stream comes up short
// (the file shrank after it was sized, or an I/O error).
void read_exact(std::ifstream& in, void* dst, uint64_t nbytes, const std::string& what);

// Reads a C-order array from the current position of `in` into a fresh [h, s, d] tensor.
// With Layout::shd the disk order is [s, h, d] and is transposed while reading.
Tensor read_array(std::ifstream& in, DType dtype, Shape3 shape, Layout layout,
                  const std::string& what);

// Writes any view as C-order [h, s, d] raw bytes of its own dtype (no conversion, so the
// bits, NaN payloads included, survive a round trip).
void write_hsd(std::ofstream& out, const TensorView& t);

// Rejects views a reader could not load back (zero dims, null data), naming `what`.
void check_writable(const TensorView& t, const std::string& what);

// Opens `path` for writing (truncating) and throws naming the path on failure.
std::ofstream open_for_write(const std::string& path);
// Flushes and closes, throwing if any write failed (disk full, ...).
void finish_write(std::ofstream& out, const std::string& path);

// Loads only the named tensors of a .safetensors file (load_qkv uses it so that unrelated
// tensors of other dtypes do not get in the way). Throws naming any name that is missing.
std::map<std::string, Tensor> read_safetensors_subset(const std::string& path, Layout layout,
                                                      const std::vector<std::string>& names);

// An integer element type as stored on disk (little-endian).
struct IntType {
  int itemsize = 4;  // 1, 2, 4 or 8 bytes
  bool is_signed = true;
};
// `n` stored integers widened to int64; unsigned 64-bit values above INT64_MAX saturate there
// (no caller has a use for them but to reject them).
std::vector<int64_t> decode_ints(const char* bytes, uint64_t n, IntType t);

// An integer array as stored: its values in C order, its shape, and (safetensors only) the
// file's `__metadata__` strings.
struct IntArray {
  std::vector<int64_t> values;
  std::vector<int64_t> shape;
  std::map<std::string, std::string> metadata;
};
// A .npy integer (or bool) array; any other dtype is an Error naming it.
IntArray read_npy_ints(const std::string& path);
// The integer (or BOOL) tensor `name` of a .safetensors file, with the file's metadata.
IntArray read_safetensors_ints(const std::string& path, const std::string& name);
// A (n,) '|u1' .npy array.
void write_npy_u8(const std::string& path, const std::vector<uint8_t>& values);

}  // namespace spattn::io

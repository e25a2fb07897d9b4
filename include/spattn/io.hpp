// Reading and writing tensors as .npy and .safetensors. Both parsers treat the file as
// hostile: every header field is checked against the file size before use.
#pragma once
#include <map>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "spattn/tensor.hpp"

namespace spattn {

// How a rank-3 array on disk maps to [heads, seq, dim]. Rank 2 means one head [seq, dim];
// rank 4 needs a leading batch dimension of 1.
enum class Layout { hsd, shd };
Layout parse_layout(std::string_view s);  // "hsd" | "shd"

// .npy: little-endian '<f4', '<f2', and bf16 stored as '<V2' or "bfloat16" (as ml_dtypes
// writes it); C order (fortran_order False).
Tensor read_npy(const std::string& path, Layout layout = Layout::hsd);
// Writes any view as C-order [h, s, d] with descr '<f4', '<f2', or '<V2' for bf16 (numpy loads
// that as raw 2-byte voids: use arr.view(ml_dtypes.bfloat16)).
void write_npy(const std::string& path, const TensorView& t);

// .safetensors: F32, BF16, F16 tensors.
std::map<std::string, Tensor> read_safetensors(const std::string& path,
                                               Layout layout = Layout::hsd);
void write_safetensors(const std::string& path,
                       const std::vector<std::pair<std::string, TensorView>>& tensors);

struct QKV {
  Tensor q, k, v;
};
// A .safetensors file holding tensors named q, k, v; or a directory / prefix with
// q.npy, k.npy, v.npy (prefix: "<prefix>q.npy"). Throws Error naming what is missing.
QKV load_qkv(const std::string& path, Layout layout = Layout::hsd);
// The inverse: a path ending in .safetensors gets one file with tensors q, k, v; an existing
// directory gets q.npy, k.npy, v.npy in it; anything else is a prefix ("<prefix>q.npy").
// Arrays are written [h, s, d]. Throws Error on mixed dtypes, a .npy path, or a failed write.
void save_qkv(const std::string& path, const TensorView& q, const TensorView& k,
              const TensorView& v);

}  // namespace spattn

// load_qkv: one entry point for the three ways Q, K and V arrive on disk; save_qkv, its inverse;
// and parse_layout.
#include <filesystem>
#include <system_error>

#include "io/io_common.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"

namespace spattn {
namespace {

namespace fs = std::filesystem;

// Attention kernels take one storage dtype for q, k and v; catching a mix here gives a message
// that names the files instead of a shape/dtype error deep inside a kernel.
void check_same_dtype(const QKV& x, const std::string (&names)[3]) {
  const Tensor* t[3] = {&x.q, &x.k, &x.v};
  for (int i = 1; i < 3; ++i)
    SPATTN_CHECK(t[i]->dtype() == t[0]->dtype(), "load_qkv: dtype mismatch: ", names[i], " is ",
                 dtype_name(t[i]->dtype()), " but ", names[0], " is ", dtype_name(t[0]->dtype()),
                 "; q, k and v must share one dtype");
}

bool ends_with(const std::string& s, std::string_view suffix) {
  return s.size() >= suffix.size() &&
         s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

QKV load_safetensors_qkv(const std::string& path, Layout layout) {
  std::map<std::string, Tensor> m = io::read_safetensors_subset(path, layout, {"q", "k", "v"});
  QKV x{std::move(m["q"]), std::move(m["k"]), std::move(m["v"])};
  const std::string names[3] = {path + ": tensor 'q'", path + ": tensor 'k'",
                                path + ": tensor 'v'"};
  check_same_dtype(x, names);
  return x;
}

// `prefix` is either "<dir>/" or a caller-given prefix; `how` explains which in errors.
QKV load_npy_qkv(const std::string& prefix, const std::string& how, Layout layout) {
  const std::string names[3] = {prefix + "q.npy", prefix + "k.npy", prefix + "v.npy"};
  // Check all three before reading any: q alone may be gigabytes.
  for (const std::string& f : names) {
    std::error_code ec;
    SPATTN_CHECK(fs::exists(f, ec), "load_qkv: ", f, " not found (", how, ")");
  }
  QKV x{read_npy(names[0], layout), read_npy(names[1], layout), read_npy(names[2], layout)};
  check_same_dtype(x, names);
  return x;
}

}  // namespace

Layout parse_layout(std::string_view s) {
  if (s == "hsd") return Layout::hsd;
  if (s == "shd") return Layout::shd;
  detail::fail("unknown layout '", s, "' (expected hsd or shd)");
}

QKV load_qkv(const std::string& path, Layout layout) {
  std::error_code ec;
  const fs::file_status st = fs::status(path, ec);
  if (fs::is_regular_file(st)) {
    SPATTN_CHECK(!ends_with(path, ".npy"), "load_qkv: ", path,
                 " is a single .npy file; pass a .safetensors file, a directory holding q.npy, "
                 "k.npy and v.npy, or the prefix they share");
    return load_safetensors_qkv(path, layout);
  }
  if (fs::is_directory(st))
    return load_npy_qkv((fs::path(path) / "").string(),
                        "expected q.npy, k.npy and v.npy in directory " + path, layout);
  return load_npy_qkv(path,
                      "'" + path +
                          "' is neither a file nor a directory, so it was taken as the "
                          "prefix of <prefix>q.npy, <prefix>k.npy, <prefix>v.npy",
                      layout);
}

void save_qkv(const std::string& path, const TensorView& q, const TensorView& k,
              const TensorView& v) {
  SPATTN_CHECK(!path.empty(), "save_qkv: empty path");
  SPATTN_CHECK(q.dtype == k.dtype && k.dtype == v.dtype, "save_qkv: q, k, v dtypes must match (q ",
               dtype_name(q.dtype), ", k ", dtype_name(k.dtype), ", v ", dtype_name(v.dtype), ")");
  if (ends_with(path, ".safetensors")) {
    write_safetensors(path, {{"q", q}, {"k", k}, {"v", v}});
    return;
  }
  SPATTN_CHECK(!ends_with(path, ".npy"), "save_qkv: ", path,
               " names a single .npy file; pass a .safetensors file, a directory, or a prefix");
  std::error_code ec;
  const std::string prefix = fs::is_directory(path, ec) ? (fs::path(path) / "").string() : path;
  write_npy(prefix + "q.npy", q);
  write_npy(prefix + "k.npy", k);
  write_npy(prefix + "v.npy", v);
}

}  // namespace spattn

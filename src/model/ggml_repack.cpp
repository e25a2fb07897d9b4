#include "model/ggml_repack.hpp"

#include <cstring>

#include "ggml-cpu.h"
#include "ggml.h"

namespace spattn::model {

ggml_backend_buffer_type_t repack_buffer_type() {
  ggml_backend_reg_t reg = ggml_backend_cpu_reg();
  auto get = reinterpret_cast<ggml_backend_dev_get_extra_bufts_t>(
      ggml_backend_reg_get_proc_address(reg, "ggml_backend_dev_get_extra_bufts"));
  if (!get) return nullptr;
  for (ggml_backend_buffer_type_t* b = get(ggml_backend_reg_dev_get(reg, 0)); b && *b; ++b)
    if (std::strcmp(ggml_backend_buft_name(*b), "CPU_REPACK") == 0) return *b;
  return nullptr;
}

std::vector<uint8_t> ggml_repacked(gguf::GgmlType type, const void* plain, int64_t m, int64_t k) {
  ggml_backend_buffer_type_t buft = repack_buffer_type();
  if (!buft) return {};
  ggml_init_params ip{8 * ggml_tensor_overhead(), nullptr, true};
  ggml_context* ctx = ggml_init(ip);
  if (!ctx) return {};
  ggml_tensor* w = ggml_new_tensor_2d(ctx, ggml_type(type), k, m);
  // ggml's own test, the loader's: would a product with w in the repack buffer run there?
  ggml_backend_buffer_t probe = ggml_backend_buft_alloc_buffer(buft, 0);
  w->buffer = probe;
  ggml_tensor* op = ggml_mul_mat(ctx, w, ggml_new_tensor_2d(ctx, GGML_TYPE_F32, k, 1));
  const bool repacks = probe && ggml_backend_dev_supports_op(
                                    ggml_backend_reg_dev_get(ggml_backend_cpu_reg(), 0), op);
  w->buffer = nullptr;
  if (probe) ggml_backend_buffer_free(probe);
  std::vector<uint8_t> out;
  if (repacks) {
    if (ggml_backend_buffer_t buf = ggml_backend_alloc_ctx_tensors_from_buft(ctx, buft)) {
      const size_t n = ggml_nbytes(w);
      ggml_backend_tensor_set(w, plain, 0, n);
      const auto* d = static_cast<const uint8_t*>(w->data);
      out.assign(d, d + n);
      ggml_backend_buffer_free(buf);
    }
  }
  ggml_free(ctx);
  return out;
}

}  // namespace spattn::model

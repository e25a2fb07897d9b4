// libFuzzer target: arbitrary bytes as blocks of a ggml type (the first byte picks it) in a
// GGUF tensor, through the reader and `gguf::dequantize_row`, row by row. For the formats with
// a plain reference decoder (tests/quant_reference.hpp) the two must agree bit for bit (a NaN
// for a NaN in the block formats, whose NaN payloads C leaves to the compiler); and a decoded
// value may be infinite or NaN only where a scale of its block is (the products of finite f16
// scales and small integers cannot overflow f32), so a non-finite output from finite scales
// is a decoding bug. Other types must decode or raise spattn::Error (integer types have no
// conversion). The formats the prefill product widens itself (kernels/gemm_widen.hpp: f16,
// q8_0, q6_K, q5_K, q3_K) are widened by it too and must give dequantize_row's values (a NaN for a
// NaN). A crash, a sanitizer report or a mismatch aborts.
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "quant_reference.hpp"
#include "kernels/gemm_widen.hpp"
#include "quant_types.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"

using namespace spattn;
namespace ref = spattn::test::quant_ref;

namespace {

[[noreturn]] void mismatch(const char* what, gguf::GgmlType t, int64_t i, float a, float b) {
  uint32_t ua, ub;
  std::memcpy(&ua, &a, 4);
  std::memcpy(&ub, &b, 4);
  std::fprintf(stderr, "fuzz_quant: %s: %s element %lld: dequantize_row 0x%08x, reference 0x%08x\n",
               what, gguf::type_name(t), static_cast<long long>(i), ua, ub);
  std::abort();
}

void check_row(const ref::Format& f, const uint8_t* src, const float* got, int64_t n) {
  std::vector<float> want(static_cast<size_t>(n));
  ref::decode_row(f, src, want.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    if (!ref::same_value(f, got[i], want[size_t(i)]))
      mismatch("differs from the reference", f.type, i, got[i], want[size_t(i)]);
    if (std::isfinite(got[i])) continue;
    const uint8_t* block = src + (i / f.block) * f.bytes;
    bool scale_non_finite = false;
    for (int off : f.f16_fields)
      scale_non_finite = scale_non_finite || !std::isfinite(ref::f16_at(block + off));
    if (f.type == gguf::GgmlType::bf16) scale_non_finite = true;  // the value is its own scale
    if (!scale_non_finite)
      mismatch("non-finite from finite scales", f.type, i, got[i], want[size_t(i)]);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 1) return 0;
  const auto& types = fuzz::quant_fuzz_types();
  const gguf::GgmlType t = types[data[0] % types.size()];
  const int64_t bs = gguf::block_size(t), bb = gguf::block_bytes(t);
  // The rest as whole blocks: rows of up to 4 blocks, as many rows as the bytes fill.
  const int64_t blocks = int64_t(size - 1) / bb;
  if (blocks == 0) return 0;
  const int64_t row_blocks = blocks >= 4 ? 4 : blocks;
  const int64_t rows = blocks / row_blocks;
  try {
    gguf::Writer w;
    w.add_tensor("fuzz", t, {row_blocks * bs, rows}, data + 1);
    const std::vector<uint8_t> file = w.bytes();
    const gguf::File f = gguf::File::from_memory(file.data(), file.size(), "fuzz_quant.gguf");
    const gguf::File::Tensor& ti = f.tensor("fuzz");
    const ref::Format* rf = ref::find_format(t);
    std::vector<float> row(static_cast<size_t>(ti.ne[0]));
    const size_t rb = gguf::row_bytes(t, ti.ne[0]);
    const auto wf = kernels::widen_format(t);
    std::vector<float> widened(wf ? static_cast<size_t>(ti.ne[0]) : 0);
    for (int64_t r = 0; r < ti.nrows(); ++r) {
      gguf::dequantize_row(t, ti.data + size_t(r) * rb, row.data(), ti.ne[0]);
      if (rf) check_row(*rf, ti.data + size_t(r) * rb, row.data(), ti.ne[0]);
      if (!wf) continue;
      const kernels::WeightRows w{*wf, ti.data, int64_t(rb), ti.nrows()};
      kernels::gemm_widen_rows(w, ti.ne[0], r, 1, 0, ti.ne[0], widened.data(), ti.ne[0]);
      for (int64_t i = 0; i < ti.ne[0]; ++i)
        if (std::memcmp(&widened[size_t(i)], &row[size_t(i)], 4) != 0 &&
            !(std::isnan(widened[size_t(i)]) && std::isnan(row[size_t(i)])))
          mismatch("widened differently", t, i, widened[size_t(i)], row[size_t(i)]);
    }
  } catch (const Error&) {}
  return 0;
}

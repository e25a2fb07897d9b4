// Choosing the operand path for bf16 inputs by timing both on this machine (flash_common.hpp).
#include <algorithm>
#include <chrono>
#include <cstdint>
#include <vector>

#include "kernels/flash_common.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"
#include "spattn/tensor.hpp"

namespace spattn::kernels {

namespace {

// A fixed pseudo-random pattern in [-1, 1), stored as bf16: the kernel's speed depends on the
// shapes only, as long as the values are finite and not all equal.
Tensor probe_tensor(int64_t heads, int64_t seq, int64_t dim, uint32_t seed) {
  Tensor f(DType::f32, heads, seq, dim);
  float* p = f.data_as<float>();
  uint32_t x = seed * 2654435761u + 1;
  for (int64_t i = 0; i < f.numel(); ++i) {
    x = x * 1664525u + 1013904223u;
    p[i] = float(x >> 8) / float(1u << 24) * 2.0f - 1.0f;
  }
  return Tensor::copy_of(f.view(), DType::bf16);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

Bf16PathChoice choose_bf16_path(int threads, int64_t dim, int64_t seq, int reps) {
  SPATTN_CHECK(reps >= 1 && reps <= 100, "bf16 path probe: reps must be in [1, 100], got ", reps);
  SPATTN_CHECK(seq >= 1 && seq <= (int64_t(1) << 20),
               "bf16 path probe: seq must be in [1, 2^20], got ", seq);
  Bf16PathChoice c;
  if (!bf16_dot_supported()) return c;
  const int64_t heads = 2;
  const Tensor q = probe_tensor(heads, seq, dim, 1), k = probe_tensor(heads, seq, dim, 2),
               v = probe_tensor(heads, seq, dim, 3);
  const Tensor out(DType::f32, heads, seq, dim);
  AttnOptions opt;
  opt.threads = threads;
  opt.check_finite = false;  // time the kernel, not the input scan
  auto time_ms = [&](bool dot) {
    opt.bf16_dot = dot;
    const auto t0 = std::chrono::steady_clock::now();
    attention_dense(q, k, v, out, opt, nullptr, nullptr);
    return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  };
  time_ms(true);  // warm-up: first-touch of the scratch, the kernel's code
  time_ms(false);
  std::vector<double> dot_ms, widen_ms;
  for (int r = 0; r < reps; ++r) {
    dot_ms.push_back(time_ms(true));
    widen_ms.push_back(time_ms(false));
  }
  c.dot_ms = median(dot_ms);
  c.widen_ms = median(widen_ms);
  c.dot = c.dot_ms <= c.widen_ms;
  return c;
}

}  // namespace spattn::kernels

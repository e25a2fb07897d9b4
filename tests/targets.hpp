// Runs a test body on every SIMD target the kernels were compiled for.
#pragma once
#include "hwy/targets.h"
#include "kernels/flash_common.hpp"

namespace spattn::test {

// Runs fn once per SIMD target compiled in and supported here, and, on AVX-512 with BF16,
// once more as on a CPU without it (the widen path for bf16 inputs; a test hook, as the
// target restriction is).
template <class Fn>
void for_each_target(Fn fn) {
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    fn();
    if (kernels::cpu_has_bf16_dot()) {
      kernels::set_bf16_dot_supported_for_test(false);
      fn();
      kernels::set_bf16_dot_supported_for_test(true);
    }
  }
  hwy::SetSupportedTargetsForTest(0);
}

}  // namespace spattn::test

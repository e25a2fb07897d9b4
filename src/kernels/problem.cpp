// Target-independent setup shared by the kernel forms.
#include <atomic>
#include <cmath>

#include "core/threading.hpp"
#include "hwy/targets.h"
#include "kernels/flash_common.hpp"

namespace spattn::kernels {

Problem make_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, float* lse) {
  validate_attention_args(q, k, v, out, opt);
  Problem p;
  p.q = q;
  p.k = k;
  p.v = v;
  p.out = out;
  p.lse = lse;
  p.causal = opt.causal;
  p.scale = opt.scale > 0 ? opt.scale : 1.0f / std::sqrt(float(q.dim));
  p.threads = resolve_threads(opt.threads);
  p.group = q.heads / k.heads;
  p.q_len = q.seq;
  p.kv_len = k.seq;
  p.dim = q.dim;
  p.pos_offset = opt.causal ? k.seq - q.seq : 0;
  return p;
}

namespace {
std::atomic<bool> g_bf16_dot{true};
}

void set_bf16_dot_enabled(bool enabled) { g_bf16_dot = enabled; }
bool bf16_dot_enabled() { return g_bf16_dot; }

bool cpu_has_bf16_dot() {
#if defined(__x86_64__) && defined(__GNUC__)
  static const bool has = [] {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512bf16") != 0;
  }();
  return has;
#else
  return false;
#endif
}

}  // namespace spattn::kernels

namespace spattn {

const char* simd_target_name() {
  static thread_local std::string name;
  const int64_t best = hwy::SupportedTargets() & HWY_TARGETS;
  // The highest-priority (lowest bit) target compiled and supported is the one dispatched to.
  int64_t chosen = best & -best;
  name = hwy::TargetName(chosen);
  if (chosen == HWY_AVX3 && kernels::cpu_has_bf16_dot()) name += "+BF16";
  return name.c_str();
}

}  // namespace spattn

// Target-independent setup shared by the kernel forms.
#include <atomic>
#include <cmath>

#include "core/threading.hpp"
#include "hwy/targets.h"
#include "kernels/flash_common.hpp"
#include "spattn/error.hpp"

namespace spattn {
float softmax_scale(const AttnOptions& opt, int64_t dim) {
  return opt.scale > 0 ? opt.scale : 1.0f / std::sqrt(float(dim));
}
}  // namespace spattn

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
  p.scale = softmax_scale(opt, q.dim);
  p.threads = resolve_threads(opt.threads);
  p.group = q.heads / k.heads;
  p.q_len = q.seq;
  p.kv_len = k.seq;
  p.dim = q.dim;
  p.pos_offset = opt.causal ? k.seq - q.seq : 0;
  return p;
}

void add_kernel_stats(const Problem& p, const std::vector<Stats>& parts, Stats* stats) {
  if (!stats) return;
  Stats total;
  for (const Stats& s : parts) total.add(s);
  total.causal_entries = p.q.heads * attention_entries(p.q_len, p.kv_len, p.causal);
  total.flops = 4.0 * double(p.dim) * double(total.score_entries);
  stats->add(total);
}

void store_row(const TensorView& out, int64_t h, int64_t row, const float* src, int64_t dim,
               float scale) {
  if (out.dtype == DType::f32 && out.stride_dim == 1) {
    float* dst = static_cast<float*>(out.ptr(h, row));
    for (int64_t c = 0; c < dim; ++c) dst[c] = src[c] * scale;
  } else {
    for (int64_t c = 0; c < dim; ++c) out.set(h, row, c, src[c] * scale);
  }
}

void check_lambda(double lambda, const char* who) {
  SPATTN_CHECK(lambda >= 0.0 && lambda <= 1.0, who, ": lambda must be in [0, 1], got ", lambda);
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

// Target-independent setup shared by the kernel forms.
#include <algorithm>
#include <atomic>
#include <cmath>

#include "core/threading.hpp"
#include "hwy/targets.h"
#include "kernels/flash_common.hpp"
#include "kernels/packed_kv.hpp"
#include "spattn/error.hpp"

namespace spattn {
float softmax_scale(const AttnOptions& opt, int64_t dim) {
  return opt.scale > 0 ? opt.scale : 1.0f / std::sqrt(float(dim));
}
}  // namespace spattn

namespace spattn::kernels {

namespace {
// The fields every kernel form shares; k, v and packed are the caller's.
Problem common(const TensorView& q, const TensorView& out, const AttnOptions& opt, float* lse,
               int64_t kv_heads, int64_t kv_len, int64_t q_start, bool takes_window) {
  SPATTN_CHECK(opt.window == 0 || takes_window, "a sliding window (window ", opt.window,
               ") runs in attention_dense only");
  Problem p;
  p.window = opt.window;
  p.q = q;
  p.out = out;
  p.lse = lse;
  p.causal = opt.causal;
  p.scale = softmax_scale(opt, q.dim);
  p.threads = resolve_threads(opt.threads);
  p.bf16_dot = opt.bf16_dot;
  p.group = q.heads / kv_heads;
  p.q_len = q.seq;
  p.kv_len = kv_len;
  p.dim = q.dim;
  p.pos_offset = opt.causal ? q_start : 0;
  return p;
}
}  // namespace

Problem make_problem(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, float* lse, bool takes_window) {
  validate_attention_args(q, k, v, out, opt);
  Problem p =
      common(q, out, opt, lse, k.heads, k.seq, query_position(0, q.seq, k.seq), takes_window);
  p.k = k;
  p.v = v;
  return p;
}

Problem make_problem(const TensorView& q, const PackedKVData& kv, const TensorView& out,
                     const AttnOptions& opt, float* lse, bool takes_window) {
  check_tensor(q, "q", opt.check_finite);
  check_tensor(out, "out", false);
  SPATTN_CHECK(kv.size > 0, "PackedKV is empty");
  SPATTN_CHECK(q.dtype == kv.dtype, "q is ", dtype_name(q.dtype), " but the PackedKV holds ",
               dtype_name(kv.dtype), " keys");
  SPATTN_CHECK(q.dim == kv.dim, "head dims must match (q ", q.dim, ", PackedKV ", kv.dim, ")");
  SPATTN_CHECK(q.heads % kv.kv_heads == 0, "q heads (", q.heads,
               ") must be a multiple of the PackedKV's kv heads (", kv.kv_heads, ")");
  SPATTN_CHECK(out.heads == q.heads && out.seq == q.seq && out.dim == q.dim, "out shape ",
               out.shape_str(), " must equal q shape ", q.shape_str());
  check_scale_and_threads(opt);
  SPATTN_CHECK(opt.q_start >= -1, "q_start must be >= 0 (or -1: bottom-right), got ", opt.q_start);
  // Bottom-right against the newest key: with keys in natural order, query_position's rule.
  const int64_t start = opt.q_start >= 0 ? opt.q_start : kv.max_position + 1 - q.seq;
  SPATTN_CHECK(!opt.causal || start >= 0,
               "causal attention needs q_len <= the newest key "
               "position + 1 (",
               q.seq, " queries, newest key at ", kv.max_position, ")");
  Problem p = common(q, out, opt, lse, kv.kv_heads, kv.size, start, takes_window);
  p.packed = &kv;
  return p;
}

void add_kernel_stats(const Problem& p, const std::vector<Stats>& parts, Stats* stats) {
  if (!stats) return;
  Stats total;
  for (const Stats& s : parts) total.add(s);
  if (p.packed && p.causal && !(p.packed->identity && p.pos_offset == p.kv_len - p.q_len)) {
    // Queries placed elsewhere or keys in another order: count what each row may see.
    std::vector<int64_t> pos = p.packed->positions;
    std::sort(pos.begin(), pos.end());
    int64_t per_head = 0;
    for (int64_t i = 0; i < p.q_len; ++i)
      per_head += std::upper_bound(pos.begin(), pos.end(), i + p.pos_offset) - pos.begin();
    total.causal_entries = p.q.heads * per_head;
  } else {
    total.causal_entries = p.q.heads * attention_entries(p.q_len, p.kv_len, p.causal);
  }
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

void check_blasst_order(BlasstOrder order, const char* who) {
  SPATTN_CHECK(order == BlasstOrder::in_order || order == BlasstOrder::local_first, who,
               ": unknown order ", int(order));
}

float blasst_log2_threshold(double lambda, const char* who) {
  SPATTN_CHECK(lambda >= 0.0 && lambda <= 1.0, who, ": lambda must be in [0, 1], got ", lambda);
  return lambda > 0 ? float(std::log2(lambda)) : kNegInf;
}

namespace {
std::atomic<bool> g_bf16_dot_hidden{false};  // test hook only (flash_common.hpp)
}

void set_bf16_dot_supported_for_test(bool supported) { g_bf16_dot_hidden = !supported; }
bool bf16_dot_supported() { return cpu_has_bf16_dot() && !g_bf16_dot_hidden; }

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

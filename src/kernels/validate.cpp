// Argument checks shared by every attention entry point.
#include <algorithm>
#include <cmath>

#include "kernels/flash_common.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"

namespace spattn {

void Stats::add(const Stats& o) {
  score_entries += o.score_entries;
  causal_entries += o.causal_entries;
  tiles_visited += o.tiles_visited;
  tiles_skipped += o.tiles_skipped;
  flops += o.flops;
  staged_bytes = std::max(staged_bytes, o.staged_bytes);
}

int64_t attention_entries(int64_t q_len, int64_t kv_len, bool causal) {
  if (!causal) return q_len * kv_len;
  // rows see causal_limit(0) .. kv_len keys
  const int64_t first = query_position(0, q_len, kv_len) + 1;
  return (first + kv_len) * q_len / 2;
}

namespace {

void check_view(const TensorView& t, const char* name) {
  SPATTN_CHECK(t.heads > 0, name, ": heads must be > 0, got ", t.heads);
  SPATTN_CHECK(t.seq > 0, name, ": sequence length must be > 0, got ", t.seq);
  SPATTN_CHECK(t.dim > 0, name, ": head dim must be > 0, got ", t.dim);
  SPATTN_CHECK(t.data != nullptr, name, ": data pointer is null");
}

namespace {
// The exponent field of a 16-bit type (all set: Inf or NaN).
uint16_t exponent_bits16(DType t) {
  switch (t) {
    case DType::bf16: return 0x7f80u;
    case DType::f16: return 0x7c00u;
    case DType::f32: break;
  }
  SPATTN_CHECK(false, "internal: ", dtype_name(t), " is not a 16-bit type");
  return 0;
}
}  // namespace

void check_finite(const TensorView& t, const char* name) {
  for (int64_t h = 0; h < t.heads; ++h)
    for (int64_t s = 0; s < t.seq; ++s) {
      if (t.dtype == DType::f32 && t.stride_dim == 1) {
        // Non-finite exactly when every exponent bit is set: integer ops the compiler
        // vectorises (a float sum poisoned by NaN/Inf would be one serial chain of adds).
        const uint32_t* p = static_cast<const uint32_t*>(t.ptr(h, s));
        uint32_t bad = 0;
        for (int64_t d = 0; d < t.dim; ++d) bad |= uint32_t((p[d] & 0x7f800000u) == 0x7f800000u);
        if (!bad) continue;
      } else if (t.stride_dim == 1) {
        // bf16 and f16 are non-finite exactly when every exponent bit is set.
        const uint16_t* p = static_cast<const uint16_t*>(t.ptr(h, s));
        const uint16_t mask = exponent_bits16(t.dtype);
        bool bad = false;
        for (int64_t d = 0; d < t.dim; ++d) bad |= (p[d] & mask) == mask;
        if (!bad) continue;
      } else {
        bool bad = false;
        for (int64_t d = 0; d < t.dim; ++d) bad |= !std::isfinite(t.get(h, s, d));
        if (!bad) continue;
      }
      for (int64_t d = 0; d < t.dim; ++d)
        SPATTN_CHECK(std::isfinite(t.get(h, s, d)), name, " holds a non-finite value (",
                     t.get(h, s, d), ") at [head ", h, ", pos ", s, ", dim ", d, "]");
    }
}

}  // namespace

namespace kernels {
void check_tensor(const TensorView& t, const char* name, bool finite) {
  check_view(t, name);
  if (finite) check_finite(t, name);
}
void check_scale_and_threads(const AttnOptions& opt) {
  SPATTN_CHECK(std::isfinite(opt.scale) && opt.scale >= 0,
               "scale must be finite and >= 0 (0 = 1/sqrt(d)), got ", opt.scale);
  SPATTN_CHECK(opt.threads >= 0, "threads must be >= 0, got ", opt.threads);
  SPATTN_CHECK(opt.window >= 0, "window must be >= 0 (0: none), got ", opt.window);
  SPATTN_CHECK(opt.window == 0 || opt.causal, "a sliding window (window ", opt.window,
               ") needs causal attention");
}
}  // namespace kernels

void validate_attention_args(const TensorView& q, const TensorView& k, const TensorView& v,
                             const TensorView& out, const AttnOptions& opt) {
  check_view(q, "q");
  check_view(k, "k");
  check_view(v, "v");
  check_view(out, "out");
  SPATTN_CHECK(q.dtype == k.dtype && k.dtype == v.dtype, "q, k, v dtypes must match (q ",
               dtype_name(q.dtype), ", k ", dtype_name(k.dtype), ", v ", dtype_name(v.dtype), ")");
  SPATTN_CHECK(q.dim == k.dim && k.dim == v.dim, "head dims must match (q ", q.dim, ", k ", k.dim,
               ", v ", v.dim, ")");
  SPATTN_CHECK(q.dim % 8 == 0 && q.dim <= kMaxHeadDim, "head dim must be a multiple of 8 up to ",
               kMaxHeadDim, ", got ", q.dim);
  SPATTN_CHECK(k.heads == v.heads, "k and v heads must match (", k.heads, " vs ", v.heads, ")");
  SPATTN_CHECK(k.seq == v.seq, "k and v lengths must match (", k.seq, " vs ", v.seq, ")");
  SPATTN_CHECK(q.heads % k.heads == 0, "q heads (", q.heads, ") must be a multiple of kv heads (",
               k.heads, ")");
  SPATTN_CHECK(out.heads == q.heads && out.seq == q.seq && out.dim == q.dim, "out shape ",
               out.shape_str(), " must equal q shape ", q.shape_str());
  SPATTN_CHECK(!opt.causal || q.seq <= k.seq, "causal attention needs q_len <= kv_len (", q.seq,
               " > ", k.seq, ")");
  kernels::check_scale_and_threads(opt);
  SPATTN_CHECK(opt.q_start == -1,
               "q_start places queries over a PackedKV; with k and v given, "
               "queries align bottom-right (got q_start ",
               opt.q_start, ")");
  if (opt.check_finite) {
    check_finite(q, "q");
    check_finite(k, "k");
    check_finite(v, "v");
  }
}

}  // namespace spattn

// The exact (O, LSE) merge (merge.hpp's identity) on the device: one warp per row, in f32 with
// merge_row's weights.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cmath>

#include "cuda/check.cuh"
#include "spattn/cuda.hpp"

namespace spattn::cuda {
namespace {

template <class T>
__device__ __forceinline__ float to_f(T x) {
  return float(x);
}
template <class T>
__device__ __forceinline__ T from_f(float x) {
  return T(x);
}

struct MergeRows {
  int64_t rows_per_head, heads, dim;
  int64_t a_h, a_s, b_h, b_s, o_h, o_s;  // element strides
};

template <class T>
__global__ void merge_kernel(const T* oa, const float* lse_a, const T* ob, const float* lse_b,
                             T* out, float* lse_out, MergeRows g) {
  const int64_t row = int64_t(blockIdx.x) * (blockDim.x / 32) + threadIdx.x / 32;
  if (row >= g.rows_per_head * g.heads) return;
  const int lane = threadIdx.x % 32;
  const int64_t h = row / g.rows_per_head, s = row % g.rows_per_head;
  const float la = lse_a[row], lb = lse_b[row];
  // merge_row's arithmetic: a side without keys (-inf) contributes nothing, so with both
  // sides empty a is kept as it is.
  float wa = 1.f, wb = 0.f, lse = la;
  if (lb != -INFINITY) {
    if (la == -INFINITY) {
      wa = 0.f, wb = 1.f, lse = lb;
    } else {
      const float m = fmaxf(la, lb);
      const float ea = expf(la - m), eb = expf(lb - m), inv = 1.f / (ea + eb);
      wa = ea * inv, wb = eb * inv;
      lse = m + logf(ea + eb);
    }
  }
  __syncwarp();  // every lane has read lse_a before lane 0 may overwrite it (lse_out == lse_a)
  const T* a = oa + h * g.a_h + s * g.a_s;
  const T* b = ob + h * g.b_h + s * g.b_s;
  T* o = out + h * g.o_h + s * g.o_s;
  for (int64_t d = lane; d < g.dim; d += 32) o[d] = from_f<T>(wa * to_f(a[d]) + wb * to_f(b[d]));
  if (lane == 0 && lse_out) lse_out[row] = lse;
}

}  // namespace

void merge_attention(const TensorView& o_a, const float* lse_a, const TensorView& o_b,
                     const float* lse_b, const TensorView& out, float* lse_out, void* stream) {
  const char* who = "cuda merge_attention";
  auto same = [](const TensorView& x, const TensorView& y) {
    return x.heads == y.heads && x.seq == y.seq && x.dim == y.dim && x.dtype == y.dtype;
  };
  SPATTN_CHECK(same(o_a, o_b) && same(o_a, out), who, ": shapes differ (a ", o_a.shape_str(),
               ", b ", o_b.shape_str(), ", out ", out.shape_str(), ")");
  SPATTN_CHECK(o_a.dtype == DType::bf16 || o_a.dtype == DType::f16 || o_a.dtype == DType::f32, who,
               ": bf16, f16 or f32 outputs, got ", o_a.shape_str());
  for (const TensorView* t : {&o_a, &o_b, &out})
    SPATTN_CHECK(t->stride_dim == 1, who, ": the head dimension must be contiguous");
  const int dev = device_of(o_a.data, "o_a", who);
  SPATTN_CHECK(device_of(o_b.data, "o_b", who) == dev && device_of(out.data, "out", who) == dev &&
                   device_of(lse_a, "lse_a", who) == dev && device_of(lse_b, "lse_b", who) == dev &&
                   (!lse_out || device_of(lse_out, "lse_out", who) == dev),
               who, ": all operands must be on one device");
  const int64_t rows = o_a.heads * o_a.seq;
  if (rows == 0) return;
  const MergeRows g{o_a.seq,         o_a.heads,       o_a.dim,
                    o_a.stride_head, o_a.stride_seq,  o_b.stride_head,
                    o_b.stride_seq,  out.stride_head, out.stride_seq};
  constexpr int kRowsPerBlock = 4;
  const dim3 grid(unsigned((rows + kRowsPerBlock - 1) / kRowsPerBlock));
  const auto s = static_cast<cudaStream_t>(stream);
  switch (o_a.dtype) {
    case DType::bf16:
      merge_kernel<<<grid, 32 * kRowsPerBlock, 0, s>>>(
          static_cast<const __nv_bfloat16*>(o_a.data), lse_a,
          static_cast<const __nv_bfloat16*>(o_b.data), lse_b, static_cast<__nv_bfloat16*>(out.data),
          lse_out, g);
      break;
    case DType::f16:
      merge_kernel<<<grid, 32 * kRowsPerBlock, 0, s>>>(static_cast<const __half*>(o_a.data), lse_a,
                                                       static_cast<const __half*>(o_b.data), lse_b,
                                                       static_cast<__half*>(out.data), lse_out, g);
      break;
    default:
      merge_kernel<<<grid, 32 * kRowsPerBlock, 0, s>>>(static_cast<const float*>(o_a.data), lse_a,
                                                       static_cast<const float*>(o_b.data), lse_b,
                                                       static_cast<float*>(out.data), lse_out, g);
  }
  check(cudaGetLastError(), "merge_kernel launch");
}

}  // namespace spattn::cuda

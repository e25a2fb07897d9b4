/* A C ABI over spattn's GPU attention forms, for callers that hold device pointers and no C++:
 * Python through ctypes with torch CUDA tensors (scripts/cuda_vs_torch.py), whatever the
 * interpreter's version. Built as libspattn_c.so. Every function returns 0 on success and
 * otherwise -1 with the spattn::Error message copied into err (err_len bytes, NUL-terminated). */
#ifndef SPATTN_C_H
#define SPATTN_C_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A [heads, seq, dim] view: strides in elements, the head dimension contiguous. */
typedef struct spattn_c_tensor {
  void* data;
  int64_t heads, seq, dim;
  int64_t stride_head, stride_seq;
} spattn_c_tensor;

enum { SPATTN_C_BF16 = 0, SPATTN_C_F16 = 1 };

/* A block mask's lists on the device (spattn::cuda::BlockSparsePlan), made once, run often. */
typedef struct spattn_c_plan spattn_c_plan;

typedef struct spattn_c_attention {
  /* "dense", "blasst" (lambda, local_first), "decode" (q_len <= 16; lambda > 0: BLASST's
   * decode, local_first), "block_sparse" (plan or grid) or "query_sparse" (row_stride: rows
   * stride-1, 2 stride-1, ... and the last, out and lse compact). */
  const char* form;
  int dtype; /* SPATTN_C_BF16 or SPATTN_C_F16 */
  spattn_c_tensor q, k, v, out;
  float* lse; /* device [heads, q_len] f32, or NULL */
  int causal;
  float scale; /* 0: 1/sqrt(dim) */
  double lambda;
  int local_first;
  /* block_sparse: a plan, or else a host grid [heads][n_qb][n_kb] of 0/1 with blocks
   * block_q x block_k (converted and uploaded in the call). */
  const spattn_c_plan* plan;
  const uint8_t* grid;
  int64_t block_q, block_k;
  void* stream; /* cudaStream_t, NULL: the default stream */
  /* Out, when want_stats is set (the call then waits for the kernel): tiles visited and
   * skipped, score entries computed and those of the dense problem. */
  int want_stats;
  int64_t tiles_visited, tiles_skipped, score_entries, causal_entries;
  int64_t row_stride;
} spattn_c_attention;

int spattn_c_cuda_device_count(void);
int spattn_c_cuda_attention(spattn_c_attention* a, char* err, size_t err_len);
int spattn_c_cuda_plan_block_sparse(const uint8_t* grid, int64_t heads, int64_t q_len,
                                    int64_t kv_len, int64_t block_q, int64_t block_k, int causal,
                                    spattn_c_plan** plan, char* err, size_t err_len);
void spattn_c_cuda_plan_free(spattn_c_plan* plan);
/* Runs a block-mask method (spattn::make_method(spec), e.g. "a_shape", "mean_pool") once on
 * the device tensors of a (its form, plan and grid are ignored): the mask is built on the host
 * (mask_host_ms: the copies and the estimate), the output written, and the mask kept as a plan
 * to time the kernel alone. */
int spattn_c_cuda_plan_method(const char* spec, spattn_c_attention* a, spattn_c_plan** plan,
                              double* mask_host_ms, char* err, size_t err_len);
/* Runs any method with a GPU path (spattn::make_method(spec), e.g. "momo") on the device
 * tensors of a (its form, plan and grid are ignored), on a->stream, the whole method timed as
 * the bench times it: for momo its selection, mask, passes and the report's read-back. Fills
 * the stats fields always (the call waits for the method). */
int spattn_c_cuda_method(const char* spec, spattn_c_attention* a, char* err, size_t err_len);
/* The project's workload generator (spattn/workload.hpp) into host bf16 buffers
 * q [heads, seq, dim], k and v [kv_heads, seq, dim]: structured inputs for the sparse forms. */
int spattn_c_workload_bf16(const char* kind, int64_t seq, int64_t heads, int64_t kv_heads,
                           int64_t dim, uint64_t seed, void* q, void* k, void* v, char* err,
                           size_t err_len);

#ifdef __cplusplus
}
#endif
#endif

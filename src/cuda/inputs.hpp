// What every GPU form checks of its inputs before a kernel touches them, the stream it runs on,
// and the dense problem's size the statistics are measured against (attention.cu holds both).
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "spattn/attention.hpp"

namespace spattn::cuda {

// Dtypes (bf16, f16, one for all), head dims (64, 128), GQA heads, shapes, strides and
// alignment, causal q_len <= kv_len, and that q, k, v, out and lse live on the current device;
// Error naming `who` else. out_rows: the rows out holds (-1: q's). Returns the device.
int check_qkv_out(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out, const float* lse, bool causal, const char* who,
                  int64_t out_rows = -1);

// The stream a form runs on: the one passed, else the options' (Method::run passes only
// AttnOptions::stream), else the default stream.
inline cudaStream_t stream_of(void* stream, const AttnOptions& opt) {
  return static_cast<cudaStream_t>(stream ? stream : opt.stream);
}

// An on/off environment variable of the GPU forms (SPATTN_CUDA_TMA, SPATTN_CUDA_MOMO_FUSED):
// true for "1", false unset, empty or "0", an Error naming it for anything else.
bool env_switch(const char* name);

// Score entries of the dense problem: what Stats::causal_entries holds on the CPU.
int64_t dense_entries(int64_t heads, int64_t q_len, int64_t kv_len, bool causal);

}  // namespace spattn::cuda

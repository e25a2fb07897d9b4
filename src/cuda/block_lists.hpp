// Block lists that live on the device, run by the block-sparse kernel (momo.cu, and the
// estimating block-mask methods through block_select.cu): per (q head, query block) an
// ascending list of key blocks, turned into the kernel's per-tile lists of 64-key tiles on the
// device and run; the lists read back for the report once everything is queued.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "cuda/check.cuh"
#include "spattn/attention.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda {

// The lists: block b of (h, qb) at list[(h * nqb + qb) * cap + i] for i < count[h * nqb + qb],
// ascending, each inside the query block's causal blocks; blocks of block_q x block_k, both
// multiples of 64 (the kernel's tiles).
struct DeviceBlockLists {
  const int* list = nullptr;
  const int* count = nullptr;
  int heads = 0, nqb = 0, cap = 0;
  int64_t block_q = 64, block_k = 64;
};

// A pass's per-64-row-tile records on the device, read once the caller is done queueing.
struct BlockListRecords {
  DeviceBuffer<int> visited;
  DeviceBuffer<unsigned long long> entries;
  int64_t dim = 0, causal_entries = 0;
  Stats read(cudaStream_t s) const;  // waits for the stream
};

// The block-sparse pass over the lists into out and lse (checked by the caller), on 128-row
// kernel tiles where block_q is a multiple of 128, else 64-row ones; its records into
// `records` when given. Never waits for the device.
void run_block_lists(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, float* lse,
                     const DeviceBlockLists& lists, BlockListRecords* records, cudaStream_t s);

// The lists on the host, per (q head, query block); waits for the stream.
std::vector<std::vector<int32_t>> read_block_lists(const DeviceBlockLists& lists, cudaStream_t s);

}  // namespace spattn::cuda

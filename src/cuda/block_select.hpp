// Block selection on the device, shared by the estimating block-mask methods' GPU paths
// (xattention.cu, mean_pool.cu): per (q head, query block) the forced blocks (sink and local
// keys, rounded out to blocks), the budget (block_budget.cuh) over an estimate already on the
// device, and the ascending list of kept blocks (block_lists.hpp), all in one kernel.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/block_budget.cuh"
#include "cuda/block_lists.hpp"
#include "cuda/check.cuh"
#include "spattn/attention.hpp"
#include "spattn/cuda.hpp"
#include "spattn/tensor.hpp"

namespace spattn::cuda {

struct BlockSelect {
  // The estimate, one of: block masses [Hq][nqb][nkb] (the antidiagonal's, antidiagonal.hpp),
  // or pooled rows, q [Hq][nqb][dim] and k [Hkv][nkb][dim] f32, whose products times `scale`
  // are the scores (mean_pool's).
  const double* mass = nullptr;
  const float* qpool = nullptr;
  const float* kpool = nullptr;
  float scale = 1;
  // Pooled scores as masses (mean_pool's topp and min_share with est=pooled): a block's score's
  // softmax numerator times its keys the query block sees.
  bool pooled_mass = false;
  int64_t block_q = 64, block_k = 64;
  // Forced: keys [0, sink) and the `local` keys ending at the query block's last position, as
  // far as the block sees them (xattention: sink 1 and local 1, its sink block and diagonal).
  int64_t sink = 0, local = 1;
  BudgetRule rule;
};

// The selected lists, owning their device memory (freed in stream order).
struct SelectedLists {
  DeviceBuffer<int> list, count;
  DeviceBlockLists view;
};

// The scratch a per-query-block selection over nkb key blocks sorts in (block_budget.cuh):
// a power of two >= nkb, at least 2; each slot takes a double, an int and a byte of shared
// memory.
int select_slots(int64_t nkb);
inline size_t select_smem(int slots) { return size_t(slots) * (sizeof(double) + sizeof(int) + 1); }
// Opts `kernel` into `smem` bytes of dynamic shared memory, or throws Error naming `who` where
// the device has fewer.
void allow_select_smem(const void* kernel, size_t smem, int64_t nkb, const char* who);

// Selects per (q head, query block) of q against k (checked by the caller); queues the kernel
// on s. Throws Error where a query block's key blocks do not fit one thread block's shared
// memory.
void select_blocks(const TensorView& q, const TensorView& k, const AttnOptions& opt,
                   const BlockSelect& sel, SelectedLists& out, cudaStream_t s);

// select_blocks, then the block-sparse pass over the lists into out and lse; the lists and the
// pass's stats read back into `result` once both are queued.
void run_selected(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out, const AttnOptions& opt, float* lse, const BlockSelect& sel,
                  BlockSelectResult& result, cudaStream_t s);

// What every estimating method's GPU path checks first (shapes, dtypes, devices; blocks in
// multiples of 64), naming `who`.
void check_select_inputs(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const float* lse, const AttnOptions& opt,
                         int64_t block_q, int64_t block_k, const char* who);

}  // namespace spattn::cuda

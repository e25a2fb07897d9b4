// The Hopper kernel's entry from the host side (cuda/attention.cu): whether it runs here, and
// its launch for a dtype, head dim and policy. Built in its own object for sm_90a
// (CMakeLists.txt): wgmma exists on no other target.
#pragma once
#include <cuda_runtime.h>

#include <cstdint>

#include "cuda/flash_fwd.cuh"
#include "spattn/tensor.hpp"

namespace spattn::cuda::sm90 {

// True when the current device is a Hopper (compute capability 9.0) and SPATTN_CUDA_KERNEL does
// not ask for the mma.sync kernel ("mma"); SPATTN_CUDA_KERNEL=wgmma on another device is an
// Error. Read at each call, so one process can time both kernels.
bool selected();
// The schedule dense and listed tiles run (flash_fwd.cuh's Schedule): "overlap" with
// SPATTN_CUDA_KERNEL=wgmma_overlap, "pingpong" with wgmma_pingpong, else "plain".
const char* schedule_name();
// True when SPATTN_CUDA_TMA=1: the producer copies by TMA (one thread, tensor maps) instead of
// cp.async (its 128 threads) for dense and listed tiles; BLASST keeps cp.async. Another value
// than 0 or 1 is an Error.
bool tma();

// Launches the kernel over 128-row query tiles (p.n_qt of them): dense (no list, no skip), a
// key-tile list per query tile, or BLASST's skip rule.
void launch(DType dtype, int64_t d, bool list, bool skip, const FlashParams& p,
            cudaStream_t stream);

}  // namespace spattn::cuda::sm90

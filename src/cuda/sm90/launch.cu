// Host side of the Hopper kernel (cuda/sm90/flash_fwd.cuh): the device and environment check
// that picks it, and the instantiations over dtype, head dim and policy.
#include <cstdlib>
#include <cstring>
#include <string>

#include "cuda/check.cuh"
#include "cuda/sm90/flash_fwd.cuh"
#include "cuda/sm90/launch.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda::sm90 {

const char* schedule_name() {
  const char* env = std::getenv("SPATTN_CUDA_KERNEL");
  if (env && std::strcmp(env, "wgmma_overlap") == 0) return "overlap";
  if (env && std::strcmp(env, "wgmma_pingpong") == 0) return "pingpong";
  return "plain";
}

bool selected() {
  const char* env = std::getenv("SPATTN_CUDA_KERNEL");
  const bool want_mma = env && std::strcmp(env, "mma") == 0;
  const bool want_wgmma =
      env && (std::strcmp(env, "wgmma") == 0 || std::strcmp(schedule_name(), "plain") != 0);
  SPATTN_CHECK(!env || !*env || want_mma || want_wgmma || std::strcmp(env, "auto") == 0,
               "SPATTN_CUDA_KERNEL=", env,
               ": expected auto, wgmma, wgmma_overlap, wgmma_pingpong or mma");
  if (want_mma) return false;
  int dev = 0, major = 0, minor = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev),
        "cudaDeviceGetAttribute");
  check(cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev),
        "cudaDeviceGetAttribute");
  const bool hopper = major == 9 && minor == 0;
  SPATTN_CHECK(hopper || !want_wgmma, "SPATTN_CUDA_KERNEL=", env, ": device ", dev, " is sm_",
               major, minor, "; the wgmma kernel runs on sm_90 (Hopper) only");
  return hopper;
}

namespace {

template <class T, int D, bool kList, bool kSkip, Schedule kSched = Schedule::plain>
void launch_t(const FlashParams& p, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<D>();
  auto* kernel = flash_fwd_kernel<T, D, kList, kSkip, kSched>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        "cudaFuncSetAttribute");
  const dim3 grid(unsigned(p.n_qt), unsigned(p.heads), 1);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  check(cudaGetLastError(), "sm90 flash_fwd_kernel launch");
}

template <class T, int D>
void launch_policy(bool list, bool skip, const FlashParams& p, cudaStream_t stream) {
  SPATTN_CHECK(!(list && skip), "sm90 flash kernel: BLASST over a tile list has no variant");
  if (skip) return launch_t<T, D, false, true>(p, stream);  // BLASST: the plain schedule only
  const std::string sched = schedule_name();
  if (sched == "overlap")
    list ? launch_t<T, D, true, false, Schedule::overlap>(p, stream)
         : launch_t<T, D, false, false, Schedule::overlap>(p, stream);
  else if (sched == "pingpong")
    list ? launch_t<T, D, true, false, Schedule::pingpong>(p, stream)
         : launch_t<T, D, false, false, Schedule::pingpong>(p, stream);
  else
    list ? launch_t<T, D, true, false>(p, stream) : launch_t<T, D, false, false>(p, stream);
}

}  // namespace

void launch(DType dtype, int64_t d, bool list, bool skip, const FlashParams& p,
            cudaStream_t stream) {
  if (dtype == DType::bf16)
    d == 64 ? launch_policy<__nv_bfloat16, 64>(list, skip, p, stream)
            : launch_policy<__nv_bfloat16, 128>(list, skip, p, stream);
  else
    d == 64 ? launch_policy<__half, 64>(list, skip, p, stream)
            : launch_policy<__half, 128>(list, skip, p, stream);
}

}  // namespace spattn::cuda::sm90

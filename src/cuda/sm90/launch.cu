// Host side of the Hopper kernel (cuda/sm90/flash_fwd.cuh): the device and environment check
// that picks it, and the instantiations over dtype, head dim and policy.
#include <cudaTypedefs.h>  // PFN_cuTensorMapEncodeTiled

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <type_traits>

#include "cuda/check.cuh"
#include "cuda/inputs.hpp"
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

bool tma() { return env_switch("SPATTN_CUDA_TMA"); }

namespace {

// cuTensorMapEncodeTiled from the driver the runtime loaded (no link against libcuda).
PFN_cuTensorMapEncodeTiled_v12000 encode_tiled() {
  static const PFN_cuTensorMapEncodeTiled_v12000 fn = [] {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult found{};
    check(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &f, 12000, cudaEnableDefault,
                                           &found),
          "cudaGetDriverEntryPointByVersion");
    SPATTN_CHECK(found == cudaDriverEntryPointSuccess && f,
                 "SPATTN_CUDA_TMA=1: the driver has no cuTensorMapEncodeTiled");
    return reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(f);
  }();
  return fn;
}

// The map of one operand of 16-bit elements (strides in elements, the head dimension
// contiguous), boxes of 64 columns by `rows` rows in the 128-byte swizzle (TmaMaps): [heads][seq]
// [d] when heads are the outer dimension (heads_inner false), else [seq][heads][d]; either way
// a box lands as rows x 128 bytes.
CUtensorMap tensor_map(DType dtype, const void* data, int64_t d, int64_t seq, int64_t heads,
                       int64_t stride_seq, int64_t stride_head, uint32_t rows, bool& heads_inner,
                       const char* name) {
  heads_inner = heads > 1 && stride_head < stride_seq;
  const int64_t inner = heads_inner ? stride_head : stride_seq;
  const int64_t outer = heads_inner ? stride_seq : heads > 1 ? stride_head : seq * stride_seq;
  const int64_t n_inner = heads_inner ? heads : seq;
  // TMA takes 16-byte aligned rows and heads, strides that grow outward.
  SPATTN_CHECK(reinterpret_cast<uintptr_t>(data) % 16 == 0 && inner % 8 == 0 && outer % 8 == 0 &&
                   inner >= d && outer >= n_inner * inner,
               "SPATTN_CUDA_TMA=1: ", name,
               " needs 16-byte aligned rows and heads that do not overlap (seq stride ", stride_seq,
               ", head stride ", stride_head, ")");
  CUtensorMap map;
  const cuuint64_t dims[3] = {cuuint64_t(d), cuuint64_t(n_inner),
                              cuuint64_t(heads_inner ? seq : heads)};
  const cuuint64_t strides[2] = {cuuint64_t(inner) * 2, cuuint64_t(outer) * 2};
  const cuuint32_t box[3] = {64, heads_inner ? 1u : rows, heads_inner ? rows : 1u},
                   unit[3] = {1, 1, 1};
  const CUresult r = encode_tiled()(
      &map,
      dtype == DType::bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 3,
      const_cast<void*>(data), dims, strides, box, unit, CU_TENSOR_MAP_INTERLEAVE_NONE,
      CU_TENSOR_MAP_SWIZZLE_128B, CU_TENSOR_MAP_L2_PROMOTION_L2_256B,
      CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  SPATTN_CHECK(r == CUDA_SUCCESS, "SPATTN_CUDA_TMA=1: cuTensorMapEncodeTiled failed for ", name,
               " (CUresult ", int(r), ")");
  return map;
}

template <class T, int D, bool kList, bool kSkip, Schedule kSched = Schedule::plain,
          bool kTma = false>
void launch_t(const FlashParams& p, cudaStream_t stream) {
  constexpr size_t smem = smem_bytes<D>();
  auto* kernel = flash_fwd_kernel<T, D, kList, kSkip, kSched, kTma>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        "cudaFuncSetAttribute");
  TmaMaps maps{};
  if constexpr (kTma) {
    const DType dt = std::is_same_v<T, __nv_bfloat16> ? DType::bf16 : DType::f16;
    const int kv_heads = p.heads / p.group;
    maps.q = tensor_map(dt, p.q, D, p.q_len, p.heads, p.q_s, p.q_h, kBM, maps.q_heads_inner, "q");
    maps.k = tensor_map(dt, p.k, D, p.kv_len, kv_heads, p.k_s, p.k_h, kBN, maps.k_heads_inner, "k");
    maps.v = tensor_map(dt, p.v, D, p.kv_len, kv_heads, p.v_s, p.v_h, kBN, maps.v_heads_inner, "v");
  }
  const dim3 grid(unsigned(p.n_qt), unsigned(p.heads), 1);
  kernel<<<grid, kThreads, smem, stream>>>(p, maps);
  check(cudaGetLastError(), "sm90 flash_fwd_kernel launch");
}

template <class T, int D, Schedule kSched>
void launch_sched(bool list, const FlashParams& p, cudaStream_t stream) {
  if (tma())
    list ? launch_t<T, D, true, false, kSched, true>(p, stream)
         : launch_t<T, D, false, false, kSched, true>(p, stream);
  else
    list ? launch_t<T, D, true, false, kSched>(p, stream)
         : launch_t<T, D, false, false, kSched>(p, stream);
}

template <class T, int D>
void launch_policy(bool list, bool skip, const FlashParams& p, cudaStream_t stream) {
  SPATTN_CHECK(!(list && skip), "sm90 flash kernel: BLASST over a tile list has no variant");
  // BLASST: the plain schedule and cp.async only.
  if (skip) return launch_t<T, D, false, true>(p, stream);
  // A 64-row mask's paired lists keep the plain schedule too: the overlapped ones compute a
  // tile one group lacks (masked) rather than branch around wgmma.
  const std::string sched = p.list_groups ? "plain" : schedule_name();
  if (sched == "overlap")
    launch_sched<T, D, Schedule::overlap>(list, p, stream);
  else if (sched == "pingpong")
    launch_sched<T, D, Schedule::pingpong>(list, p, stream);
  else
    launch_sched<T, D, Schedule::plain>(list, p, stream);
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

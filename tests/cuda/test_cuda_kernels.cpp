// Which prefill kernel runs (spattn/cuda.hpp: prefill_kernel): the wgmma kernel on a Hopper GPU,
// mma.sync elsewhere or when SPATTN_CUDA_KERNEL=mma asks; a wrong value is a named Error. On a
// Hopper both kernels run here on the same inputs: the same BLASST decisions, tile for tile,
// and outputs within rounding of each other. The other GPU tests check whichever kernel the
// environment picks against the CPU (run them under both: DEVELOPERS.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

#include "assets.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/blasst.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

// Sets SPATTN_CUDA_KERNEL for a scope and restores what was there.
class KernelEnv {
 public:
  explicit KernelEnv(const char* value) {
    if (const char* old = std::getenv("SPATTN_CUDA_KERNEL")) old_ = old, had_ = true;
    ::setenv("SPATTN_CUDA_KERNEL", value, 1);
  }
  ~KernelEnv() {
    if (had_)
      ::setenv("SPATTN_CUDA_KERNEL", old_.c_str(), 1);
    else
      ::unsetenv("SPATTN_CUDA_KERNEL");
  }

 private:
  std::string old_;
  bool had_ = false;
};

bool hopper() { return cuda::device_description().find(", sm_90,") != std::string::npos; }

TEST(CudaKernels, ChoiceFollowsTheDeviceAndTheEnvironment) {
  if (cuda::device_count() == 0) SPATTN_SKIP_NOT_APPLICABLE("no CUDA device");
  {
    KernelEnv env("auto");
    EXPECT_EQ(cuda::prefill_kernel(), hopper() ? "wgmma" : "mma");
  }
  {
    KernelEnv env("mma");
    EXPECT_EQ(cuda::prefill_kernel(), "mma");
  }
  {
    KernelEnv env("wgmma");
    if (hopper())
      EXPECT_EQ(cuda::prefill_kernel(), "wgmma");
    else
      EXPECT_THROW(cuda::prefill_kernel(), Error);
  }
  KernelEnv env("fast");
  try {
    (void)cuda::prefill_kernel();
    ADD_FAILURE() << "SPATTN_CUDA_KERNEL=fast was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SPATTN_CUDA_KERNEL"), std::string::npos) << e.what();
  }
}

// The two kernels on one input: BLASST's skipped tiles (both orders) and the outputs.
TEST(CudaKernels, WgmmaAndMmaAgreeOnHopper) {
  if (cuda::device_count() == 0) SPATTN_SKIP_NOT_APPLICABLE("no CUDA device");
  if (!hopper()) SPATTN_SKIP_NOT_APPLICABLE("not a Hopper GPU: one prefill kernel here");
  for (int64_t d : {64, 128}) {
    const int64_t seq = 1500;
    const Workload w = test::text_workload(seq, d, 21);
    test::DeviceTensor dq(w.q), dk(w.k), dv(w.v);
    for (BlasstOrder order : {BlasstOrder::in_order, BlasstOrder::local_first})
      for (double lambda : {0.0, 1e-3, 1e-2}) {
        Tensor out[2];
        SkipStats skip[2];
        for (int i = 0; i < 2; ++i) {
          KernelEnv env(i == 0 ? "wgmma" : "mma");
          test::DeviceTensor dout(DType::bf16, 4, seq, d);
          skip[i].record_tiles = true;
          cuda::attention_blasst(dq.view, dk.view, dv.view, dout.view, lambda, {}, nullptr, nullptr,
                                 &skip[i], order);
          out[i] = dout.to_host();
        }
        const std::string what = std::string(blasst_order_name(order)) + " d" + std::to_string(d) +
                                 " lambda " + std::to_string(lambda);
        EXPECT_EQ(skip[0].visited, skip[1].visited) << what;
        int64_t differ = 0;
        for (size_t i = 0; i < skip[0].skipped_tiles.size(); ++i)
          differ += skip[0].skipped_tiles[i] != skip[1].skipped_tiles[i];
        // Scores summed in another order may round a margin across ln(lambda): rare.
        EXPECT_LE(differ, 2) << what << ": query tiles whose skipped key tiles differ";
        const test::Diff df = test::diff(out[0].view(), out[1].view());
        if (differ == 0) {
          EXPECT_LE(df.max_abs, 1.6e-2 * std::max(1.0, df.ref_max)) << what;
        }
      }
  }
}

}  // namespace
}  // namespace spattn

// Which prefill kernel runs (spattn/cuda.hpp: prefill_kernel): the wgmma kernel on a Hopper GPU,
// mma.sync elsewhere or when SPATTN_CUDA_KERNEL=mma asks; a wrong value is a named Error. On a
// Hopper both kernels run here on the same inputs: the same BLASST decisions, tile for tile,
// and outputs within rounding of each other; the wgmma kernel's overlapped schedules
// (wgmma_overlap, wgmma_pingpong) give the plain schedule's outputs exactly. The other GPU tests check whichever kernel the
// environment picks against the CPU (run them under both: DEVELOPERS.md).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "assets.hpp"
#include "cuda/device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/blasst.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

// Sets an environment variable (SPATTN_CUDA_KERNEL by default) for a scope and restores what
// was there.
class KernelEnv {
 public:
  explicit KernelEnv(const char* value, const char* name = "SPATTN_CUDA_KERNEL") : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value, 1);
  }
  ~KernelEnv() {
    if (had_)
      ::setenv(name_, old_.c_str(), 1);
    else
      ::unsetenv(name_);
  }

 private:
  const char* name_;
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
  for (const char* name : {"wgmma", "wgmma_overlap", "wgmma_pingpong"}) {
    KernelEnv env(name);
    if (hopper())
      EXPECT_EQ(cuda::prefill_kernel(), name);
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

// FlashAttention-3's schedules (SPATTN_CUDA_KERNEL=wgmma_overlap, wgmma_pingpong) and TMA
// copies (SPATTN_CUDA_TMA=1, with each schedule) against the plain wgmma schedule on one input:
// dense (causal, full, queries at the end of a longer cache) and tile lists (128-row and 64-row
// masks, the latter as the kernel's paired 64-row groups, which keep the plain schedule), both
// dtypes and head dims. The same operations in the same order: the same outputs, LSE and
// entries.
TEST(CudaKernels, SchedulesAreThePlainWgmmaKernel) {
  if (cuda::device_count() == 0) SPATTN_SKIP_NOT_APPLICABLE("no CUDA device");
  if (!hopper()) SPATTN_SKIP_NOT_APPLICABLE("not a Hopper GPU: no wgmma kernel here");
  uint64_t seed = 40;
  for (DType t : {DType::bf16, DType::f16})
    for (int64_t d : {64, 128})
      for (int form = 0; form < 4; ++form) {
        const bool causal = form != 1;
        const int64_t hq = 4, hkv = 2, lq = 1333, lkv = form == 2 ? 2001 : 1333;
        const int64_t bq = form == 3 ? 64 : 128;
        const Tensor q = test::random_tensor(t, hq, lq, d, seed++);
        const Tensor k = test::random_tensor(t, hkv, lkv, d, seed++);
        const Tensor v = test::random_tensor(t, hkv, lkv, d, seed++);
        test::DeviceTensor dq(q), dk(k), dv(v);
        AttnOptions opt;
        opt.causal = causal;
        // Forms 2 and 3 through a mask: every third block of each row and its last (diagonal).
        const BlockMask full = BlockMask::full(hq, lq, lkv, bq, 64, causal);
        std::vector<std::vector<int32_t>> lists;
        for (int64_t h = 0; h < hq; ++h)
          for (int64_t qb = 0; qb < full.n_qb(); ++qb) {
            const auto row = full.row(h, qb);
            std::vector<int32_t>& l = lists.emplace_back();
            for (size_t i = 0; i < row.size(); ++i)
              if (i % 3 == size_t(h % 3) || i + 1 == row.size()) l.push_back(row[i]);
          }
        const BlockMask mask = BlockMask::from_lists(hq, lq, lkv, bq, 64, causal, lists);
        const char* names[] = {"wgmma", "wgmma_overlap", "wgmma_pingpong"};
        Tensor out[6];
        std::vector<float> lse[6];
        Stats st[6];
        for (int i = 0; i < 6; ++i) {
          KernelEnv env(names[i % 3]), copies(i < 3 ? "0" : "1", "SPATTN_CUDA_TMA");
          test::DeviceTensor dout(t, hq, lq, d);
          test::DeviceFloats dlse(size_t(hq * lq));
          if (form < 2)
            cuda::attention_dense(dq.view, dk.view, dv.view, dout.view, opt, dlse.ptr, &st[i]);
          else
            cuda::attention_block_sparse(dq.view, dk.view, dv.view, dout.view, mask, opt, dlse.ptr,
                                         &st[i]);
          out[i] = dout.to_host();
          lse[i] = dlse.to_host();
        }
        for (int i = 1; i < 6; ++i) {
          const std::string what = std::string(names[i % 3]) + (i < 3 ? "" : " tma ") + " " +
                                   dtype_name(t) + " d" + std::to_string(d) + " form " +
                                   std::to_string(form);
          const test::Diff df = test::diff(out[i].view(), out[0].view());
          EXPECT_EQ(df.max_abs, 0.0) << what;
          EXPECT_EQ(lse[i], lse[0]) << what;
          EXPECT_EQ(st[i].score_entries, st[0].score_entries) << what;
        }
      }
  // A value SPATTN_CUDA_TMA does not take is a named Error, not the cp.async producer.
  KernelEnv env("wgmma"), copies("yes", "SPATTN_CUDA_TMA");
  const Tensor x = test::random_tensor(DType::bf16, 1, 100, 64, 1);
  test::DeviceTensor dx(x), dout(DType::bf16, 1, 100, 64);
  try {
    cuda::attention_dense(dx.view, dx.view, dx.view, dout.view);
    ADD_FAILURE() << "SPATTN_CUDA_TMA=yes was taken";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("SPATTN_CUDA_TMA"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace spattn

// The in-process peaks (measure_machine_peak, the loops behind it) and the bf16 operand-path
// chooser. No timing passes or fails here: figures only have to be positive, finite and
// within a sane factor of each other, whatever else runs on the machine.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "hwy/targets.h"
#include "kernels/flash_common.hpp"
#include "kernels/gemm_int8.hpp"
#include "kernels/peak_loops.hpp"
#include "spattn/attention.hpp"
#include "spattn/error.hpp"
#include "spattn/peak.hpp"
#include "test_util.hpp"

namespace spattn {
namespace {

// Short repetitions and a small buffer: the figures are checked for sanity, not accuracy.
MachinePeakOptions quick() {
  MachinePeakOptions o;
  o.rep_s = 0.02;
  o.reps = 2;
  o.read_bytes = 64ll << 20;
  o.sgemm_opt.n = 512;
  o.sgemm_opt.budget_s = 0.05;
  return o;
}

bool finite_positive(double x) { return std::isfinite(x) && x > 0; }

TEST(Peak, FiguresArePositiveAndFinite) {
  const MachinePeak m = measure_machine_peak(0, quick());
  EXPECT_TRUE(finite_positive(m.fma_gflops)) << m.fma_gflops;
  EXPECT_TRUE(finite_positive(m.sgemm_gflops)) << m.sgemm_gflops;
  EXPECT_TRUE(finite_positive(m.read_gbps)) << m.read_gbps;
  EXPECT_EQ(m.simd_target, simd_target_name());
  // bf16 dot is 0 exactly when the kernels' dot path cannot run here.
  if (kernels::cpu_has_bf16_dot())
    EXPECT_TRUE(finite_positive(m.bf16_dot_gflops)) << m.bf16_dot_gflops;
  else
    EXPECT_EQ(m.bf16_dot_gflops, 0.0);
  // int8 dot likewise: 0 exactly where the integer products have no vpdpbusd path.
  if (kernels::gemm_int8_vnni())
    EXPECT_TRUE(finite_positive(m.int8_dot_gops)) << m.int8_dot_gops;
  else
    EXPECT_EQ(m.int8_dot_gops, 0.0);
  // How the FMA peak compares with sgemm's is a timing, checked where timings belong: the
  // microbenchmark warns when the ratio is implausible (bench/main.cpp).
}

TEST(Peak, SgemmCanBeLeftOut) {
  MachinePeakOptions o = quick();
  o.sgemm = false;
  o.read_bytes = 0;
  const MachinePeak m = measure_machine_peak(1, o);
  EXPECT_TRUE(finite_positive(m.fma_gflops));
  EXPECT_EQ(m.sgemm_gflops, 0.0);
  EXPECT_EQ(m.read_gbps, 0.0);
}

TEST(Peak, BadOptionsThrow) {
  MachinePeakOptions o = quick();
  o.reps = 0;
  EXPECT_THROW(measure_machine_peak(1, o), Error);
  o = quick();
  o.rep_s = -1;
  EXPECT_THROW(measure_machine_peak(1, o), Error);
  EXPECT_THROW(measure_machine_peak(-1, quick()), Error);
}

// Every compiled target's loops do work; bf16 dot only where the dot path exists; the read
// loop really sums what it reads, at any alignment and length.
TEST(Peak, LoopsOnEveryTarget) {
  std::vector<float> buf(1000 + 3);
  for (size_t i = 0; i < buf.size(); ++i) buf[i] = float(i % 5) * 0.5f;  // exact in f32
  for (int64_t target : hwy::SupportedAndGeneratedTargets()) {
    hwy::SetSupportedTargetsForTest(target);
    SCOPED_TRACE(hwy::TargetName(target));
    float sink = -1;
    const double fma = kernels::fma_peak_loop(100, &sink);
    EXPECT_GT(fma, 0);
    EXPECT_EQ(std::fmod(fma, 200.0), 0.0);  // 2 flops per lane per FMA, 100 rounds
    EXPECT_TRUE(std::isfinite(sink));
    const double dot = kernels::bf16_dot_peak_loop(100, &sink);
    if (target == HWY_AVX3 && kernels::cpu_has_bf16_dot()) {
      EXPECT_EQ(dot, 4.0 * 16 * 16 * 100);
      EXPECT_TRUE(std::isfinite(sink));
    } else {
      EXPECT_EQ(dot, 0.0);
    }
    for (int64_t off : {0, 1, 3})
      for (int64_t n : {0, 1, 17, 999, 1000}) {
        double want = 0;
        for (int64_t i = 0; i < n; ++i) want += buf[size_t(off + i)];
        EXPECT_EQ(kernels::read_sum_loop(buf.data() + off, n, &sink), 4.0 * double(n));
        EXPECT_EQ(sink, float(want)) << "off " << off << " n " << n;
      }
  }
  hwy::SetSupportedTargetsForTest(0);
}

// The chooser times both paths and returns its choice; it sets nothing, so a call made with
// default options computes the same bits before and after it.
TEST(Bf16Path, ChooserReturnsAValidChoiceAndSetsNothing) {
  const Tensor q = test::random_tensor(DType::bf16, 2, 96, 64, 1),
               k = test::random_tensor(DType::bf16, 2, 96, 64, 2),
               v = test::random_tensor(DType::bf16, 2, 96, 64, 3);
  Tensor before(DType::f32, 2, 96, 64), after(DType::f32, 2, 96, 64);
  attention_dense(q, k, v, before);
  const bool supported = kernels::bf16_dot_supported();
  const kernels::Bf16PathChoice c = kernels::choose_bf16_path(0, 64, 256, 2);
  if (supported) {
    EXPECT_TRUE(finite_positive(c.dot_ms)) << c.dot_ms;
    EXPECT_TRUE(finite_positive(c.widen_ms)) << c.widen_ms;
    EXPECT_EQ(c.dot, c.dot_ms <= c.widen_ms);
  } else {
    EXPECT_FALSE(c.dot);
    EXPECT_EQ(c.dot_ms, 0.0);
    EXPECT_EQ(c.widen_ms, 0.0);
  }
  EXPECT_EQ(kernels::bf16_dot_supported(), supported);
  attention_dense(q, k, v, after);
  EXPECT_EQ(std::memcmp(before.view().data, after.view().data, size_t(after.numel()) * 4), 0);
}

TEST(Bf16Path, BadProbeThrows) {
  EXPECT_THROW(kernels::choose_bf16_path(1, 64, 256, 0), Error);
  EXPECT_THROW(kernels::choose_bf16_path(1, 64, 0, 1), Error);
}

}  // namespace
}  // namespace spattn

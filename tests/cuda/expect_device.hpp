// The checks the GPU method tests share: a device output and LSE against a host reference, the
// output over a device-built mask against the host's block-sparse attention over that mask, and
// the Error a method spec raises on small device tensors.
#pragma once
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "device_buffers.hpp"
#include "cuda/text_workload.hpp"
#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/sparse_attention.hpp"
#include "test_util.hpp"

namespace spattn::test {

// Device output (any dtype) against the reference within the dtype's tolerance (scale: a
// multiple of it), and every LSE row within 2e-3 (relative above 1).
inline void expect_device_output(const DeviceTensor& dout, const DeviceFloats& dlse,
                                 const Tensor& ref, const std::vector<float>& lse_ref, DType t,
                                 double scale = 1.0) {
  const Tensor got = dout.to_host();
  const Diff d = diff(got.view(), ref.view());
  EXPECT_LE(d.max_abs, scale * out_tol(t) * std::max(1.0, d.ref_max));
  const std::vector<float> lse = dlse.to_host();
  int64_t off = 0;
  for (size_t i = 0; i < lse.size(); ++i)
    off += !(std::abs(lse[i] - lse_ref[i]) <= 2e-3f * std::max(1.0f, std::abs(lse_ref[i])));
  EXPECT_EQ(off, 0) << "LSE rows off";
}

// The device's output over its own mask m against the host's block-sparse attention over it;
// the device run's entries against the host's.
inline void expect_block_sparse_output(const Input& in, const AttnOptions& opt, const BlockMask& m,
                                       const DeviceTensor& dout, const DeviceFloats& dlse, DType t,
                                       const Stats& device_stats) {
  const int64_t hq = in.q.heads(), lq = in.q.seq(), d = in.q.dim();
  Tensor ref(DType::f32, hq, lq, d);
  std::vector<float> lse_ref(size_t(hq * lq));
  Stats ref_stats;
  attention_block_sparse(in.q, in.k, in.v, ref, m, opt, lse_ref.data(), &ref_stats);
  expect_device_output(dout, dlse, ref, lse_ref, t);
  EXPECT_EQ(device_stats.score_entries, ref_stats.score_entries);
  EXPECT_EQ(device_stats.causal_entries, ref_stats.causal_entries);
}

// The Error text `spec` raises on small bf16 device tensors (2 heads, 300 rows, dim 64), or
// "no error".
inline std::string method_error_on_device(const std::string& spec, bool causal) {
  const Tensor x = random_tensor(DType::bf16, 2, 300, 64, 1);
  DeviceTensor d(x), o(DType::bf16, 2, 300, 64);
  AttnOptions opt;
  opt.causal = causal;
  try {
    make_method(spec)->run(d.view, d.view, d.view, o.view, opt);
  } catch (const Error& e) {
    return e.what();
  }
  return "no error";
}

}  // namespace spattn::test

// What the CPU bench (bench.cpp) and the device bench (bench_cuda.cpp) share: the median of
// the timed runs, progress lines, and the run's description of its problem.
#pragma once
#include <algorithm>
#include <string>
#include <vector>

#include "spattn/bench.hpp"
#include "spattn/peak.hpp"

namespace spattn::bench_parts {

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

inline void say(const BenchOptions& o, const std::string& status) {
  if (o.progress) o.progress(status);
}

// The methods, the shapes, the dtype and options the run used, and the host it ran on.
inline void describe(BenchRun& run, const BenchMethods& methods, const TensorView& q,
                     const TensorView& k, DType dtype, const AttnOptions& opt,
                     const BenchOptions& o) {
  run.machine = machine_info();
  for (const auto& s : methods.specs) run.specs.push_back(s.text);
  run.left_out = methods.left_out;
  run.heads = q.heads;
  run.kv_heads = k.heads;
  run.q_len = q.seq;
  run.seq = k.seq;
  run.dim = q.dim;
  run.dtype = dtype;
  run.opt = opt;
  run.repeat = o.repeat;
}

}  // namespace spattn::bench_parts

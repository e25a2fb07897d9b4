// Calibrating BLASST on generated workloads, and checking a calibration on fresh ones: the
// loops behind `spattn calibrate` and spattn.calibrate / spattn.evaluate_calibration.
#include <fmt/format.h>

#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

void check_plan(const std::vector<int64_t>& lengths, int64_t samples) {
  SPATTN_CHECK(!lengths.empty(), "--lengths needs at least one length");
  for (int64_t l : lengths)
    SPATTN_CHECK(l >= 1 && l <= (int64_t(1) << 30), "--lengths: each must be in [1, 2^30], got ",
                 l);
  SPATTN_CHECK(samples >= 1 && samples <= 1000, "--samples must be in [1, 1000], got ", samples);
}

}  // namespace

void for_each_calibration_workload(const WorkloadConfig& base, const std::vector<int64_t>& lengths,
                                   int64_t samples, const CalibrationProgress& progress,
                                   const std::function<void(const Workload&)>& use) {
  check_plan(lengths, samples);
  int64_t done = 0;
  const int64_t total = int64_t(lengths.size()) * samples;
  for (int64_t len : lengths)
    for (int64_t i = 0; i < samples; ++i) {
      WorkloadConfig cfg = base;
      cfg.seq = len;
      cfg.q_len = 0;
      cfg.seed = base.seed + uint64_t(i);
      if (progress)
        progress(fmt::format("sample {}/{}: length {}, seed {}", ++done, total, len, cfg.seed));
      use(make_workload(cfg));
    }
}

Calibration calibrate_on_workloads(const CalibrationOptions& opt, const WorkloadConfig& base,
                                   const std::vector<int64_t>& lengths, int64_t samples,
                                   const CalibrationProgress& progress) {
  check_plan(lengths, samples);
  BlasstCalibrator cal(opt);  // checks the fit options before any data is made
  for_each_calibration_workload(base, lengths, samples, progress, [&](const Workload& w) {
    cal.add(w.q.view(), w.k.view(), w.v.view());
  });
  return cal.fit();
}

CalibrationEvaluation evaluate_calibration(const Calibration& c, const WorkloadConfig& base,
                                           const std::vector<int64_t>& lengths, int64_t samples,
                                           const std::vector<double>& targets, double fixed_lambda,
                                           const AttnOptions& attn,
                                           const CalibrationProgress& progress) {
  check_plan(lengths, samples);
  SPATTN_CHECK(!targets.empty(), "--targets needs at least one sparsity");
  for (double t : targets)
    SPATTN_CHECK(t >= 0.0 && t < 1.0, "--targets: each must be in [0, 1), got ", t);
  SPATTN_CHECK(fixed_lambda >= 0.0 && fixed_lambda <= 1.0,
               "--fixed-lambda must be in (0, 1] (or 0: derived from the calibration), got ",
               fixed_lambda);
  CalibrationEvaluation e;
  e.lengths = lengths;
  e.targets = targets;
  e.first_seed = base.seed;
  e.samples = samples;
  e.fixed_lambda = fixed_lambda > 0 ? fixed_lambda : c.lambda_for(targets.back(), lengths.front());
  e.sparsity.assign(lengths.size(), std::vector<std::vector<double>>(targets.size()));
  e.fixed.assign(lengths.size(), {});
  size_t n = 0;  // samples come length by length
  for_each_calibration_workload(base, lengths, samples, progress, [&](const Workload& w) {
    const size_t li = n++ / size_t(samples);
    const TileMargins tm = blasst_tile_margins(w.q, w.k, w.v, attn, c.order);
    for (size_t ti = 0; ti < targets.size(); ++ti)
      e.sparsity[li][ti].push_back(tm.sparsity_at(c.lambda_for(targets[ti], lengths[li])));
    e.fixed[li].push_back(tm.sparsity_at(e.fixed_lambda));
  });
  return e;
}

}  // namespace spattn

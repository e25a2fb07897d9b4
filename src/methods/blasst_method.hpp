// The blasst method's class, visible to tools that report what its last run skipped
// (`spattn bench` prints the skipped-tile fraction per head).
#pragma once
#include <cstdint>
#include <memory>

#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/method.hpp"

namespace spattn {

class BlasstMethod final : public Method {
 public:
  std::string name() const override { return "blasst"; }
  void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
           const AttnOptions& opt, float* lse, Stats* stats) override;
  // Recall: the last run (prefill or decode) recorded which tiles it skipped, so coverage()
  // is exact (before any run: every causal key, like the other methods).
  std::unique_ptr<Coverage> coverage(int64_t q_len, int64_t kv_len, bool causal) const override;

  double lambda_for(int64_t kv_len) const;  // the threshold a run at this length uses
  double last_lambda() const { return last_lambda_; }
  // Per (head, query tile) skip counts and skipped tiles of the last run; a decode run
  // (q_len <= 16) has one query tile per head.
  const SkipStats& last_skips() const { return skip_; }

 private:
  friend std::unique_ptr<Method> make_blasst(const MethodSpec& spec);
  double lambda_ = 0, sparsity_ = 0;
  std::shared_ptr<const Calibration> calib_;  // set for sparsity=S
  int64_t batch_ = 4;
  double last_lambda_ = 0;
  SkipStats skip_;
};

}  // namespace spattn

// blasst (seeds/003): skip key tiles whose scores fall ln(lambda) below the running max.
//   blasst:lambda=X                 a fixed threshold in [0, 1]
//   blasst:sparsity=S,calib=FILE    lambda = alpha * exp(beta * S) / L^(gamma + delta * S) from a
//                                   `spattn calibrate` file, L the context (kv) length
//   batch=B                         decode only: key blocks scored before their V is loaded
// q_len <= 16 runs the decode kernel (skips V loads), longer queries the prefill kernel.
#include <cmath>
#include <optional>

#include "methods/blasst_method.hpp"
#include "methods/registry.hpp"
#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"

namespace spattn {

double BlasstMethod::lambda_for(int64_t kv_len) const {
  return calib_ ? calib_->lambda_for(sparsity_, kv_len) : lambda_;
}

void BlasstMethod::run(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const AttnOptions& opt, float* lse, Stats* stats) {
  last_lambda_ = lambda_for(k.seq);
  // Both kernels record the skipped tiles: one small vector per (head, q tile) (decode: per
  // q head), negligible next to the tile work, and it makes recall exact.
  skip_ = SkipStats{};
  skip_.record_tiles = true;
  if (q.seq <= kMaxDecodeQueries) {
    DecodeOptions d;
    d.lambda = last_lambda_;
    d.batch = batch_;
    attention_decode(q, k, v, out, opt, d, lse, stats, &skip_);
  } else {
    attention_blasst(q, k, v, out, last_lambda_, opt, lse, stats, &skip_);
  }
}

std::unique_ptr<Coverage> BlasstMethod::coverage(int64_t q_len, int64_t kv_len,
                                                 bool causal) const {
  if (skip_.heads == 0) return Method::coverage(q_len, kv_len, causal);  // not run yet
  return blasst_coverage(skip_, q_len, kv_len, causal);
}

std::unique_ptr<Method> make_blasst(const MethodSpec& spec) {
  ParamReader r(spec);
  const bool has_lambda = r.has("lambda"), has_sparsity = r.has("sparsity");
  SPATTN_CHECK(has_lambda != has_sparsity, "blasst: give exactly one of lambda=X or "
               "sparsity=S,calib=FILE (got ", has_lambda ? "both" : "neither", ")");
  auto m = std::make_unique<BlasstMethod>();
  m->lambda_ = r.get_double("lambda", 0.0, 0.0, 1.0);
  // Upper bound just below 1: Calibration::lambda_for rejects 1 with its own message, but the
  // spec should fail before any file is read.
  m->sparsity_ = r.get_double("sparsity", 0.0, 0.0, std::nextafter(1.0, 0.0));
  const std::string calib = r.get_string("calib", "");
  m->batch_ = r.get_int("batch", DecodeOptions{}.batch, 1, 1024);
  r.finish();
  SPATTN_CHECK(!has_sparsity || !calib.empty(),
               "blasst: sparsity=S needs calib=FILE (write one with `spattn calibrate`)");
  SPATTN_CHECK(!has_lambda || !r.has("calib"),
               "blasst: calib=FILE goes with sparsity=S, not lambda=X");
  if (has_sparsity) m->calib_ = std::make_shared<Calibration>(load_calibration(calib));
  return m;
}

}  // namespace spattn

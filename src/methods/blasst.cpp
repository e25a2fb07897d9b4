// blasst ("BLASST: Dynamic Blocked Attention Sparsity via Softmax Thresholding", section 3):
// skip key tiles whose scores fall ln(lambda) below the running max.
//   blasst:lambda=X                 a fixed threshold in [0, 1]
//   blasst:sparsity=S,calib=FILE    lambda = alpha * exp(beta * S + eta * S^2) /
//                                   L^(gamma + delta * S + epsilon * S^2) from a
//                                   `spattn calibrate` file, L the context (kv) length. A target
//                                   above what any lambda reaches at L (the file's reach) raises
//                                   Error naming the reachable range: never a silent shortfall
//   layer=N                         with calib=FILE: layer N's own law (a per-layer file; a
//                                   file with one law serves every layer)
//   order=local_first|in_order      the order key tiles are visited in (BlasstOrder; the skip
//                                   rule is the same): default local_first, see below. With
//                                   calib=FILE the file's order (an order= must match it)
//   batch=B                         decode only: key blocks scored before their V is loaded
// q_len <= 16 runs the decode kernel (skips V loads), longer queries the prefill kernel.
//
// Report: extras "lambda" (the threshold this run used) and "skipped_fraction" (of visited key
// tiles), per_head "head_skipped" (skipped fraction per q head; heads differ a lot, as in the
// paper's Fig. 7), and the exact coverage for recall.
#include <cmath>
#include <memory>
#include <utility>
#include <vector>

#include "dist/ring_attention.hpp"
#include "methods/kernel_path.hpp"
#include "methods/registry.hpp"
#include "spattn/blasst.hpp"
#include "spattn/calibration.hpp"
#include "spattn/cuda.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"

namespace spattn {

// The fixed threshold of a blasst spec run across ranks (--cp): blasst:lambda=X with the
// local-first order (the default). Throws Error for a spec make_method refuses, and by name
// for what the ring cannot carry: sparsity=S,calib=FILE (its threshold follows the kv length
// of each one-process chunk) and order=in_order (the seed is local-first's first two tiles).
double blasst_cp_lambda(const MethodSpec& spec);
namespace {

// The default visiting order, chosen by measurement (docs/methods/blasst.md, "BLASST's visiting
// order"): on real attention in order skips almost nothing at any useful lambda, local-first
// skips most tiles at the same recall.
constexpr BlasstOrder kDefaultOrder = BlasstOrder::local_first;

// The threshold rule of a blasst spec, read one way for the method and for decode: lambda=X, or
// sparsity=S,calib=FILE with the law of layer=N (`layer` where the spec names none; -1: the
// file's one law), and order=. The calibration file is read here, once, not per run: the one
// plan-like step BLASST has (the threshold at a length is then a few flops).
struct BlasstRule {
  double lambda = 0, sparsity = 0;
  std::shared_ptr<const Calibration> law;
  BlasstOrder order = kDefaultOrder;
  // The threshold for a cache of kv_len keys: the calibration's law or the fixed lambda.
  double at(int64_t kv_len) const { return law ? law->threshold_for(kv_len, sparsity) : lambda; }
};

BlasstRule read_blasst_rule(ParamReader& r, int64_t layer) {
  BlasstRule rule;
  const bool has_lambda = r.has("lambda"), has_sparsity = r.has("sparsity");
  SPATTN_CHECK(has_lambda != has_sparsity,
               "blasst: give exactly one of lambda=X or "
               "sparsity=S,calib=FILE (got ",
               has_lambda ? "both" : "neither", ")");
  rule.lambda = r.get_double("lambda", 0.0, 0.0, 1.0);
  // Upper bound just below 1: Calibration::lambda_for rejects 1 with its own message, but
  // the spec should fail before any file is read.
  rule.sparsity = r.get_double("sparsity", 0.0, 0.0, std::nextafter(1.0, 0.0));
  const std::string calib = r.get_string("calib", "");
  const bool has_layer = r.has("layer");
  if (has_layer) layer = r.get_int("layer", 0, 0, int64_t(1) << 20);
  const bool has_order = r.has("order");
  try {
    rule.order = parse_blasst_order(r.get_string("order", blasst_order_name(kDefaultOrder)));
  } catch (const Error& e) {
    detail::fail("blasst: order: ", e.what());
  }
  SPATTN_CHECK(!has_sparsity || !calib.empty(),
               "blasst: sparsity=S needs calib=FILE (write one with `spattn calibrate`)");
  SPATTN_CHECK(!has_lambda || !r.has("calib"),
               "blasst: calib=FILE goes with sparsity=S, not lambda=X");
  SPATTN_CHECK(!has_layer || has_sparsity, "blasst: layer=N goes with sparsity=S,calib=FILE");
  if (has_sparsity) {
    const Calibration file = load_calibration(calib);
    try {
      // The layer's own law, copied out so the rule holds one law whatever the file: a
      // per-layer file without it is an Error naming its layers when the method or session is
      // made, not at the first token.
      rule.law = std::make_shared<const Calibration>(layer >= 0 ? file.for_layer(layer) : file);
    } catch (const Error& e) {
      detail::fail("blasst: layer: ", calib, ": ", e.what());
    }
    // Its thresholds reach their sparsity only in the order it was measured in.
    SPATTN_CHECK(!has_order || rule.order == rule.law->order,
                 "blasst: order=", blasst_order_name(rule.order), " but ", calib,
                 " was calibrated for order ", blasst_order_name(rule.law->order),
                 " (leave order= out to use it)");
    rule.order = rule.law->order;
  }
  return rule;
}

class Blasst final : public Method {
 public:
  explicit Blasst(const MethodSpec& spec) {
    ParamReader r(spec);
    batch_ = r.get_int("batch", DecodeOptions{}.batch, 1, 1024);
    rule_ = read_blasst_rule(r, -1);
    r.finish();
  }
  std::string name() const override { return "blasst"; }
  double lambda() const { return rule_.lambda; }
  BlasstOrder order() const { return rule_.order; }

  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    const double lambda = rule_.at(k.seq);
    SkipStats skip = recording_skips();
    MethodReport r;
    r.path = run_decode_or_prefill(
        q.seq,
        [&] { attention_decode(q, k, v, out, opt, decode_options(lambda), lse, &r.stats, &skip); },
        [&] { attention_blasst(q, k, v, out, lambda, opt, lse, &r.stats, &skip, rule_.order); });
    report_skips(r, lambda, std::move(skip), q.seq, k.seq, opt.causal);
    return r;
  }
  // The same kernels on the GPU (spattn/cuda.hpp): its split-K decode (batch 1..4 there) and
  // its prefill loop.
  MethodReport run_cuda(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    const double lambda = rule_.at(k.seq);
    SkipStats skip = recording_skips();
    MethodReport r;
    r.path = run_decode_or_prefill(
        q.seq,
        [&] {
          cuda::attention_decode(q, k, v, out, opt, decode_options(lambda), lse, &r.stats, &skip,
                                 opt.stream);
        },
        [&] {
          cuda::attention_blasst(q, k, v, out, lambda, opt, lse, &r.stats, &skip, rule_.order,
                                 opt.stream);
        });
    report_skips(r, lambda, std::move(skip), q.seq, k.seq, opt.causal);
    return r;
  }

 private:
  DecodeOptions decode_options(double lambda) const {
    DecodeOptions d;
    d.lambda = lambda;
    d.batch = batch_;
    d.order = rule_.order;
    return d;
  }
  // Every kernel records the skipped tiles: one small vector per (head, q tile) (decode: per
  // q head), negligible next to the tile work, and it makes recall exact.
  static SkipStats recording_skips() {
    SkipStats skip;
    skip.record_tiles = true;
    return skip;
  }
  static void report_skips(MethodReport& r, double lambda, SkipStats skip, int64_t q_len,
                           int64_t kv_len, bool causal) {
    r.extras["lambda"] = lambda;
    r.extras["skipped_fraction"] = skip.skipped_fraction();
    std::vector<double>& heads = r.per_head["head_skipped"];
    heads.reserve(size_t(skip.heads));
    for (int64_t h = 0; h < skip.heads; ++h) heads.push_back(skip.head_skipped_fraction(h));
    r.coverage = blasst_coverage(std::move(skip), q_len, kv_len, causal);
  }

  BlasstRule rule_;
  int64_t batch_ = 4;
};

}  // namespace

std::unique_ptr<Method> make_blasst(const MethodSpec& spec) {
  return std::make_unique<Blasst>(spec);
}

double blasst_cp_lambda(const MethodSpec& spec) {
  SPATTN_CHECK(!spec.params.count("sparsity") && !spec.params.count("calib"),
               "--cp with blasst takes lambda=X, not sparsity=S,calib=FILE (its threshold "
               "follows each one-process chunk's kv length)");
  const Blasst b(spec);  // every check make_method makes
  SPATTN_CHECK(b.order() == BlasstOrder::local_first,
               "--cp with blasst runs order=local_first "
               "only (the ranks seed the running max with its first two tiles)");
  return b.lambda();
}

namespace {
// In a model runner a calibrated spec (sparsity=S,calib=FILE) runs each layer at its own law:
// layer=l is added unless the spec names a layer itself. A file with one law serves every
// layer; a per-layer file without this layer's law is an Error naming its layers. Across ranks
// the ring runs BLASST's rule itself (dist::RingBlasst) on the 64-token tiles.
class BlasstPrefill final : public MethodPrefill {
 public:
  BlasstPrefill(const MethodSpec& spec, const MethodSpec& layer_spec, double cp_lambda)
      : MethodPrefill(make_method(layer_spec), spec.text), ring_{cp_lambda} {}
  RingPlan ring_plan(int64_t, int, bool) const override { return RingPlan{kKeyBlock, false}; }
  void ring_check(int64_t n, int ranks) const override {
    SPATTN_CHECK((n + kKeyBlock - 1) / kKeyBlock >= 2 * int64_t(ranks), "--cp ", ranks,
                 " with blasst: the prompt's ", n, " tokens make fewer than the ", 2 * ranks,
                 " chunks of ", kKeyBlock, " tokens (its tiles) the split needs");
  }
  void ring_prefill(const RingCall& c, const RingPlan&) override {
    ring_attention(c, nullptr, &ring_, false);
  }

 private:
  dist::RingBlasst ring_;
};

// Decode (`--attn-decode blasst:...`): the skip rule over the cache, one threshold per step
// (lambda=X), or the layer's law at the cache's length (sparsity=S,calib=FILE).
class BlasstDecode final : public LayerBackend {
 public:
  BlasstDecode(std::string spec, BlasstRule rule)
      : spec_(std::move(spec)), rule_(std::move(rule)) {}
  std::string name() const override { return spec_; }
  BackendCaps capabilities() const override {
    BackendCaps c;
    c.sparse_decode = true;
    return c;
  }
  TensorView prefill(const LayerCall& c) override { return dense_prefill(c); }
  void decode(const LayerCall& c, DecodeReads& reads) override {
    const PackedKV& kv = *c.packed;
    DecodeOptions o;
    o.lambda = rule_.at(kv.size());
    o.order = rule_.order;
    attention_decode(c.q, kv, c.out, decode_options(c.opt, c.pos0, kv), o, c.lse, c.stats);
    // Every key's K is read (the skip saves V and the exponentials).
    reads.keys_read += kv.kv_heads() * kv.size();
    reads.keys_total += kv.kv_heads() * kv.size();
  }

 private:
  std::string spec_;
  BlasstRule rule_;
};
}  // namespace

std::unique_ptr<LayerBackend> make_blasst_prefill(const MethodSpec& spec,
                                                  const BackendContext& ctx) {
  double cp_lambda = 0;
  if (ctx.cp) {
    cp_lambda = blasst_cp_lambda(spec);
    SPATTN_CHECK(ctx.n_ubatch % kKeyBlock == 0, "--cp with blasst needs -ub (", ctx.n_ubatch,
                 ") a multiple of ", kKeyBlock, " (its tiles)");
  }
  MethodSpec s = spec;
  if (spec.params.count("calib") && !spec.params.count("layer")) {
    s.params["layer"] = std::to_string(ctx.layer);
    s.text += ",layer=" + std::to_string(ctx.layer);
  }
  return std::make_unique<BlasstPrefill>(spec, s, cp_lambda);
}

std::unique_ptr<LayerBackend> make_blasst_decode(const MethodSpec& spec,
                                                 const BackendContext& ctx) {
  ParamReader r(spec);
  BlasstRule rule = read_blasst_rule(r, ctx.layer);
  r.finish();
  SPATTN_CHECK(spec.params.count("sparsity") || rule.lambda > 0,
               "blasst: lambda=0 is dense decode; give lambda in (0, 1]");
  return std::make_unique<BlasstDecode>(spec.text, std::move(rule));
}

}  // namespace spattn

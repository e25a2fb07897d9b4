// `--attn-decode SPEC`: which decode a runner runs (spattn/decode_spec.hpp).
#include "spattn/decode_spec.hpp"

#include <cmath>

#include "spattn/error.hpp"
#include "spattn/method.hpp"

namespace spattn {

DecodeSpec parse_decode_spec(std::string_view text) {
  const MethodSpec spec = parse_method_spec(text);
  DecodeSpec d;
  d.text = std::string(text);
  if (spec.name == "dense") {
    SPATTN_CHECK(spec.params.empty(), "--attn-decode dense takes no parameters ('", text, "')");
  } else if (spec.name == "quest") {
    d.kind = DecodeKind::quest;
    d.quest = parse_quest_params(spec);
  } else if (spec.name == "blasst") {
    d.kind = DecodeKind::blasst;
    ParamReader r(spec);
    const bool has_lambda = r.has("lambda"), has_sparsity = r.has("sparsity");
    SPATTN_CHECK(has_lambda != has_sparsity, "--attn-decode blasst: give exactly one of lambda=X "
                 "or sparsity=S,calib=FILE (got ", has_lambda ? "both" : "neither", ")");
    if (has_lambda) {
      d.blasst.lambda = r.get_double("lambda", 0.0, 0.0, 1.0);
      SPATTN_CHECK(d.blasst.lambda > 0, "blasst: lambda=0 is dense decode; give lambda in (0, 1]");
    } else {
      d.blasst_sparsity = r.get_double("sparsity", 0.0, 0.0, std::nextafter(1.0, 0.0));
    }
    const std::string calib = r.get_string("calib", "");
    const bool has_order = r.has("order");
    try {
      d.blasst.order = parse_blasst_order(r.get_string("order", "local_first"));
    } catch (const Error& e) {
      detail::fail("blasst: order: ", e.what());
    }
    r.finish();
    SPATTN_CHECK(has_lambda || !calib.empty(),
                 "blasst: sparsity=S needs calib=FILE (write one with `spattn calibrate`)");
    SPATTN_CHECK(!has_lambda || calib.empty(), "blasst: calib=FILE goes with sparsity=S, not lambda=X");
    if (has_sparsity) {
      d.blasst_calib = std::make_shared<const Calibration>(load_calibration(calib));
      // Its thresholds reach their sparsity only in the order it was measured in.
      SPATTN_CHECK(!has_order || d.blasst.order == d.blasst_calib->order, "blasst: order=",
                   blasst_order_name(d.blasst.order), " but ", calib, " was calibrated for order ",
                   blasst_order_name(d.blasst_calib->order), " (leave order= out to use it)");
      d.blasst.order = d.blasst_calib->order;
    }
  } else {
    detail::fail("--attn-decode: unknown decode method '", spec.name,
                 "' (expected dense, quest or blasst)");
  }
  return d;
}

DecodeOptions DecodeSpec::blasst_step(int64_t layer, int64_t length) const {
  DecodeOptions o = blasst;
  if (blasst_calib) o.lambda = blasst_calib->threshold_for(layer, length, blasst_sparsity);
  return o;
}

}  // namespace spattn

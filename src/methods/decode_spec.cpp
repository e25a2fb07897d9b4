// `--attn-decode SPEC`: which decode a runner runs (spattn/decode_spec.hpp).
#include "spattn/decode_spec.hpp"

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
    SPATTN_CHECK(r.has("lambda"), "--attn-decode blasst needs lambda=X in (0, 1] (calibrated "
                 "sparsity= is not wired into decode yet)");
    d.blasst.lambda = r.get_double("lambda", 0.0, 0.0, 1.0);
    SPATTN_CHECK(d.blasst.lambda > 0, "blasst: lambda=0 is dense decode; give lambda in (0, 1]");
    try {
      d.blasst.order = parse_blasst_order(r.get_string("order", "local_first"));
    } catch (const Error& e) {
      detail::fail("blasst: order: ", e.what());
    }
    r.finish();
  } else {
    detail::fail("--attn-decode: unknown decode method '", spec.name,
                 "' (expected dense, quest or blasst)");
  }
  return d;
}

}  // namespace spattn

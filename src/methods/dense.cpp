// dense: the tiled FlashAttention-style kernel over every causal entry. The baseline every
// sparse method's speedup is measured against.
#include "methods/registry.hpp"
#include "spattn/attention.hpp"
#include "spattn/decode.hpp"

namespace spattn {
namespace {

class Dense final : public Method {
 public:
  std::string name() const override { return "dense"; }
  void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
           const AttnOptions& opt, float* lse, Stats* stats) override {
    // Decode-sized queries take the decode kernel (lambda 0: every block), so a decode
    // method's speedup is measured against dense decode, not the prefill kernel.
    if (q.seq <= kMaxDecodeQueries)
      attention_decode(q, k, v, out, opt, DecodeOptions{}, lse, stats);
    else
      attention_dense(q, k, v, out, opt, lse, stats);
  }
};

}  // namespace

std::unique_ptr<Method> make_dense(const MethodSpec& spec) {
  ParamReader(spec).finish();
  return std::make_unique<Dense>();
}

}  // namespace spattn

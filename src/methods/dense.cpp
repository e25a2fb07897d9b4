// dense: the tiled FlashAttention-style kernel over every causal entry. The baseline every
// sparse method's speedup is measured against.
#include <memory>

#include "methods/kernel_path.hpp"
#include "methods/registry.hpp"
#include "spattn/attention.hpp"
#include "spattn/cuda.hpp"
#include "spattn/decode.hpp"

namespace spattn {
namespace {

class Dense final : public Method {
 public:
  std::string name() const override { return "dense"; }
  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    MethodReport r;
    // Decode-sized queries take the decode kernel (lambda 0: every block), so a decode
    // method's speedup is measured against dense decode, not the prefill kernel.
    r.path = run_decode_or_prefill(
        q.seq, [&] { attention_decode(q, k, v, out, opt, DecodeOptions{}, lse, &r.stats); },
        [&] { attention_dense(q, k, v, out, opt, lse, &r.stats); });
    r.coverage = std::make_shared<FullCoverage>(q.seq, k.seq, opt.causal);
    return r;
  }
  MethodReport run_cuda(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    MethodReport r;
    r.path = run_decode_or_prefill(
        q.seq,
        [&] {
          cuda::attention_decode(q, k, v, out, opt, DecodeOptions{}, lse, &r.stats, nullptr,
                                 opt.stream);
        },
        [&] { cuda::attention_dense(q, k, v, out, opt, lse, &r.stats, opt.stream); });
    r.coverage = std::make_shared<FullCoverage>(q.seq, k.seq, opt.causal);
    return r;
  }
};

}  // namespace

std::unique_ptr<Method> make_dense(const MethodSpec& spec) {
  ParamReader(spec).finish();
  return std::make_unique<Dense>();
}

}  // namespace spattn

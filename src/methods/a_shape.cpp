// a_shape: StreamingLLM's sinks plus local window, a static block mask (MMInference Table 2:
// sink = 128, local = 4096). No estimate: the mask depends on the lengths only.
#include "methods/a_shape.hpp"
#include "methods/block_mask_method.hpp"
#include "methods/registry.hpp"

namespace spattn {
namespace {

class AShape final : public BlockMaskMethod {
 public:
  explicit AShape(const MethodSpec& spec) {
    const AShapeParams p = a_shape_params(spec);
    sink_ = p.sink;
    local_ = p.local;
    block_q_ = p.block_q;
    block_k_ = p.block_k;
  }
  std::string name() const override { return "a_shape"; }

 protected:
  bool static_pattern() const override { return true; }
  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView&,
                       const AttnOptions& opt) const override {
    return a_shape_mask(geometry(q, k, opt), sink_, local_);
  }

 private:
  int64_t sink_, local_;
};

}  // namespace

AShapeParams a_shape_params(const MethodSpec& spec) {
  ParamReader r(spec);
  AShapeParams p;
  p.sink = r.get_int("sink", 128, 0, int64_t(1) << 40);
  p.local = r.get_int("local", 4096, 1, int64_t(1) << 40);
  read_block_sizes(r, p.block_q, p.block_k);
  r.finish();
  return p;
}

std::unique_ptr<Method> make_a_shape(const MethodSpec& spec) { return std::make_unique<AShape>(spec); }

}  // namespace spattn

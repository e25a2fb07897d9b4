// tri_shape: A-shape plus dense rows for the last `bottom` queries (MMInference Table 2:
// sink = 128, local = 4096, bottom = 128). Static: no estimate.
#include "methods/block_mask_method.hpp"
#include "methods/registry.hpp"

namespace spattn {
namespace {

class TriShape final : public BlockMaskMethod {
 public:
  explicit TriShape(const MethodSpec& spec) {
    ParamReader r(spec);
    sink_ = r.get_int("sink", 128, 0, int64_t(1) << 40);
    local_ = r.get_int("local", 4096, 1, int64_t(1) << 40);
    bottom_ = r.get_int("bottom", 128, 0, int64_t(1) << 40);
    read_block_sizes(r, block_q_, block_k_);
    r.finish();
  }
  std::string name() const override { return "tri_shape"; }

 protected:
  bool static_pattern() const override { return true; }
  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView&,
                       const AttnOptions& opt) const override {
    return tri_shape_mask(geometry(q, k, opt), sink_, local_, bottom_);
  }

 private:
  int64_t sink_, local_, bottom_;
};

}  // namespace

std::unique_ptr<Method> make_tri_shape(const MethodSpec& spec) {
  return std::make_unique<TriShape>(spec);
}

}  // namespace spattn

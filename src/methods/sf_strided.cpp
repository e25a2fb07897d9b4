// sf_strided: Sparse Transformer's "strided" pattern (Child et al. 2019): a local window
// plus slash lines every vline_stride diagonals. Static: no estimate.
// MMInference Table 2 sets local = vline_stride = token_per_frame; the default 256 is the frame of
// spattn's video workload (16 x 16 patches), a whole number of 64-key blocks; `frame` takes the
// input's own frame size (local=frame,vline_stride=frame is Table 2's setting).
#include "methods/block_mask_method.hpp"
#include "methods/registry.hpp"

namespace spattn {
namespace {

class SfStrided final : public BlockMaskMethod {
 public:
  explicit SfStrided(const MethodSpec& spec) {
    ParamReader r(spec);
    local_ = r.get_tokens("local", 256, 1, int64_t(1) << 40);
    vline_stride_ = r.get_tokens("vline_stride", 256, 1, int64_t(1) << 40);
    read_block_sizes(r, block_q_, block_k_);
    r.finish();
  }
  std::string name() const override { return "sf_strided"; }

 protected:
  bool static_pattern() const override { return true; }
  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView&,
                       const AttnOptions& opt) const override {
    return sf_strided_mask(geometry(q, k, opt), local_.resolve(opt, name(), "local"),
                           vline_stride_.resolve(opt, name(), "vline_stride"));
  }

 private:
  TokenCount local_, vline_stride_;
};

}  // namespace

std::unique_ptr<Method> make_sf_strided(const MethodSpec& spec) {
  return std::make_unique<SfStrided>(spec);
}

}  // namespace spattn

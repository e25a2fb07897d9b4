// mean_pool: block top-k from mean-pooled Q and K ("Measure Once, Mask Once", Eq. 1), the
// block-sparse estimate of MInference and SeerAttention. Pooling and scoring run inside
// run(): part of its time.
// Default topk = 128 key blocks of 64 (beta): the per-row block budget MOMO compares
// every selector at (k = 128); the first block (sink) and the blocks of each row's own 64
// most recent keys (local) are kept on top of it.
#include "methods/block_mask_method.hpp"
#include "methods/registry.hpp"

namespace spattn {
namespace {

class MeanPool final : public BlockMaskMethod {
 public:
  explicit MeanPool(const MethodSpec& spec) {
    ParamReader r(spec);
    const int64_t big = int64_t(1) << 40;
    topk_ = r.get_int("topk", 128, 0, big);
    sink_ = r.get_int("sink", 64, 0, big);
    local_ = r.get_int("local", 64, 1, big);
    read_block_sizes(r, block_q_, block_k_);
    r.finish();
  }
  std::string name() const override { return "mean_pool"; }

 protected:
  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView&,
                       const AttnOptions& opt) const override {
    return mean_pool_mask(q, k, block_q_, block_k_, topk_, sink_, local_, opt);
  }

 private:
  int64_t topk_, sink_, local_;
};

}  // namespace

std::unique_ptr<Method> make_mean_pool(const MethodSpec& spec) {
  return std::make_unique<MeanPool>(spec);
}

}  // namespace spattn

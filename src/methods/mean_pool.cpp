// mean_pool: block top-k from mean-pooled Q and K ("Measure Once, Mask Once", Eq. 1), the
// block-sparse estimate of MInference and SeerAttention. Pooling and scoring run inside
// run(): part of its time.
// Default topk = 128 key blocks of 64 (beta): the per-row block budget MOMO compares
// every selector at (k = 128); the first block (sink) and the blocks of each row's own 64
// most recent keys (local) are kept on top of it. `topp=P` instead: the fewest blocks whose
// estimated mass (spattn/masks.hpp) reaches P per query block, sink and local counted first.
#include <cmath>

#include "methods/block_mask_method.hpp"
#include "methods/registry.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

class MeanPool final : public BlockMaskMethod {
 public:
  explicit MeanPool(const MethodSpec& spec) {
    ParamReader r(spec);
    const int64_t big = int64_t(1) << 40;
    SPATTN_CHECK(!(r.has("topk") && r.has("topp")),
                 "mean_pool: give topk (blocks) or topp (mass), not both");
    topk_ = r.get_int("topk", 128, 0, big);
    if (r.has("topp")) {
      topp_ = r.get_double("topp", 1.0, -HUGE_VAL, HUGE_VAL);
      SPATTN_CHECK(topp_ > 0 && topp_ <= 1, "mean_pool: topp=", topp_, " outside (0, 1]");
    }
    sink_ = r.get_int("sink", 64, 0, big);
    local_ = r.get_int("local", 64, 1, big);
    read_block_sizes(r, block_q_, block_k_);
    r.finish();
  }
  std::string name() const override { return "mean_pool"; }

 protected:
  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView&,
                       const AttnOptions& opt) const override {
    return mean_pool_mask(q, k, block_q_, block_k_, topk_, sink_, local_, opt, topp_);
  }

 private:
  int64_t topk_, sink_, local_;
  double topp_ = 0;  // 0: the topk budget; else the mass budget in (0, 1]
};

}  // namespace

std::unique_ptr<Method> make_mean_pool(const MethodSpec& spec) {
  return std::make_unique<MeanPool>(spec);
}

}  // namespace spattn

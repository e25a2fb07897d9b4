// oracle_topk: the best block mask of topk blocks per query block, from the exact softmax mass
// of every block (block_mass). EVALUATION ONLY: run() computes full attention twice to learn
// the mass, so its time says nothing about a method; compare its recall and error, not speed.
// Default topk = 128 blocks of 64 (MOMO's defaults: k = 128, beta = 64), as mean_pool.
#include "methods/block_mask_method.hpp"
#include "methods/registry.hpp"

namespace spattn {
namespace {

class OracleTopk final : public BlockMaskMethod {
 public:
  explicit OracleTopk(const MethodSpec& spec) {
    ParamReader r(spec);
    topk_ = r.get_int("topk", 128, 1, int64_t(1) << 40);
    read_block_sizes(r, block_q_, block_k_);
    r.finish();
  }
  std::string name() const override { return "oracle_topk"; }
  int64_t block_budget() const override { return topk_; }

 protected:
  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                       const AttnOptions& opt) const override {
    return oracle_topk_mask(q, k, v, block_q_, block_k_, topk_, opt);
  }

 private:
  int64_t topk_;
};

}  // namespace

std::unique_ptr<Method> make_oracle_topk(const MethodSpec& spec) {
  return std::make_unique<OracleTopk>(spec);
}

}  // namespace spattn

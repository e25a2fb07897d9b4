// oracle_topk: the best block mask of topk blocks per query block, from the exact softmax mass
// of every block (block_mass). EVALUATION ONLY: run() computes full attention twice to learn
// the mass, so its time says nothing about a method; compare its recall and error, not speed.
// Default topk = 128 blocks of 64 (MOMO's defaults: k = 128, beta = 64), as mean_pool.
// Instead of topk, a mass budget on the same exact masses: `topp=P` (the fewest blocks holding
// P of each query block's mass) or `min_share=T` (every block holding at least T of it), the
// rules every estimating selector spends its estimate by (masks/block_budget.hpp), here with no
// estimate's error and no forced blocks: whether a per-query-block mass budget can match the
// count at equal density at all, apart from any estimate (issue 61). `local=W` keeps, beside
// any budget, the blocks of each row's W most recent keys (0, the default: nothing forced). A
// query block's first rows read their recent keys in the block before the diagonal; where the
// rest of the block reads the diagonal, a mass budget with nothing forced can leave those rows
// almost nothing (code-tiny-8k layer 6: 0.01% of their mass at topp=0.9; local=64 lifts them).
// `per=row` holds every row to topp of its own exact mass (masks::keep_row_mass): what a
// budget per row keeps with no estimate's error.
#include <cmath>

#include "methods/block_mask_method.hpp"
#include "methods/fraction.hpp"
#include "methods/registry.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

class OracleTopk final : public BlockMaskMethod {
 public:
  explicit OracleTopk(const MethodSpec& spec) {
    ParamReader r(spec);
    SPATTN_CHECK(int(r.has("topk")) + int(r.has("topp")) + int(r.has("min_share")) <= 1,
                 "oracle_topk: give one budget: topk (blocks), topp (a mass) or min_share (a "
                 "threshold)");
    topk_ = r.get_int("topk", 128, 1, int64_t(1) << 40);
    if (r.has("topp")) topp_ = get_fraction(r, spec.name, "topp", 1.0, Fraction::up_to_one);
    if (r.has("min_share"))
      min_share_ = get_fraction(r, spec.name, "min_share", 0.5, Fraction::below_one);
    read_block_sizes(r, block_q_, block_k_);
    local_ = r.get_int("local", 0, 0, int64_t(1) << 40);
    per_row_ = read_per_row(r, spec.name, !r.has("topp"));
    r.finish();
  }
  std::string name() const override { return "oracle_topk"; }
  int64_t block_budget() const override { return mass_budget() ? -1 : topk_; }

 protected:
  BlockMask build_mask(const TensorView& q, const TensorView& k, const TensorView& v,
                       const AttnOptions& opt) const override {
    if (mass_budget())
      return oracle_mass_mask(q, k, v, block_q_, block_k_, topp_, min_share_, opt, local_,
                              per_row_);
    return oracle_topk_mask(q, k, v, block_q_, block_k_, topk_, opt, local_);
  }

 private:
  bool mass_budget() const { return topp_ > 0 || min_share_ > 0; }
  int64_t topk_;
  int64_t local_ = 0;  // each row's most recent keys kept beside any budget (0: nothing forced)
  double topp_ = 0, min_share_ = 0;
  bool per_row_ = false;  // topp holds every row to its exact mass, not the query block's sum
};

}  // namespace

std::unique_ptr<Method> make_oracle_topk(const MethodSpec& spec) {
  return std::make_unique<OracleTopk>(spec);
}

}  // namespace spattn

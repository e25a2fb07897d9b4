// a_shape: StreamingLLM's sinks plus local window, a static block mask (MMInference Table 2:
// sink = 128, local = 4096). No estimate: the mask depends on the lengths only.
#include "dist/ring_attention.hpp"
#include "methods/block_mask_method.hpp"
#include "methods/registry.hpp"
#include "spattn/error.hpp"

namespace spattn {

struct AShapeParams {
  int64_t sink = 128, local = 4096, block_q = 64, block_k = 64;
};
// Throws Error on a bad or unknown parameter, as make_method does.
AShapeParams a_shape_params(const MethodSpec& spec);
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

std::unique_ptr<Method> make_a_shape(const MethodSpec& spec) {
  return std::make_unique<AShape>(spec);
}

namespace {
// Across ranks the ring runs the static pattern itself: each shard travels with only the rows
// some other rank sees (dist::RingPattern).
class AShapePrefill final : public MethodPrefill {
 public:
  AShapePrefill(const MethodSpec& spec, const AShapeParams& a)
      : MethodPrefill(make_method(spec), spec.text),
        pattern_{a.sink, a.local, a.block_q, a.block_k} {}
  RingPlan ring_plan(int64_t, int, bool) const override { return RingPlan{}; }
  void ring_prefill(const RingCall& c, const RingPlan&) override {
    ring_attention(c, &pattern_, nullptr, false);
  }

 private:
  dist::RingPattern pattern_;
};
}  // namespace

std::unique_ptr<LayerBackend> make_a_shape_prefill(const MethodSpec& spec,
                                                   const BackendContext& ctx) {
  const AShapeParams a = a_shape_params(spec);
  // One process lays query blocks from each -ub chunk's start; across ranks they lie from
  // position 0: the same blocks when -ub is a multiple of their height.
  SPATTN_CHECK(!ctx.cp || ctx.n_ubatch % a.block_q == 0, "--cp with a_shape needs -ub (",
               ctx.n_ubatch, ") a multiple of block_q (", a.block_q, ")");
  return std::make_unique<AShapePrefill>(spec, a);
}

}  // namespace spattn

// dense: the tiled FlashAttention-style kernel over every causal entry. The baseline every
// sparse method's speedup is measured against.
#include <memory>

#include "methods/kernel_path.hpp"
#include "methods/layer_backend.hpp"
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

// In a model runner: the packed cache, read in place; across ranks, the chunks in position
// order (or the whole K/V gathered), so every row gets one process's bits.
class DenseBackend final : public LayerBackend {
 public:
  std::string name() const override { return "dense"; }
  BackendCaps capabilities() const override {
    BackendCaps c;
    c.ring_gather = c.rows_independent = true;
    return c;
  }
  TensorView prefill(const LayerCall& c) override { return dense_prefill(c); }
  RingPlan ring_plan(int64_t n, int ranks, bool gather_asked) const override {
    return dense_ring_plan(n, ranks, gather_asked);
  }
  void ring_prefill(const RingCall& c, const RingPlan& plan) override {
    dense_ring_prefill(c, plan);
  }
};

}  // namespace

std::unique_ptr<Method> make_dense(const MethodSpec& spec) {
  ParamReader(spec).finish();
  return std::make_unique<Dense>();
}

RingPlan dense_ring_plan(int64_t n, int ranks, bool gather_asked) {
  // A prompt of fewer than 2P tiles leaves some run empty on the tiles' grid: gathered, it is
  // at most 2P - 1 tiles, and one process's bits too.
  RingPlan p;
  p.gather = gather_asked || (n + kKeyBlock - 1) / kKeyBlock < 2 * int64_t(ranks);
  p.grid = p.gather ? 1 : kKeyBlock;
  return p;
}

void dense_ring_prefill(const RingCall& c, const RingPlan& plan) {
  ring_attention(c, nullptr, nullptr, plan.gather);
}

std::unique_ptr<LayerBackend> make_dense_backend() { return std::make_unique<DenseBackend>(); }

std::unique_ptr<LayerBackend> make_dense_prefill(const MethodSpec& spec, const BackendContext&) {
  ParamReader(spec).finish();
  return make_dense_backend();
}

}  // namespace spattn

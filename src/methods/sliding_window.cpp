// sliding_window: each query attends to the last `window` keys up to its own position and no
// others (the local attention of Mistral 7B's and Gemma's local layers, StreamingLLM without
// its sinks). No estimate: the band depends on positions only, and it costs O(Lq window).
//   sliding_window:window=W     W >= 1 keys, default 4096
// In a model runner it reads the layer's packed cache in place, like a sliding-window layer's
// own band, so every row is its own query's alone (a prefill goes on from any prefix); across
// ranks every rank gathers the layer's K/V and runs the band over it: one process's bits.
#include <memory>
#include <string>
#include <vector>

#include "methods/layer_backend.hpp"
#include "methods/registry.hpp"
#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

int64_t window_param(const MethodSpec& spec) {
  ParamReader r(spec);
  const int64_t w = r.get_int("window", 4096, 1, int64_t(1) << 40);
  r.finish();
  return w;
}

// The band each row computed: keys p - W < j <= p for the row at position p.
class BandCoverage final : public Coverage {
 public:
  BandCoverage(int64_t q_start, int64_t window) : q_start_(q_start), window_(window) {}
  void row_ranges(int64_t, int64_t row, std::vector<KeyRange>& out) const override {
    const int64_t p = q_start_ + row;
    out.push_back({window_start(p, window_), p + 1});
  }

 private:
  int64_t q_start_, window_;
};

class SlidingWindow final : public Method {
 public:
  explicit SlidingWindow(int64_t window) : window_(window) {}
  std::string name() const override { return "sliding_window"; }
  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    SPATTN_CHECK(opt.causal, "sliding_window: defined for causal attention only");
    AttnOptions a = opt;
    a.window = window_;
    MethodReport r;
    attention_dense(q, k, v, out, a, lse, &r.stats);
    r.path = KernelPath::prefill;
    r.coverage =
        std::make_shared<BandCoverage>(opt.q_start < 0 ? k.seq - q.seq : opt.q_start, window_);
    return r;
  }

 private:
  int64_t window_;
};

class SlidingWindowPrefill final : public LayerBackend {
 public:
  SlidingWindowPrefill(int64_t window, std::string spec)
      : window_(window), spec_(std::move(spec)) {}
  std::string name() const override { return spec_; }
  BackendCaps capabilities() const override {
    BackendCaps c;
    c.rows_independent = true;
    return c;
  }
  TensorView prefill(const LayerCall& c) override {
    AttnOptions a = c.opt;
    a.q_start = c.pos0;
    a.window = window_;
    attention_dense(c.q, *c.packed, c.out, a, c.lse, c.stats);
    return c.out;
  }
  RingPlan ring_plan(int64_t, int, bool) const override { return RingPlan{1, true}; }
  void ring_prefill(const RingCall& c, const RingPlan& plan) override {
    RingCall windowed = c;
    windowed.opt.window = window_;
    dense_ring_prefill(windowed, plan);
  }

 private:
  int64_t window_;
  std::string spec_;
};

}  // namespace

std::unique_ptr<Method> make_sliding_window(const MethodSpec& spec) {
  return std::make_unique<SlidingWindow>(window_param(spec));
}

std::unique_ptr<LayerBackend> make_sliding_window_prefill(const MethodSpec& spec,
                                                          const BackendContext&) {
  return std::make_unique<SlidingWindowPrefill>(window_param(spec), spec.text);
}

}  // namespace spattn

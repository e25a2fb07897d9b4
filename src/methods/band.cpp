// A layer's own sliding window (gemma3's and gpt-oss's local layers) in a model runner: the band
// over the cache, whatever --attn and --attn-decode say, since a window is already sparse.
// One decoded row reads only the window's keys (attention_decode_ranges); more rows run the
// dense kernel with the window, which visits only the key tiles in the rows' bands.
#include <string>
#include <vector>

#include "methods/layer_backend.hpp"
#include "spattn/decode.hpp"
#include "spattn/error.hpp"

namespace spattn {
namespace {

class Band final : public LayerBackend {
 public:
  explicit Band(int64_t window) : window_(window) {}
  std::string name() const override { return "band"; }
  BackendCaps capabilities() const override {
    BackendCaps c;
    c.rows_independent = true;
    return c;
  }
  TensorView prefill(const LayerCall& c) override {
    run(c);
    return c.out;
  }
  void decode(const LayerCall& c, DecodeReads& reads) override {
    run(c);
    const int64_t lo = window_start(c.pos0, window_);
    reads.keys_read += c.packed->kv_heads() * (c.pos0 + 1 - lo);
    reads.keys_total += c.packed->kv_heads() * (c.pos0 + 1 - lo);
  }
  RingPlan ring_plan(int64_t, int, bool) const override {
    detail::fail(
        "context parallelism (--cp) does not split a model with sliding-window layers "
        "across ranks yet");
  }

 private:
  void run(const LayerCall& c) const {
    const PackedKV& kv = *c.packed;
    if (c.q.seq == 1) {
      const int64_t lo = window_start(c.pos0, window_);
      const std::vector<std::vector<KeyRange>> ranges(size_t(c.q.heads),
                                                      {KeyRange{lo, c.pos0 + 1}});
      attention_decode_ranges(c.q, kv, c.out, ranges,
                              decode_options(c.opt, c.pos0, kv, c.pos0 + 1 - lo), c.lse, c.stats);
      return;
    }
    AttnOptions a = c.opt;
    a.q_start = c.pos0;
    a.window = window_;
    attention_dense(c.q, kv, c.out, a, c.lse, c.stats);
  }
  int64_t window_;
};

}  // namespace

std::unique_ptr<LayerBackend> make_band_backend(const BackendContext& ctx) {
  SPATTN_CHECK(ctx.window > 0, "internal: a band needs a window, got ", ctx.window);
  return std::make_unique<Band>(ctx.window);
}

}  // namespace spattn

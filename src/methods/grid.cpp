// grid: MMInference's grid head on every q head ("MMInference: Modality-Aware Permutation
// Sparse Attention", section 3.1, Algorithms 1 and 5). The stride and phase are searched per
// head from the last last_q = 64 queries inside run() (so the method's time includes it), over
// the stride space of Table 3 (the frame stride and its fractions, from frame=N or the run's
// modality layout, and powers
// of two up to max_stride = 1024), unless stride= (and phase=) fix them. Lines: hline, vline,
// slash (Table 3's options, all on by default); plus the sink tile and a local band of whole
// tiles, computed in natural order and merged exactly.
#include <algorithm>
#include <memory>
#include <utility>

#include "methods/registry.hpp"
#include "spattn/error.hpp"
#include "spattn/grid.hpp"
#include "spattn/modality.hpp"

namespace spattn {
namespace {

class Grid final : public Method {
 public:
  explicit Grid(const MethodSpec& spec) {
    ParamReader r(spec);
    const int64_t big = int64_t(1) << 40;
    c_.hline = r.get_int("hline", 1, 0, 1) != 0;
    c_.vline = r.get_int("vline", 1, 0, 1) != 0;
    c_.slash = r.get_int("slash", 1, 0, 1) != 0;
    if (r.has("frame")) frame_ = r.get_int("frame", 0, 0, big);
    c_.max_stride = r.get_int("max_stride", 1024, 1, big);
    c_.min_stride = r.get_int("min_stride", 16, 1, big);
    c_.last_q = r.get_int("last_q", 64, 1, big);
    c_.sink_blocks = r.get_int("sink_blocks", 1, 0, big);
    c_.local_blocks = r.get_int("local_blocks", 1, 0, big);
    c_.density_weight = r.get_double("density_weight", 1.0, 0.0, 1e9);
    // stride=0 is refused: a fixed stride is >= 1; leaving it out searches.
    if (r.has("stride")) stride_ = r.get_int("stride", 0, 1, big);
    if (r.has("phase")) {
      SPATTN_CHECK(stride_ > 0, "grid: phase= needs stride=");
      phase_ = r.get_int("phase", 0, 0, stride_ - 1);
    }
    r.finish();
    check_grid_config(c_);
  }
  std::string name() const override { return "grid"; }

  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    GridConfig cfg = c_;
    // The frame stride joins the stride space: frame=N, else the run's modality layout's.
    cfg.frame_stride = frame_ >= 0 ? frame_ : opt.modality ? opt.modality->frame_tokens : 0;
    if (stride_ > 0) check_grid_lines({stride_, std::max<int64_t>(phase_, 0)}, k.seq);
    std::vector<GridLines> lines;
    if (stride_ > 0 && phase_ >= 0) {
      lines.assign(size_t(q.heads), GridLines{stride_, phase_});
    } else {
      GridConfig c = cfg;
      if (stride_ > 0) c.min_stride = c.max_stride = stride_, c.frame_stride = 0;
      lines = grid_estimate(q, k, c, opt);
    }
    MethodReport r;
    attention_grid(q, k, v, out, lines, c_, opt, lse, &r.stats);
    auto& st = r.per_head["stride"];
    auto& ph = r.per_head["phase"];
    for (const GridLines& g : lines) st.push_back(double(g.stride)), ph.push_back(double(g.phase));
    r.coverage = grid_coverage(std::move(lines), c_, q.seq, k.seq);
    return r;
  }

 private:
  GridConfig c_;
  int64_t stride_ = 0, phase_ = -1, frame_ = -1;
};

}  // namespace

std::unique_ptr<Method> make_grid(const MethodSpec& spec) { return std::make_unique<Grid>(spec); }

}  // namespace spattn

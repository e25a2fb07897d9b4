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
#include <vector>

#include "methods/registry.hpp"
#include "spattn/cuda.hpp"
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
    std::vector<GridLines> lines = lines_for(q, k, opt);
    MethodReport r;
    attention_grid(q, k, v, out, lines, c_, opt, lse, &r.stats);
    report(std::move(lines), q.seq, k.seq, r);
    return r;
  }

  // On CUDA tensors: the search's A_hat on the device (cuda::grid_estimate; the stride and phase
  // chosen on the host from its sums, extras "mask_device"), both passes and the merge on the
  // device (cuda::attention_grid, src/cuda/grid.cu).
  MethodReport run_cuda(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    MethodReport r;
    std::vector<GridLines> lines = lines_for(q, k, opt);
    r.extras["mask_device"] = 1.0;
    cuda::attention_grid(q, k, v, out, lines, c_, opt, lse, &r.stats, opt.stream);
    report(std::move(lines), q.seq, k.seq, r);
    return r;
  }

 private:
  // Each q head's stride and phase: fixed by stride= and phase=, else searched (Algorithm 1) on
  // the tensors' device.
  std::vector<GridLines> lines_for(const TensorView& q, const TensorView& k,
                                   const AttnOptions& opt) const {
    GridConfig cfg = c_;
    // The frame stride joins the stride space: frame=N, else the run's modality layout's.
    cfg.frame_stride = frame_ >= 0 ? frame_ : opt.modality ? opt.modality->frame_tokens : 0;
    if (stride_ > 0) check_grid_lines({stride_, std::max<int64_t>(phase_, 0)}, k.seq);
    if (stride_ > 0 && phase_ >= 0)
      return std::vector<GridLines>(size_t(q.heads), {stride_, phase_});
    if (stride_ > 0) cfg.min_stride = cfg.max_stride = stride_, cfg.frame_stride = 0;
    return cuda::is_device_pointer(q.data) ? cuda::grid_estimate(q, k, cfg, opt, opt.stream)
                                           : grid_estimate(q, k, cfg, opt);
  }

  void report(std::vector<GridLines> lines, int64_t q_len, int64_t kv_len, MethodReport& r) const {
    auto& st = r.per_head["stride"];
    auto& ph = r.per_head["phase"];
    for (const GridLines& g : lines) st.push_back(double(g.stride)), ph.push_back(double(g.phase));
    r.coverage = grid_coverage(std::move(lines), c_, q_len, kv_len);
  }

  GridConfig c_;
  int64_t stride_ = 0, phase_ = -1, frame_ = -1;
};

}  // namespace

std::unique_ptr<Method> make_grid(const MethodSpec& spec) { return std::make_unique<Grid>(spec); }

}  // namespace spattn

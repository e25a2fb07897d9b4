// mminference: every q head runs the pattern its plan names ("MMInference: Modality-Aware
// Permutation Sparse Attention", section 3; the plan comes from `spattn search`, Algorithm 4).
// The plan is read and checked when the method is made; a run with another head count is an
// Error, never a silent default. Each head's index is built from the input inside run():
// the grid's stride and phase (Algorithm 1), vertical-slash's lines from the last 64 queries;
// A-shape is static.
// On CUDA tensors (run_cuda) every head runs on the device: A-shape through the block-sparse
// kernel over its static mask, vertical-slash through MInference's estimate and the token-level
// kernel (src/cuda/vertical_slash.cu, attention.cu), grid through its two passes and merge
// (src/cuda/grid.cu, its search's A_hat too), Q / 2D boundary heads through their pieces on
// gathered row groups (src/cuda/modality_pairs.cu; each piece's vertical-slash estimate on the
// device too, cuda::vertical_slash_estimate, its pieces' key lists built on the host from the
// layout and the estimate's index).
#include <memory>
#include <utility>

#include "methods/registry.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/grid.hpp"
#include "spattn/masks.hpp"
#include "spattn/mminference.hpp"
#include "spattn/modality.hpp"
#include "spattn/modality_boundary.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {

namespace {

VerticalSlashConfig vs_config(const MMHeadPlan& hp) {
  VerticalSlashConfig c;
  c.vertical_size = hp.vertical, c.slash_size = hp.slash_size;
  return c;
}

// Q-boundary and 2D-boundary heads: the pattern's pieces per modality (or modality pair), each
// from its own last queries, as plans for the row-groups kernel (spattn/modality_boundary.hpp).
// q, k: one head; host tensors, or with `device` (the device's piece estimate) any.
std::vector<PairPlan> boundary_plans(const MMHeadPlan& hp, const TensorView& q, const TensorView& k,
                                     const AttnOptions& opt,
                                     const PieceEstimate* device = nullptr) {
  const bool split_keys = hp.boundary == MMBoundary::two_d;
  const std::shared_ptr<const ModalityLayout> layout =
      opt.modality ? opt.modality : std::make_shared<const ModalityLayout>(uniform_modality(k.seq));
  layout->validate(k.seq);
  std::vector<ModalityPairIndex> pieces;
  switch (hp.pattern) {
    case MMPattern::a_shape:
      pieces = a_shape_pairs(*layout, q.seq, hp.sink, hp.local, split_keys);
      break;
    case MMPattern::vertical_slash:
      pieces = device ? vertical_slash_pairs(*layout, q.seq, vs_config(hp), split_keys, *device)
                      : vertical_slash_pairs(q, k, *layout, vs_config(hp), opt, split_keys);
      break;
    case MMPattern::grid:
      detail::fail("mminference: boundary '", mm_boundary_name(hp.boundary),
                   "' is not implemented for grid heads");
  }
  return pair_plans(pieces, *layout, q.seq);
}

std::unique_ptr<Coverage> run_boundary_head(const MMHeadPlan& hp, const TensorView& q,
                                            const TensorView& k, const TensorView& v,
                                            const TensorView& out, const AttnOptions& opt,
                                            float* lse, Stats* stats) {
  std::vector<PairPlan> plans = boundary_plans(hp, q, k, opt);
  attention_modality_pairs(q, k, v, out, plans, opt, lse, stats);
  return modality_pairs_coverage(std::move(plans), q.seq, k.seq);
}

// A grid head's configuration: the plan's lines and max stride, the run's frame stride.
GridConfig grid_config(const MMHeadPlan& hp, int64_t frame_stride) {
  GridConfig c;
  c.hline = hp.hline, c.vline = hp.vline, c.slash = hp.slash;
  c.max_stride = hp.max_stride;
  c.min_stride = std::min(c.min_stride, c.max_stride);
  c.frame_stride = frame_stride;
  return c;
}

}  // namespace

std::unique_ptr<Coverage> mm_run_head(const MMHeadPlan& hp, int64_t frame_stride,
                                      const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& out, const AttnOptions& opt, float* lse,
                                      Stats* stats) {
  SPATTN_CHECK(q.heads == 1 && k.heads == 1, "mminference: mm_run_head takes one head");
  if (hp.boundary == MMBoundary::q || hp.boundary == MMBoundary::two_d)
    return run_boundary_head(hp, q, k, v, out, opt, lse, stats);
  switch (hp.pattern) {
    case MMPattern::grid: {
      const GridConfig c = grid_config(hp, frame_stride);
      std::vector<GridLines> lines = grid_estimate(q, k, c, opt);
      attention_grid(q, k, v, out, lines, c, opt, lse, stats);
      return grid_coverage(std::move(lines), c, q.seq, k.seq);
    }
    case MMPattern::a_shape: {
      MaskGeometry g;
      g.heads = 1, g.q_len = q.seq, g.kv_len = k.seq;
      BlockMask m = a_shape_mask(g, hp.sink, hp.local);
      attention_block_sparse(q, k, v, out, m, opt, lse, stats);
      return block_mask_coverage(std::move(m));
    }
    case MMPattern::vertical_slash: {
      VerticalSlashIndex idx = vertical_slash_index(q, k, vs_config(hp), opt);
      attention_vertical_slash(q, k, v, out, idx, opt, lse, stats);
      return vertical_slash_coverage(std::move(idx), q.seq, k.seq);
    }
  }
  detail::fail("mminference: unknown pattern");
}

namespace {

// Head h's rows come from its own pattern's coverage (asked as head 0 of a one-head view).
class PerHeadCoverage final : public Coverage {
 public:
  explicit PerHeadCoverage(std::vector<std::unique_ptr<Coverage>> heads)
      : heads_(std::move(heads)) {}
  void row_ranges(int64_t head, int64_t row, std::vector<KeyRange>& out) const override {
    heads_[size_t(head)]->row_ranges(0, row, out);
  }

 private:
  std::vector<std::unique_ptr<Coverage>> heads_;
};

class MMInference final : public Method {
 public:
  explicit MMInference(const MethodSpec& spec) {
    ParamReader r(spec);
    const std::string path = r.get_string("plan", "");
    SPATTN_CHECK(!path.empty(), "mminference: needs plan=FILE (write one with `spattn search`)");
    plan_ = load_mm_plan(path);
    layer_ = r.get_int("layer", 0, 0, int64_t(plan_.layers.size()) - 1);
    if (r.has("frame")) frame_ = r.get_int("frame", 0, 0, int64_t(1) << 40);
    // boundary=off runs every head's pattern as a No-Boundary head (the comparison that shows
    // what the plan's boundaries are worth); boundary=plan (the default) runs the plan's.
    const std::string b = r.get_string("boundary", "plan");
    SPATTN_CHECK(b == "plan" || b == "off", "mminference: boundary must be plan or off, got '", b,
                 "'");
    if (b == "off")
      for (auto& layer : plan_.layers)
        for (MMHeadPlan& h : layer) h.boundary = MMBoundary::none;
    r.finish();
  }
  std::string name() const override { return "mminference"; }

  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    const auto& heads = layer_plan(q, opt);
    validate_attention_args(q, k, v, out, opt);
    AttnOptions o = opt;
    o.check_finite = false;  // checked once above
    const int64_t group = q.heads / k.heads, frame = frame_stride(opt);
    MethodReport r;
    std::vector<std::unique_ptr<Coverage>> cov;
    auto& pattern = r.per_head["pattern"];    // 0 grid, 1 a_shape, 2 vertical_slash
    auto& boundary = r.per_head["boundary"];  // 0 none, 1 k, 2 q, 3 2d
    for (int64_t h = 0; h < q.heads; ++h) {
      const int64_t kvh = h / group;
      cov.push_back(mm_run_head(heads[size_t(h)], frame, q.head_range(h, 1), k.head_range(kvh, 1),
                                v.head_range(kvh, 1), out.head_range(h, 1), o,
                                lse ? lse + h * q.seq : nullptr, &r.stats));
      pattern.push_back(double(int(heads[size_t(h)].pattern)));
      boundary.push_back(double(int(heads[size_t(h)].boundary)));
    }
    r.coverage = std::make_shared<PerHeadCoverage>(std::move(cov));
    return r;
  }

  MethodReport run_cuda(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    const auto& heads = layer_plan(q, opt);  // a plan never pairs a grid head with Q / 2D
    const int64_t group = q.heads / k.heads, frame = frame_stride(opt);
    MethodReport r;
    std::vector<std::unique_ptr<Coverage>> cov;
    auto& pattern = r.per_head["pattern"];
    auto& boundary = r.per_head["boundary"];
    for (int64_t h = 0; h < q.heads; ++h) {
      const MMHeadPlan& hp = heads[size_t(h)];
      const int64_t kvh = h / group;
      const TensorView qh = q.head_range(h, 1), kh = k.head_range(kvh, 1),
                       vh = v.head_range(kvh, 1), oh = out.head_range(h, 1);
      float* lh = lse ? lse + h * q.seq : nullptr;
      if (hp.boundary == MMBoundary::q || hp.boundary == MMBoundary::two_d) {
        // Each piece's estimate, passes and merge on the device; the plans' key lists from the
        // layout and the estimates' indices on the host.
        const PieceEstimate estimate = [&](const std::vector<int64_t>& rows,
                                           const std::vector<int64_t>& keys) {
          return cuda::vertical_slash_estimate(qh, kh, vs_config(hp), opt, rows, &keys, opt.stream);
        };
        std::vector<PairPlan> plans = boundary_plans(hp, qh, kh, opt, &estimate);
        cuda::attention_modality_pairs(qh, kh, vh, oh, plans, opt, lh, &r.stats, opt.stream);
        cov.push_back(modality_pairs_coverage(std::move(plans), q.seq, k.seq));
      } else if (hp.pattern == MMPattern::grid) {
        const GridConfig c = grid_config(hp, frame);
        std::vector<GridLines> lines = cuda::grid_estimate(qh, kh, c, opt, opt.stream);
        cuda::attention_grid(qh, kh, vh, oh, lines, c, opt, lh, &r.stats, opt.stream);
        cov.push_back(grid_coverage(std::move(lines), c, q.seq, k.seq));
      } else if (hp.pattern == MMPattern::a_shape) {
        MaskGeometry g;
        g.heads = 1, g.q_len = q.seq, g.kv_len = k.seq;
        BlockMask m = a_shape_mask(g, hp.sink, hp.local);
        cuda::attention_block_sparse(qh, kh, vh, oh, m, opt, lh, &r.stats, opt.stream);
        cov.push_back(block_mask_coverage(std::move(m)));
      } else {
        VerticalSlashIndex idx = cuda::vertical_slash_index(qh, kh, vs_config(hp), opt, opt.stream);
        cuda::attention_vertical_slash(qh, kh, vh, oh, idx, opt, lh, &r.stats, opt.stream);
        cov.push_back(vertical_slash_coverage(std::move(idx), q.seq, k.seq));
      }
      pattern.push_back(double(int(hp.pattern)));
      boundary.push_back(double(int(hp.boundary)));
    }
    r.coverage = std::make_shared<PerHeadCoverage>(std::move(cov));
    return r;
  }

 private:
  // Frame stride: frame=N, else the run's modality layout's, else the calibration input's.
  int64_t frame_stride(const AttnOptions& opt) const {
    return frame_ >= 0                                      ? frame_
           : opt.modality && opt.modality->frame_tokens > 0 ? opt.modality->frame_tokens
                                                            : plan_.frame_stride;
  }

  // The run's layer of the plan, checked against the problem.
  const std::vector<MMHeadPlan>& layer_plan(const TensorView& q, const AttnOptions& opt) const {
    const auto& heads = plan_.layers[size_t(layer_)];
    SPATTN_CHECK(int64_t(heads.size()) == q.heads, "mminference: the plan has ", heads.size(),
                 " heads, the problem ", q.heads, " q heads");
    SPATTN_CHECK(opt.causal, "mminference: needs causal attention");
    return heads;
  }

  MMPlan plan_;
  int64_t layer_ = 0, frame_ = -1;
};

}  // namespace

std::unique_ptr<Method> make_mminference(const MethodSpec& spec) {
  return std::make_unique<MMInference>(spec);
}

}  // namespace spattn

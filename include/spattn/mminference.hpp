// MMInference ("MMInference: Modality-Aware Permutation Sparse Attention"): each head runs the
// pattern an offline search chose for it (section 3.3, Algorithm 4, Appendix A, C.5), with its
// sparse index built online from the input (grid stride and phase, vertical-slash lines).
//
// A plan is JSON, one entry per q head (per layer when the calibration input has layers):
//   {"format": "spattn.mminference_plan", "version": 1, "heads": H, "frame_stride": F,
//    "layers": [[{"pattern": "grid", "hline": true, "vline": true, "slash": true,
//                 "max_stride": 1024, "boundary": "none"},
//                {"pattern": "a_shape", "sink": 128, "local": 4096, "boundary": "none"},
//                {"pattern": "vertical_slash", "vertical": 1000, "slash": 2048,
//                 "boundary": "none"}, ...]]}
// Loading treats the file as untrusted: missing fields, unknown patterns or boundaries, and
// values out of range are Errors naming the field; so is running a plan on another head count.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"

namespace spattn {

enum class MMPattern { grid, a_shape, vertical_slash };
const char* mm_pattern_name(MMPattern p);

struct MMHeadPlan {
  MMPattern pattern = MMPattern::a_shape;
  // grid (Table 3: use_hline, use_vline, use_slash, max stride)
  bool hline = true, vline = true, slash = true;
  int64_t max_stride = 1024;
  // a_shape (Table 3: sink, local)
  int64_t sink = 128, local = 4096;
  // vertical_slash (Table 3: vertical size, slash size)
  int64_t vertical = 1000, slash_size = 2048;
  // Modality boundary type: only "none" so far (No-Boundary heads).
  std::string boundary = "none";
  // What the search measured on its calibration sample (informational; 0 when hand-written).
  double recall = 0, cost = 0;
};

struct MMPlan {
  int64_t heads = 0;
  int64_t frame_stride = 0;  // tokens per frame of the calibration input (0: none)
  std::vector<std::vector<MMHeadPlan>> layers;  // [layer][q head]
};

// JSON text <-> plan. from_json throws Error (prefixed with `origin`) on anything malformed.
std::string mm_plan_to_json(const MMPlan& plan);
MMPlan mm_plan_from_json(const std::string& text, const std::string& origin);
MMPlan load_mm_plan(const std::string& path);
void save_mm_plan(const MMPlan& plan, const std::string& path);

// Runs one head's pattern on single-head views (q [1, Lq, d], k, v [1, Lkv, d]) and returns
// exactly the entries it computed. frame_stride joins the grid's stride space when > 0.
std::unique_ptr<Coverage> mm_run_head(const MMHeadPlan& hp, int64_t frame_stride,
                                      const TensorView& q, const TensorView& k,
                                      const TensorView& v, const TensorView& out,
                                      const AttnOptions& opt, float* lse, Stats* stats);

// Algorithm 4 (intra-modality part) on one calibration sample: per q head, every candidate of
// Table 3 (grid's six line options with the stride searched online, A-shape (128, 1k/2k/4k),
// vertical-slash's nine sizes) runs on our kernels; its cost is the work the kernel did
// (key tiles visited, x 1.25 for vertical-slash's gathered columns), a deterministic count; the
// budget is A-shape with 1k global + 4k local tokens on the same sample. Among candidates within
// budget, the one with the highest output recall (1 - ||O - O_dense|| / ||O_dense||) wins; ties
// go to the earlier candidate. Same input, same plan.
struct MMSearchOptions {
  int64_t frame_stride = 0;
  int threads = 0;
  bool verbose = false;  // one line per head on stderr
};
MMPlan mm_search(const TensorView& q, const TensorView& k, const TensorView& v,
                 const AttnOptions& opt, const MMSearchOptions& so);

}  // namespace spattn

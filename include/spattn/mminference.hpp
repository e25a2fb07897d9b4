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
#include <optional>
#include <string>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/coverage.hpp"

namespace spattn {

enum class MMPattern { grid, a_shape, vertical_slash };
const char* mm_pattern_name(MMPattern p);

// The modality boundary type of a head (section 3.2), named in plans "none", "k", "q", "2d":
//  none, k: the intra-modality pattern over all rows, its index from the last queries of the
//           whole input. K-boundary heads run exactly as No-Boundary ones: their query
//           dimension is continuous, so the paper computes their index across all rows at no
//           extra cost (Appendix B.1); the plan keeps the name for the record.
//  q:       Q-boundary (Algorithm 2): per query modality, the pattern with its own index from
//           that modality's last queries, against every key (modality_boundary.hpp).
//  2d:      2D-boundary (Algorithm 3): per (query modality, key modality) pair, the pattern
//           with its own index from the query modality's last queries against that key
//           modality's keys, cross-modality pairs included; merged exactly by (O, LSE).
// q and 2d are implemented for a_shape and vertical_slash heads; a grid head with them is an
// Error at plan load.
enum class MMBoundary { none, k, q, two_d };
const char* mm_boundary_name(MMBoundary b);

struct MMHeadPlan {
  MMPattern pattern = MMPattern::a_shape;
  // grid (Table 3: use_hline, use_vline, use_slash, max stride)
  bool hline = true, vline = true, slash = true;
  int64_t max_stride = 1024;
  // a_shape (Table 3: sink, local)
  int64_t sink = 128, local = 4096;
  // vertical_slash (Table 3: vertical size, slash size)
  int64_t vertical = 1000, slash_size = 2048;
  MMBoundary boundary = MMBoundary::none;
  // What the search measured on its calibration sample (informational; 0 when hand-written):
  // output recall, cost relative to the A-shape budget, why the search chose this pattern,
  // and whether the head missed the search's recall target (--recall) with every candidate.
  double recall = 0, cost = 0;
  std::string reason;
  bool flagged = false;
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

// Runs one head's pattern and boundary on single-head views (q [1, Lq, d], k, v [1, Lkv, d])
// and returns exactly the entries it computed. frame_stride joins the grid's stride space when
// > 0. q and 2d heads read the modality layout from opt.modality (none: all text, one modality).
std::unique_ptr<Coverage> mm_run_head(const MMHeadPlan& hp, int64_t frame_stride,
                                      const TensorView& q, const TensorView& k, const TensorView& v,
                                      const TensorView& out, const AttnOptions& opt, float* lse,
                                      Stats* stats);

// Algorithm 4 on one calibration sample: per q head, every candidate of Table 3 (grid's six
// line options with the stride searched online, A-shape (128, 1k/2k/4k), vertical-slash's nine
// sizes) runs on our kernels as a No-Boundary head; when opt.modality holds two or more
// modalities (and `boundaries`), each A-shape and vertical-slash candidate also runs as a
// Q-boundary and a 2D-boundary head (the boundary step). A candidate's cost is the work the
// kernel did (key tiles visited, x 1.25 for vertical-slash's gathered columns), a deterministic
// count; the budget is A-shape with 1k global + 4k local tokens on the same sample. Among
// candidates within budget, the one with the highest output recall
// (1 - ||O - O_dense|| / ||O_dense||) wins; ties go to the earlier candidate (no-boundary
// first). With a recall target (MMSearchOptions::recall_target) the budget no longer caps the
// cost: see mm_pick. Same input, same plan.
struct MMSearchOptions {
  int64_t frame_stride = 0;
  bool boundaries = true;  // false: the intra-modality search only (every head "none")
  int threads = 0;
  bool verbose = false;  // one line per head on stderr
  // 0: the budget rule (the best recall within the A-shape budget). R in (0, 1]: the cheapest
  // candidate reaching output recall R, whatever its cost; else the best one, flagged.
  double recall_target = 0;
  // When set: per q head, every candidate as measured (recall, cost), in candidate order.
  std::vector<std::vector<MMHeadPlan>>* measured = nullptr;
};

// The search's choice among measured candidates (recall and cost set; cost relative to the
// budget), with its reason. recall_target 0: the best recall among those with cost <= 1 (ties
// to the earlier), none: nullopt (the search then runs the budget pattern itself).
// recall_target R: the cheapest with recall >= R (ties to the earlier); none reaching it: the
// best recall, flagged.
std::optional<MMHeadPlan> mm_pick(const std::vector<MMHeadPlan>& measured, double recall_target);
MMPlan mm_search(const TensorView& q, const TensorView& k, const TensorView& v,
                 const AttnOptions& opt, const MMSearchOptions& so);

}  // namespace spattn

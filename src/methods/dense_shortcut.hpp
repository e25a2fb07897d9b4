// The one rule every block-selecting method (BlockMaskMethod's subclasses, momo) goes through
// when its budget or its estimate leaves nothing to skip at a length: it runs the dense kernel
// instead of the block-sparse one, and says so in its report (MethodReport::dense_shortcut).
// Why: a block-sparse pass over every causal block computes what dense computes through a
// slower loop (block lists, per-block causal checks), and momo adds its fused pass and delta
// besides: momo at its defaults at 8K (k = 128 covers all 128 key blocks) ran at 0.90x dense
// with sparsity -3.1%, mean_pool at 0.97-0.98x (BENCHMARKS.md). When the count budget alone
// shows it, the estimate is skipped too.
#pragma once
#include <cstdint>
#include <memory>

#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/report.hpp"
#include "spattn/tensor.hpp"

namespace spattn {

// MethodReport::dense_shortcut's values.
inline constexpr const char* kDenseByBudget = "budget";      // estimate skipped
inline constexpr const char* kDenseByEstimate = "estimate";  // the mask kept every block

// Whether a count budget of `blocks` key blocks per query block (on top of any forced ones)
// keeps every key block a query block can see, at kv_len keys in blocks of block_k: the
// longest row sees all ceil(kv_len / block_k). A negative budget (none: a mass or threshold
// decides, which only the estimate can answer) never does.
bool budget_covers_context(int64_t blocks, int64_t kv_len, int64_t block_k);

// Whether the (valid) mask lists every causal block of every (head, query block).
bool keeps_every_block(const BlockMask& m);

// Runs the dense kernel on the host (or the device, on_device) into out and lse, and fills r:
// the dense pass's stats added to r's (what an estimate counted stays), full coverage, path prefill, dense_shortcut = why, and `mask` (the one estimated,
// or when none was, the full mask in blocks of block_q by block_k).
void run_dense_instead(const TensorView& q, const TensorView& k, const TensorView& v,
                       const TensorView& out, const AttnOptions& opt, float* lse, const char* why,
                       bool on_device, std::shared_ptr<const BlockMask> mask, int64_t block_q,
                       int64_t block_k, MethodReport& r);

}  // namespace spattn

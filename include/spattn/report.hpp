// What one Method::run did. Every caller (spattn bench and mask, tests, later a model runner
// that runs one method per layer and head) reads this record instead of asking the method, so a
// method keeps no state between runs and no caller needs to know a method's class.
#pragma once
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/coverage.hpp"

namespace spattn {

// Which kernel family computed the output. Decode kernels take q_len <= kMaxDecodeQueries and
// read the KV cache in place (flash-decoding); prefill kernels run the tiled flash loop.
enum class KernelPath { prefill, decode };
const char* kernel_path_name(KernelPath path);  // "prefill" or "decode"

struct MethodReport {
  Stats stats;  // this run only
  KernelPath path = KernelPath::prefill;
  // Exactly the score entries this run computed, for attention_recall: a FullCoverage for
  // dense. Never null in a report Method::run returns. Shared, so copying a report is cheap.
  std::shared_ptr<const Coverage> coverage;
  // The block mask the run computed with, for methods that build one (the block-sparse
  // baselines; vertical_slash gives its token-level index rounded out to blocks); else null.
  std::shared_ptr<const BlockMask> mask;
  // Empty, or why a block-selecting method ran the dense kernel instead of its block-sparse
  // pass (src/methods/dense_shortcut.hpp): "budget" (its count budget covers every key block
  // at this length; the estimate was skipped) or "estimate" (its mask kept every block).
  std::string dense_shortcut;
  // Method-specific values by name, e.g. blasst's "lambda" and "skipped_fraction".
  std::map<std::string, double> extras;
  // Method-specific series with one value per q head, e.g. blasst's "head_skipped".
  std::map<std::string, std::vector<double>> per_head;
};

}  // namespace spattn

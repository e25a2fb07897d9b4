// How a model runner decodes (`--attn-decode SPEC`): dense, Quest's page selection
// (spattn/quest.hpp) or BLASST's skip rule over the cache (spattn/decode.hpp).
//   dense
//   quest[:k=..,page=..,topp=..,sink=..,local=..,dense_layers=..]
//   blasst:lambda=X[,order=local_first|in_order]   lambda in (0, 1]; order default local_first
//   blasst:sparsity=S,calib=FILE                   each layer's threshold for target S at the
//                                                  cache's length, from the layer's law in a
//                                                  `spattn calibrate` file (one law: every
//                                                  layer), in the file's order, per step
#pragma once
#include <memory>
#include <string>
#include <string_view>

#include "spattn/calibration.hpp"
#include "spattn/decode.hpp"
#include "spattn/quest.hpp"

namespace spattn {

enum class DecodeKind { dense, quest, blasst };

struct DecodeSpec {
  DecodeKind kind = DecodeKind::dense;
  std::string text = "dense";
  QuestParams quest;   // kind quest
  DecodeOptions blasst;  // kind blasst: lambda and order
  // kind blasst with sparsity=S: the file's laws (lambda then comes from them each step).
  std::shared_ptr<const Calibration> blasst_calib;
  double blasst_sparsity = 0;
  // The DecodeOptions of one step of `layer` over a cache of `length` keys (kind blasst).
  DecodeOptions blasst_step(int64_t layer, int64_t length) const;
};
// Throws Error naming the method and parameter for unknown names and bad parameters.
DecodeSpec parse_decode_spec(std::string_view text);

}  // namespace spattn

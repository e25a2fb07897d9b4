// How a model runner decodes (`--attn-decode SPEC`): dense, Quest's page selection
// (spattn/quest.hpp) or BLASST's skip rule over the cache (spattn/decode.hpp).
//   dense
//   quest[:k=..,page=..,topp=..,sink=..,local=..,dense_layers=..]
//   blasst:lambda=X[,order=local_first|in_order]   lambda in (0, 1]; order default local_first
#pragma once
#include <string>
#include <string_view>

#include "spattn/decode.hpp"
#include "spattn/quest.hpp"

namespace spattn {

enum class DecodeKind { dense, quest, blasst };

struct DecodeSpec {
  DecodeKind kind = DecodeKind::dense;
  std::string text = "dense";
  QuestParams quest;   // kind quest
  DecodeOptions blasst;  // kind blasst: lambda and order
};
// Throws Error naming the method and parameter for unknown names and bad parameters.
DecodeSpec parse_decode_spec(std::string_view text);

}  // namespace spattn

// The text a chat request's messages become before tokenizing: the model's chat template
// (--chat-template NAME, else the family recognised in the GGUF's tokenizer.chat_template;
// see spattn/chat_template.hpp), or, for a model with none spattn renders, one plain
// fallback: each message as "role: content" on its own line, then "assistant:" for the reply
// to follow. /props says which.
#pragma once
#include <string>
#include <vector>

#include "request.hpp"
#include "spattn/chat_template.hpp"

namespace spattn::serve {

inline constexpr const char* kChatFallbackName = "spattn-plain";
inline constexpr const char* kChatFallbackDescription =
    "no chat template spattn renders: each message as a line 'role: content', then 'assistant:'";

std::string render_chat(const std::vector<ChatMessage>& messages);

}  // namespace spattn::serve

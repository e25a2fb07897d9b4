// The text a chat request's messages become before tokenizing. Until the models' own chat
// templates are read from the GGUF (another piece of work), every model gets one plain
// fallback: each message as "role: content" on its own line, then "assistant:" for the reply
// to follow. /props reports it, so a client can tell.
#pragma once
#include <string>
#include <vector>

#include "request.hpp"

namespace spattn::serve {

inline constexpr const char* kChatFallbackName = "spattn-plain";
inline constexpr const char* kChatFallbackDescription =
    "no chat template yet: each message as a line 'role: content', then 'assistant:'";

std::string render_chat(const std::vector<ChatMessage>& messages);

}  // namespace spattn::serve

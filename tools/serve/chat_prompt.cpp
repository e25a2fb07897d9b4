#include "chat_prompt.hpp"

namespace spattn::serve {

std::string render_chat(const std::vector<ChatMessage>& messages) {
  std::string s;
  for (const ChatMessage& m : messages) s += m.role + ": " + m.content + "\n";
  return s + "assistant:";
}

}  // namespace spattn::serve

#include "chat_prompt.hpp"

#include "spattn/error.hpp"

namespace spattn::serve {

std::string render_chat(const std::vector<ChatMessage>& messages) {
  std::string s;
  for (const ChatMessage& m : messages) s += m.role + ": " + m.content + "\n";
  return s + "assistant:";
}

std::optional<ChatTemplate> pick_chat_template(const std::string& name, const std::string& jinja) {
  if (!name.empty()) {
    const std::optional<ChatTemplate> t = chat_template_named(name);
    SPATTN_CHECK(t.has_value(), "--chat-template: unknown template '", name, "' (spattn renders ",
                 chat_template_names(), ")");
    return t;
  }
  return detect_chat_template(jinja);
}

}  // namespace spattn::serve

// Chat templates: the text a conversation becomes before tokenizing, for the model families
// the runner reads (Llama 3, ChatML as Qwen uses it, Phi-3, Gemma, Mistral's v1/v3/v3-tekken/v7
// instruct formats, gpt-oss's Harmony turns as llama.cpp renders them, GLM's turns after
// [gMASK]<sop> (GLM-4 and GLM-5), DeepSeek V3's). A GGUF carries its
// template as Jinja source (tokenizer.chat_template); spattn does not run Jinja: it recognises
// the family from marker strings in that source, as llama.cpp's built-in templates do, and
// renders the family's format itself. Names are llama.cpp's (--chat-template NAME).
#pragma once
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace spattn {

struct ChatMessage {
  std::string role, content;  // role: "system", "user", "assistant" (others pass through)
};

enum class ChatTemplate {
  chatml,
  llama3,
  phi3,
  gemma,
  mistral_v1,
  mistral_v3,
  mistral_v3_tekken,
  mistral_v7,
  gpt_oss,
  chatglm4,
  deepseek3
};

// llama.cpp's name of a template ("chatml", "llama3", "phi3", "gemma", "mistral-v1", ...).
const char* chat_template_name(ChatTemplate t);
// The template of a name, or nothing.
std::optional<ChatTemplate> chat_template_named(std::string_view name);
// Every name, comma-separated (for messages).
std::string chat_template_names();
// The family of a Jinja template's source, or nothing when no family's markers are in it.
std::optional<ChatTemplate> detect_chat_template(std::string_view jinja);

// What a runner uses: the template named (llama.cpp's name; an unknown one is an Error naming
// the known ones), else the family recognised in the model's Jinja source, else nothing.
std::optional<ChatTemplate> pick_chat_template(const std::string& name, std::string_view jinja);

// The conversation as the family formats it; with add_assistant, the opening of the
// assistant's turn follows (where the format has one), for the model to continue.
std::string apply_chat_template(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                bool add_assistant);

}  // namespace spattn

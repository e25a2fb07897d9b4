// The chat formats, each as its model family documents it (Meta's Llama 3 prompt format,
// ChatML, Microsoft's Phi-3, Google's Gemma turns, Mistral's instruct formats v1 / v3 /
// v3-tekken / v7, OpenAI's Harmony turns for gpt-oss, GLM's and DeepSeek V3's turns); detection and whitespace handling
// follow llama.cpp's built-in templates, so that the same conversation gives the same text as
// llama.cpp's llama_chat_apply_template.
#include "spattn/chat_template.hpp"

#include "spattn/error.hpp"

#include <array>
#include <utility>

namespace spattn {

namespace {

constexpr std::array<std::pair<const char*, ChatTemplate>, 11> kNames = {{
    {"chatml", ChatTemplate::chatml},
    {"llama3", ChatTemplate::llama3},
    {"phi3", ChatTemplate::phi3},
    {"gemma", ChatTemplate::gemma},
    {"mistral-v1", ChatTemplate::mistral_v1},
    {"mistral-v3", ChatTemplate::mistral_v3},
    {"mistral-v3-tekken", ChatTemplate::mistral_v3_tekken},
    {"mistral-v7", ChatTemplate::mistral_v7},
    {"gpt-oss", ChatTemplate::gpt_oss},
    {"chatglm4", ChatTemplate::chatglm4},
    {"deepseek3", ChatTemplate::deepseek3},
}};

// Leading and trailing whitespace off (Llama 3 and Gemma strip message contents).
std::string trim(const std::string& s) {
  const char* ws = " \t\n\r\f\v";
  const size_t a = s.find_first_not_of(ws);
  if (a == std::string::npos) return "";
  return s.substr(a, s.find_last_not_of(ws) - a + 1);
}

// Mistral v1 / v3 / v3-tekken: [INST] opens a turn that the user's message closes with
// [/INST]; a system message goes first inside the turn; the assistant's answer ends with </s>.
// v1 puts a space before [INST] and [/INST], v3 after [INST] and before the answer (trimmed),
// v3-tekken neither.
std::string mistral_inst(ChatTemplate t, const std::vector<ChatMessage>& messages) {
  const std::string lead = t == ChatTemplate::mistral_v1 ? " " : "";
  const std::string trail = t == ChatTemplate::mistral_v3_tekken ? "" : " ";
  std::string s;
  bool in_turn = false;
  for (const ChatMessage& m : messages) {
    if (!in_turn) {
      s += lead + "[INST]" + trail;
      in_turn = true;
    }
    if (m.role == "system") {
      s += m.content + "\n\n";
    } else if (m.role == "user") {
      s += m.content + lead + "[/INST]";
    } else {
      s += trail + (t == ChatTemplate::mistral_v3 ? trim(m.content) : m.content) + "</s>";
      in_turn = false;
    }
  }
  return s;
}

}  // namespace

const char* chat_template_name(ChatTemplate t) {
  for (const auto& [name, v] : kNames)
    if (v == t) return name;
  return "?";
}

std::optional<ChatTemplate> chat_template_named(std::string_view name) {
  for (const auto& [n, v] : kNames)
    if (name == n) return v;
  return std::nullopt;
}

std::string chat_template_names() {
  std::string s;
  for (const auto& [n, v] : kNames) s += (s.empty() ? "" : ", ") + std::string(n);
  return s;
}

std::optional<ChatTemplate> detect_chat_template(std::string_view jinja) {
  const auto has = [&](std::string_view marker) {
    return jinja.find(marker) != std::string_view::npos;
  };
  // In llama.cpp's order: a template carrying several markers is the first family matched.
  if (has("<|im_start|>")) {
    // Phi-4 (<|im_sep|>) and SmolVLM (<end_of_utterance>) share the marker but not the format.
    if (has("<|im_sep|>") || has("<end_of_utterance>")) return std::nullopt;
    return ChatTemplate::chatml;
  }
  if (jinja.substr(0, 7) == "mistral" || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return ChatTemplate::mistral_v7;
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) return ChatTemplate::mistral_v1;
      if (has("\"[INST]\"")) return ChatTemplate::mistral_v3_tekken;
      return ChatTemplate::mistral_v3;
    }
    return std::nullopt;  // Llama 2's [INST] variants: not rendered here
  }
  if (has("<|assistant|>") && has("<|end|>")) return ChatTemplate::phi3;
  if (has("[gMASK]<sop>")) return ChatTemplate::chatglm4;  // GLM-4, GLM-4.5 ... GLM-5
  if (has("<start_of_turn>")) return ChatTemplate::gemma;
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) return ChatTemplate::llama3;
  if (has("<|start|>") && has("<|channel|>")) return ChatTemplate::gpt_oss;
  if (has("<\uff5cAssistant\uff5c>") && has("<\uff5cUser\uff5c>") &&
      has("<\uff5cend\u2581of\u2581sentence\uff5c>"))
    return ChatTemplate::deepseek3;  // DeepSeek V3, R1, V3.1, V3.2
  return std::nullopt;
}

std::optional<ChatTemplate> pick_chat_template(const std::string& name, std::string_view jinja) {
  if (!name.empty()) {
    const std::optional<ChatTemplate> t = chat_template_named(name);
    SPATTN_CHECK(t.has_value(), "--chat-template: unknown template '", name, "' (spattn renders ",
                 chat_template_names(), ")");
    return t;
  }
  return detect_chat_template(jinja);
}

std::string apply_chat_template(ChatTemplate t, const std::vector<ChatMessage>& messages,
                                bool add_assistant) {
  std::string s;
  switch (t) {
    case ChatTemplate::chatml:
      for (const ChatMessage& m : messages)
        s += "<|im_start|>" + m.role + "\n" + m.content + "<|im_end|>\n";
      if (add_assistant) s += "<|im_start|>assistant\n";
      break;
    case ChatTemplate::llama3:
      for (const ChatMessage& m : messages)
        s += "<|start_header_id|>" + m.role + "<|end_header_id|>\n\n" + trim(m.content) +
             "<|eot_id|>";
      if (add_assistant) s += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    case ChatTemplate::phi3:
      for (const ChatMessage& m : messages) s += "<|" + m.role + "|>\n" + m.content + "<|end|>\n";
      if (add_assistant) s += "<|assistant|>\n";
      break;
    case ChatTemplate::gemma: {
      // Gemma has no system turn: system text opens the next user turn. Its assistant is
      // "model".
      std::string system;
      for (const ChatMessage& m : messages) {
        if (m.role == "system") {
          system += trim(m.content);
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        s += "<start_of_turn>" + role + "\n";
        if (!system.empty() && role != "model") {
          s += system + "\n\n";
          system.clear();
        }
        s += trim(m.content) + "<end_of_turn>\n";
      }
      if (add_assistant) s += "<start_of_turn>model\n";
      break;
    }
    case ChatTemplate::mistral_v1:
    case ChatTemplate::mistral_v3:
    case ChatTemplate::mistral_v3_tekken: s = mistral_inst(t, messages); break;
    case ChatTemplate::mistral_v7:
      // Each message in its own brackets; the assistant's answer after a space, ending </s>.
      for (const ChatMessage& m : messages) {
        if (m.role == "system")
          s += "[SYSTEM_PROMPT] " + m.content + "[/SYSTEM_PROMPT]";
        else if (m.role == "user")
          s += "[INST] " + m.content + "[/INST]";
        else
          s += " " + m.content + "</s>";
      }
      break;
    case ChatTemplate::gpt_oss:
      // Harmony's turns without channels, as llama.cpp's built-in OpenAI MoE template writes
      // them: an assistant's answer ends <|return|>, every other message <|end|>.
      for (const ChatMessage& m : messages)
        s += "<|start|>" + m.role + "<|message|>" + m.content +
             (m.role == "assistant" ? "<|return|>" : "<|end|>");
      if (add_assistant) s += "<|start|>assistant";
      break;
    case ChatTemplate::chatglm4:
      // llama.cpp's built-in chatglm4: [gMASK]<sop>, then each message as <|role|>\n and its
      // text, nothing between turns.
      s = "[gMASK]<sop>";
      for (const ChatMessage& m : messages) s += "<|" + m.role + "|>\n" + m.content;
      if (add_assistant) s += "<|assistant|>\n";
      break;
    case ChatTemplate::deepseek3:
      // llama.cpp's built-in deepseek3: the system text first (two newlines after it), the
      // user's after <｜User｜>, the assistant's after <｜Assistant｜> ending
      // <｜end▁of▁sentence｜>.
      for (const ChatMessage& m : messages) {
        if (m.role == "system")
          s += m.content + "\n\n";
        else if (m.role == "user")
          s += "<\uff5cUser\uff5c>" + m.content;
        else if (m.role == "assistant")
          s += "<\uff5cAssistant\uff5c>" + m.content + "<\uff5cend\u2581of\u2581sentence\uff5c>";
      }
      if (add_assistant) s += "<\uff5cAssistant\uff5c>";
      break;
  }
  return s;
}

}  // namespace spattn

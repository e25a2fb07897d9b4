// Chat templates: each family's text for one conversation (a system message, a user message
// with spaces around it, an answer, a second user message), written out here from the family's
// documented format; detection from marker strings of the Jinja sources models ship; names.
// (Checked once against llama.cpp: for its own example conversation, llama-completion -cnv
// --chat-template NAME prints the same text as spattn for all eight names, 2026-11-25.)
#include <gtest/gtest.h>

#include "spattn/chat_template.hpp"

namespace spattn {
namespace {

const std::vector<ChatMessage> kChat = {{"system", "You are terse."},
                                        {"user", " Hi there "},
                                        {"assistant", "Hello! "},
                                        {"user", "Bye"}};

std::string render(const char* name, bool add_assistant = true) {
  const std::optional<ChatTemplate> t = chat_template_named(name);
  EXPECT_TRUE(t.has_value()) << name;
  return t ? apply_chat_template(*t, kChat, add_assistant) : "";
}

TEST(ChatTemplate, EachFamilysFormat) {
  EXPECT_EQ(render("chatml"),
            "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\n Hi there <|im_end|>\n"
            "<|im_start|>assistant\nHello! <|im_end|>\n<|im_start|>user\nBye<|im_end|>\n"
            "<|im_start|>assistant\n");
  // Llama 3 strips each content.
  EXPECT_EQ(render("llama3"),
            "<|start_header_id|>system<|end_header_id|>\n\nYou are terse.<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nHi there<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\nHello!<|eot_id|>"
            "<|start_header_id|>user<|end_header_id|>\n\nBye<|eot_id|>"
            "<|start_header_id|>assistant<|end_header_id|>\n\n");
  EXPECT_EQ(render("phi3"),
            "<|system|>\nYou are terse.<|end|>\n<|user|>\n Hi there <|end|>\n<|assistant|>\nHello! "
            "<|end|>\n<|user|>\nBye<|end|>\n<|assistant|>\n");
  // Gemma: no system turn (its text opens the next user turn), "model" for the assistant,
  // contents stripped.
  EXPECT_EQ(render("gemma"),
            "<start_of_turn>user\nYou are terse.\n\nHi there<end_of_turn>\n<start_of_turn>model\n"
            "Hello!<end_of_turn>\n<start_of_turn>user\nBye<end_of_turn>\n<start_of_turn>model\n");
  // Mistral: the system text inside the first [INST]; v1 spaces before [INST] and [/INST],
  // v3 after [INST] and before the (stripped) answer, v3-tekken none; no assistant opening.
  EXPECT_EQ(render("mistral-v1"),
            " [INST] You are terse.\n\n Hi there  [/INST] Hello! </s> [INST] Bye [/INST]");
  EXPECT_EQ(render("mistral-v3"),
            "[INST] You are terse.\n\n Hi there [/INST] Hello!</s>[INST] Bye[/INST]");
  EXPECT_EQ(render("mistral-v3-tekken"),
            "[INST]You are terse.\n\n Hi there [/INST]Hello! </s>[INST]Bye[/INST]");
  EXPECT_EQ(render("mistral-v7"),
            "[SYSTEM_PROMPT] You are terse.[/SYSTEM_PROMPT][INST]  Hi there [/INST] Hello! </s>"
            "[INST] Bye[/INST]");
  // gpt-oss: Harmony's turns, the assistant's ending in <|return|>.
  EXPECT_EQ(
      render("gpt-oss"),
      "<|start|>system<|message|>You are terse.<|end|><|start|>user<|message|> Hi there <|end|>"
      "<|start|>assistant<|message|>Hello! <|return|><|start|>user<|message|>Bye<|end|>"
      "<|start|>assistant");
  // GLM (chatglm4) and DeepSeek V3 (deepseek3): llama_chat_apply_template's text for this
  // conversation, 2026-12-02.
  EXPECT_EQ(render("chatglm4"),
            "[gMASK]<sop><|system|>\nYou are terse.<|user|>\n Hi there <|assistant|>\nHello! "
            "<|user|>\nBye<|assistant|>\n");
  EXPECT_EQ(render("deepseek3"),
            "You are terse.\n\n<\uff5cUser\uff5c> Hi there <\uff5cAssistant\uff5c>Hello! "
            "<\uff5cend\u2581of\u2581sentence\uff5c><\uff5cUser\uff5c>Bye<\uff5cAssistant\uff5c>");
  // Without the assistant's opening.
  EXPECT_EQ(render("phi3", false),
            "<|system|>\nYou are terse.<|end|>\n<|user|>\n Hi there <|end|>\n<|assistant|>\nHello! "
            "<|end|>\n<|user|>\nBye<|end|>\n");
}

TEST(ChatTemplate, DetectedFromTheMarkersOfTheJinjaSource) {
  const auto is = [](std::string_view jinja) { return detect_chat_template(jinja); };
  EXPECT_EQ(is("{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
               "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}"),
            ChatTemplate::chatml);
  EXPECT_EQ(is("{{- '<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n' }}"),
            ChatTemplate::llama3);
  EXPECT_EQ(is("{{'<|' + message['role'] + '|>' + '\\n' + message['content'] + '<|end|>\\n'}}"
               "{{ '<|assistant|>\\n' }}"),
            ChatTemplate::phi3);
  EXPECT_EQ(is("{{ '<start_of_turn>' + role + '\\n' + message['content'] | trim + "
               "'<end_of_turn>\\n' }}"),
            ChatTemplate::gemma);
  EXPECT_EQ(is("{{- '[SYSTEM_PROMPT]' + system_message + '[/SYSTEM_PROMPT]' }}{{ '[INST]' }}"),
            ChatTemplate::mistral_v7);
  EXPECT_EQ(is("{{- bos_token + ' [INST] ' + system_message }}"), ChatTemplate::mistral_v1);
  EXPECT_EQ(is("{%- if tools %}[AVAILABLE_TOOLS]{% endif %}{{- \"[INST]\" + content }}"),
            ChatTemplate::mistral_v3_tekken);
  EXPECT_EQ(is("{%- if tools %}[AVAILABLE_TOOLS]{% endif %}{{- '[INST] ' + content }}"),
            ChatTemplate::mistral_v3);
  EXPECT_EQ(is("{{- '<|start|>' + message.role + '<|channel|>' + message.channel }}"),
            ChatTemplate::gpt_oss);
  EXPECT_EQ(is("[gMASK]<sop>{%- for msg in messages %}<|{{ msg.role }}|>{% endfor %}"),
            ChatTemplate::chatglm4);
  EXPECT_EQ(is("{{'<\uff5cUser\uff5c>' + content}}{{'<\uff5cAssistant\uff5c>' + content + "
               "'<\uff5cend\u2581of\u2581sentence\uff5c>'}}"),
            ChatTemplate::deepseek3);
  // ChatML's marker with Phi-4's separator is another format; Llama 2's [INST] is not
  // rendered; no markers: nothing.
  EXPECT_FALSE(is("<|im_start|>{{ role }}<|im_sep|>"));
  EXPECT_FALSE(is("{{ bos_token + '[INST] <<SYS>>' }}"));
  EXPECT_FALSE(is("{{ message['content'] }}"));
  EXPECT_FALSE(is(""));
}

TEST(ChatTemplate, NamesAreLlamaCppsAndRoundTrip) {
  for (ChatTemplate t : {ChatTemplate::chatml, ChatTemplate::llama3, ChatTemplate::phi3,
                         ChatTemplate::gemma, ChatTemplate::mistral_v1, ChatTemplate::mistral_v3,
                         ChatTemplate::mistral_v3_tekken, ChatTemplate::mistral_v7,
                         ChatTemplate::gpt_oss, ChatTemplate::chatglm4, ChatTemplate::deepseek3})
    EXPECT_EQ(chat_template_named(chat_template_name(t)), t);
  EXPECT_FALSE(chat_template_named("llama-3"));
  EXPECT_NE(chat_template_names().find("mistral-v3-tekken"), std::string::npos);
}

}  // namespace
}  // namespace spattn

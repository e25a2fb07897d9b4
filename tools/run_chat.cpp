#include "run_chat.hpp"

#include <fmt/format.h>

#include <iostream>
#include <span>
#include <vector>

#include "spattn/chat_template.hpp"
#include "spattn/error.hpp"

namespace spattn::cli {

void run_chat(const RunnerOptions& r, const ChatOptions& c) {
  const model::SessionOptions so = session_options(r, r.attn);
  SPATTN_CHECK(c.n_predict >= -1, "-n must be >= -1 in a chat, got ", c.n_predict);
  c.sampling.validate();
  pick_chat_template(c.chat_template, "");  // an unknown name fails before the model loads
  LoadedModel lm = load_model_and_tokenizer(r);
  ChatTemplate tmpl = ChatTemplate::chatml;
  if (const auto t = pick_chat_template(c.chat_template, lm.chat_template)) {
    tmpl = *t;
  } else {
    // As llama-cli: a model without a template spattn renders is spoken to in ChatML.
    fmt::print(stderr, "chat: {}; using chatml (--chat-template names another)\n",
               lm.chat_template.empty() ? "the model has no chat template"
                                        : "the model's chat template is none spattn renders");
  }
  fmt::print(stderr, "chat: template {}, attention {}; one line per turn, end with Ctrl-D\n",
             chat_template_name(tmpl), r.attn);
  model::Session s(lm.model, so);
  std::vector<ChatMessage> msgs;
  if (!c.system.empty()) msgs.push_back({"system", c.system});
  std::vector<int32_t> conv;  // every token of the conversation (the cache holds n_past())
  std::vector<float> logits(size_t(lm.model.config().n_vocab));
  Sampler sampler(c.sampling);
  std::string line;
  for (;;) {
    fmt::print("\n> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line.empty()) continue;
    // The text this turn adds: the conversation with it and the assistant's opening, past what
    // the conversation so far renders to (on the first turn, all of it, system message too). That ended at the template's end-of-turn text, of
    // which the cache holds the generated end token only: a newline after it comes back, as
    // llama.cpp's common_chat_format_single does.
    const std::string before = conv.empty() ? "" : apply_chat_template(tmpl, msgs, false);
    msgs.push_back({"user", line});
    const std::string after = apply_chat_template(tmpl, msgs, true);
    std::string delta =
        after.compare(0, before.size(), before) == 0 ? after.substr(before.size()) : after;
    if (!before.empty() && before.back() == '\n') delta = "\n" + delta;
    const std::vector<int32_t> add =
        lm.tokenizer.encode(delta, conv.empty() && lm.tokenizer.add_bos(), true);
    conv.insert(conv.end(), add.begin(), add.end());
    SPATTN_CHECK(int64_t(conv.size()) < so.n_ctx, "chat: the conversation (", conv.size(),
                 " tokens) fills the context -c ", so.n_ctx);
    // What the cache lacks: this turn's tokens, after the last answer's end token (sampled,
    // never decoded), from the longest prefix the session can go on from (dense: all it holds;
    // a method that chooses keys per call: none, so all of it from position 0).
    s.truncate(s.reuse_point(s.n_past()));
    const std::span<const int32_t> rest(conv.data() + s.n_past(), conv.size() - size_t(s.n_past()));
    s.prefill(rest, logits.data(), int64_t(rest.size()) - 1);
    std::string answer;
    for (int64_t n = 0; c.n_predict < 0 || n < c.n_predict; ++n) {
      const int32_t id = sampler.sample(logits);
      conv.push_back(id);
      if (lm.tokenizer.is_eog(id)) break;
      const std::string piece = lm.tokenizer.piece(id, false);
      answer += piece;
      fmt::print("{}", piece);
      std::fflush(stdout);
      if (int64_t(conv.size()) >= so.n_ctx) break;
      s.decode(id, logits.data());
    }
    msgs.push_back({"assistant", answer});
  }
  fmt::print("\n");
}

}  // namespace spattn::cli

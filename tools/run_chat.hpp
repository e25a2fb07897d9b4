// `spattn run --chat` (-cnv): llama-cli's conversation mode. Each line on stdin is a user turn;
// the conversation is rendered with the model's chat template (see spattn/chat_template.hpp),
// only the text a turn adds is tokenized and prefilled (the cache keeps the rest: dense
// prefill continues it; chunked_h2o and the methods prefill the whole conversation again, as
// they run from position 0), and the answer streams to stdout until end of generation or -n.
#pragma once
#include <cstdint>
#include <string>

#include "runner.hpp"
#include "sampler.hpp"

namespace spattn::cli {

struct ChatOptions {
  std::string system;         // -sys: the system message ("" : none)
  std::string chat_template;  // --chat-template NAME ("" : the model's; chatml if none)
  int64_t n_predict = -1;     // per answer; -1: until end of generation or a full context
  SamplingParams sampling;
};

void run_chat(const RunnerOptions& r, const ChatOptions& c);

}  // namespace spattn::cli

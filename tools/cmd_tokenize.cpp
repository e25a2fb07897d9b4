// `spattn tokenize`: the token ids of a text under a GGUF file's vocabulary, printed as
// llama.cpp's llama-tokenize prints them ("%6d -> 'piece'" lines, or --ids: [1, 2, 3]).
// Works on vocabulary-only files.
#include <fmt/format.h>

#include <fstream>
#include <memory>
#include <sstream>
#include <string>

#include "cli.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/tokenizer.hpp"

namespace spattn::cli {
namespace {

struct TokenizeOptions {
  std::string model, prompt, file;
  bool ids = false, no_bos = false, no_parse_special = false, show_count = false;
};

std::string read_text(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  SPATTN_CHECK(in.is_open(), path, ": cannot open for reading");
  std::stringstream ss;
  ss << in.rdbuf();
  SPATTN_CHECK(!in.bad(), path, ": read failed");
  return ss.str();
}

void run_tokenize(const TokenizeOptions& o) {
  const gguf::File f = gguf::File::open(o.model);
  const Tokenizer tok = Tokenizer::from_gguf(f);
  const std::string text = o.file.empty() ? o.prompt : read_text(o.file);
  const std::vector<int32_t> ids =
      tok.encode(text, tok.add_bos() && !o.no_bos, !o.no_parse_special);
  if (o.ids) {
    std::string line = "[";
    for (size_t i = 0; i < ids.size(); ++i) line += (i ? ", " : "") + std::to_string(ids[i]);
    fmt::print("{}]\n", line);
  } else {
    for (int32_t id : ids) fmt::print("{:6d} -> '{}'\n", id, tok.piece(id));
  }
  if (o.show_count) fmt::print("Total number of tokens: {}\n", ids.size());
}

}  // namespace

void add_tokenize_command(CLI::App& root) {
  auto o = std::make_shared<TokenizeOptions>();
  CLI::App* cmd = root.add_subcommand(
      "tokenize", "print the token ids of a text under a GGUF vocabulary (as llama-tokenize)");
  cmd->add_option("-m,--model", o->model, "GGUF file (a vocabulary-only file is enough)")
      ->required();
  auto* p = cmd->add_option("-p,--prompt", o->prompt, "text to tokenize");
  auto* f = cmd->add_option("-f,--file", o->file, "file whose text to tokenize");
  p->excludes(f);
  f->excludes(p);
  cmd->add_flag("--ids", o->ids, "print only the ids, as [1, 2, 3]");
  cmd->add_flag("--no-bos", o->no_bos, "do not add BOS even where the vocabulary asks for it");
  cmd->add_flag("--no-parse-special", o->no_parse_special,
                "treat control tokens written in the text (<|endoftext|>) as plain text");
  cmd->add_flag("--show-count", o->show_count, "print the number of tokens at the end");
  cmd->callback([o] {
    SPATTN_CHECK(!o->prompt.empty() || !o->file.empty(), "give one of -p/--prompt and -f/--file");
    run_tokenize(*o);
  });
}

}  // namespace spattn::cli

// Tokenizers built from a GGUF file's vocabulary, behaving as llama.cpp's do:
//  - SentencePiece-style (tokenizer.ggml.model = "llama"): pieces with scores, merged
//    highest-score pair first; spaces become U+2581 and a space is put in front of the text;
//    characters no piece covers fall back to byte tokens <0xXX>;
//  - byte-level BPE (tokenizer.ggml.model = "gpt2"): GPT-2's pre-tokenizer splits the text
//    into words, each word's bytes are mapped to printable characters (GPT-2's
//    bytes_to_unicode) and merged by the ranked merges list, lowest rank first; Gemma 4's
//    ("gemma4") is BPE over raw UTF-8 with spaces as U+2581 and <0xXX> byte tokens;
//  - WordPiece (tokenizer.ggml.model = "bert"): BERT's normaliser and split, then the
//    longest vocabulary pieces of each word; [CLS] text [SEP] when special tokens are added.
// Control and user-defined tokens written in the text (such as <|endoftext|>) become their
// ids when parse_special is on. BOS/EOS and whether BOS is added come from the metadata.
#pragma once
#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "spattn/gguf.hpp"

namespace spattn {

class Tokenizer {
 public:
  enum class Kind { spm, bpe, wpm };
  // Token types as GGUF stores them in tokenizer.ggml.token_type.
  enum class TokenType : int32_t {
    undefined = 0,
    normal = 1,
    unknown = 2,
    control = 3,
    user_defined = 4,
    unused = 5,
    byte = 6
  };

  // Reads tokenizer.ggml.* from the file; throws Error naming what is missing or malformed.
  static Tokenizer from_gguf(const gguf::File& file);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Token ids of `text`, with BOS first when add_bos (llama.cpp's add_special). With
  // parse_special, control tokens written in the text become their ids (llama-tokenize does
  // this by default; llama-perplexity does not).
  std::vector<int32_t> encode(std::string_view text, bool add_bos, bool parse_special) const;
  // add_bos from the metadata, parse_special off.
  std::vector<int32_t> encode(std::string_view text) const;

  // The text of one token as llama.cpp's token_to_piece renders it: SentencePiece's U+2581
  // as a space, byte tokens as their byte, BPE characters back to bytes; control tokens as
  // their text when `special`, else as nothing.
  std::string piece(int32_t id, bool special = true) const;
  // The text of a token sequence: control tokens left out, and for SentencePiece the space
  // that encode put in front removed, so decode(encode(s)) == s.
  std::string decode(const std::vector<int32_t>& ids) const;

  Kind kind() const;
  int32_t n_vocab() const;
  int32_t bos() const;  // -1 when the vocabulary has none
  int32_t eos() const;
  bool add_bos() const;
  // End of generation, as llama.cpp's vocabulary marks it: EOS, EOT, EOM, the FIM pad / repo /
  // separator tokens, and tokens by their text (<|eot_id|>, <|im_end|>, <|end|>, <|return|>,
  // <|call|>, <end_of_turn>, <|endoftext|>, ...; gpt-oss's <|end|> ends a message, not the
  // answer, and is not one).
  bool is_eog(int32_t id) const;
  TokenType type(int32_t id) const;
  const std::string& text(int32_t id) const;  // the raw vocabulary entry
  float score(int32_t id) const;

  struct Impl;

 private:
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace spattn

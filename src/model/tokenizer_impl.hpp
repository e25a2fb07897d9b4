// The tokenizer's vocabulary and the two algorithms (private to src/model).
#pragma once
#include <cstdint>
#include <string>
#include <string_view>
#include <functional>
#include <unordered_map>
#include <vector>

#include "spattn/tokenizer.hpp"

namespace spattn {

// The word splits of byte-level BPE vocabularies, named by tokenizer.ggml.pre (several names
// may share one split: starcoder is also refact's and command-r's). Values run from 0 without
// gaps: bpe_pretokenizer.cpp counts them by the cases of its switch.
enum class PreTokenizer {
  gpt2,
  llama3,
  qwen2,
  qwen35,
  deepseek_llm,
  deepseek_coder,
  falcon,
  starcoder,
  gemma4,  // SentencePiece-style BPE: lines and runs of newlines only (spaces are U+2581 first)
  gpt4o,   // OpenAI's o200k (gpt-oss; also Llama 4's): letter runs cut at case changes
  tekken   // Mistral's: gpt4o's without contractions, single digits
};

struct Tokenizer::Impl {
  Kind kind = Kind::spm;
  PreTokenizer pre = PreTokenizer::gpt2;
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<TokenType> types;
  // text -> id (the last one, as llama.cpp): an open-addressing table of ids into `tokens`,
  // at most half full, 4 bytes a slot (a 128K vocabulary: 1 MiB, where a map of strings took
  // about 8).
  std::vector<int32_t> id_slots;
  // BPE merges by the ids of their two parts, (left << 32 | right), sorted, with their ranks:
  // 12 bytes a merge where a map keyed by "left right" strings took about 70 (a 128K-token
  // vocabulary has 280K merges: 3.4 MiB instead of 20).
  std::vector<uint64_t> merge_pairs;
  std::vector<int32_t> merge_ranks;
  // The few merges whose parts are not both vocabulary tokens, by "left right".
  std::unordered_map<std::string, int32_t> merge_rank_text;
  std::vector<int32_t> special;  // control/user-defined/unknown ids, longest text first
  int32_t bos = -1, eos = -1, eot = -1, unk = -1;
  std::vector<int32_t> eog;  // the ids that end generation, sorted (end_of_generation_ids)
  bool add_bos = false;
  bool add_space_prefix = false;
  // BPE: a word that is itself a vocabulary token is that token, whatever the merges would
  // make of it (Llama 3's tokenizer.json sets ignore_merges; llama.cpp does this for it).
  bool ignore_merges = false;
  // BPE over raw UTF-8 with spaces written U+2581 and <0xXX> byte tokens (Gemma 4's
  // SentencePiece-style BPE), instead of GPT-2's byte-to-character map.
  bool spm_style_bpe = false;
  // WordPiece: BERT's normaliser (lowercase; strip accents: NFD, then marks dropped), the
  // separator appended after the text when special tokens are added, the longest token.
  bool lowercase = true, strip_accents = true;
  int32_t sep = -1;
  size_t max_token_bytes = 0;
  int32_t byte_ids[256];  // SPM: the id of <0xXX>, or -1

  int32_t find(std::string_view s) const {
    const size_t mask = id_slots.size() - 1;
    for (size_t i = std::hash<std::string_view>{}(s)&mask;; i = (i + 1) & mask) {
      const int32_t id = id_slots[i];
      if (id < 0 || tokens[size_t(id)] == s) return id;
    }
  }
  // Fills id_slots from tokens.
  void index_tokens();
  // The rank of merging a with b (BPE), or -1.
  int32_t merge_rank(std::string_view a, std::string_view b) const;
  // Builds the merge tables from tokenizer.ggml.merges ("left right" each, rank = index).
  void set_merges(const std::vector<std::string_view>& merges, const std::string& path);
  // Appends the ids of a run of plain text (no special tokens in it).
  void encode_spm(std::string_view text, std::vector<int32_t>& out) const;
  void encode_bpe(std::string_view text, std::vector<int32_t>& out) const;
  void encode_wpm(std::string_view text, std::vector<int32_t>& out) const;
};

// UTF-8 sequence length from its first byte (1 for stray continuation bytes), as llama.cpp.
inline size_t utf8_len(unsigned char c) {
  static const size_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
  return lookup[c >> 4];
}

// Length of the UTF-8 character at text[off]: utf8_len when the continuation bytes are
// really there, else 1, so a broken sequence never swallows the next character's bytes
// (llama.cpp trusts the lead byte; the two differ only on invalid UTF-8).
inline size_t utf8_char_len(std::string_view text, size_t off) {
  const size_t n = utf8_len(uint8_t(text[off]));
  if (n > text.size() - off) return 1;
  for (size_t j = 1; j < n; ++j)
    if ((uint8_t(text[off + j]) & 0xc0) != 0x80) return 1;
  return n;
}

// GPT-2's bytes_to_unicode: byte -> UTF-8 of the printable character standing for it, and
// the inverse (code point -> byte, -1 for characters that stand for no byte).
const std::string& byte_to_unicode(uint8_t b);
int unicode_to_byte(uint32_t cp);

// Splits `text` into words by the pre-tokenizer's regex; GPT-2's is
//   's|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+
// Bytes no alternative matches (invalid UTF-8) are words of their own.
std::vector<std::string_view> pretokenize(std::string_view text, PreTokenizer p);

}  // namespace spattn

// SentencePiece-style encoding as llama.cpp's llm_tokenizer_spm does it: start from the
// UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the vocabulary
// piece with the highest score (leftmost on ties), then emit each remaining symbol as its
// piece or, when no piece covers it, as byte tokens <0xXX> (byte fallback).
#include <optional>

#include "model/pair_merge.hpp"
#include "model/tokenizer_impl.hpp"

namespace spattn {

void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<MergeSymbol> sym;
  for (size_t off = 0; off < text.size();) {
    const size_t n = utf8_char_len(text, off);
    sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, off, n});
    off += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  // Highest-scoring vocabulary piece first.
  merge_best_pairs<float>(sym,
                          [&](const MergeSymbol& a, const MergeSymbol& b) -> std::optional<float> {
                            const int32_t id = find(text.substr(a.start, a.n + b.n));
                            if (id < 0) return std::nullopt;
                            return scores[size_t(id)];
                          });
  // Every merge made a vocabulary piece, so a symbol is either a piece or one character
  // that no piece covers: that one goes out byte by byte.
  for (int i = 0; i >= 0; i = sym[size_t(i)].next) {
    const std::string_view s = text.substr(sym[size_t(i)].start, sym[size_t(i)].n);
    const int32_t id = find(s);
    if (id >= 0) {
      out.push_back(id);
      continue;
    }
    for (char c : s) {
      int32_t b = byte_ids[uint8_t(c)];
      if (b < 0) b = find(std::string_view(&c, 1));  // no <0xXX>: the byte as a piece
      if (b < 0) b = unk;
      if (b >= 0) out.push_back(b);
    }
  }
}

}  // namespace spattn

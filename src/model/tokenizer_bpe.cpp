// Byte-level BPE encoding as llama.cpp's llm_tokenizer_bpe does it: the pre-tokenizer
// cuts the text into words; each word's bytes become GPT-2's printable stand-in characters;
// the adjacent pair with the lowest merge rank (leftmost on ties) is merged until no ranked
// pair is left; each symbol is then its vocabulary id. With ignore_merges (Llama 3) a word that
// is a vocabulary token is that token at once.
#include <optional>

#include "model/pair_merge.hpp"
#include "model/tokenizer_impl.hpp"

namespace spattn {

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::string word;
  std::string key;
  std::vector<MergeSymbol> sym;
  for (std::string_view w : pretokenize(text, pre)) {
    word.clear();
    for (char c : w) word += byte_to_unicode(uint8_t(c));
    if (ignore_merges) {
      if (const int32_t id = find(word); id >= 0) {
        out.push_back(id);
        continue;
      }
    }
    sym.clear();
    for (size_t off = 0; off < word.size();) {
      const size_t n = std::min(utf8_len(uint8_t(word[off])), word.size() - off);
      sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, off, n});
      off += n;
    }
    if (sym.empty()) continue;
    sym.back().next = -1;
    // Lowest merge rank first.
    merge_best_pairs<int64_t>(sym, [&](const MergeSymbol& a, const MergeSymbol& b) -> std::optional<int64_t> {
      key.assign(word, a.start, a.n);
      key += ' ';
      key.append(word, b.start, b.n);
      auto it = merge_rank.find(key);
      if (it == merge_rank.end()) return std::nullopt;
      return -int64_t(it->second);
    });
    for (int i = 0; i >= 0; i = sym[size_t(i)].next) {
      const std::string_view s = std::string_view(word).substr(sym[size_t(i)].start, sym[size_t(i)].n);
      const int32_t id = find(s);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // A merge whose result is not in the vocabulary: its characters one by one, as
      // llama.cpp does; a character missing too becomes <unk> where there is one.
      for (size_t off = 0; off < s.size();) {
        const size_t n = std::min(utf8_len(uint8_t(s[off])), s.size() - off);
        int32_t c = find(s.substr(off, n));
        if (c < 0) c = unk;
        if (c >= 0) out.push_back(c);
        off += n;
      }
    }
  }
}

}  // namespace spattn

// Byte-level BPE encoding as llama.cpp's llm_tokenizer_bpe does it: the pre-tokenizer
// cuts the text into words; each word's bytes become GPT-2's printable stand-in characters;
// the adjacent pair with the lowest merge rank (leftmost on ties) is merged until no ranked
// pair is left; each symbol is then its vocabulary id. With ignore_merges (Llama 3) a word that
// is a vocabulary token is that token at once. Gemma 4's variant works on the raw UTF-8 (spaces
// already U+2581) and falls back to <0xXX> byte tokens.
#include <algorithm>
#include <optional>
#include <utility>

#include "model/pair_merge.hpp"
#include "model/tokenizer_impl.hpp"
#include "spattn/error.hpp"

namespace spattn {

void Tokenizer::Impl::set_merges(const std::vector<std::string_view>& merges,
                                 const std::string& path) {
  std::vector<std::pair<uint64_t, int32_t>> by_ids;
  by_ids.reserve(merges.size());
  for (size_t r = 0; r < merges.size(); ++r) {
    const std::string_view m = merges[r];
    // "left right"; the search starts at 1 so that a left part may itself begin with ' '.
    const size_t sp = m.size() > 1 ? m.find(' ', 1) : std::string_view::npos;
    SPATTN_CHECK(sp != std::string_view::npos && sp + 1 < m.size(), path,
                 ": tokenizer.ggml.merges entry ", r, " is not 'left right'");
    const int32_t a = find(m.substr(0, sp)), b = find(m.substr(sp + 1));
    if (a >= 0 && b >= 0)
      by_ids.emplace_back(uint64_t(uint32_t(a)) << 32 | uint32_t(b), int32_t(r));
    else
      merge_rank_text.emplace(std::string(m), int32_t(r));  // the first rank stays, as before
  }
  // Sorted by pair, then rank: of a pair listed twice, the first (lowest) rank is kept.
  std::sort(by_ids.begin(), by_ids.end());
  merge_pairs.clear();
  merge_ranks.clear();
  for (size_t i = 0; i < by_ids.size(); ++i) {
    if (i > 0 && by_ids[i].first == by_ids[i - 1].first) continue;
    merge_pairs.push_back(by_ids[i].first);
    merge_ranks.push_back(by_ids[i].second);
  }
  merge_pairs.shrink_to_fit();
  merge_ranks.shrink_to_fit();
}

int32_t Tokenizer::Impl::merge_rank(std::string_view a, std::string_view b) const {
  const int32_t ia = find(a), ib = find(b);
  if (ia >= 0 && ib >= 0) {
    const uint64_t key = uint64_t(uint32_t(ia)) << 32 | uint32_t(ib);
    const auto it = std::lower_bound(merge_pairs.begin(), merge_pairs.end(), key);
    return it != merge_pairs.end() && *it == key ? merge_ranks[size_t(it - merge_pairs.begin())]
                                                 : -1;
  }
  if (merge_rank_text.empty()) return -1;
  std::string key;
  key.reserve(a.size() + 1 + b.size());
  key.append(a).append(1, ' ').append(b);
  const auto it = merge_rank_text.find(key);
  return it == merge_rank_text.end() ? -1 : it->second;
}

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::string word;
  std::vector<MergeSymbol> sym;
  for (std::string_view w : pretokenize(text, pre)) {
    word.clear();
    if (spm_style_bpe)
      word.assign(w);
    else
      for (char c : w) word += byte_to_unicode(uint8_t(c));
    // Gemma 4: a run of newlines that is a token is that token (llama.cpp's fix for the
    // merges that build such runs in an order its queue cannot follow).
    const bool newlines = spm_style_bpe && word.find_first_not_of('\n') == std::string::npos;
    if (ignore_merges || newlines) {
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
    const std::string_view wv(word);
    merge_best_pairs<int64_t>(
        sym, [&](const MergeSymbol& a, const MergeSymbol& b) -> std::optional<int64_t> {
          const int32_t r = merge_rank(wv.substr(a.start, a.n), wv.substr(b.start, b.n));
          if (r < 0) return std::nullopt;
          return -int64_t(r);
        });
    for (int i = 0; i >= 0; i = sym[size_t(i)].next) {
      const std::string_view s =
          std::string_view(word).substr(sym[size_t(i)].start, sym[size_t(i)].n);
      const int32_t id = find(s);
      if (id >= 0) {
        out.push_back(id);
        continue;
      }
      // A merge whose result is not in the vocabulary: its characters one by one, as
      // llama.cpp does; a character missing too becomes <unk> where there is one. Gemma 4
      // writes such a symbol as its bytes' <0xXX> tokens instead.
      if (spm_style_bpe) {
        for (char c : s)
          if (byte_ids[uint8_t(c)] >= 0) out.push_back(byte_ids[uint8_t(c)]);
        continue;
      }
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

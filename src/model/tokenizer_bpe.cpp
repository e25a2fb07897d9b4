// Byte-level BPE encoding as llama.cpp's llm_tokenizer_bpe does it: the pre-tokenizer
// cuts the text into words; each word's bytes become GPT-2's printable stand-in characters;
// the adjacent pair with the lowest merge rank (leftmost on ties) is merged until no ranked
// pair is left; each symbol is then its vocabulary id.
#include <queue>

#include "model/tokenizer_impl.hpp"

namespace spattn {

namespace {

struct Symbol {
  int prev, next;
  size_t start, n;
};

struct Bigram {
  int left, right;
  int32_t rank;
  size_t size;
  bool operator<(const Bigram& o) const {  // priority_queue pops the largest: lowest rank
    return rank > o.rank || (rank == o.rank && left > o.left);
  }
};

}  // namespace

void Tokenizer::Impl::encode_bpe(std::string_view text, std::vector<int32_t>& out) const {
  std::string word;
  std::string key;
  std::vector<Symbol> sym;
  for (std::string_view w : pretokenize(text, pre)) {
    word.clear();
    for (char c : w) word += byte_to_unicode(uint8_t(c));
    sym.clear();
    for (size_t off = 0; off < word.size();) {
      const size_t n = std::min(utf8_len(uint8_t(word[off])), word.size() - off);
      sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, off, n});
      off += n;
    }
    if (sym.empty()) continue;
    sym.back().next = -1;
    std::priority_queue<Bigram> queue;
    auto try_add = [&](int l, int r) {
      if (l < 0 || r < 0) return;
      const Symbol& a = sym[size_t(l)];
      const Symbol& b = sym[size_t(r)];
      key.assign(word, a.start, a.n);
      key += ' ';
      key.append(word, b.start, b.n);
      auto it = merge_rank.find(key);
      if (it == merge_rank.end()) return;
      queue.push({l, r, it->second, a.n + b.n});
    };
    for (size_t i = 1; i < sym.size(); ++i) try_add(int(i) - 1, int(i));
    while (!queue.empty()) {
      const Bigram b = queue.top();
      queue.pop();
      Symbol& l = sym[size_t(b.left)];
      Symbol& r = sym[size_t(b.right)];
      if (l.n == 0 || r.n == 0 || l.next != b.right || l.n + r.n != b.size) continue;
      l.n += r.n;
      r.n = 0;
      l.next = r.next;
      if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
      try_add(l.prev, b.left);
      try_add(b.left, l.next);
    }
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

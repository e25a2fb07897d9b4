// SentencePiece-style encoding as llama.cpp's llm_tokenizer_spm does it: start from the
// UTF-8 characters, repeatedly merge the adjacent pair whose concatenation is the vocabulary
// piece with the highest score (leftmost on ties), then emit each remaining symbol as its
// piece or, when no piece covers it, as byte tokens <0xXX> (byte fallback).
#include <queue>

#include "model/tokenizer_impl.hpp"

namespace spattn {

namespace {

struct Symbol {
  int prev, next;
  size_t start, n;  // bytes [start, start + n) of the text; n == 0 once merged away
};

struct Bigram {
  int left, right;
  float score;
  size_t size;
  bool operator<(const Bigram& o) const {  // priority_queue pops the largest
    return score < o.score || (score == o.score && left > o.left);
  }
};

}  // namespace

void Tokenizer::Impl::encode_spm(std::string_view text, std::vector<int32_t>& out) const {
  std::vector<Symbol> sym;
  for (size_t off = 0; off < text.size();) {
    const size_t n = utf8_char_len(text, off);
    sym.push_back({int(sym.size()) - 1, int(sym.size()) + 1, off, n});
    off += n;
  }
  if (sym.empty()) return;
  sym.back().next = -1;

  std::priority_queue<Bigram> queue;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    const std::string_view s = text.substr(sym[size_t(l)].start, sym[size_t(l)].n + sym[size_t(r)].n);
    const int32_t id = find(s);
    if (id < 0) return;
    queue.push({l, r, scores[size_t(id)], s.size()});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(int(i) - 1, int(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    Symbol& l = sym[size_t(b.left)];
    Symbol& r = sym[size_t(b.right)];
    // Stale: one side was merged into something else since this pair was queued.
    if (l.n == 0 || r.n == 0 || l.next != b.right || l.n + r.n != b.size) continue;
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
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

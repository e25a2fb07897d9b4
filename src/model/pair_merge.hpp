// The merge loop both tokenizers share (llama.cpp's SentencePiece and byte-level BPE): the
// text is a linked list of symbols (byte ranges); the adjacent pair with the best key is
// merged, leftmost first on ties, until no pair has a key. A queue entry made stale by an
// earlier merge (one side merged away, or grown) is dropped when it comes up.
#pragma once
#include <cstddef>
#include <optional>
#include <queue>
#include <vector>

namespace spattn {

struct MergeSymbol {
  int prev, next;
  size_t start, n;  // bytes [start, start + n) of the text; n == 0 once merged away
};

// key(l, r): the pair's key (larger merges first; BPE passes minus its rank, SentencePiece its
// score), or nothing when the pair may not merge.
template <class Key, class KeyOf>
void merge_best_pairs(std::vector<MergeSymbol>& sym, KeyOf key) {
  struct Bigram {
    int left, right;
    Key key;
    size_t size;
    bool operator<(const Bigram& o) const {  // priority_queue pops the largest
      return key < o.key || (key == o.key && left > o.left);
    }
  };
  std::priority_queue<Bigram> queue;
  auto try_add = [&](int l, int r) {
    if (l < 0 || r < 0) return;
    if (const std::optional<Key> k = key(sym[size_t(l)], sym[size_t(r)]))
      queue.push({l, r, *k, sym[size_t(l)].n + sym[size_t(r)].n});
  };
  for (size_t i = 1; i < sym.size(); ++i) try_add(int(i) - 1, int(i));
  while (!queue.empty()) {
    const Bigram b = queue.top();
    queue.pop();
    MergeSymbol& l = sym[size_t(b.left)];
    MergeSymbol& r = sym[size_t(b.right)];
    if (l.n == 0 || r.n == 0 || l.next != b.right || l.n + r.n != b.size) continue;  // stale
    l.n += r.n;
    r.n = 0;
    l.next = r.next;
    if (r.next >= 0) sym[size_t(r.next)].prev = b.left;
    try_add(l.prev, b.left);
    try_add(b.left, l.next);
  }
}

}  // namespace spattn

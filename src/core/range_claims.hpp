// Work over [0, n) split into one contiguous range per thread: each thread claims its own range
// from the front, piece by piece in order, and, once it is done, the pieces other threads have
// not yet claimed, from the back of their ranges. So each thread reads one contiguous stream
// (the memory prefetchers follow it: decode's f16 products read 56 GB/s in a shared counter's
// interleaved 64-row pieces and 62 this way on 2 Zen 5 cores, BENCHMARKS.md) while a thread
// the host delays still has its pieces taken by the others. Every index is run exactly once;
// which thread runs it depends on timing, so fn's results must not depend on the thread.
//
// One object serves one pool call at a time, run by every thread of the call (ith of nth). The
// last thread to finish leaves the object ready for the next call, so a graph node can keep it
// (the pool's barrier at the call's end orders one call before the next).
#pragma once
#include <atomic>
#include <cstdint>

namespace spattn {

class RangeClaims {
 public:
  static constexpr int kMaxThreads = 64;

  // fn(begin, end) over the pieces of at most `piece` indices (at least one; more where a range
  // would have over 65,535 pieces) this thread claims.
  template <class Fn>
  void run(int64_t n, int64_t piece, int ith, int nth, Fn&& fn) {
    const int64_t longest = (n + nth - 1) / nth;
    if (piece < 1) piece = 1;
    if ((longest + piece - 1) / piece > kMaxPieces) piece = (longest + kMaxPieces - 1) / kMaxPieces;
    const auto first = [&](int t) { return n * t / nth; };
    const auto piece_range = [&](int t, uint64_t p) {
      const int64_t b = first(t) + int64_t(p) * piece, e = first(t + 1);
      fn(b, b + piece < e ? b + piece : e);
    };
    // A range's word: bit 32 set once a thread has opened it in this call, the pieces claimed
    // from its front (bits 0-15) and where its back stands (bits 16-31); front == back: nothing
    // left. Whichever thread reaches a range first opens it, so a thread that starts late (a
    // worker waking up) has its whole range taken by the others.
    constexpr uint64_t kOpen = uint64_t(1) << 32;
    const auto open = [&](int t) {
      const uint64_t pieces = uint64_t((first(t + 1) - first(t) + piece - 1) / piece);
      uint64_t w = 0;
      slots_[t].word.compare_exchange_strong(w, kOpen | pieces << 16, std::memory_order_relaxed);
      return w == 0 ? kOpen | pieces << 16 : w;
    };
    for (int d = 0; d < nth; ++d) {  // its own range from the front, then the others' backs
      const int t = (ith + d) % nth;
      std::atomic<uint64_t>& word = slots_[t].word;
      for (uint64_t w = open(t);;) {
        const uint64_t f = w & 0xffff, bk = w >> 16 & 0xffff;
        if (f >= bk) break;
        const uint64_t next = d == 0 ? w + 1 : w - (uint64_t(1) << 16);
        if (word.compare_exchange_weak(w, next, std::memory_order_relaxed)) {
          piece_range(t, d == 0 ? f : bk - 1);
          w = next;  // (a thief's claim since then fails the next exchange, which reloads)
        }
      }
    }
    // Every thread has stopped claiming when the last one arrives here: it closes the ranges
    // for the next call.
    if (done_.fetch_add(1, std::memory_order_acq_rel) == nth - 1) {
      for (int t = 0; t < nth; ++t) slots_[t].word.store(0, std::memory_order_relaxed);
      done_.store(0, std::memory_order_release);
    }
  }

 private:
  struct alignas(64) Slot {
    std::atomic<uint64_t> word{0};
  };
  Slot slots_[kMaxThreads];
  static constexpr int64_t kMaxPieces = 0xffff;
  alignas(64) std::atomic<int> done_{0};
};

}  // namespace spattn

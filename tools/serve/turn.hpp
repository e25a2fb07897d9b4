// The compute turn of `spattn serve -np N`: the slots' generations run on their own HTTP
// threads, and each step of work (one layer of a prefill piece, one decoded token) is taken in
// turn, first come first served, so N slots interleave their steps as llama-server's loop interleaves its
// slots' batches. Why a turn rather than N threads computing at once: every step already runs
// on the process's one thread pool with -t threads (ThreadPool makes calls from several
// threads take turns per call, but the work a step does on its calling thread alone - RoPE,
// sampling, the cache's bookkeeping - would then run beside another step's pool work and
// oversubscribe the cores); one step at a time keeps -t threads busy and no more. Writing to a
// client (text, progress) happens outside the turn, so a slow client holds back only itself.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <mutex>

namespace spattn::serve {

// A ticket lock: enter() waits for the tickets handed out before it, so a thread that leaves
// and enters again goes behind every thread already waiting (no slot starves another).
class Turn {
 public:
  void enter() {
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t me = next_++;
    cv_.wait(l, [&] { return serving_ == me; });
  }
  void leave() {
    {
      std::lock_guard<std::mutex> l(mu_);
      ++serving_;
    }
    cv_.notify_all();
  }

 private:
  std::mutex mu_;
  std::condition_variable cv_;
  uint64_t next_ = 0, serving_ = 0;
};

// Holds a Turn (when given one) for a scope, with leave / enter around work outside it.
class TurnHold {
 public:
  explicit TurnHold(Turn* t) : t_(t) { enter(); }
  ~TurnHold() {
    if (held_) t_->leave();
  }
  TurnHold(const TurnHold&) = delete;
  TurnHold& operator=(const TurnHold&) = delete;
  void enter() {
    if (t_ && !held_) {
      t_->enter();
      held_ = true;
    }
  }
  void leave() {
    if (t_ && held_) {
      held_ = false;
      t_->leave();
    }
  }

 private:
  Turn* t_;
  bool held_ = false;
};

}  // namespace spattn::serve

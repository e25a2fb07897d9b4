// The slots of `spattn serve -np N`: N Slots (each its own Session, so its own KV cache and
// prefix), one request at a time each. A request takes a free slot, the one whose cached
// tokens share the longest prefix with its prompt (llama-server's choice by prompt
// similarity), ties to the slot used least recently; with none free it waits (the server's
// admission bound says how many may wait). What each slot holds is kept here for /props and
// /metrics, read without touching a slot that is running.
#pragma once
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "slot.hpp"

namespace spattn::serve {

struct SlotState {
  int id = 0;
  bool busy = false;
  int64_t kv_tokens = 0;      // tokens its cache holds (as of its last request's end)
  int64_t cached_tokens = 0;  // prompt tokens its last request took from the cache
  int64_t requests = 0;       // requests it has served
  std::string attn;           // the attention its session runs ("" before its first request)
};

class SlotPool {
 public:
  SlotPool(const model::Model& model, const Tokenizer& tok, const cli::RunnerOptions& defaults,
           int n);

  // A slot held for one request; given back when it goes out of scope (or at release()).
  class Lease {
   public:
    Lease(SlotPool* pool, int id) : pool_(pool), id_(id) {}
    Lease(Lease&& o) noexcept : pool_(o.pool_), id_(o.id_) { o.pool_ = nullptr; }
    Lease(const Lease&) = delete;
    Lease& operator=(const Lease&) = delete;
    ~Lease() { release(); }
    Slot& slot() const { return *pool_->slots_[size_t(id_)]; }
    int id() const { return id_; }
    // Gives the slot back, noting what it now holds and what its request reused.
    void release(const SlotResult* r = nullptr);

   private:
    SlotPool* pool_;
    int id_;
  };

  // Waits for a free slot and takes the best one for `prompt`: the longest cached prefix when
  // it covers more than half of the prompt, else the slot holding the fewest cached tokens
  // (least recently used on ties).
  Lease acquire(const std::vector<int32_t>& prompt);
  // As acquire, but gives up (nullopt) once `gone` says the client left, so a request waiting
  // for a slot frees its place in the queue when its client does, not when a slot frees.
  std::optional<Lease> acquire(const std::vector<int32_t>& prompt,
                               const std::function<bool()>& gone);
  std::vector<SlotState> states() const;
  int size() const { return int(slots_.size()); }

 private:
  int pick(const std::vector<int32_t>& prompt) const;  // the best free slot, or -1
  Lease take(int id);
  std::vector<std::unique_ptr<Slot>> slots_;
  std::vector<SlotState> state_;
  std::vector<uint64_t> last_used_;
  uint64_t clock_ = 0;
  mutable std::mutex mu_;
  std::condition_variable free_;
};

}  // namespace spattn::serve

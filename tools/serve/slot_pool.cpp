#include "slot_pool.hpp"

#include <chrono>

namespace spattn::serve {

SlotPool::SlotPool(const model::Model& model, const Tokenizer& tok,
                   const cli::RunnerOptions& defaults, int n)
    : state_(size_t(n)), last_used_(size_t(n), 0) {
  for (int i = 0; i < n; ++i) {
    slots_.push_back(std::make_unique<Slot>(model, tok, defaults));
    state_[size_t(i)].id = i;
  }
}

int SlotPool::pick(const std::vector<int32_t>& prompt) const {
  int best = -1;
  // A free slot's tokens do not change while it is free: reading them here is safe.
  // 1. A slot whose cache holds more than half of the prompt (llama-server's
  //    slot_prompt_similarity, 0.5): the longest such prefix, least recently used on ties.
  int64_t best_len = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (state_[i].busy) continue;
    const int64_t len = slots_[i]->common_prefix(prompt);
    if (2 * len <= int64_t(prompt.size())) continue;
    if (len > best_len || (len == best_len && last_used_[i] < last_used_[size_t(best)])) {
      best = int(i);
      best_len = len;
    }
  }
  if (best >= 0) return best;
  // 2. Else the slot holding the fewest cached tokens, least recently used on ties: the
  //    cheapest to overwrite, so a short unrelated prompt does not evict a long document
  //    (sharing only the BOS token with it) that its next turn would reuse.
  int64_t fewest = -1;
  for (size_t i = 0; i < slots_.size(); ++i) {
    if (state_[i].busy) continue;
    const int64_t n = slots_[i]->cached_tokens();
    if (best < 0 || n < fewest || (n == fewest && last_used_[i] < last_used_[size_t(best)])) {
      best = int(i);
      fewest = n;
    }
  }
  return best;
}

SlotPool::Lease SlotPool::take(int id) {
  state_[size_t(id)].busy = true;
  last_used_[size_t(id)] = ++clock_;
  return Lease(this, id);
}

SlotPool::Lease SlotPool::acquire(const std::vector<int32_t>& prompt) {
  std::unique_lock<std::mutex> l(mu_);
  int best = -1;
  free_.wait(l, [&] { return (best = pick(prompt)) >= 0; });
  return take(best);
}

std::optional<SlotPool::Lease> SlotPool::acquire(const std::vector<int32_t>& prompt,
                                                 const std::function<bool()>& gone) {
  std::unique_lock<std::mutex> l(mu_);
  int best = -1;
  // A client leaves without a notify: look every 50 ms.
  while (
      !free_.wait_for(l, std::chrono::milliseconds(50), [&] { return (best = pick(prompt)) >= 0; }))
    if (gone && gone()) return std::nullopt;
  return take(best);
}

void SlotPool::Lease::release(const SlotResult* r) {
  if (!pool_) return;
  SlotPool& p = *pool_;
  pool_ = nullptr;
  {
    std::lock_guard<std::mutex> l(p.mu_);
    SlotState& s = p.state_[size_t(id_)];
    // This thread still holds the slot: its session is safe to read.
    s.kv_tokens = p.slots_[size_t(id_)]->kv_tokens();
    s.attn = p.slots_[size_t(id_)]->attn();
    if (r) {
      s.cached_tokens = r->usage.cached_tokens;
      ++s.requests;
    }
    s.busy = false;
  }
  p.free_.notify_all();
}

std::vector<SlotState> SlotPool::states() const {
  std::lock_guard<std::mutex> l(mu_);
  return state_;
}

}  // namespace spattn::serve

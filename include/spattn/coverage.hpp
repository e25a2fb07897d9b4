// Which score entries a method computed, row by row: the input of attention recall.
#pragma once
#include <cstdint>
#include <vector>

namespace spattn {

struct KeyRange {
  int64_t begin = 0, end = 0;  // keys [begin, end)
  friend bool operator==(const KeyRange&, const KeyRange&) = default;
};

class Coverage {
 public:
  virtual ~Coverage() = default;
  // Appends the sorted, disjoint key ranges computed for row `row` of q head `head`.
  virtual void row_ranges(int64_t head, int64_t row, std::vector<KeyRange>& out) const = 0;
};

// Every key the row may see (all causal keys, or all keys when not causal).
class FullCoverage final : public Coverage {
 public:
  FullCoverage(int64_t q_len, int64_t kv_len, bool causal)
      : q_len_(q_len), kv_len_(kv_len), causal_(causal) {}
  void row_ranges(int64_t, int64_t row, std::vector<KeyRange>& out) const override {
    out.push_back({0, causal_ ? kv_len_ - q_len_ + row + 1 : kv_len_});
  }

 private:
  int64_t q_len_, kv_len_;
  bool causal_;
};

}  // namespace spattn

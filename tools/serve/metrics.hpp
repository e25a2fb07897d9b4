// `spattn serve --metrics`: GET /metrics in Prometheus's text format, llama-server's counters
// and gauges under the prefix `spattn:` (prompt tokens and seconds, predicted tokens and
// seconds, requests processing and deferred, KV cache tokens) plus what a sparse-prefill server
// is watched for: time to first token and decode rate as histograms, requests by prefill
// attention (the method's name), prompt tokens taken from the cache, and errors by HTTP status.
#pragma once
#include <array>
#include <cstdint>
#include <map>
#include <mutex>
#include <string>

#include <vector>

#include "openai.hpp"
#include "slot_pool.hpp"

namespace spattn::serve {

class Metrics {
 public:
  // A generation that finished (stopped or hit its length; not cancelled).
  void record(const Usage& u);
  void error(int status);
  // The label a generation is counted under: its attention method's name.
  static std::string attn_label(const std::string& spec);
  // The text for GET /metrics; the gauges are the server's at this moment, the KV cache's
  // summed over the slots (n_ctx each) and given per slot.
  std::string render(int64_t processing, int64_t deferred, int64_t n_ctx,
                     const std::vector<SlotState>& slots) const;

  // Upper bounds of the histograms' buckets (+Inf is implied).
  static constexpr std::array<double, 12> kTtftSeconds = {0.05, 0.1, 0.25, 0.5, 1,   2.5,
                                                          5,    10,  30,   60,  120, 300};
  static constexpr std::array<double, 12> kDecodeTokPerS = {1,   2,   5,   10,   20,   50,
                                                            100, 200, 500, 1000, 2000, 5000};

 private:
  struct Histogram {
    std::array<int64_t, 13> counts{};  // per bucket, the last one +Inf (not cumulative)
    double sum = 0;
    int64_t n = 0;
  };
  template <size_t N>
  static void observe(Histogram& h, const std::array<double, N>& bounds, double v);

  mutable std::mutex mu_;
  int64_t prompt_tokens_ = 0, cached_tokens_ = 0, predicted_tokens_ = 0;
  double prompt_s_ = 0, predicted_s_ = 0;
  Histogram ttft_, decode_rate_;
  std::map<std::string, int64_t> by_attn_;
  std::map<int, int64_t> errors_;
};

}  // namespace spattn::serve

// The one place a method chooses between the decode and the prefill kernels. Methods with both
// (dense, blasst) call it, so they switch at the same query count and their reports say which
// ran; block-sparse methods have prefill kernels only and report prefill.
#pragma once
#include <cstdint>

#include "spattn/decode.hpp"
#include "spattn/report.hpp"

namespace spattn {

// Runs decode() when q_len fits the decode kernel, else prefill(), and returns which ran. At
// that few queries reading K and V is the whole cost: the decode kernel reads them in place
// and splits keys over threads, where the prefill loop would pack them first and find one
// query tile per head to spread over threads.
template <class Decode, class Prefill>
KernelPath run_decode_or_prefill(int64_t q_len, Decode&& decode, Prefill&& prefill) {
  if (q_len <= kMaxDecodeQueries) {
    decode();
    return KernelPath::decode;
  }
  prefill();
  return KernelPath::prefill;
}

}  // namespace spattn

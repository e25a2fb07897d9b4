// Picking the next token from logits, for `spattn run` and `spattn serve`: greedy at
// temperature 0, else a draw from softmax(logits / T), optionally limited to the top_k most
// likely tokens and then to the smallest set of them whose probability reaches top_p
// (llama.cpp's top-k then top-p order).
#pragma once
#include <cstdint>
#include <random>
#include <vector>

namespace spattn::cli {

struct SamplingParams {
  double temperature = 0.0;  // 0: greedy
  int64_t top_k = 0;         // 0: every token
  double top_p = 1.0;        // 1: no nucleus cut
  double min_p = 0.0;        // 0: none; else keep tokens at least min_p times the top one's
                             // probability before temperature, as llama.cpp's min_p
  uint64_t seed = 42;
  // Throws Error naming the parameter when one is out of range (a negative or non-finite
  // temperature, top_p outside (0, 1], min_p outside [0, 1], a negative top_k).
  void validate() const;
};

class Sampler {
 public:
  explicit Sampler(const SamplingParams& p);
  // The next token. With top_k 0 and top_p 1 the draw walks the tokens in id order, as
  // `spattn run --temp T --seed S` always has.
  int32_t sample(const std::vector<float>& logits);
  void reseed(uint64_t seed) { rng_.seed(seed); }

 private:
  SamplingParams p_;
  std::mt19937_64 rng_;
};

}  // namespace spattn::cli

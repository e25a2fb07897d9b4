// What RULER's task generators share (include/spattn/ruler.hpp says which recipe): the seeded
// draws (numbers, UUIDs, adjective-noun keys, sampling without replacement, shuffles), RULER's 40
// needle depths, one-pass template filling, and the fit of a sample's haystack by bisection on
// its token count.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "eval/prng.hpp"
#include "spattn/ruler.hpp"

namespace spattn::eval {

// The word lists (ruler_words.cpp).
const std::vector<std::string>& ruler_adjectives();
const std::vector<std::string>& ruler_nouns();
const std::vector<std::string>& ruler_verbs();

// RULER's needle depths: 0..100 percent in 40 evenly spaced steps, rounded to integers.
const std::vector<int>& ruler_depths();

// A random integer of `digits` decimal digits (no leading zero), as RULER's needle values.
std::string random_number(Rng& rng, int digits = 7);
// A version-4 UUID from 128 random bits (RFC 4122's variant and version bits set).
std::string random_uuid(Rng& rng);
// An "adjective-noun" key.
std::string random_word_key(Rng& rng);
// `k` random uppercase (or lowercase) letters.
std::string random_letters(Rng& rng, int k, bool upper);
// A made-up pronounceable word (consonant-vowel syllables), for lists longer than the word lists.
std::string pseudo_word(Rng& rng);
// `k` distinct indices of [0, n) in random order (k <= n).
std::vector<int64_t> sample_indices(Rng& rng, int64_t n, int64_t k);
template <class T>
void shuffle(Rng& rng, std::vector<T>& v) {
  for (size_t i = v.size(); i > 1; --i)
    std::swap(v[i - 1], v[size_t(rng.range(0, int64_t(i) - 1))]);
}

// `depth` given (>= 0): k copies of it; else k distinct depths drawn from ruler_depths(). Sorted.
std::vector<double> draw_depths(Rng& rng, int64_t k, double depth);
// Where a needle at `depth` percent goes among n units: before unit floor(n * depth / 100).
int64_t depth_index(int64_t n, double depth);

// Haystack units standing in for removed needles in the prompt without them, so that prompt
// keeps the length in bytes (and so about the tokens) of the one with them: units are taken in
// turn (unit(first), unit(first + 1), ...) while the removed bytes are more than half a unit
// ahead of the bytes put in.
class Filler {
 public:
  Filler(std::function<std::string(int64_t)> unit, int64_t first)
      : unit_(std::move(unit)), next_(first) {}
  std::vector<std::string> replace(size_t removed_bytes);

 private:
  std::function<std::string(int64_t)> unit_;
  int64_t next_;
  int64_t debt_ = 0;  // bytes removed minus bytes put in
};

// Lines joined by '\n', the prompt with needles and the one without them side by side.
struct TwoTexts {
  std::string with, without;
  bool first_with = true, first_without = true;
  // Returns the line's offset in `with`.
  size_t line_with(const std::string& s) {
    if (!first_with) with += '\n';
    first_with = false;
    const size_t at = with.size();
    with += s;
    return at;
  }
  void line_without(const std::string& s) {
    if (!first_without) without += '\n';
    first_without = false;
    without += s;
  }
};

// Fills {name} placeholders in one pass over the template, so braces inside the filled text (a
// code haystack) are left alone. Every placeholder must be given.
std::string fill_template(std::string_view tmpl,
                          const std::vector<std::pair<std::string, std::string>>& values);
// Every occurrence of `from` replaced by `to` (Python's str.replace).
std::string replace_all(std::string s, std::string_view from, std::string_view to);

// One sample's texts for a haystack of n units.
struct BuiltText {
  std::string prompt, without;
  std::vector<double> depths;          // actual depth of each needle, percent of the units
  std::vector<size_t> needle_offsets;  // byte offsets in prompt
};

// The largest n in [lo, ...) whose texts both fit `budget` tokens, found by bisection (RULER's
// search): the upper end from the tokens per unit at n = lo, three times the estimate as RULER
// allows. Throws Error when even n = lo does not fit. Returns n and its texts with their counts.
struct Fitted {
  int64_t n = 0;
  BuiltText text;
  int64_t prompt_tokens = 0, without_tokens = 0;
};
Fitted fit_haystack(const std::string& task, int64_t length, int64_t budget, int64_t lo,
                    const std::function<BuiltText(int64_t)>& build, const TokenCounter& count);

// The per-family generators: answers, reference and the fitted texts.
RulerSample make_niah(const RulerTaskInfo& t, const RulerOptions& o, const TokenCounter& count,
                      Rng& rng);
RulerSample make_variable_tracking(const RulerTaskInfo& t, const RulerOptions& o,
                                   const TokenCounter& count, Rng& rng);
RulerSample make_common_words(const RulerTaskInfo& t, const RulerOptions& o,
                              const TokenCounter& count, Rng& rng);
RulerSample make_freq_words(const RulerTaskInfo& t, const RulerOptions& o,
                            const TokenCounter& count, Rng& rng);

// Fills a sample from a fit.
RulerSample sample_from_fit(const RulerTaskInfo& t, Fitted&& f, std::vector<std::string> answers,
                            std::string reference);

}  // namespace spattn::eval

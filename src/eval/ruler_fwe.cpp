// RULER's frequent-words extraction (scripts/data/synthetic/freq_words_extraction.py and
// synthetic.yaml's "fwe": alpha 2): a text of made-up six-letter words whose counts follow a
// Zipf law, word k appearing floor(N k^-alpha / zeta(alpha)) times, the most frequent one
// replaced by the noise "..."; the question asks for the three most frequent coded words (ranks
// 2 to 4). The vocabulary has (length - tokens to generate) / 50 words, as RULER's. RULER grows
// N in steps until the text no longer fits; this bisects on N like the other tasks.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <vector>

#include "eval/ruler_common.hpp"
#include "spattn/error.hpp"

namespace spattn::eval {
namespace {

constexpr const char* kTemplate =
    "Read the following coded text and track the frequency of each coded word. Find the three "
    "most frequently appeared coded words. {context}\nQuestion: Do not provide any explanation. "
    "Please ignore the dots '....'. What are the three most frequently appeared words in the "
    "above coded text? Answer: According to the coded text above, the three most frequently "
    "appeared words are:";
constexpr double kAlpha = 2.0;
constexpr double kZeta2 = 1.6449340668482264;  // zeta(2) = pi^2 / 6
constexpr int kWordLength = 6;

}  // namespace

RulerSample make_freq_words(const RulerTaskInfo& t, const RulerOptions& o,
                            const TokenCounter& count, Rng& rng) {
  const int64_t vocab_size = (o.length - t.tokens_to_generate) / 50;
  SPATTN_CHECK(vocab_size >= 5, t.name, ": length ", o.length, " is too short (its vocabulary of ",
               "(length - ", t.tokens_to_generate, ") / 50 words needs at least 5)");
  std::set<std::string> seen;
  std::vector<std::string> vocab;
  while (int64_t(vocab.size()) < vocab_size + 3) {  // three more: the replacements
    std::string w = random_letters(rng, kWordLength, false);
    if (seen.insert(w).second) vocab.push_back(w);
  }
  const std::vector<std::string> fresh(vocab.end() - 3, vocab.end());
  vocab.resize(size_t(vocab_size));
  std::sort(vocab.begin(), vocab.end());
  shuffle(rng, vocab);
  vocab[0] = "...";  // the top rank is noise
  const uint64_t order_seed = rng.next();

  auto build = [&](int64_t n) {
    std::vector<size_t> order;
    for (int64_t k = 1; k <= vocab_size; ++k) {
      const auto c = int64_t(double(n) * std::pow(double(k), -kAlpha) / kZeta2);
      for (int64_t r = 0; r < c; ++r) order.push_back(size_t(k - 1));
    }
    Rng r(order_seed);
    shuffle(r, order);
    std::string with, without;
    for (size_t i = 0; i < order.size(); ++i) {
      const size_t w = order[i];
      if (i) with += ' ', without += ' ';
      with += vocab[w];
      // Without the signal: the three answers swapped for three words not in the text.
      without += (w >= 1 && w <= 3) ? fresh[w - 1] : vocab[w];
    }
    BuiltText b;
    b.prompt = fill_template(kTemplate, {{"context", with}});
    b.without = fill_template(kTemplate, {{"context", without}});
    return b;
  };
  // Below N = 30 the third answer would not appear at all.
  Fitted f = fit_haystack(t.name, o.length, o.length - t.tokens_to_generate, 30, build, count);
  const std::vector<std::string> answers(vocab.begin() + 1, vocab.begin() + 4);
  return sample_from_fit(t, std::move(f), answers,
                         " " + answers[0] + " " + answers[1] + " " + answers[2]);
}

}  // namespace spattn::eval

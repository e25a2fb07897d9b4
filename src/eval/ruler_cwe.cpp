// RULER's common-words extraction (scripts/data/synthetic/common_words_extraction.py and
// synthetic.yaml's "cwe": freq_cw 30, freq_ucw 3, num_cw 10): a numbered list in which ten
// words appear 30 times each and every other word 3 times, shuffled; the question asks for the
// ten most common. One answered example list (40 words: ten 10 times, the rest 3 times) comes
// first. Below 4096 tokens RULER uses smaller counts (6 and 1; the example 3 and 1 over 20
// words), and so does this. The fit is over the number of distinct words.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "eval/ruler_common.hpp"
#include "spattn/error.hpp"

namespace spattn::eval {
namespace {

constexpr const char* kTemplate =
    "Below is a numbered list of words. In these words, some appear more often than others. "
    "Memorize the ones that appear most often.\n{context}\nQuestion: What are the 10 most common "
    "words in the above list? Answer: The top 10 words that appear most often in the list are:";
constexpr int64_t kCommon = 10;

std::string numbered(const std::vector<std::string>& words) {
  std::string s;
  for (size_t i = 0; i < words.size(); ++i)
    s += (i ? " " : "") + std::to_string(i + 1) + ". " + words[i];
  return s;
}

// `words[0..common)` repeated `common_reps` times and the rest `other_reps` times, in the order
// a shuffle seeded with `order_seed` gives (positions into `words`).
std::vector<size_t> repeated_order(size_t n_words, int64_t common_reps, int64_t other_reps,
                                   uint64_t order_seed) {
  std::vector<size_t> order;
  for (size_t w = 0; w < n_words; ++w)
    for (int64_t r = 0; r < (int64_t(w) < kCommon ? common_reps : other_reps); ++r)
      order.push_back(w);
  Rng rng(order_seed);
  shuffle(rng, order);
  return order;
}

}  // namespace

RulerSample make_common_words(const RulerTaskInfo& t, const RulerOptions& o,
                              const TokenCounter& count, Rng& rng) {
  std::vector<std::string> pool;
  {
    std::set<std::string> all;
    for (const auto* list : {&ruler_nouns(), &ruler_adjectives(), &ruler_verbs()})
      all.insert(list->begin(), list->end());
    pool.assign(all.begin(), all.end());
  }
  shuffle(rng, pool);
  const bool short_form = o.length < 4096;
  const int64_t common_reps = short_form ? 6 : 30, other_reps = short_form ? 1 : 3;

  // pool[0..10) are the common words, pool[10..20) what replaces them in the prompt without
  // them, pool[20..) the other words. The answered example draws from the word lists too (RULER
  // draws it independently), but never the twenty above: no answer and no replacement appears
  // in it.
  std::vector<std::string> ex_words(pool.begin() + 2 * kCommon, pool.end());
  shuffle(rng, ex_words);
  ex_words.resize(short_form ? 20 : 40);
  const std::vector<size_t> ex_order =
      repeated_order(ex_words.size(), short_form ? 3 : 10, short_form ? 1 : 3, rng.next());
  std::vector<std::string> ex_list;
  for (size_t i : ex_order) ex_list.push_back(ex_words[i]);
  const std::vector<std::string> ex_answer(ex_words.begin(), ex_words.begin() + kCommon);
  const std::string example =
      fill_template(kTemplate, {{"context", numbered(ex_list)}}) + " " + numbered(ex_answer);

  // Beyond the word lists, made-up words (RULER turns to a larger English list there).
  const uint64_t extra_seed = rng.next(), order_seed = rng.next();
  std::set<std::string> used(pool.begin(), pool.end());
  Rng extra(extra_seed);
  auto words_up_to = [&](int64_t n) {
    while (int64_t(pool.size()) < n) {
      std::string w = pseudo_word(extra);
      if (used.insert(w).second) pool.push_back(w);
    }
  };

  auto build = [&](int64_t n) {
    words_up_to(n + kCommon);  // the task's n words and ten replacements for the common ones
    const std::vector<size_t> order =
        repeated_order(size_t(n), common_reps, other_reps, order_seed);
    // Word w of the list: the common ones first, then the others from pool[20] on.
    auto word = [&](size_t w) { return int64_t(w) < kCommon ? w : w + size_t(kCommon); };
    std::vector<std::string> with, without;
    for (size_t i : order) {
      with.push_back(pool[word(i)]);
      // Without the signal: the ten common words swapped for ten words that are not in the list.
      without.push_back(int64_t(i) < kCommon ? pool[i + size_t(kCommon)] : pool[word(i)]);
    }
    BuiltText b;
    b.prompt = example + "\n" + fill_template(kTemplate, {{"context", numbered(with)}});
    b.without = example + "\n" + fill_template(kTemplate, {{"context", numbered(without)}});
    return b;
  };
  Fitted f = fit_haystack(t.name, o.length, o.length - t.tokens_to_generate, kCommon, build, count);
  const std::vector<std::string> answers(pool.begin(), pool.begin() + kCommon);
  return sample_from_fit(t, std::move(f), answers, " " + numbered(answers));
}

}  // namespace spattn::eval

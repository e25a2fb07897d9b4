// RULER's variable tracking (scripts/data/synthetic/variable_tracking.py and synthetic.yaml's
// "vt": one chain of four hops over the noise haystack): "VAR A = 12345", then "VAR B = VAR A "
// and so on, the links placed in order at depths among noise lines; the question asks for every
// variable holding the value. As RULER, one worked example comes first: a short chain of
// three-letter names in its own noise, fitted to 500 tokens, followed by its answer.
#include <algorithm>
#include <string>
#include <vector>

#include "eval/ruler_common.hpp"
#include "spattn/error.hpp"

namespace spattn::eval {
namespace {

constexpr const char* kNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";
// constants.py's variable_tracking template and answer prefix, joined (base template).
constexpr const char* kHead =
    "Memorize and track the chain(s) of variable assignment hidden in the following text.\n\n";
constexpr const char* kTail =
    "\nQuestion: Find all variables that are assigned the value {query} in the text above. "
    "Answer: According to the chain(s) of variable assignment in the text above, {num_v} "
    "variables are assigned the value {query}, they are: ";
constexpr int kHops = 4;
constexpr int64_t kExampleTokens = 500;  // RULER fits its worked example to 500 tokens

struct Chain {
  std::vector<std::string> vars;  // kHops + 1 names, the first holding the value
  std::string value;
  std::vector<std::string> links;
  std::vector<double> depths;
};

Chain draw_chain(Rng& rng, int letters, double depth) {
  Chain c;
  while (int(c.vars.size()) < kHops + 1) {
    std::string v = random_letters(rng, letters, true);
    if (std::find(c.vars.begin(), c.vars.end(), v) == c.vars.end()) c.vars.push_back(v);
  }
  c.value = std::to_string(rng.range(10000, 99998));  // numpy's randint(10000, 99999)
  c.links.push_back("VAR " + c.vars[0] + " = " + c.value);
  for (int j = 0; j < kHops; ++j)
    c.links.push_back("VAR " + c.vars[size_t(j) + 1] + " = VAR " + c.vars[size_t(j)] + " ");
  c.depths = draw_depths(rng, kHops + 1, depth);
  return c;
}

// The question over n noise lines with the chain's links at their depths (without them: noise
// lines of about their length in their place), after `before` (the worked example); the
// links' offsets and depths.
BuiltText chain_text(const Chain& c, int64_t n, const std::string& before) {
  BuiltText b;
  const std::vector<std::pair<std::string, std::string>> fill = {
      {"query", c.value}, {"num_v", std::to_string(kHops + 1)}};
  const std::string head = before + kHead;
  TwoTexts t2;
  Filler filler([](int64_t) { return std::string(kNoise); }, n);
  size_t j = 0;
  for (int64_t i = 0; i <= n; ++i) {
    for (; j < c.links.size() && depth_index(n, c.depths[j]) == i; ++j) {
      b.depths.push_back(100.0 * double(i) / double(n));
      b.needle_offsets.push_back(head.size() + t2.line_with(c.links[j]));
      for (const auto& u : filler.replace(c.links[j].size() + 1)) t2.line_without(u);
    }
    if (i < n) {
      t2.line_with(kNoise);
      t2.line_without(kNoise);
    }
  }
  const std::string tail = fill_template(kTail, fill);
  // (RULER's clean-up of ". \n" in the context changes nothing here: no noise line or link
  // has a full stop before a space at its end.)
  b.prompt = head + t2.with + tail;
  b.without = head + t2.without + tail;
  return b;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

}  // namespace

RulerSample make_variable_tracking(const RulerTaskInfo& t, const RulerOptions& o,
                                   const TokenCounter& count, Rng& rng) {
  // The worked example: its own chain of three-letter names, answered.
  // A tokenizer that spends more than 500 tokens on its smallest form gets that form.
  const Chain ex = draw_chain(rng, 3, -1);
  auto example_text = [&](int64_t n) { return chain_text(ex, n, ""); };
  const int64_t example_budget = std::max(kExampleTokens, count(example_text(1).prompt));
  Fitted fe = fit_haystack(t.name + " (worked example)", example_budget, example_budget, 1,
                           example_text, count);
  const std::string example = fe.text.prompt + " " + join(ex.vars, " ") + "\n" + "\n";

  const Chain c = draw_chain(rng, 5, o.depth);
  Fitted f = fit_haystack(
      t.name, o.length, o.length - t.tokens_to_generate, 1,
      [&](int64_t n) { return chain_text(c, n, example); }, count);
  return sample_from_fit(t, std::move(f), c.vars, join(c.vars, " "));
}

}  // namespace spattn::eval

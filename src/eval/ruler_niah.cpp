// RULER's needle-in-a-haystack tasks (scripts/data/synthetic/niah.py and synthetic.yaml at the
// commit ruler.hpp names): needles "One of the special magic {values} for {key} is: {value}."
// placed at depths in a haystack of noise sentences, code lines (RULER's essay) or other
// needles, and a question about one or more keys. The variants differ in how many keys, values
// per key and queried keys there are and in the kinds of key and value.
#include <algorithm>
#include <string>
#include <vector>

#include "eval/ruler_common.hpp"
#include "spattn/error.hpp"

namespace spattn::eval {
namespace {

struct NiahConfig {
  const char* name;
  const char* type_k;  // words | uuids
  const char* type_v;  // numbers | uuids
  int num_k, num_v, num_q;
};
// synthetic.yaml's settings (the haystack is in the task table, ruler_tasks.cpp).
constexpr NiahConfig kConfigs[] = {
    {"niah_single_1", "words", "numbers", 1, 1, 1},
    {"niah_single_2", "words", "numbers", 1, 1, 1},
    {"niah_single_3", "words", "uuids", 1, 1, 1},
    {"niah_multikey_1", "words", "numbers", 4, 1, 1},
    {"niah_multikey_2", "words", "numbers", 1, 1, 1},
    {"niah_multikey_3", "uuids", "uuids", 1, 1, 1},
    {"niah_multivalue", "words", "numbers", 1, 4, 1},
    {"niah_multiquery", "words", "numbers", 1, 1, 4},
};

// RULER's noise haystack unit, one per line.
constexpr const char* kNoise =
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again.";

// constants.py's niah template and answer prefix, as prepare.py joins them (base template).
constexpr const char* kHead =
    "Some special magic {type_needle_v} are hidden within the following text. Make sure to "
    "memorize it. I will quiz you about the {type_needle_v} afterwards.\n";
constexpr const char* kTail =
    "\nWhat are all the special magic {type_needle_v} for {query} mentioned in the provided "
    "text? The special magic {type_needle_v} for {query} mentioned in the provided text are";

std::string draw(Rng& rng, const std::string& type) {
  if (type == "numbers") return random_number(rng);
  if (type == "uuids") return random_uuid(rng);
  return random_word_key(rng);
}

std::string needle_text(const std::string& type_v, const std::string& key,
                        const std::string& value) {
  return "One of the special magic " + type_v + " for " + key + " is: " + value + ".";
}

// With one answer, RULER rewrites the template in the singular (its str.replace chain).
std::string singular(std::string t) {
  t = replace_all(std::move(t), "Some", "A");
  t = replace_all(std::move(t), "are all", "is");
  t = replace_all(std::move(t), "are", "is");
  return replace_all(std::move(t), "answers", "answer");
}

std::vector<std::string> split_lines(std::string_view text) {
  std::vector<std::string> lines;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find('\n', start);
    if (end == std::string_view::npos) end = text.size();
    lines.emplace_back(text.substr(start, end - start));
    start = end + 1;
  }
  return lines;
}

}  // namespace

RulerSample make_niah(const RulerTaskInfo& t, const RulerOptions& o, const TokenCounter& count,
                      Rng& rng) {
  const NiahConfig* cfg = nullptr;
  for (const auto& c : kConfigs)
    if (t.name == c.name) cfg = &c;
  SPATTN_CHECK(cfg, "no needle settings for task '", t.name, "'");
  const std::string type_k = cfg->type_k, type_v = cfg->type_v;
  const int num_q = cfg->num_q, num_k = std::max(cfg->num_k, cfg->num_q), num_v = cfg->num_v;

  // The draws, fixed before the fit so every haystack size holds the same needles.
  std::vector<std::string> keys;
  std::vector<std::vector<std::string>> values;
  std::vector<std::string> needles;
  for (int k = 0; k < num_k; ++k) {
    std::string key;
    do key = draw(rng, type_k);
    while (std::find(keys.begin(), keys.end(), key) != keys.end());
    keys.push_back(key);
    values.emplace_back();
    for (int v = 0; v < num_v; ++v) {
      values.back().push_back(draw(rng, type_v));
      needles.push_back(needle_text(type_v, key, values.back().back()));
    }
  }
  shuffle(rng, needles);
  const std::vector<double> depths = draw_depths(rng, int64_t(needles.size()), o.depth);
  std::vector<std::string> queries, answers;
  for (int64_t i : sample_indices(rng, num_k, num_q)) {
    queries.push_back(keys[size_t(i)]);
    for (const auto& v : values[size_t(i)]) answers.push_back(v);
  }
  std::string query = queries.back();
  if (queries.size() > 1) {
    query.clear();
    for (size_t i = 0; i + 1 < queries.size(); ++i) query += queries[i] + ", ";
    query += "and " + queries.back();
  }

  std::vector<std::string> code;
  if (t.haystack == "code") {
    code = split_lines(o.code_haystack);
    SPATTN_CHECK(!code.empty(), t.name, ": the code haystack is empty (give a text file)");
  }
  const int64_t code_start = code.empty() ? 0 : rng.range(0, int64_t(code.size()) - 1);
  const uint64_t distractor_seed = rng.next();
  // Unit i of the haystack; the prompt without needles takes units from n on in their place.
  auto unit = [&](int64_t i) -> std::string {
    if (t.haystack == "noise") return kNoise;
    if (t.haystack == "code") return code[size_t((code_start + i) % int64_t(code.size()))];
    Rng r(stream_seed(distractor_seed, uint64_t(i)));  // a needle haystack: other keys' needles
    std::string key;
    do key = draw(r, type_k);
    while (std::find(keys.begin(), keys.end(), key) != keys.end());
    return needle_text(type_v, key, draw(r, type_v));
  };

  const bool one = num_q * num_v == 1;
  const std::string tv = one ? type_v.substr(0, type_v.size() - 1) : type_v;
  const std::vector<std::pair<std::string, std::string>> fill = {{"type_needle_v", tv},
                                                                 {"query", query}};
  const std::string head = fill_template(one ? singular(kHead) : kHead, fill);
  const std::string tail = fill_template(one ? singular(kTail) : kTail, fill);

  auto build = [&](int64_t n) {
    BuiltText b;
    TwoTexts t2;
    Filler filler(unit, n);  // the prompt without needles continues the haystack in their place
    size_t j = 0;
    for (int64_t i = 0; i <= n; ++i) {
      for (; j < needles.size() && depth_index(n, depths[j]) == i; ++j) {
        b.depths.push_back(100.0 * double(i) / double(n));
        b.needle_offsets.push_back(head.size() + t2.line_with(needles[j]));
        for (const auto& u : filler.replace(needles[j].size() + 1)) t2.line_without(u);
      }
      if (i < n) {
        const std::string u = unit(i);
        t2.line_with(u);
        t2.line_without(u);
      }
    }
    b.prompt = head + t2.with + tail;
    b.without = head + t2.without + tail;
    return b;
  };
  Fitted f = fit_haystack(t.name, o.length, o.length - t.tokens_to_generate, 1, build, count);
  std::string reference = " ";
  for (size_t i = 0; i < answers.size(); ++i) reference += (i ? ", " : "") + answers[i];
  reference += ".";
  return sample_from_fit(t, std::move(f), answers, reference);
}

}  // namespace spattn::eval

// RULER's task table (synthetic.yaml and the families' constants.py entries at the commit
// ruler.hpp names), the sample's seeded stream, and the metrics (scripts/eval/synthetic/
// constants.py and evaluate.py's postprocess_pred).
#include <cctype>

#include "eval/ruler_common.hpp"
#include "spattn/error.hpp"
#include "spattn/ruler.hpp"

namespace spattn {

const std::vector<RulerTaskInfo>& ruler_tasks() {
  using M = RulerMetric;
  // tokens_to_generate per family: niah 128, variable_tracking 30, common_words 120,
  // freq_words 50. Every synthetic task is scored with string_match_all.
  static const std::vector<RulerTaskInfo> tasks = {
      {"niah_single_1", "niah", "noise", 128, M::match_all},
      {"niah_single_2", "niah", "code", 128, M::match_all},
      {"niah_single_3", "niah", "code", 128, M::match_all},
      {"niah_multikey_1", "niah", "code", 128, M::match_all},
      {"niah_multikey_2", "niah", "needle", 128, M::match_all},
      {"niah_multikey_3", "niah", "needle", 128, M::match_all},
      {"niah_multivalue", "niah", "code", 128, M::match_all},
      {"niah_multiquery", "niah", "code", 128, M::match_all},
      {"vt", "variable_tracking", "noise", 30, M::match_all},
      {"cwe", "common_words_extraction", "words", 120, M::match_all},
      {"fwe", "freq_words_extraction", "words", 50, M::match_all},
  };
  return tasks;
}

const RulerTaskInfo& ruler_task(std::string_view name) {
  std::string known;
  for (const auto& t : ruler_tasks()) {
    if (t.name == name) return t;
    known += (known.empty() ? "" : ", ") + t.name;
  }
  detail::fail("unknown task '", name, "' (known: ", known,
               "; groups: niah_single, niah_multikey, niah, all)");
}

std::vector<std::string> expand_ruler_task(std::string_view name) {
  std::vector<std::string> out;
  const bool all = name == "all", niah = name == "niah";
  for (const auto& t : ruler_tasks()) {
    const bool group = (name == "niah_single" || name == "niah_multikey") &&
                       t.name.compare(0, name.size() + 1, std::string(name) + "_") == 0;
    if (all || (niah && t.family == "niah") || group) out.push_back(t.name);
  }
  if (out.empty()) out.push_back(ruler_task(name).name);
  return out;
}

namespace {
uint64_t fnv1a(std::string_view s) {
  uint64_t h = 0xcbf29ce484222325ull;
  for (char c : s) h = (h ^ uint8_t(c)) * 0x100000001b3ull;
  return h;
}
}  // namespace

RulerSample make_ruler_sample(const RulerTaskInfo& task, const RulerOptions& opt,
                              const TokenCounter& count) {
  SPATTN_CHECK(opt.length > task.tokens_to_generate, task.name, ": length ", opt.length,
               " must exceed the ", task.tokens_to_generate, " tokens the task generates");
  SPATTN_CHECK(opt.depth < 0 || opt.depth <= 100, "depth must be in [0, 100] percent, got ",
               opt.depth);
  SPATTN_CHECK(opt.index >= 0, "sample index must be >= 0, got ", opt.index);
  SPATTN_CHECK(task.haystack != "code" || !opt.code_haystack.empty(), task.name,
               " uses the code haystack: give its text (spattn eval --haystack FILE)");
  // One stream per (seed, task, length, sample): a sample does not depend on what else runs.
  uint64_t s = eval::stream_seed(opt.seed, fnv1a(task.name));
  s = eval::stream_seed(s, uint64_t(opt.length));
  eval::Rng rng(eval::stream_seed(s, uint64_t(opt.index)));
  if (task.family == "niah") return eval::make_niah(task, opt, count, rng);
  if (task.family == "variable_tracking")
    return eval::make_variable_tracking(task, opt, count, rng);
  if (task.family == "common_words_extraction")
    return eval::make_common_words(task, opt, count, rng);
  return eval::make_freq_words(task, opt, count, rng);
}

std::string ruler_postprocess(std::string_view prediction) {
  auto strip = [](std::string_view s) {
    // Python's str.strip(): ASCII whitespace and the control separators \x1c-\x1f.
    auto ws = [](unsigned char c) { return std::isspace(c) || (c >= 0x1c && c <= 0x1f); };
    while (!s.empty() && ws((unsigned char)s.front())) s.remove_prefix(1);
    while (!s.empty() && ws((unsigned char)s.back())) s.remove_suffix(1);
    return s;
  };
  std::string out(strip(prediction));
  for (char& c : out)
    if ((unsigned char)c <= 0x1f) c = '\n';
  return std::string(strip(out));
}

namespace {
std::string lower(std::string_view s) {
  std::string o(s);
  for (char& c : o) c = char(std::tolower((unsigned char)c));
  return o;
}
}  // namespace

double string_match_all(std::string_view prediction, const std::vector<std::string>& refs) {
  SPATTN_CHECK(!refs.empty(), "string_match_all: no references");
  const std::string p = lower(prediction);
  double found = 0;
  for (const auto& r : refs) found += p.find(lower(r)) != std::string::npos ? 1.0 : 0.0;
  return found / double(refs.size());
}

double string_match_part(std::string_view prediction, const std::vector<std::string>& refs) {
  SPATTN_CHECK(!refs.empty(), "string_match_part: no references");
  const std::string p = lower(prediction);
  for (const auto& r : refs)
    if (p.find(lower(r)) != std::string::npos) return 1.0;
  return 0.0;
}

double ruler_score(const RulerTaskInfo& task, std::string_view prediction,
                   const std::vector<std::string>& refs) {
  const std::string p = ruler_postprocess(prediction);
  return task.metric == RulerMetric::match_all ? string_match_all(p, refs)
                                               : string_match_part(p, refs);
}

}  // namespace spattn

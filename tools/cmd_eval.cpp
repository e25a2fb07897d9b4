// `spattn eval`: RULER's synthetic tasks (include/spattn/ruler.hpp: which recipe, pinned) on a
// GGUF model, for dense prefill and any sparse one. Per task, length and sample the prompt is
// generated for the model's own tokenizer; per prefill attention (--attn, repeatable, or all)
// the runner prefills it and decodes greedily (--attn-decode) up to the task's
// tokens_to_generate, and the answer is scored with RULER's metric. Small models mostly fail
// exact match, so each sample is also scored by the teacher-forced log-likelihood of the
// reference answer (prefill the prompt, then decode the reference's tokens, summing their log
// probabilities): with the needles in the context and without them (the same prompt with the
// needles replaced by haystack). The gap is what the model retrieved from the context; a sparse
// prefill that drops the needle closes it. Methods run interleaved per sample, the first one
// rotating, so none always meets a warm cache.
#include <fmt/format.h>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <span>
#include <sstream>
#include <tuple>
#include <utility>

#include "cli.hpp"
#include "runner.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"
#include "spattn/ruler.hpp"

namespace spattn::cli {
namespace {

struct EvalOptions {
  RunnerOptions r;
  std::vector<std::string> tasks;
  std::vector<int64_t> lengths = {4096};
  int64_t samples = 4;
  uint64_t seed = 42;
  std::vector<std::string> attn;  // prefill attentions; empty: dense
  double depth = -1;
  std::string haystack;  // --haystack FILE: the code haystack's text
  int64_t max_gen = 0;   // cap on generated tokens (0: the task's tokens_to_generate)
  std::string save;      // --save-samples FILE: one JSON line per sample and method
};

// One sample through one prefill attention.
struct SampleResult {
  std::string prediction;
  double score = 0;
  double ll_with = 0, ll_without = 0;  // mean log-likelihood per reference token (nats)
  // The first reference token's log-likelihood alone: it is predicted by the prompt's last row,
  // which the prefill attention computed, while the later ones are read through decode.
  double first_with = 0, first_without = 0;
  double prefill_ms = 0;
  int64_t generated = 0;
};

// Sums of SampleResult over a (task, length, method) cell.
struct Cell {
  double score = 0, ll_with = 0, ll_without = 0, first_with = 0, first_without = 0, prefill_ms = 0;
  double prompt_tokens = 0;
  int64_t n = 0;
  nlohmann::json per_sample = nlohmann::json::array();
};

double log_prob(const std::vector<float>& logits, int32_t token) {
  double mx = logits[0];
  for (float x : logits) mx = std::max(mx, double(x));
  double sum = 0;
  for (float x : logits) sum += std::exp(double(x) - mx);
  return double(logits[size_t(token)]) - mx - std::log(sum);
}

int32_t argmax(const std::vector<float>& logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

// Mean log-probability of `ref` after the state whose next-token logits are `first`, teacher
// forced through decode (the path a generated answer takes), and its first token's alone.
std::pair<double, double> teacher_forced(model::Session& s, const std::vector<float>& first,
                                         const std::vector<int32_t>& ref,
                                         std::vector<float>& logits) {
  const double first_lp = log_prob(first, ref[0]);
  double sum = first_lp;
  for (size_t j = 1; j < ref.size(); ++j) {
    s.decode(ref[j - 1], logits.data());
    sum += log_prob(logits, ref[j]);
  }
  return {sum / double(ref.size()), first_lp};
}

SampleResult run_sample(model::Session& s, const LoadedModel& lm, const RulerTaskInfo& task,
                        const RulerSample& sample, const std::vector<int32_t>& prompt,
                        const std::vector<int32_t>& without, const std::vector<int32_t>& ref,
                        int64_t max_gen) {
  const int64_t V = lm.model.config().n_vocab;
  std::vector<float> first(static_cast<size_t>(V)), logits(static_cast<size_t>(V));
  SampleResult r;
  s.reset();
  s.reset_timings();
  s.prefill(prompt, first.data(), int64_t(prompt.size()) - 1);
  r.prefill_ms = s.timings().prefill_ms;
  std::tie(r.ll_with, r.first_with) = teacher_forced(s, first, ref, logits);
  // Greedy generation from the same prefilled prompt.
  s.truncate(int64_t(prompt.size()));
  int32_t tok = argmax(first);
  while (!lm.tokenizer.is_eog(tok)) {
    r.prediction += lm.tokenizer.piece(tok, false);
    if (++r.generated >= max_gen) break;
    s.decode(tok, logits.data());
    tok = argmax(logits);
  }
  r.score = ruler_score(task, r.prediction, sample.answers);
  s.reset();
  s.prefill(without, first.data(), int64_t(without.size()) - 1);
  std::tie(r.ll_without, r.first_without) = teacher_forced(s, first, ref, logits);
  return r;
}

std::string read_file(const std::string& path, const char* what) {
  std::ifstream in(path, std::ios::binary);
  SPATTN_CHECK(in.good(), what, ": cannot read '", path, "'");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

void run(EvalOptions& o) {
  // Everything the command line says is checked before the model loads.
  std::vector<std::string> tasks;
  for (const auto& t : o.tasks)
    for (const auto& name : expand_ruler_task(t))
      if (std::find(tasks.begin(), tasks.end(), name) == tasks.end()) tasks.push_back(name);
  SPATTN_CHECK(!tasks.empty(), "--task: give at least one task");
  SPATTN_CHECK(!o.lengths.empty(), "--lengths: give at least one length");
  for (int64_t L : o.lengths)
    SPATTN_CHECK(L >= 64 && L <= (int64_t(1) << 24), "--lengths: each must be in [64, 2^24], got ",
                 L);
  SPATTN_CHECK(o.samples >= 1 && o.samples <= 100000, "--samples must be in [1, 100000], got ",
               o.samples);
  SPATTN_CHECK(o.max_gen >= 0, "--max-gen must be >= 0, got ", o.max_gen);
  SPATTN_CHECK(o.depth < 0 || (o.depth >= 0 && o.depth <= 100),
               "--depth must be in [0, 100] percent, got ", o.depth);
  const int64_t longest = *std::max_element(o.lengths.begin(), o.lengths.end());
  if (o.r.n_ctx == 0) o.r.n_ctx = longest;
  SPATTN_CHECK(o.r.n_ctx >= longest, "-c ", o.r.n_ctx, " is below the longest --lengths ", longest);
  std::vector<std::string> methods;
  for (const auto& a : o.attn.empty() ? std::vector<std::string>{"dense"} : o.attn) {
    if (a == "all") {
      for (const auto& m : method_catalog()) methods.push_back(m.default_spec);
    } else {
      methods.push_back(a);
    }
  }
  std::vector<model::SessionOptions> so;
  for (const auto& m : methods) so.push_back(session_options(o.r, m));
  std::string haystack;
  bool needs_code = false;
  for (const auto& t : tasks) needs_code |= ruler_task(t).haystack == "code";
  if (needs_code) {
    SPATTN_CHECK(!o.haystack.empty(),
                 "tasks with the code haystack (niah_single_2/3, "
                 "niah_multikey_1, niah_multivalue, niah_multiquery) need --haystack FILE");
    haystack = read_file(o.haystack, "--haystack");
    SPATTN_CHECK(!haystack.empty(), "--haystack: '", o.haystack, "' is empty");
  }
  std::ofstream save;
  if (!o.save.empty()) {
    save.open(o.save, std::ios::binary);
    SPATTN_CHECK(save.good(), "--save-samples: cannot write '", o.save, "'");
  }

  LoadedModel lm = load_model_and_tokenizer(o.r);
  const TokenCounter count = [&](std::string_view text) {
    return int64_t(lm.tokenizer.encode(text).size());
  };
  std::vector<std::unique_ptr<model::Session>> sessions;
  for (const auto& s : so) sessions.push_back(std::make_unique<model::Session>(lm.model, s));

  // (task, length, method) -> sums, in the order they are first met.
  std::vector<std::tuple<std::string, int64_t, size_t>> keys;
  std::map<std::tuple<std::string, int64_t, size_t>, Cell> cells;
  Progress progress("eval");
  int64_t done = 0;
  const int64_t total = int64_t(o.lengths.size() * tasks.size()) * o.samples;
  for (int64_t L : o.lengths) {
    for (const auto& name : tasks) {
      const RulerTaskInfo& task = ruler_task(name);
      const int64_t max_gen =
          o.max_gen > 0 ? std::min(o.max_gen, task.tokens_to_generate) : task.tokens_to_generate;
      for (int64_t i = 0; i < o.samples; ++i) {
        RulerOptions ro;
        ro.length = L;
        ro.seed = o.seed;
        ro.index = i;
        ro.depth = o.depth;
        ro.code_haystack = haystack;
        const RulerSample sample = make_ruler_sample(task, ro, count);
        const std::vector<int32_t> prompt = lm.tokenizer.encode(sample.prompt);
        const std::vector<int32_t> without = lm.tokenizer.encode(sample.prompt_without);
        const std::vector<int32_t> ref = lm.tokenizer.encode(sample.reference, false, false);
        SPATTN_CHECK(!ref.empty(), name, ": the reference answer has no tokens");
        SPATTN_CHECK(int64_t(std::max(prompt.size(), without.size()) +
                             std::max<size_t>(ref.size(), size_t(max_gen))) <= o.r.n_ctx,
                     name, ": the prompt and its answer exceed -c ", o.r.n_ctx);
        for (size_t k = 0; k < methods.size(); ++k) {
          const size_t m = (size_t(i) + k) % methods.size();
          const SampleResult r =
              run_sample(*sessions[m], lm, task, sample, prompt, without, ref, max_gen);
          const auto key = std::make_tuple(name, L, m);
          if (!cells.count(key)) keys.push_back(key);
          Cell& c = cells[key];
          c.score += r.score;
          c.ll_with += r.ll_with;
          c.ll_without += r.ll_without;
          c.first_with += r.first_with;
          c.first_without += r.first_without;
          c.prefill_ms += r.prefill_ms;
          c.prompt_tokens += double(prompt.size());
          ++c.n;
          nlohmann::json js = {{"index", i},
                               {"score", r.score},
                               {"prediction", r.prediction},
                               {"answers", sample.answers},
                               {"ll_with", r.ll_with},
                               {"ll_without", r.ll_without},
                               {"ll_first_with", r.first_with},
                               {"ll_first_without", r.first_without},
                               {"prompt_tokens", prompt.size()},
                               {"prompt_without_tokens", without.size()},
                               {"reference_tokens", ref.size()},
                               {"generated_tokens", r.generated},
                               {"depths", sample.depths},
                               {"prefill_ms", r.prefill_ms}};
          if (save.is_open()) {
            nlohmann::json line = js;
            line["task"] = name;
            line["length"] = L;
            line["method"] = methods[m];
            line["prompt"] = sample.prompt;
            line["prompt_without"] = sample.prompt_without;
            line["reference"] = sample.reference;
            save << line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) << "\n";
          }
          c.per_sample.push_back(std::move(js));
        }
        ++done;
        progress.update(fmt::format("{} at {}: sample {}/{} ({} of {} done)", name, L, i + 1,
                                    o.samples, done, total));
      }
    }
  }
  progress.done();

  nlohmann::json results = nlohmann::json::array();
  for (const auto& key : keys) {
    const Cell& c = cells[key];
    const double n = double(c.n);
    results.push_back({{"task", std::get<0>(key)},
                       {"length", std::get<1>(key)},
                       {"method", methods[std::get<2>(key)]},
                       {"samples", c.n},
                       {"score", 100.0 * c.score / n},
                       {"ll_with", c.ll_with / n},
                       {"ll_without", c.ll_without / n},
                       {"gap", (c.ll_with - c.ll_without) / n},
                       {"ll_first_with", c.first_with / n},
                       {"ll_first_without", c.first_without / n},
                       {"gap_first", (c.first_with - c.first_without) / n},
                       {"prompt_tokens", c.prompt_tokens / n},
                       {"prefill_ms", c.prefill_ms / n},
                       {"per_sample", c.per_sample}});
  }
  if (o.r.json) {
    nlohmann::json j;
    j["model"] = o.r.model;
    j["seed"] = o.seed;
    j["samples"] = o.samples;
    j["lengths"] = o.lengths;
    j["tasks"] = tasks;
    j["methods"] = methods;
    j["attn_decode"] = model::model_attention(o.r.attn_decode, lm.model.config());
    j["depth"] = o.depth;
    j["haystack"] = o.haystack;
    j["ruler_commit"] = "c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a";
    j["results"] = results;
    fmt::print("{}\n", j.dump(2, ' ', false, nlohmann::json::error_handler_t::replace));
    return;
  }
  fmt::print(
      "RULER synthetic tasks on {} (seed {}, {} samples each, --attn-decode {}); score: "
      "RULER's string_match_all in percent; log-likelihood: mean nats per reference "
      "token, with the needles and without them; gap = with - without; gap 1st: the same "
      "for the answer's first token alone (the one the prefill's last row predicts)\n",
      o.r.model, o.seed, o.samples, model::model_attention(o.r.attn_decode, lm.model.config()));
  size_t width = 6;
  for (const auto& m : methods) width = std::max(width, m.size());
  fmt::print("{:<16} {:>7} {:<{}} {:>7} {:>9} {:>9} {:>8} {:>8} {:>8}\n", "task", "length",
             "method", width, "score", "ll with", "ll w/o", "gap", "gap 1st", "tokens");
  for (const auto& r : results)
    fmt::print("{:<16} {:>7} {:<{}} {:>7.1f} {:>9.3f} {:>9.3f} {:>+8.3f} {:>+8.3f} {:>8.0f}\n",
               r["task"].get<std::string>(), r["length"].get<int64_t>(),
               r["method"].get<std::string>(), width, r["score"].get<double>(),
               r["ll_with"].get<double>(), r["ll_without"].get<double>(), r["gap"].get<double>(),
               r["gap_first"].get<double>(), r["prompt_tokens"].get<double>());
}

}  // namespace

void add_eval_command(CLI::App& root) {
  auto o = std::make_shared<EvalOptions>();
  o->r.n_ctx = 0;  // the longest --lengths
  CLI::App* app = root.add_subcommand(
      "eval",
      "RULER's synthetic tasks (needle in a haystack, variable tracking, common and "
      "frequent words) on a GGUF model: exact match and the likelihood gap, per prefill "
      "attention");
  add_runner_options(*app, o->r);
  app->add_option("--task", o->tasks,
                  "tasks, comma-separated, RULER's names: niah_single_1..3, niah_multikey_1..3, "
                  "niah_multivalue, niah_multiquery, vt, cwe, fwe; groups niah_single, "
                  "niah_multikey, niah; all")
      ->delimiter(',')
      ->required();
  app->add_option("--lengths", o->lengths,
                  "sequence lengths, comma-separated: prompt plus generated tokens (RULER's "
                  "max_seq_length)")
      ->delimiter(',')
      ->capture_default_str();
  app->add_option("--samples", o->samples, "samples per task and length")->capture_default_str();
  app->add_option("--seed", o->seed, "seed of the generated tasks")->capture_default_str();
  app->add_option("--attn", o->attn,
                  "prefill attention (repeat for several): dense, chunked_h2o, a method spec, or "
                  "all (dense and every method at its default); default dense")
      ->take_all();
  app->add_option("--depth", o->depth,
                  "put every needle (and chain link) at this depth, percent of the haystack "
                  "(default: RULER's draw from 40 depths)");
  app->add_option("--haystack", o->haystack,
                  "text file whose lines are the code haystack (RULER's essay haystack), e.g. "
                  "held-out source");
  app->add_option("--max-gen", o->max_gen,
                  "generate at most this many tokens (0: the task's tokens_to_generate)")
      ->capture_default_str();
  app->add_option("--save-samples", o->save,
                  "write every sample (prompts, prediction, scores) as JSON lines to FILE");
  app->callback([o] { run(*o); });
}

}  // namespace spattn::cli

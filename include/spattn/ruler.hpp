// RULER's synthetic tasks ("RULER: What's the Real Context Size of Your Long-Context Language
// Models?", Hsieh et al., 2024; Section 3, the task categories) generated for any model's
// tokenizer: needle-in-a-haystack (single, multi-key, multi-value, multi-query), variable
// tracking, common-words and frequent-words extraction, with RULER's metrics.
//
// The recipe follows NVIDIA/RULER at commit c3f5e3b4f87f97e048793bb510a3a6b19a46bf3a
// (scripts/synthetic.yaml for the task settings, scripts/data/synthetic/{niah,
// variable_tracking,common_words_extraction,freq_words_extraction,constants}.py for the texts
// and scripts/eval/synthetic/constants.py for string_match_all / string_match_part),
// re-expressed here. Where this differs from it (docs/eval.md):
//  - RULER's "essay" haystack (Paul Graham's essays) is not available: the tasks that use it
//    take lines of a held-out source file instead (the "code" haystack), one line per unit;
//  - every sample is fitted on its own: its haystack size is found by bisection on the token
//    count of that sample's own text (RULER bisects once on a random draw and backs off per
//    sample), and each sample draws from its own seeded stream (seed, task, length, index), so a
//    sample is the same whichever other tasks and lengths run beside it;
//  - needles go at depths drawn from RULER's 40 depths (0..100%) for every haystack (RULER draws
//    uniformly over noise sentences), or all at one requested depth;
//  - the word lists are spattn's own (RULER uses the wonderwords package's lists and, when a
//    common-words sample needs more words than they hold, a larger English list): adjectives,
//    nouns and verbs, then made-up pronounceable words beyond them.
// Each sample also carries the same prompt without its needles (replaced by haystack of the same
// kind, so the length stays within a few tokens), for the likelihood gap `spattn eval` reports.
#pragma once
#include <cstdint>
#include <functional>
#include <string>
#include <string_view>
#include <vector>

namespace spattn {

// The number of tokens a text becomes for the model, as it is prefilled (BOS included where the
// vocabulary adds one).
using TokenCounter = std::function<int64_t(std::string_view)>;

enum class RulerMetric { match_all, match_part };

struct RulerTaskInfo {
  std::string name;      // RULER's name in synthetic.yaml: niah_single_1, vt, cwe, ...
  std::string family;    // niah, variable_tracking, common_words_extraction, freq_words_extraction
  std::string haystack;  // noise, code (RULER's essay), needle, words
  int64_t tokens_to_generate;  // RULER's per family: kept free in the length budget
  RulerMetric metric;
};

// The tasks in synthetic.yaml's order (qa_1 and qa_2 left out: they need SQuAD and HotpotQA).
const std::vector<RulerTaskInfo>& ruler_tasks();
// A task by RULER's name; Error naming the known ones otherwise.
const RulerTaskInfo& ruler_task(std::string_view name);
// A comma-free list element to tasks: a RULER name, a group (niah_single, niah_multikey: their
// numbered variants; niah: every needle task) or "all"; Error on anything else.
std::vector<std::string> expand_ruler_task(std::string_view name);

struct RulerOptions {
  int64_t length = 4096;  // RULER's max_seq_length: prompt tokens + tokens_to_generate <= length
  uint64_t seed = 42;
  int64_t index = 0;  // the sample's number
  double depth = -1;  // needle and chain-link depth in percent [0, 100]; < 0: RULER's draw
  // The code haystack's text (its lines are the units): tasks whose haystack is "code" need it.
  std::string_view code_haystack;
};

struct RulerSample {
  std::string task;
  std::string prompt;          // RULER's input followed by its answer prefix (the base template)
  std::string prompt_without;  // the same prompt with the needles replaced by haystack
  std::vector<std::string> answers;  // the references the metric looks for
  std::string reference;  // the continuation scored by teacher forcing: the answers written
                          // as the prompt leads into them
  int64_t prompt_tokens = 0, prompt_without_tokens = 0;
  int64_t haystack = 0;  // haystack units the fit chose (sentences, lines, words)
  // Needle tasks and variable tracking: each needle's (each chain link's) depth in percent of
  // the haystack units and its byte offset in `prompt`.
  std::vector<double> depths;
  std::vector<size_t> needle_offsets;
};

// One sample: its draws from (seed, task, length, index), its haystack fitted by bisection on
// count(prompt) so that prompt tokens + tokens_to_generate <= length (and the prompt without
// needles fits too). Error when the length cannot hold the task's smallest prompt, when a code
// task has no haystack text, or for a depth outside [0, 100].
RulerSample make_ruler_sample(const RulerTaskInfo& task, const RulerOptions& opt,
                              const TokenCounter& count);

// RULER's evaluation: the prediction stripped, control bytes (0x00-0x1f) made newlines, stripped
// again.
std::string ruler_postprocess(std::string_view prediction);
// Per sample, in [0, 1], case-insensitive substring matches (ASCII case): string_match_all is the
// share of references found in the prediction, string_match_part 1 if any is. RULER averages
// them over samples and prints percent.
double string_match_all(std::string_view prediction, const std::vector<std::string>& refs);
double string_match_part(std::string_view prediction, const std::vector<std::string>& refs);
// The task's metric on the postprocessed prediction.
double ruler_score(const RulerTaskInfo& task, std::string_view prediction,
                   const std::vector<std::string>& refs);

}  // namespace spattn

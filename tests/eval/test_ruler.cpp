// RULER's synthetic tasks (spattn/ruler.hpp) and `spattn eval`: the texts each task writes (the
// template, needles at the requested depth, the prompt without needles holding none of the
// answers), the fit (token count within the target, and close to it) on a made-up model's own
// tokenizer, determinism by seed, RULER's metrics on planted answers, and the command line
// (a short run on a made-up model; bad arguments exit 2 naming the problem).
#include <fmt/format.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>

#include "cli_run.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model_maker.hpp"
#include "spattn/ruler.hpp"
#include "spattn/tokenizer.hpp"
#include "temp_dir.hpp"

namespace spattn {
namespace {

namespace fs = std::filesystem;

test::TempDir temp_dir(const std::string& what) { return test::TempDir("spattn_ruler_" + what); }

// A made-up model (byte-level BPE vocabulary) written once; its path.
const fs::path& model_path() {
  static const test::TempDir dir = temp_dir("model");  // removed at exit
  static const fs::path p = [] {
    const fs::path d = dir / "m.gguf";
    ModelShape s;
    s.layers = 2;
    s.dim = 64;
    s.heads = 4;
    s.kv_heads = 2;
    s.ffn = 96;
    s.vocab = 512;
    s.context = 4096;
    s.seed = 3;
    make_model(d.string(), s);
    return d;
  }();
  return p;
}

const Tokenizer& tokenizer() {
  static const Tokenizer t = Tokenizer::from_gguf(gguf::File::open(model_path().string()));
  return t;
}

const TokenCounter& counter() {
  static const TokenCounter c = [](std::string_view s) {
    return int64_t(tokenizer().encode(s).size());
  };
  return c;
}

// Made-up "source" lines without digits, so no needle value can be found in the haystack.
std::string code_text() {
  std::string s;
  const char* kLines[] = {"def parse(self, text):",
                          "    if not text:",
                          "        return None",
                          "    items = text.split(sep)",
                          "    for item in items:",
                          "        yield item.strip()",
                          "",
                          "class Reader(object):",
                          "    \"\"\"Reads {records} from a stream.\"\"\"",
                          "    pass"};
  for (int r = 0; r < 20; ++r)
    for (const char* l : kLines) s += std::string(l) + "\n";
  return s;
}

RulerSample sample(const std::string& task, int64_t length, uint64_t seed = 7, int64_t index = 0,
                   double depth = -1) {
  static const std::string code = code_text();
  RulerOptions o;
  o.length = length;
  o.seed = seed;
  o.index = index;
  o.depth = depth;
  o.code_haystack = code;
  return make_ruler_sample(ruler_task(task), o, counter());
}

// Whole-word occurrence: the answer not inside a longer word or number.
bool has_word(const std::string& text, const std::string& w) {
  auto word_char = [](char c) { return std::isalnum((unsigned char)c) || c == '-'; };
  for (size_t p = text.find(w); p != std::string::npos; p = text.find(w, p + 1)) {
    const bool left = p == 0 || !word_char(text[p - 1]);
    const bool right = p + w.size() >= text.size() || !word_char(text[p + w.size()]);
    if (left && right) return true;
  }
  return false;
}

TEST(Ruler, TaskTableFollowsRulersNames) {
  std::vector<std::string> names;
  for (const auto& t : ruler_tasks()) names.push_back(t.name);
  EXPECT_EQ(names,
            (std::vector<std::string>{"niah_single_1", "niah_single_2", "niah_single_3",
                                      "niah_multikey_1", "niah_multikey_2", "niah_multikey_3",
                                      "niah_multivalue", "niah_multiquery", "vt", "cwe", "fwe"}));
  EXPECT_EQ(expand_ruler_task("niah_single"),
            (std::vector<std::string>{"niah_single_1", "niah_single_2", "niah_single_3"}));
  EXPECT_EQ(expand_ruler_task("niah").size(), 8u);
  EXPECT_EQ(expand_ruler_task("all").size(), 11u);
  EXPECT_EQ(expand_ruler_task("vt"), std::vector<std::string>{"vt"});
  EXPECT_THROW(expand_ruler_task("qa_1"), Error);
  EXPECT_THROW(ruler_task("niah_single_4"), Error);
  EXPECT_EQ(ruler_task("niah_single_1").tokens_to_generate, 128);
  EXPECT_EQ(ruler_task("vt").tokens_to_generate, 30);
  EXPECT_EQ(ruler_task("cwe").tokens_to_generate, 120);
  EXPECT_EQ(ruler_task("fwe").tokens_to_generate, 50);
}

// Every task at two lengths (below 4096, common words uses its short form): the prompt fits
// the target with the tokens it generates, fills it (the fit is within a few haystack units of
// the target), holds every answer, and the prompt without needles holds none and has about the
// same length. The made-up vocabulary's merges are random, so English costs about a token a
// byte: the lengths are those a real vocabulary fills with about three times the text.
TEST(Ruler, EveryTaskFitsItsLengthAndHoldsItsAnswers) {
  for (const auto& t : ruler_tasks()) {
    for (int64_t L : {2048, 8192}) {
      SCOPED_TRACE(t.name + " at " + std::to_string(L));
      const RulerSample s = sample(t.name, L);
      const int64_t budget = L - t.tokens_to_generate;
      EXPECT_EQ(s.prompt_tokens, counter()(s.prompt));
      EXPECT_EQ(s.prompt_without_tokens, counter()(s.prompt_without));
      EXPECT_LE(s.prompt_tokens, budget);
      EXPECT_LE(s.prompt_without_tokens, budget);
      EXPECT_GE(s.prompt_tokens, budget - budget / 25) << "the fit leaves too much unused";
      EXPECT_LE(std::abs(s.prompt_tokens - s.prompt_without_tokens), budget / 25);
      ASSERT_FALSE(s.answers.empty());
      for (const auto& a : s.answers) {
        EXPECT_TRUE(has_word(s.prompt, a)) << a;
        EXPECT_FALSE(has_word(s.prompt_without, a)) << a;
      }
      EXPECT_DOUBLE_EQ(ruler_score(t, s.reference, s.answers), 1.0) << s.reference;
    }
  }
}

TEST(Ruler, NiahTextsAreRulersTemplate) {
  const RulerSample one = sample("niah_single_1", 1024);
  ASSERT_EQ(one.answers.size(), 1u);
  EXPECT_EQ(one.answers[0].size(), 7u);  // a seven-digit number
  EXPECT_EQ(one.prompt.rfind("A special magic number is hidden within the following text. Make "
                             "sure to memorize it. I will quiz you about the number afterwards.\n",
                             0),
            0u);
  const std::string question = "\nWhat is the special magic number for ";
  const size_t q = one.prompt.find(question);
  ASSERT_NE(q, std::string::npos);
  const size_t key_at = q + question.size(), key_end = one.prompt.find(' ', key_at);
  ASSERT_NE(key_end, std::string::npos);
  const std::string key(one.prompt.begin() + std::ptrdiff_t(key_at),
                        one.prompt.begin() + std::ptrdiff_t(key_end));
  EXPECT_NE(one.prompt.find("One of the special magic numbers for " + key +
                            " is: " + one.answers[0] + "."),
            std::string::npos);
  EXPECT_TRUE(one.prompt.ends_with(" mentioned in the provided text is"));
  EXPECT_NE(one.prompt.find("The grass is green. The sky is blue. The sun is yellow. Here we go. "
                            "There and back again.\n"),
            std::string::npos);
  // Several answers: the plural template, four needles.
  const RulerSample mv = sample("niah_multivalue", 1024);
  EXPECT_EQ(mv.answers.size(), 4u);
  EXPECT_EQ(mv.needle_offsets.size(), 4u);
  EXPECT_EQ(mv.prompt.rfind("Some special magic numbers are hidden", 0), 0u);
  EXPECT_TRUE(mv.prompt.ends_with(" mentioned in the provided text are"));
  const RulerSample mq = sample("niah_multiquery", 1024);
  EXPECT_EQ(mq.answers.size(), 4u);
  EXPECT_NE(mq.prompt.find(", and "), std::string::npos);  // "k1, k2, k3, and k4"
  const RulerSample u = sample("niah_multikey_3", 1024);
  ASSERT_EQ(u.answers.size(), 1u);
  EXPECT_EQ(u.answers[0].size(), 36u);  // a UUID
  EXPECT_EQ(u.answers[0][14], '4');
  // The code haystack's braces are text, not placeholders.
  EXPECT_NE(sample("niah_single_2", 1024).prompt.find("{records}"), std::string::npos);
}

TEST(Ruler, OtherTasksAreRulersTemplates) {
  const RulerSample vt = sample("vt", 1024);
  ASSERT_EQ(vt.answers.size(), 5u);
  EXPECT_NE(vt.prompt.find("VAR " + vt.answers[1] + " = VAR " + vt.answers[0] + " "),
            std::string::npos);
  const std::string first_link = "VAR " + vt.answers[0] + " = ";
  const size_t value_at = vt.prompt.find(first_link);
  ASSERT_NE(value_at, std::string::npos);
  const std::string value(vt.prompt, value_at + first_link.size(), 5);
  EXPECT_TRUE(vt.prompt.ends_with("5 variables are assigned the value " + value + ", they are: "));
  // The worked example comes first, answered.
  EXPECT_EQ(vt.prompt.rfind("Memorize and track the chain(s)", 0), 0u);
  EXPECT_NE(vt.prompt.find("they are: ", 0), vt.prompt.rfind("they are: "));
  const RulerSample cwe = sample("cwe", 8192);
  EXPECT_EQ(cwe.answers.size(), 10u);
  EXPECT_TRUE(
      cwe.prompt.ends_with("Answer: The top 10 words that appear most often in the list "
                           "are:"));
  const RulerSample fwe = sample("fwe", 2048);
  EXPECT_EQ(fwe.answers.size(), 3u);
  for (const auto& a : fwe.answers) EXPECT_EQ(a.size(), 6u);
}

// The needle goes where --depth says: its depth among the haystack's units, and its token
// position over the context's tokens (up to one unit and the needle's own share).
TEST(Ruler, NeedleAtTheRequestedDepth) {
  for (double depth : {0.0, 25.0, 50.0, 100.0}) {
    SCOPED_TRACE(depth);
    const RulerSample s = sample("niah_single_1", 8192, 7, 0, depth);
    ASSERT_EQ(s.depths.size(), 1u);
    EXPECT_NEAR(s.depths[0], depth, 100.0 / double(s.haystack));
    const size_t start = s.prompt.find('\n') + 1, end = s.prompt.rfind("\nWhat is");
    const double before = double(counter()(s.prompt.substr(start, s.needle_offsets[0] - start)));
    const double context = double(counter()(s.prompt.substr(start, end - start)));
    EXPECT_NEAR(100.0 * before / context, depth, 2.5);
  }
  // Several needles at one depth sit together.
  const RulerSample mk = sample("niah_multikey_1", 2048, 7, 0, 40);
  ASSERT_EQ(mk.depths.size(), 4u);
  for (double d : mk.depths) EXPECT_DOUBLE_EQ(d, mk.depths[0]);
  // Drawn depths are RULER's (integers from 0..100) and vary with the sample.
  std::set<double> seen;
  for (int64_t i = 0; i < 6; ++i) {
    const RulerSample s = sample("niah_single_1", 1024, 7, i);
    EXPECT_EQ(s.depths.size(), 1u);
    seen.insert(s.depths[0]);
  }
  EXPECT_GT(seen.size(), 1u);
}

TEST(Ruler, DeterministicBySeed) {
  for (const char* t : {"niah_multikey_2", "vt", "cwe", "fwe"}) {
    SCOPED_TRACE(t);
    const RulerSample a = sample(t, 2048, 11, 2), b = sample(t, 2048, 11, 2);
    EXPECT_EQ(a.prompt, b.prompt);
    EXPECT_EQ(a.prompt_without, b.prompt_without);
    EXPECT_EQ(a.answers, b.answers);
    EXPECT_NE(a.prompt, sample(t, 2048, 12, 2).prompt);
    EXPECT_NE(a.prompt, sample(t, 2048, 11, 3).prompt);
  }
}

TEST(Ruler, MetricsAsRulerDefinesThem) {
  const std::vector<std::string> refs = {"1234567", "7654321", "1111111", "2222222"};
  EXPECT_DOUBLE_EQ(string_match_all("1234567, 7654321, 1111111 and 2222222", refs), 1.0);
  EXPECT_DOUBLE_EQ(string_match_all("7654321 and 2222222", refs), 0.5);
  EXPECT_DOUBLE_EQ(string_match_all("nothing here", refs), 0.0);
  EXPECT_DOUBLE_EQ(string_match_part("7654321 only", refs), 1.0);
  EXPECT_DOUBLE_EQ(string_match_part("none", refs), 0.0);
  EXPECT_DOUBLE_EQ(string_match_all("The words: APPLE, Pear", {"apple", "pear", "plum"}), 2.0 / 3);
  EXPECT_EQ(ruler_postprocess("  \tanswer\x01is\x1f here \n"), "answer\nis\n here");
  const RulerTaskInfo& t = ruler_task("niah_multivalue");
  EXPECT_DOUBLE_EQ(ruler_score(t, "\n 1234567 7654321", refs), 0.5);
  // A planted perfect answer scores 1, a wrong one 0, on a generated sample.
  const RulerSample s = sample("niah_single_3", 1024);
  EXPECT_DOUBLE_EQ(ruler_score(ruler_task("niah_single_3"), " " + s.answers[0], s.answers), 1.0);
  EXPECT_DOUBLE_EQ(ruler_score(ruler_task("niah_single_3"), "no idea", s.answers), 0.0);
  const RulerSample c = sample("cwe", 2048);
  std::string half;
  for (size_t i = 0; i < 5; ++i) half += c.answers[i] + " ";
  EXPECT_DOUBLE_EQ(ruler_score(ruler_task("cwe"), half, c.answers), 0.5);
}

TEST(Ruler, BadOptionsAreErrors) {
  RulerOptions o;
  o.length = 100;  // below niah's 128 generated tokens
  EXPECT_THROW(make_ruler_sample(ruler_task("niah_single_1"), o, counter()), Error);
  o.length = 200;  // above them, but no prompt fits in the 72 left
  EXPECT_THROW(make_ruler_sample(ruler_task("niah_single_1"), o, counter()), Error);
  o.length = 1024;
  o.depth = 101;
  EXPECT_THROW(make_ruler_sample(ruler_task("niah_single_1"), o, counter()), Error);
  o.depth = -1;
  EXPECT_THROW(make_ruler_sample(ruler_task("niah_single_2"), o, counter()), Error);  // no code
  EXPECT_THROW(string_match_all("x", {}), Error);
}

// Two runs of the same command: the JSON run's figures, and the table run printing the same
// figures (a second run, so also determinism).
TEST(Ruler, EvalCommandRunsAndIsDeterministic) {
  const test::TempDir d = temp_dir("cli");
  const std::string args = "eval -m " + model_path().string() +
                           " --task niah_single_1,vt --lengths 1024 --samples 1 --attn dense "
                           "--attn a_shape --max-gen 4";
  const test::CliRun a = test::run_spattn(args + " --json", d);
  ASSERT_EQ(a.code(), 0) << a.err;
  const nlohmann::json j = nlohmann::json::parse(a.out);
  ASSERT_EQ(j["results"].size(), 4u);  // 2 tasks x 2 methods
  const test::CliRun b = test::run_spattn(args, d);
  ASSERT_EQ(b.code(), 0) << b.err;
  for (const auto& r : j["results"]) {
    EXPECT_GE(r["score"].get<double>(), 0.0);
    EXPECT_LE(r["score"].get<double>(), 100.0);
    EXPECT_LT(r["ll_with"].get<double>(), 0.0);
    EXPECT_LT(r["ll_without"].get<double>(), 0.0);
    EXPECT_NEAR(r["gap"].get<double>(), r["ll_with"].get<double>() - r["ll_without"].get<double>(),
                1e-9);
    EXPECT_LT(r["ll_first_with"].get<double>(), 0.0);
    EXPECT_NEAR(r["gap_first"].get<double>(),
                r["ll_first_with"].get<double>() - r["ll_first_without"].get<double>(), 1e-9);
    EXPECT_LE(r["prompt_tokens"].get<double>() + (r["task"] == "vt" ? 30 : 128), 1024);
    EXPECT_LE(r["per_sample"][0]["generated_tokens"].get<int64_t>(), 4);
    // The table's row for the same cell, with the same figures.
    const std::string row = fmt::format(
        "{:<16} {:>7} {:<7} {:>7.1f} {:>9.3f} {:>9.3f} {:>+8.3f} {:>+8.3f}",
        r["task"].get<std::string>(), 1024, r["method"].get<std::string>(),
        r["score"].get<double>(), r["ll_with"].get<double>(), r["ll_without"].get<double>(),
        r["gap"].get<double>(), r["gap_first"].get<double>());
    EXPECT_NE(b.out.find(row), std::string::npos) << row << "\n" << b.out;
  }
}

TEST(Ruler, EvalCommandBadArgumentsExit2) {
  const test::TempDir d = temp_dir("bad");
  const std::string m = "eval -m " + model_path().string();
  const std::vector<std::pair<std::string, std::string>> cases = {
      {m + " --task niah_single_9", "unknown task 'niah_single_9'"},
      {m + " --task vt --samples 0", "--samples"},
      {m + " --task vt --lengths 0", "--lengths"},
      {m + " --task niah_single_2", "--haystack"},
      {m + " --task niah_single_2 --haystack /nonexistent/x.txt", "cannot read"},
      {m + " --task vt --attn nosuch", "unknown method 'nosuch'"},
      {m + " --task vt --depth 150", "--depth"},
      {m + " --task vt --lengths 1024 -c 256", "-c 256"},
      {m + " --task niah_single_1 --lengths 150", "too short"},
      {"eval -m /nonexistent.gguf --task vt", "nonexistent"},
  };
  for (const auto& [args, message] : cases) {
    SCOPED_TRACE(args);
    const test::CliRun r = test::run_spattn(args, d);
    EXPECT_EQ(r.code(), 2) << r.err;
    EXPECT_NE(r.err.find(message), std::string::npos) << r.err;
  }
}

}  // namespace
}  // namespace spattn

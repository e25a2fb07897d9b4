// End of generation against llama.cpp on its suite's vocabularies (the last test), and word
// splits llama.cpp's tokenizer suite has no vocabulary for (GPT-4o's o200k, Mistral's
// Tekken, MiniMax M2's): Llama 3's vocabulary from the suite with tokenizer.ggml.pre rewritten,
// tokenized by spattn and by llama.cpp's llama-tokenize, which must give the same ids, BOS
// included (the suite's own test leaves it out); llama-bpe, the file as it is, for that. The texts
// are every suite test string, strings that tell the splits apart (case changes, contractions,
// letters outside ASCII, marks, digits, paths, white space) and code-heldout.txt where the
// models folder has it, joined by the vocabulary's end-of-text token (both tokenizers cut the
// text at it and split each piece on its own, so each string is tokenized as if alone). Needs
// llama.cpp's built tools (tests/assets.hpp says where they are found); skipped where they or the
// suite are absent, failed under SPATTN_REQUIRE_ASSETS=1.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "cli_run.hpp"
#include "gguf_edit.hpp"
#include "assets.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/tokenizer.hpp"
#include "temp_dir.hpp"

namespace {

namespace fs = std::filesystem;
using Ids = std::vector<int32_t>;

using spattn::test::llama_bin;

fs::path suite_dir() { return spattn::test::llama_cpp_source() / "models"; }

// Strings whose words differ between the splits. U+180E is left out: PCRE2 counts it as white
// space, llama.cpp's table (Unicode's, since 6.3) does not.
const std::vector<std::string> kSplitTexts = {
    "HelloWorld helloWorld HELLOWorld XMLHttpRequest iPhone McDonald's",
    "DON'T don't It's we'VE I'm they'll she'd O'Neil ' s 'S x'\xc5\xbf I\xe2\x80\x99m",
    "\xc3\x89"
    "COLE \xc3\xa9"
    "cole \xc3\x89"
    "cole \xc3\xa9"
    "COLE a\xc3\x89"
    "b CAF\xc3\x89"
    "caf\xc3\xa9",
    "\xd0\x9f\xd1\x80\xd0\xb8\xd0\xb2\xd0\xb5\xd1\x82\xd0\x9c\xd0\xb8\xd1\x80 \xce\xa9mega "
    "\xc7\x85ungla",
    "e\xcc\x81t\xc3\xa9 cafe\xcc\x81s \xe0\xa4\xa8\xe0\xa4\xae\xe0\xa4\xb8\xe0\xa5\x8d\xe0\xa4\xa4"
    "\xe0\xa5\x87 A\xcc\x81"
    "B\xcc\x81",
    "path/to/file.txt\n/usr/bin/env\n// comment\n\t\tx = 1234567;\r\n",
    "1234567 \xd9\xa1\xd9\xa2\xd9\xa3\xd9\xa4 \xc2\xbd \xe2\x91\xa0\xe2\x91\xa1 12ab34",
    "a\xc2\xa0"
    "b\xe2\x80\xa8"
    "c\xe3\x80\x80"
    "d\xe2\x80\x8b"
    "e\xc2\x85"
    "f  \t \n\n  g",
    "camelCaseWord snake_case_word SCREAMING_CASE kebab-case PascalCase",
};

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// The suite's test strings, each once (test-tokenizer-0's .inp format).
std::vector<std::string> suite_texts() {
  std::set<std::string> seen;
  std::vector<std::string> out;
  std::error_code ec;
  std::vector<fs::path> inps;
  for (const auto& e : fs::directory_iterator(suite_dir(), ec))
    if (e.path().string().ends_with(".gguf.inp")) inps.push_back(e.path());
  std::sort(inps.begin(), inps.end());
  const std::string sep = "\n__ggml_vocab_test__\n";
  for (const fs::path& p : inps) {
    const std::string raw = read_all(p);
    for (size_t pos = 0; pos <= raw.size();) {
      size_t next = raw.find(sep, pos);
      if (next == std::string::npos) next = raw.size();
      std::string s = raw.substr(pos, next - pos);
      if (seen.insert(s).second) out.push_back(std::move(s));
      pos = next + sep.size();
    }
  }
  return out;
}

// "[1, 2, 3]" as llama-tokenize --ids prints it; empty when there is no such line.
Ids parse_ids(const std::string& out) {
  Ids ids;
  const size_t open = out.rfind('['), close = out.rfind(']');
  if (open == std::string::npos || close == std::string::npos || close < open) return ids;
  std::istringstream in(out.substr(open + 1, close - open - 1));
  std::string item;
  while (std::getline(in, item, ',')) ids.push_back(std::stoi(item));
  return ids;
}

// The start of a text for a message, control characters escaped.
std::string shown(const std::string& s) {
  std::string out;
  for (char c : s.substr(0, 60)) {
    if (c == '\n')
      out += "\\n";
    else if (c == '\r')
      out += "\\r";
    else if (c == '\t')
      out += "\\t";
    else
      out += c;
  }
  return out + (s.size() > 60 ? "..." : "");
}

// The ids cut at each `sep` (which is left out).
std::vector<Ids> pieces(const Ids& ids, int32_t sep) {
  std::vector<Ids> out(1);
  for (int32_t id : ids) {
    if (id == sep)
      out.emplace_back();
    else
      out.back().push_back(id);
  }
  return out;
}

class TokenizerVsLlamaCpp : public ::testing::TestWithParam<std::string> {};

TEST_P(TokenizerVsLlamaCpp, EditedVocabularyGivesLlamaCppIds) {
  const std::string pre = GetParam();
  const fs::path tool = llama_bin() / "llama-tokenize";
  if (!spattn::test::missing_llama_tool({"llama-tokenize"}).empty())
    SPATTN_MISSING_ASSET("llama-tokenize in " << llama_bin() << " (SPATTN_LLAMA_BIN)");
  const fs::path base = suite_dir() / "ggml-vocab-llama-bpe.gguf";
  if (!fs::exists(base)) SPATTN_MISSING_ASSET("llama.cpp's tokenizer suite in " << suite_dir());

  const spattn::test::TempDir dir("spattn_tok_" + pre);
  const fs::path vocab = dir / "vocab.gguf";
  {
    const spattn::gguf::File f = spattn::gguf::File::open(base.string());
    spattn::test::GgufEdit e;
    e.set_strings["tokenizer.ggml.pre"] = pre;
    spattn::test::write_edited(f, vocab.string(), e);
  }
  const spattn::gguf::File f = spattn::gguf::File::open(vocab.string());
  const spattn::Tokenizer t = spattn::Tokenizer::from_gguf(f);
  const int32_t sep = t.eos();
  ASSERT_GE(sep, 0);
  ASSERT_EQ(t.type(sep), spattn::Tokenizer::TokenType::control);

  std::vector<std::string> texts = suite_texts();
  ASSERT_FALSE(texts.empty());
  const size_t n_suite = texts.size();
  texts.insert(texts.end(), kSplitTexts.begin(), kSplitTexts.end());
  if (const std::string code = spattn::test::model_file("code-heldout.txt"); !code.empty())
    texts.push_back(read_all(code));
  std::string joined;
  for (size_t i = 0; i < texts.size(); ++i) joined += (i ? t.text(sep) : "") + texts[i];
  std::ofstream(dir / "text.txt", std::ios::binary) << joined;

  // As `spattn tokenize` and llama-tokenize do by default: BOS as the vocabulary says, control
  // tokens written in the text parsed.
  const Ids ours = t.encode(joined, t.add_bos(), true);
  const std::string cmd = "exec " + tool.string() + " -m " + vocab.string() + " -f " +
                          (dir / "text.txt").string() + " --ids --no-escape --log-disable >" +
                          (dir / "out").string() + " 2>" + (dir / "err").string();
  const int status = std::system(cmd.c_str());
  const std::string out = spattn::test::slurp(dir / "out");
  const std::string err = spattn::test::slurp(dir / "err");
  ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << "llama-tokenize: " << err;
  const Ids theirs = parse_ids(out);
  ASSERT_FALSE(theirs.empty()) << out << err;

  // Tekken and Llama 3 add BOS (llama.cpp's default for them; the file has no
  // add_bos_token), GPT-4o not.
  EXPECT_EQ(t.add_bos(), pre == "tekken" || pre == "llama-bpe");
  EXPECT_EQ(ours.front() == t.bos(), theirs.front() == t.bos());
  const std::vector<Ids> a = pieces(ours, sep), b = pieces(theirs, sep);
  ASSERT_EQ(a.size(), texts.size());
  ASSERT_EQ(b.size(), texts.size());
  size_t equal = 0;
  for (size_t i = 0; i < texts.size(); ++i) {
    if (a[i] == b[i]) {
      ++equal;
      continue;
    }
    size_t at = 0;
    while (at < a[i].size() && at < b[i].size() && a[i][at] == b[i][at]) ++at;
    ADD_FAILURE() << pre << ": text " << i << " ('" << shown(texts[i])
                  << "') differs from llama.cpp at token " << at << " of " << a[i].size()
                  << " (llama.cpp: " << b[i].size() << ")";
  }
  std::printf("%s: %zu of %zu texts equal (%zu suite strings, %zu split strings%s), %zu ids\n",
              pre.c_str(), equal, texts.size(), n_suite, kSplitTexts.size(),
              texts.size() > n_suite + kSplitTexts.size() ? ", code-heldout.txt" : "",
              theirs.size());
}

// End of generation: the ids llama.cpp's loader lists as EOG tokens (llama-tokenize --verbose
// prints them) are those spattn's is_eog marks, on every vocabulary of llama.cpp's suite that
// spattn reads.
TEST(TokenizerEogVsLlamaCpp, SuiteVocabulariesEndGenerationAtLlamaCppsTokens) {
  const fs::path tool = llama_bin() / "llama-tokenize";
  if (!spattn::test::missing_llama_tool({"llama-tokenize"}).empty())
    SPATTN_MISSING_ASSET("llama-tokenize in " << llama_bin() << " (SPATTN_LLAMA_BIN)");
  if (!fs::exists(suite_dir()))
    SPATTN_MISSING_ASSET("llama.cpp's tokenizer suite in " << suite_dir());
  const spattn::test::TempDir dir("spattn_eog");
  const fs::path out = dir / "out";
  int compared = 0;
  for (const auto& e : fs::directory_iterator(suite_dir())) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ggml-vocab-", 0) != 0 || e.path().extension() != ".gguf") continue;
    const spattn::gguf::File f = spattn::gguf::File::open(e.path().string());
    std::optional<spattn::Tokenizer> t;
    try {
      t.emplace(spattn::Tokenizer::from_gguf(f));
    } catch (const spattn::Error&) {
      continue;  // a vocabulary spattn refuses by name (the suite test covers which)
    }
    const std::string cmd = "exec " + tool.string() + " -m " + e.path().string() +
                            " -p hi --ids --verbose >" + out.string() + " 2>&1";
    // The loader's lines come from llama.cpp's log thread, whose logger is leaked at exit
    // (llama.cpp issue 22142): on a loaded machine the process can exit before the thread
    // writes them. A log without the line that follows the EOG tokens ("max token length") is
    // such a run, repeated a little later (six runs at most).
    std::string log;
    for (int run = 0; run < 6; ++run) {
      if (run) std::this_thread::sleep_for(std::chrono::milliseconds(250 * run));
      const int status = std::system(cmd.c_str());
      log = spattn::test::slurp(out);
      ASSERT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0) << name << ": " << log;
      if (log.find("max token length") != std::string::npos) break;
    }
    ASSERT_NE(log.find("max token length"), std::string::npos)
        << name << ": llama-tokenize's loader log ended early in 6 runs: " << log;
    std::set<int32_t> theirs, ours;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);)
      if (const size_t at = line.find("EOG token"); at != std::string::npos)
        if (const size_t eq = line.find('=', at); eq != std::string::npos)
          theirs.insert(int32_t(std::stol(line.substr(eq + 1))));
    for (int32_t id = 0; id < t->n_vocab(); ++id)
      if (t->is_eog(id)) ours.insert(id);
    EXPECT_EQ(ours, theirs) << name;
    ++compared;
  }
  EXPECT_GE(compared, 10);
  std::printf("end-of-generation sets equal to llama.cpp's on %d suite vocabularies\n", compared);
}

INSTANTIATE_TEST_SUITE_P(Pre, TokenizerVsLlamaCpp,
                         ::testing::Values("gpt-4o", "tekken", "minimax-m2", "llama-bpe"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           for (char& c : n)
                             if (c == '-') c = '_';
                           return n;
                         });

}  // namespace

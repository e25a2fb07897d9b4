// llama.cpp's tokenizer suite (its models/ggml-vocab-*.gguf with the .inp test strings and the
// .out ids llama.cpp gives them), run from the pinned llama.cpp source when it is there
// (third_party/llama.cpp; skipped cleanly when absent). One test per vocabulary: every string
// tokenized without BOS and without parsing special tokens, as test-tokenizer-0 does, must give
// llama.cpp's ids. Vocabularies spattn does not read yet are listed in kUnsupported: their test
// checks that loading them is refused with a named Error and then reports them skipped, so a
// vocabulary never passes silently.
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "assets.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/tokenizer.hpp"

namespace {

namespace fs = std::filesystem;

// Vocabularies not read yet (none at present: WordPiece and Gemma 4 came last, issue 21).
const std::map<std::string, std::string> kUnsupported = {};

fs::path suite_dir() { return spattn::test::llama_cpp_source() / "models"; }

// The vocabularies that have test strings, by the name between ggml-vocab- and .gguf.
std::vector<std::string> suite_vocabs() {
  std::vector<std::string> v;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(suite_dir(), ec)) {
    const std::string n = e.path().filename().string();
    const std::string pre = "ggml-vocab-", post = ".gguf.inp";
    if (n.size() > pre.size() + post.size() && n.starts_with(pre) && n.ends_with(post))
      v.push_back(n.substr(pre.size(), n.size() - pre.size() - post.size()));
  }
  std::sort(v.begin(), v.end());
  if (v.empty()) v.push_back("absent");  // one test that reports the suite missing
  return v;
}

std::string read_all(const fs::path& p) {
  std::ifstream in(p, std::ios::binary);
  EXPECT_TRUE(in.is_open()) << p;
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

struct Case {
  std::string text;
  std::vector<int32_t> ids;
};

// test-tokenizer-0's format: strings separated by "\n__ggml_vocab_test__\n", one line of ids
// (space separated) per string.
std::vector<Case> read_cases(const std::string& vocab) {
  const fs::path base = suite_dir() / ("ggml-vocab-" + vocab + ".gguf");
  const std::string raw = read_all(base.string() + ".inp");
  const std::string sep = "\n__ggml_vocab_test__\n";
  std::vector<std::string> inp;
  for (size_t pos = 0; pos < raw.size();) {
    const size_t next = raw.find(sep, pos);
    if (next == std::string::npos) {
      inp.push_back(raw.substr(pos));
      break;
    }
    inp.push_back(raw.substr(pos, next - pos));
    pos = next + sep.size();
  }
  std::istringstream out(read_all(base.string() + ".out"));
  std::vector<Case> cases;
  std::string line;
  for (size_t i = 0; std::getline(out, line); ++i) {
    if (i >= inp.size()) break;
    Case c{inp[i], {}};
    std::istringstream ls(line);
    for (int32_t id; ls >> id;) c.ids.push_back(id);
    cases.push_back(std::move(c));
  }
  EXPECT_EQ(cases.size(), inp.size()) << vocab << ": .inp and .out differ in length";
  return cases;
}

std::string show(const std::vector<int32_t>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

class LlamaCppTokenizerSuite : public ::testing::TestWithParam<std::string> {};

TEST_P(LlamaCppTokenizerSuite, EveryStringGivesLlamaCppIds) {
  const std::string vocab = GetParam();
  if (vocab == "absent") SPATTN_MISSING_ASSET("llama.cpp's tokenizer suite in " << suite_dir());
  const std::string path = (suite_dir() / ("ggml-vocab-" + vocab + ".gguf")).string();
  const spattn::gguf::File f = spattn::gguf::File::open(path);
  if (auto it = kUnsupported.find(vocab); it != kUnsupported.end()) {
    EXPECT_THROW(spattn::Tokenizer::from_gguf(f), spattn::Error) << vocab;
    SPATTN_SKIP_NOT_APPLICABLE(vocab << ": not supported yet (" << it->second << ")");
  }
  const spattn::Tokenizer t = spattn::Tokenizer::from_gguf(f);
  const std::vector<Case> cases = read_cases(vocab);
  ASSERT_FALSE(cases.empty());
  size_t equal = 0;
  for (const Case& c : cases) {
    const std::vector<int32_t> got = t.encode(c.text, false, false);
    if (got == c.ids)
      ++equal;
    else
      ADD_FAILURE() << vocab << ": '" << c.text << "' gives " << show(got) << ", llama.cpp "
                    << show(c.ids);
  }
  std::printf("%s: %zu of %zu strings equal\n", vocab.c_str(), equal, cases.size());
}

INSTANTIATE_TEST_SUITE_P(Vocab, LlamaCppTokenizerSuite, ::testing::ValuesIn(suite_vocabs()),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string n = i.param;
                           std::replace(n.begin(), n.end(), '-', '_');
                           return n;
                         });

}  // namespace

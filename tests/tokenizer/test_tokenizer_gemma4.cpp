// Gemma 4's tokenizer (tokenizer.ggml.model = "gemma4") on a made-up vocabulary: BPE over raw
// UTF-8 with spaces written U+2581, merges by rank, <0xXX> byte tokens for what no token
// covers, a run of newlines that is a token taken whole, BOS always added. llama.cpp's ids on
// the real vocabulary are in test_tokenizer_suite.cpp (gemma-4).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "made_up_vocab.hpp"
#include "spattn/gguf.hpp"
#include "spattn/tokenizer.hpp"

namespace {

using spattn::Tokenizer;
using spattn::gguf::Writer;
using Ids = std::vector<int32_t>;

constexpr int kFirstPiece = 4 + 256;  // <pad> <eos> <bos> <unk>, then <0x00> .. <0xFF>

using Vocab = spattn::test::MadeUpVocab;

std::vector<uint8_t> vocab() {
  std::vector<std::string> toks = {"<pad>", "<eos>", "<bos>", "<unk>"};
  std::vector<int32_t> types = {3, 3, 3, 2};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back(buf);
    types.push_back(6);
  }
  // kFirstPiece + 0 .. 10
  for (const char* p : {"\xe2\x96\x81", "h", "e", "l", "o", "he", "ll", "hell", "hello",
                        "\xe2\x96\x81"
                        "hello",
                        "\n\n\n"}) {
    toks.push_back(p);
    types.push_back(1);
  }
  Writer w;
  w.set("tokenizer.ggml.model", "gemma4");
  w.set("tokenizer.ggml.tokens", toks);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.scores", std::vector<float>(toks.size(), 0.0f));
  // "l l" outranks "h e"; "\n\n\n" has no merge that builds it.
  w.set("tokenizer.ggml.merges",
        std::vector<std::string>{"l l", "h e", "he ll", "hell o", "\xe2\x96\x81 hello"});
  w.set("tokenizer.ggml.bos_token_id", uint32_t(2));
  w.set("tokenizer.ggml.eos_token_id", uint32_t(1));
  w.set("tokenizer.ggml.unknown_token_id", uint32_t(3));
  w.set("tokenizer.ggml.add_bos_token", false);  // llama.cpp overrides this for gemma4
  w.set("tokenizer.ggml.add_space_prefix", false);
  return w.bytes();
}

TEST(TokenizerGemma4, SpacesAsU2581MergesAndByteTokens) {
  const Vocab v(vocab());
  const Tokenizer& t = v.tok;
  EXPECT_EQ(t.kind(), Tokenizer::Kind::bpe);
  EXPECT_TRUE(t.add_bos());
  EXPECT_EQ(t.encode("hello hello"), (Ids{2, kFirstPiece + 8, kFirstPiece + 9}));
  // No space prefix: a leading space is its own "▁" when nothing merges it.
  EXPECT_EQ(t.encode(" he", false, false), (Ids{kFirstPiece + 0, kFirstPiece + 5}));
  // 'x' and 'é' are no tokens: their bytes as <0xXX>.
  EXPECT_EQ(t.encode("x\xc3\xa9", false, false), (Ids{4 + 'x', 4 + 0xc3, 4 + 0xa9}));
  // Three newlines are a token although no merge makes them; two are not: bytes.
  EXPECT_EQ(t.encode("\n\n\n", false, false), (Ids{kFirstPiece + 10}));
  EXPECT_EQ(t.encode("o\n\n", false, false), (Ids{kFirstPiece + 4, 4 + '\n', 4 + '\n'}));
  const std::string s = "hello hello\n\n\nx\xc3\xa9 he  ll";
  EXPECT_EQ(t.decode(t.encode(s)), s);
  EXPECT_EQ(t.piece(kFirstPiece + 9), " hello");
  EXPECT_EQ(t.piece(4 + 0xc3), "\xc3");
}

}  // namespace

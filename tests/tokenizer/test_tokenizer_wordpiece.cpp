// WordPiece (tokenizer.ggml.model = "bert") on a made-up vocabulary: BERT's normaliser
// (lowercase, accents stripped, punctuation and CJK split off, controls dropped), the
// longest-piece cut behind U+2581, [UNK] for a word that cannot be cut, [CLS] ... [SEP], and
// the normaliser keys. llama.cpp's own ids on a real BERT vocabulary are in
// test_tokenizer_suite.cpp (bert-bge).
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

// ids: 0 [PAD], 1 [UNK], 2 [CLS], 3 [SEP], then the pieces below from 4 on. "▁" marks a
// word-initial piece; the others continue a word (BERT's "##").
const std::vector<std::string> kPieces = {
    "\xe2\x96\x81"
    "hello",  // 4
    "\xe2\x96\x81"
    "hell",  // 5
    "o",     // 6
    "\xe2\x96\x81"
    "world",  // 7
    "\xe2\x96\x81"
    "!",  // 8
    "\xe2\x96\x81"
    "cafe",  // 9
    "\xe2\x96\x81"
    "e",  // 10
    "\xe2\x96\x81"
    "\xe4\xb8\xad",  // 11 (a CJK ideograph)
    "\xe2\x96\x81"
    "a",  // 12
    "b",  // 13
    "\xe2\x96\x81"
    "Hello",  // 14
    "\xe2\x96\x81"
    "caf\xc3\xa9",  // 15
};

std::vector<uint8_t> vocab(int lowercase = -1, int strip_accents = -1) {
  std::vector<std::string> toks = {"[PAD]", "[UNK]", "[CLS]", "[SEP]"};
  toks.insert(toks.end(), kPieces.begin(), kPieces.end());
  std::vector<int32_t> types(toks.size(), 1);
  for (int i = 0; i < 4; ++i) types[size_t(i)] = 3;
  Writer w;
  w.set("tokenizer.ggml.model", "bert");
  w.set("tokenizer.ggml.tokens", toks);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.unknown_token_id", uint32_t(1));
  w.set("tokenizer.ggml.cls_token_id", uint32_t(2));
  w.set("tokenizer.ggml.bos_token_id", uint32_t(2));
  w.set("tokenizer.ggml.seperator_token_id", uint32_t(3));
  if (lowercase >= 0) w.set("tokenizer.ggml.normalizer.lowercase", lowercase == 1);
  if (strip_accents >= 0) w.set("tokenizer.ggml.normalizer.strip_accents", strip_accents == 1);
  return w.bytes();
}

using Vocab = spattn::test::MadeUpVocab;

TEST(TokenizerWordPiece, NormalisesSplitsAndCutsLongestFirst) {
  const Vocab v(vocab());
  const Tokenizer& t = v.tok;
  EXPECT_EQ(t.kind(), Tokenizer::Kind::wpm);
  // Lowercased; "!" is a word of its own; white space of any kind ends a word.
  EXPECT_EQ(t.encode("Hello\tWORLD!", false, false), (Ids{4, 7, 8}));
  // "hello" is one piece even though "▁hell" + "o" also cut it: longest first.
  EXPECT_EQ(t.encode("hello", false, false), (Ids{4}));
  // "hellobo": ▁hello, then "b" and "o" as continuations.
  EXPECT_EQ(t.encode("hellobo", false, false), (Ids{4, 13, 6}));
  // Accents stripped (é -> e), also when written as e + combining acute (U+0301).
  EXPECT_EQ(t.encode("Caf\xc3\xa9", false, false), (Ids{9}));
  EXPECT_EQ(t.encode("cafe\xcc\x81", false, false), (Ids{9}));
  // A CJK ideograph is a word by itself; a control character (U+0007) vanishes.
  EXPECT_EQ(t.encode("a\xe4\xb8\xad"
                     "\x07"
                     "b",
                     false, false),
            (Ids{12, 11, 1}));
  // A word that cannot be cut entirely is one [UNK], whatever pieces its start had.
  EXPECT_EQ(t.encode("hellx world", false, false), (Ids{1, 7}));
  // Nothing but white space: no words.
  EXPECT_EQ(t.encode(" \n\t ", false, false), Ids{});
  // Special tokens added: [CLS] text [SEP].
  EXPECT_EQ(t.encode("hello", true, false), (Ids{2, 4, 3}));
  EXPECT_EQ(t.encode("", true, false), (Ids{2, 3}));
  // [SEP] written in the text is its id with parse_special.
  EXPECT_EQ(t.encode("hello[SEP]world", false, true), (Ids{4, 3, 7}));
  EXPECT_EQ(t.decode(t.encode("Hello  world!", true, false)), "hello world !");
}

TEST(TokenizerWordPiece, NormaliserKeysAreRead) {
  // lowercase off: strip_accents follows it (llama.cpp's reading), so case and accents stay.
  const Vocab cased(vocab(0));
  EXPECT_EQ(cased.tok.encode("Hello", false, false), (Ids{14}));
  EXPECT_EQ(cased.tok.encode("caf\xc3\xa9", false, false), (Ids{15}));
  // lowercase on, strip_accents explicitly off.
  const Vocab accents(vocab(1, 0));
  EXPECT_EQ(accents.tok.encode("CAF\xc3\x89", false, false), (Ids{15}));
}

TEST(TokenizerWordPiece, InvalidUtf8IsDroppedNotFatal) {
  const Vocab v(vocab());
  EXPECT_EQ(v.tok.encode("hel\xff"
                         "lo \xc3",
                         false, false),
            (Ids{4}));
}

}  // namespace

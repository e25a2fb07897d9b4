// Tokenizers: known ids on the real vocabularies (checked piece by piece against the vocab),
// llama.cpp's ids on both real model vocabularies, round trips on ASCII, UTF-8 and whitespace runs, and
// made-up vocabularies (always run) for the merge order, byte fallback and bad metadata.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "made_up_vocab.hpp"
#include "assets.hpp"
#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/tokenizer.hpp"
#include "model/tokenizer_impl.hpp"

namespace {

using spattn::Tokenizer;
using spattn::gguf::File;
using spattn::gguf::Writer;
using Ids = std::vector<int32_t>;

struct Loaded {
  File file;
  Tokenizer tok;
};
Loaded load(const std::string& path) {
  File f = File::open(path);
  Tokenizer t = Tokenizer::from_gguf(f);
  return {std::move(f), std::move(t)};
}

const std::vector<std::string> kRoundTrip = {
    "Hello world",
    "  leading and trailing spaces  ",
    "tabs\tand\nnew\r\nlines\n\n\n",
    "      eight spaces then text",
    "caf\xc3\xa9 na\xc3\xafve \xc3\x85ngstr\xc3\xb6m",                            // accents
    "\xe4\xb8\xad\xe6\x96\x87\xe5\xad\x97 \xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e",  // CJK
    "emoji \xf0\x9f\xa6\x99 and \xf0\x9f\x98\x80\xf0\x9f\x98\x80!",
    "def f(x):\n    return x ** 2  # comment\n",
    "",
    " ",
    "\n",
};

void expect_round_trips(const Tokenizer& t, const char* what) {
  for (const std::string& s : kRoundTrip) {
    const Ids ids = t.encode(s);
    EXPECT_EQ(t.decode(ids), s) << what << ": '" << s << "'";
    for (int32_t id : ids) ASSERT_TRUE(id >= 0 && id < t.n_vocab());
  }
}

TEST(TokenizerReal, CodeTiny8kMatchesLlamaCpp) {
  const std::string path = spattn::test::model_file("code-tiny-8k.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("code-tiny-8k.gguf in " << spattn::test::models_dir());
  const Loaded m = load(path);
  EXPECT_EQ(m.tok.kind(), Tokenizer::Kind::bpe);
  EXPECT_EQ(m.tok.n_vocab(), 4096);
  EXPECT_EQ(m.tok.bos(), 0);
  EXPECT_TRUE(m.tok.add_bos());
  // llama.cpp's llama-tokenize on the same file and prompt.
  EXPECT_EQ(m.tok.encode("import os\nimport sys\n\n\ndef main():\n"),
            (Ids{0, 3192, 3162, 199, 3192, 2610, 1193, 199, 271, 664, 259, 449, 26, 199}));
  // Pieces, by hand: 'Ġ' stands for a space and 'Ċ' for a newline in GPT-2's byte map.
  EXPECT_EQ(m.tok.text(3162), "\xc4\xa0os");
  EXPECT_EQ(m.tok.text(1193), "\xc4\x8a\xc4\x8a");
  EXPECT_EQ(m.tok.piece(1193), "\n\n");
  EXPECT_EQ(m.tok.text(449), "()");
  EXPECT_EQ(m.tok.piece(0), "<|endoftext|>");
  EXPECT_EQ(m.tok.piece(0, false), "");
  // Written in the text, <|endoftext|> is the control token only when special parsing is on.
  EXPECT_EQ(m.tok.encode("a<|endoftext|>", false, true).back(), 0);
  EXPECT_NE(m.tok.encode("a<|endoftext|>", false, false).back(), 0);
  expect_round_trips(m.tok, "code-tiny-8k");
}

// llama.cpp's ids for accents, CJK, emoji (one with a skin-tone modifier), whitespace runs and
// indented code, on both real model vocabularies (byte-level BPE and SentencePiece). Made with
// llama.cpp 0.5.0-dev (build 1, commit de3ff81, as bundled by node-llama-cpp 3.22.1):
//   llama-tokenize -m MODEL.gguf -p TEXT --ids --log-disable
const std::vector<std::string> kParityText = {
    "caf\xc3\xa9 na\xc3\xafve r\xc3\xa9sum\xc3\xa9",
    "\xe6\x97\xa5\xe6\x9c\xac\xe8\xaa\x9e\xe3\x81\xae\xe3\x83\x86\xe3\x82\xad\xe3\x82\xb9\xe3\x83\x88"
    " \xe4\xb8\xad\xe6\x96\x87",
    "emoji \xf0\x9f\x98\x80\xf0\x9f\x8e\x89\xf0\x9f\x91\x8d\xf0\x9f\x8f\xbd done",
    "a  b   c\t\td\n\n\n    e   ",
    "    def f(x):\n        return x  # comment\n",
};

TEST(TokenizerReal, RealVocabulariesMatchLlamaCppIds) {
  const std::string code = spattn::test::model_file("code-tiny-8k.gguf");
  const std::string stories = spattn::test::model_file("stories260K.gguf");
  if (code.empty() || stories.empty())
    SPATTN_MISSING_ASSET("code-tiny-8k.gguf or stories260K.gguf in " << spattn::test::models_dir());
  const std::vector<Ids> code_ids = {
      {0, 2283, 70, 128, 103, 348, 65, 128, 108, 415, 674, 128, 103, 83, 379, 128, 103},
      {0,   163, 246, 99,  163, 251, 106, 165, 104, 253, 160, 224, 107, 160, 226, 229,
       160, 225, 256, 160, 225, 118, 160, 226, 231, 221, 161, 117, 256, 163, 245, 230},
      {0,   915, 79,  74,  73,  221, 173, 254, 247, 223, 173, 254,
       237, 232, 173, 254, 240, 236, 173, 254, 238, 122, 426, 863},
      {0, 65, 221, 324, 257, 273, 198, 198, 68, 199, 663, 629, 267},
      {0, 267, 768, 306, 8, 88, 909, 404, 446, 754, 221, 521, 273, 642, 644, 199},
  };
  const std::vector<Ids> stories_ids = {
      {1, 280, 412, 431, 485, 297, 412, 198, 178, 360, 352, 485, 419, 425, 423, 485},
      {1,   410, 233, 154, 168, 233, 159, 175, 235, 173, 161, 230, 132, 177, 230, 134, 137,
       230, 133, 176, 230, 133, 188, 230, 134, 139, 410, 231, 187, 176, 233, 153, 138},
      {1,   344, 423, 414, 449, 417, 410, 243, 162, 155, 131, 243, 162,
       145, 140, 243, 162, 148, 144, 243, 162, 146, 192, 279, 289, 411},
      {1, 261, 410, 268, 410, 410, 280, 12, 12, 418, 13, 13, 13, 410, 410, 410, 344, 410, 410, 410},
      {1,   410, 410, 410, 410, 279, 411, 431, 272, 489, 444, 488, 467,
       13,  410, 410, 410, 410, 410, 410, 410, 410, 276, 413, 425, 420,
       416, 410, 444, 410, 410, 38,  280, 287, 423, 377, 13},
  };
  const Loaded c = load(code), s = load(stories);
  for (size_t i = 0; i < kParityText.size(); ++i) {
    EXPECT_EQ(c.tok.encode(kParityText[i]), code_ids[i])
        << "code-tiny-8k: '" << kParityText[i] << "'";
    EXPECT_EQ(s.tok.encode(kParityText[i]), stories_ids[i])
        << "stories260K: '" << kParityText[i] << "'";
    EXPECT_EQ(c.tok.decode(code_ids[i]), kParityText[i]);
    EXPECT_EQ(s.tok.decode(stories_ids[i]), kParityText[i]);
  }
}

TEST(TokenizerReal, LlamaSpmVocabulary) {
  const std::string path = spattn::test::model_file("ggml-vocab-llama-spm.gguf");
  if (path.empty())
    SPATTN_MISSING_ASSET("ggml-vocab-llama-spm.gguf in " << spattn::test::models_dir());
  const Loaded m = load(path);
  const Tokenizer& t = m.tok;
  EXPECT_EQ(t.kind(), Tokenizer::Kind::spm);
  EXPECT_EQ(t.encode("Hello world"), (Ids{1, 15043, 3186}));
  EXPECT_EQ(t.text(15043), "\xe2\x96\x81Hello");
  EXPECT_EQ(t.text(3186), "\xe2\x96\x81world");
  // The llama emoji has no piece: byte fallback <0xF0><0x9F><0xA6><0x99> (id = 3 + byte).
  const Ids ids = t.encode(" this is \xf0\x9f\xa6\x99.cpp");
  EXPECT_EQ(ids, (Ids{1, 29871, 445, 338, 29871, 243, 162, 169, 156, 29889, 8223}));
  const std::vector<std::string> pieces = {
      "<s>",    "\xe2\x96\x81", "\xe2\x96\x81this", "\xe2\x96\x81is", "\xe2\x96\x81",
      "<0xF0>", "<0x9F>",       "<0xA6>",           "<0x99>",         ".",
      "cpp"};
  for (size_t i = 0; i < ids.size(); ++i) EXPECT_EQ(t.text(ids[i]), pieces[i]) << i;
  EXPECT_EQ(t.piece(243), "\xf0");
  EXPECT_EQ(t.piece(15043), " Hello");
  expect_round_trips(t, "llama-spm");
}

TEST(TokenizerReal, Gpt2Vocabulary) {
  const std::string path = spattn::test::model_file("ggml-vocab-gpt-2.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("ggml-vocab-gpt-2.gguf in " << spattn::test::models_dir());
  const Loaded m = load(path);
  const Tokenizer& t = m.tok;
  EXPECT_FALSE(t.add_bos());
  EXPECT_EQ(t.bos(), 50256);
  EXPECT_EQ(t.encode("Hello world"), (Ids{15496, 995}));
  EXPECT_EQ(t.text(15496), "Hello");
  EXPECT_EQ(t.text(995), "\xc4\xa0world");
  // Contractions are their own words; digits group; a space before a letter joins it.
  const Ids ids = t.encode("it's 42");
  ASSERT_EQ(ids.size(), 3u);
  EXPECT_EQ(t.text(ids[0]), "it");
  EXPECT_EQ(t.text(ids[1]), "'s");
  EXPECT_EQ(t.text(ids[2]),
            "\xc4\xa0"
            "42");
  expect_round_trips(t, "gpt-2");
  // Invalid UTF-8 survives too: every byte has a stand-in character.
  const std::string bad = "ok\xff\xfe\x80 x";
  EXPECT_EQ(t.decode(t.encode(bad)), bad);
}

TEST(TokenizerReal, Stories260k) {
  const std::string path = spattn::test::model_file("stories260K.gguf");
  if (path.empty()) SPATTN_MISSING_ASSET("stories260K.gguf in " << spattn::test::models_dir());
  const Loaded m = load(path);
  EXPECT_EQ(m.tok.kind(), Tokenizer::Kind::spm);
  EXPECT_TRUE(m.tok.add_bos());
  EXPECT_EQ(m.tok.bos(), 1);
  EXPECT_EQ(m.tok.eos(), 2);
  EXPECT_TRUE(m.tok.is_eog(2));
  const Ids ids = m.tok.encode("Once upon a time");
  EXPECT_EQ(ids.front(), 1);
  std::string joined;
  for (size_t i = 1; i < ids.size(); ++i) joined += m.tok.text(ids[i]);
  EXPECT_EQ(joined,
            "\xe2\x96\x81Once\xe2\x96\x81upon\xe2\x96\x81"
            "a\xe2\x96\x81time");
  expect_round_trips(m.tok, "stories260K");
}

// ---- Made-up vocabularies ----

// SentencePiece: "ab" scores higher than "bc", so "abc" is "ab" + "c"; "x" has no piece
// and falls back to its byte.
Writer spm_vocab() {
  std::vector<std::string> toks = {"<unk>", "<s>", "</s>"};
  std::vector<int32_t> types = {2, 3, 3};
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back(buf);
    types.push_back(6);
  }
  for (const char* p : {"\xe2\x96\x81", "a", "b", "c", "ab", "bc",
                        "\xe2\x96\x81"
                        "a"}) {
    toks.push_back(p);
    types.push_back(1);
  }
  std::vector<float> scores(toks.size(), 0.0f);
  scores[259 + 4] = -1.0f;  // ab
  scores[259 + 5] = -2.0f;  // bc
  scores[259 + 6] = -3.0f;  // ▁a
  Writer w;
  w.set("tokenizer.ggml.model", "llama");
  w.set("tokenizer.ggml.tokens", toks);
  w.set("tokenizer.ggml.scores", scores);
  w.set("tokenizer.ggml.token_type", types);
  return w;
}

TEST(TokenizerMadeUp, SpmMergesByScoreAndFallsBackToBytes) {
  const std::vector<uint8_t> b = spm_vocab().bytes();
  const File f = File::from_memory(b.data(), b.size());
  const Tokenizer t = Tokenizer::from_gguf(f);
  EXPECT_EQ(t.bos(), 1);
  // " abc" -> "▁abc": ▁a (-3), ab (-1), bc (-2): ab first; then ▁+ab and ab+c have no piece.
  EXPECT_EQ(t.encode("abc"), (Ids{1, 259, 263, 262}));
  EXPECT_EQ(t.encode("x", false, false), (Ids{259, 3 + 'x'}));
  EXPECT_EQ(t.decode(t.encode("bcx a")), "bcx a");
  expect_round_trips(t, "made-up spm");
}

// "<|endoftext|>", then GPT-2's 256 byte stand-in characters (ids 1-256), built the way GPT-2
// does, independently of the library.
std::vector<std::string> bpe_byte_tokens() {
  std::vector<std::string> toks{"<|endoftext|>"};
  int extra = 0;
  for (int b = 0; b < 256; ++b) {
    const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
    const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + extra++);
    std::string s;
    if (cp < 0x80)
      s = char(cp);
    else
      s = {char(0xc0 | (cp >> 6)), char(0x80 | (cp & 0x3f))};
    toks.push_back(s);
  }
  return toks;
}

TEST(TokenizerMadeUp, BpeMergesByRank) {
  // Byte-level: the 256 stand-in characters, then merges "a b" (rank 0), "b c" (rank 1),
  // "ab c" (rank 2), and "Ġ a" (rank 3).
  std::vector<std::string> toks = bpe_byte_tokens();
  for (const char* p : {"ab", "bc", "abc",
                        "\xc4\xa0"
                        "a"})
    toks.push_back(p);
  std::vector<int32_t> types(toks.size(), 1);
  types[0] = 3;
  Writer w;
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.tokens", toks);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.merges", std::vector<std::string>{"a b", "b c", "ab c", "\xc4\xa0 a"});
  w.set("tokenizer.ggml.bos_token_id", uint32_t(0));
  w.set("tokenizer.ggml.add_bos_token", true);
  const std::vector<uint8_t> b = w.bytes();
  const File f = File::from_memory(b.data(), b.size());
  const Tokenizer t = Tokenizer::from_gguf(f);
  // "abc": a+b (rank 0) first, then ab+c (rank 2) -> "abc".
  EXPECT_EQ(t.encode("abc"), (Ids{0, 259}));
  // " abc": a+b (0) beats Ġ+a (3), then ab+c; "Ġ abc" is no merge: Ġ (byte 32), abc.
  EXPECT_EQ(t.encode(" abc", false, false), (Ids{1 + 32, 259}));
  EXPECT_EQ(t.encode(" a", false, false), (Ids{260}));
  EXPECT_EQ(t.encode("bc", false, false), (Ids{258}));
  expect_round_trips(t, "made-up bpe");
}

// End of generation as llama.cpp marks it: EOS and EOT by key, turn enders and FIM tokens by
// their text; in a vocabulary with <|return|> and <|call|> (gpt-oss's o200k_harmony) <|end|>
// closes a message and does not end the answer, elsewhere (Phi-3) it does.
TEST(TokenizerMadeUp, EndOfGenerationAsLlamaCppMarksIt) {
  const auto vocab = [](const std::vector<std::string>& added, int32_t eos) {
    std::vector<std::string> toks = bpe_byte_tokens();
    for (const std::string& a : added) toks.push_back(a);
    std::vector<int32_t> types(toks.size(), 1);
    for (size_t i = 257; i < toks.size(); ++i) types[i] = 3;
    Writer w;
    w.set("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.tokens", toks);
    w.set("tokenizer.ggml.token_type", types);
    w.set("tokenizer.ggml.merges", std::vector<std::string>{});
    w.set("tokenizer.ggml.eos_token_id", uint32_t(eos));
    return spattn::test::MadeUpVocab(w.bytes());
  };
  // gpt-oss: <|return|> (257, EOS), <|call|> (258) end it; <|end|> (259), <|start|> do not.
  const auto oss = vocab({"<|return|>", "<|call|>", "<|end|>", "<|start|>"}, 257);
  EXPECT_TRUE(oss.tok.is_eog(257));
  EXPECT_TRUE(oss.tok.is_eog(258));
  EXPECT_FALSE(oss.tok.is_eog(259));
  EXPECT_FALSE(oss.tok.is_eog(260));
  EXPECT_TRUE(oss.tok.is_eog(0));  // <|endoftext|>, by its text
  EXPECT_FALSE(oss.tok.is_eog(1));
  EXPECT_FALSE(oss.tok.is_eog(-1));
  // Phi-3 / ChatML / Qwen's coder: <|end|>, <|im_end|>, <|fim_pad|> and <|file_sep|> end it.
  const auto chat =
      vocab({"<|end|>", "<|im_end|>", "<|im_start|>", "<|fim_pad|>", "<|file_sep|>"}, 0);
  for (int32_t id : {0, 257, 258, 260, 261}) EXPECT_TRUE(chat.tok.is_eog(id)) << id;
  EXPECT_FALSE(chat.tok.is_eog(259));  // <|im_start|>
}

TEST(TokenizerMadeUp, BpeMergeTablesKeepLlamaCppsRules) {
  // "x y" makes "xy", which is no token, and "xy z" merges it on to "xyz"; "p q" is listed
  // twice (ranks 2 and 4: the first counts, so p+q beats q+r at rank 3); "pq" is listed twice
  // as a token (the later id counts).
  std::vector<std::string> toks = bpe_byte_tokens();
  for (const char* p : {"xyz", "pq", "qr", "pq"}) toks.push_back(p);  // ids 257-260
  Writer w;
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.tokens", toks);
  w.set("tokenizer.ggml.merges", std::vector<std::string>{"x y", "xy z", "p q", "q r", "p q"});
  const std::vector<uint8_t> b = w.bytes();
  const File f = File::from_memory(b.data(), b.size());
  const Tokenizer t = Tokenizer::from_gguf(f);
  EXPECT_EQ(t.encode("xyz", false, false), (Ids{257}));
  // x+y merges, but "xy" is no token: its characters, one by one.
  EXPECT_EQ(t.encode("xy", false, false), (Ids{1 + 'x', 1 + 'y'}));
  EXPECT_EQ(t.encode("pqr", false, false), (Ids{260, 1 + 'r'}));
  EXPECT_EQ(t.encode("qr", false, false), (Ids{259}));
}

TEST(TokenizerMadeUp, BadMetadataIsNamed) {
  auto expect_bad = [](Writer& w, const std::string& needle) {
    const std::vector<uint8_t> b = w.bytes();
    const File f = File::from_memory(b.data(), b.size(), "v.gguf");
    try {
      Tokenizer::from_gguf(f);
      ADD_FAILURE() << "no error for " << needle;
    } catch (const spattn::Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  Writer none;
  none.set("general.architecture", "llama");
  expect_bad(none, "no tokenizer.ggml.model");
  Writer ugm;
  ugm.set("tokenizer.ggml.model", "t5");
  expect_bad(ugm, "tokenizer.ggml.model 't5' is not supported");
  Writer gemma4;  // Gemma 4's BPE without its merges
  gemma4.set("tokenizer.ggml.model", "gemma4");
  gemma4.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b"});
  expect_bad(gemma4, "a gemma4 tokenizer needs tokenizer.ggml.merges");
  Writer w = spm_vocab();
  w.set("tokenizer.ggml.scores", std::vector<float>{1.0f});
  expect_bad(w, "tokenizer.ggml.scores has 1 entries for 266 tokens");
  Writer w2 = spm_vocab();
  w2.set("tokenizer.ggml.token_type", std::vector<int32_t>{1, 1});
  expect_bad(w2, "token_type has 2 entries");
  Writer w3 = spm_vocab();
  w3.set("tokenizer.ggml.tokens", std::vector<std::string>{});
  expect_bad(w3, "tokenizer.ggml.tokens has 0 entries");
  Writer g;
  g.set("tokenizer.ggml.model", "gpt2");
  g.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b"});
  expect_bad(g, "needs tokenizer.ggml.merges");
  g.set("tokenizer.ggml.merges", std::vector<std::string>{"ab"});
  expect_bad(g, "merges entry 0 is not 'left right'");
  g.set("tokenizer.ggml.merges", std::vector<std::string>{"a b"});
  g.set("tokenizer.ggml.add_bos_token", true);
  expect_bad(g, "add_bos_token is set but the vocabulary has no BOS token");
  g.set("tokenizer.ggml.add_bos_token", false);
  const std::vector<uint8_t> b = g.bytes();
  const File f = File::from_memory(b.data(), b.size());
  const Tokenizer t = Tokenizer::from_gguf(f);
  EXPECT_THROW(t.piece(2), spattn::Error);
  EXPECT_THROW(t.piece(-1), spattn::Error);
}

}  // namespace

namespace {

std::vector<std::string> words(std::string_view text, spattn::PreTokenizer p) {
  std::vector<std::string> out;
  for (std::string_view w : spattn::pretokenize(text, p)) out.emplace_back(w);
  return out;
}
using Words = std::vector<std::string>;

TEST(TokenizerPreSplit, Gpt2Llama3AndQwen2Regexes) {
  using spattn::PreTokenizer;
  // GPT-2: digits in one run, a space joins the next word, the last of a whitespace run
  // before a word goes with it.
  EXPECT_EQ(words("I'll pay 12345!!  ok\n\nx", PreTokenizer::gpt2),
            (Words{"I", "'ll", " pay", " 12345", "!!", " ", " ok", "\n", "\n", "x"}));
  // Llama 3: digits in threes, case-insensitive contractions, newlines kept together.
  EXPECT_EQ(words("I'LL pay 12345!!\n\nx", PreTokenizer::llama3),
            (Words{"I", "'LL", " pay", " ", "123", "45", "!!\n\n", "x"}));
  // Qwen2: single digits.
  EXPECT_EQ(words("12 ab", PreTokenizer::qwen2), (Words{"1", "2", " ab"}));
  // Unicode classes: letters with accents and CJK are \p{L}, Arabic-Indic digits \p{N}.
  EXPECT_EQ(words("caf\xc3\xa9 \xe4\xb8\xad\xe6\x96\x87 \xd9\xa3\xd9\xa4", PreTokenizer::gpt2),
            (Words{"caf\xc3\xa9", " \xe4\xb8\xad\xe6\x96\x87", " \xd9\xa3\xd9\xa4"}));
  // Invalid UTF-8 is never dropped.
  std::string joined;
  for (const std::string& w : words("a\xff\xfe b", PreTokenizer::gpt2)) joined += w;
  EXPECT_EQ(joined, "a\xff\xfe b");
}

// GPT-4o's and Tekken's splits; the words are llama.cpp's (its unicode_regex_split with the
// expressions llm_tokenizer_bpe gives the two, commit de3ff81).
TEST(TokenizerPreSplit, Gpt4oAndTekkenCutLetterRunsAtCaseChanges) {
  using spattn::PreTokenizer;
  // A capital starts a word; GPT-4o keeps a contraction on its word (case by case) and cuts
  // digits in threes, Tekken cuts contractions off and digits one by one. Llama 3's split
  // keeps "HelloWorld" whole.
  const std::string text = "HelloWorld DON'T it's 12345";
  EXPECT_EQ(words(text, PreTokenizer::gpt4o),
            (Words{"Hello", "World", " DON'T", " it's", " ", "123", "45"}));
  EXPECT_EQ(words(text, PreTokenizer::tekken),
            (Words{"Hello", "World", " DON", "'T", " it", "'s", " ", "1", "2", "3", "4", "5"}));
  EXPECT_EQ(words(text, PreTokenizer::llama3),
            (Words{"HelloWorld", " DON", "'T", " it", "'s", " ", "123", "45"}));
  // Capitals run on until the last one before small letters: "HTTPServer" is one word.
  EXPECT_EQ(words("HTTPServer iOS", PreTokenizer::gpt4o), (Words{"HTTPServer", " i", "OS"}));
  // As llama.cpp runs them: a letter outside ASCII is of both cases ("aÉb" is one word, where
  // the published classes cut "a", "Éb"), a combining mark is no part of a word (U+0301 starts
  // one here), and U+017F LONG S is no contraction's s.
  for (PreTokenizer p : {PreTokenizer::gpt4o, PreTokenizer::tekken})
    EXPECT_EQ(words("a\xc3\x89"
                    "b cafe\xcc\x81"
                    "s x'\xc5\xbf",
                    p),
              (Words{"a\xc3\x89"
                     "b",
                     " cafe",
                     "\xcc\x81"
                     "s",
                     " x", "'\xc5\xbf"}));
  // Punctuation takes the newlines and slashes after it.
  EXPECT_EQ(words("io/file.h>/\n//x", PreTokenizer::gpt4o),
            (Words{"io", "/file", ".h", ">/\n//", "x"}));
}

// Every name llama.cpp gives these two splits: the made-up merges "o W" and "1 2" show which
// split ran ("oW" is one word only where case changes do not cut), and Tekken adds BOS when
// the file does not say (llama.cpp's default for it, as for Llama 3's). The ids are
// llama-tokenize's on the same vocabulary.
TEST(TokenizerPreSplit, Gpt4oAndTekkenNames) {
  std::vector<std::string> toks = bpe_byte_tokens();
  toks.push_back("oW");  // 257
  toks.push_back("12");  // 258
  auto load_named = [&](const char* pre) {
    Writer w;
    w.set("tokenizer.ggml.model", "gpt2");
    w.set("tokenizer.ggml.pre", pre);
    w.set("tokenizer.ggml.tokens", toks);
    w.set("tokenizer.ggml.merges", std::vector<std::string>{"o W", "1 2"});
    w.set("tokenizer.ggml.bos_token_id", uint32_t(0));
    return spattn::test::MadeUpVocab(w.bytes());
  };
  const std::string text = "oW 1234";
  for (const char* pre : {"gpt-4o", "llama4", "kanana2", "talkie", "minimax-m2"}) {
    const auto v = load_named(pre);
    EXPECT_FALSE(v.tok.add_bos()) << pre;
    EXPECT_EQ(v.tok.encode(text), (Ids{1 + 'o', 1 + 'W', 1 + ' ', 258, 1 + '3', 1 + '4'})) << pre;
  }
  const auto tekken = load_named("tekken");
  EXPECT_TRUE(tekken.tok.add_bos());
  EXPECT_EQ(tekken.tok.encode(text),
            (Ids{0, 1 + 'o', 1 + 'W', 1 + ' ', 1 + '1', 1 + '2', 1 + '3', 1 + '4'}));
  const auto llama3 = load_named("llama-bpe");  // BOS too: llama.cpp's default for Llama 3
  EXPECT_TRUE(llama3.tok.add_bos());
  EXPECT_EQ(llama3.tok.encode(text), (Ids{0, 257, 1 + ' ', 258, 1 + '3', 1 + '4'}));
}

TEST(TokenizerPreSplit, UnknownPreTokenizerIsRefused) {
  Writer w;
  w.set("tokenizer.ggml.model", "gpt2");
  w.set("tokenizer.ggml.pre", "made-up-split");
  w.set("tokenizer.ggml.tokens", std::vector<std::string>{"a", "b"});
  w.set("tokenizer.ggml.merges", std::vector<std::string>{"a b"});
  const std::vector<uint8_t> b = w.bytes();
  const File f = File::from_memory(b.data(), b.size(), "v.gguf");
  try {
    Tokenizer::from_gguf(f);
    ADD_FAILURE() << "accepted";
  } catch (const spattn::Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.ggml.pre 'made-up-split' is not supported"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace

namespace {

TEST(TokenizerMadeUp, SpmBrokenUtf8BeforeASpaceRoundTrips) {
  // A 4-byte lead with two continuation bytes, then a space: the broken character must not
  // swallow the first byte of the space's U+2581 (a libFuzzer finding).
  const std::vector<uint8_t> b = spm_vocab().bytes();
  const File f = File::from_memory(b.data(), b.size());
  const Tokenizer t = Tokenizer::from_gguf(f);
  const std::string s = "c\xf0\x9f\x99 \xff\xfe";
  EXPECT_EQ(t.decode(t.encode(s)), s);
}

}  // namespace

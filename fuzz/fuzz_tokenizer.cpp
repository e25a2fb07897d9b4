// libFuzzer target: encoding arbitrary bytes with a made-up byte-level BPE under every word
// split spattn implements (tokenizer.ggml.pre: each list of regexes, and Llama 3's and
// Tekken's ignore_merges), a SentencePiece vocabulary with byte fallback and Gemma 4's BPE
// with byte tokens. Each must give back exactly the input bytes (control-token text aside; for
// SentencePiece and Gemma 4, text without a literal U+2581, which they cannot tell from the
// space it stands for), so a mismatch aborts as a finding. WordPiece, which normalises, must
// give the same ids again when its decoded text is encoded.
#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "made_up_vocab.hpp"
#include "spattn/tokenizer.hpp"

using namespace spattn;

namespace {

using Vocab = test::MadeUpVocab;

// SentencePiece's byte tokens <0x00> .. <0xFF> (type 6), as Gemma 4's vocabulary has them too.
void add_byte_tokens(std::vector<std::string>& toks, std::vector<int32_t>& types) {
  for (int b = 0; b < 256; ++b) {
    char buf[8];
    std::snprintf(buf, sizeof buf, "<0x%02X>", b);
    toks.push_back(buf);
    types.push_back(6);
  }
}

std::vector<uint8_t> vocab_bytes(const char* kind, const char* pre = "gpt-2") {
  gguf::Writer w;
  std::vector<std::string> toks;
  std::vector<int32_t> types;
  std::vector<std::string> merges;
  std::vector<float> scores;
  if (std::string(kind) == "bert") {
    toks = {"[PAD]", "[UNK]", "[CLS]", "[SEP]"};
    types = {3, 3, 3, 3};
    for (const char* p : {"\xe2\x96\x81"
                          "he",
                          "\xe2\x96\x81"
                          "hello",
                          "l", "lo", "o", "w",
                          "\xe2\x96\x81"
                          "!",
                          "\xe2\x96\x81"
                          "e",
                          "\xe2\x96\x81"
                          "\xe4\xb8\xad"}) {
      toks.push_back(p);
      types.push_back(1);
    }
  } else if (std::string(kind) == "gemma4") {
    toks = {"<pad>", "<eos>", "<bos>", "<unk>"};
    types = {3, 3, 3, 2};
    add_byte_tokens(toks, types);
    for (const char* p : {"\xe2\x96\x81", "h", "e", "he",
                          "\xe2\x96\x81"
                          "he",
                          "\n\n"}) {
      toks.push_back(p);
      types.push_back(1);
    }
    merges = {"h e", "\xe2\x96\x81 he"};
    w.set("tokenizer.ggml.merges", merges);
  } else if (std::string(kind) == "gpt2") {
    toks.push_back("<|endoftext|>");
    types.push_back(3);
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const unsigned cp = printable ? unsigned(b) : unsigned(256 + extra++);
      std::string s;
      if (cp < 0x80)
        s = char(cp);
      else
        s = {char(0xc0 | (cp >> 6)), char(0x80 | (cp & 0x3f))};
      toks.push_back(s);
      types.push_back(1);
    }
    for (const char* m : {"h e", "l l", "he ll", "hell o", "\xc4\xa0 w", "o r"}) {
      std::string s(m);
      merges.push_back(s);
      s.erase(s.find(' '), 1);
      toks.push_back(s);
      types.push_back(1);
    }
    w.set("tokenizer.ggml.merges", merges);
    w.set("tokenizer.ggml.pre", pre);
  } else {
    toks = {"<unk>", "<s>", "</s>"};
    types = {2, 3, 3};
    add_byte_tokens(toks, types);
    for (const char* p : {"\xe2\x96\x81", "a", "b", "ab",
                          "\xe2\x96\x81"
                          "a",
                          "\xc3\xa9"}) {
      toks.push_back(p);
      types.push_back(1);
    }
    for (size_t i = 0; i < toks.size(); ++i) scores.push_back(-float(i % 7));
    w.set("tokenizer.ggml.scores", scores);
  }
  w.set("tokenizer.ggml.model", kind);
  w.set("tokenizer.ggml.tokens", toks);
  w.set("tokenizer.ggml.token_type", types);
  w.set("tokenizer.ggml.bos_token_id", uint32_t(std::string(kind) == "gpt2" ? 0 : 1));
  return w.bytes();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // One BPE vocabulary per word split (the names map to distinct splits).
  // Owned by statics (freed at exit, so LeakSanitizer sees nothing left over).
  static const std::vector<std::unique_ptr<const Vocab>> bpe = [] {
    std::vector<std::unique_ptr<const Vocab>> v;
    for (const char* pre : {"gpt-2", "llama-bpe", "qwen2", "qwen35", "deepseek-llm",
                            "deepseek-coder", "falcon", "starcoder", "gpt-4o", "tekken"})
      v.push_back(std::make_unique<const Vocab>(vocab_bytes("gpt2", pre)));
    return v;
  }();
  static const Vocab spm(vocab_bytes("llama"));
  static const Vocab gemma4(vocab_bytes("gemma4"));
  static const Vocab wpm(vocab_bytes("bert"));
  const std::string text(reinterpret_cast<const char*>(data), size);
  const bool spm_exact = text.find("\xe2\x96\x81") == std::string::npos;
  std::vector<const Vocab*> all;
  for (const auto& v : bpe) all.push_back(v.get());
  all.push_back(&spm);
  all.push_back(&gemma4);
  for (const Vocab* v : all) {
    const std::vector<int32_t> ids = v->tok.encode(text, true, false);
    const std::string back = v->tok.decode(ids);
    const bool exact = v->tok.kind() == Tokenizer::Kind::bpe && v != &gemma4;
    if (back != text && (exact || spm_exact)) std::abort();  // every byte must survive
  }
  // WordPiece normalises (case, accents, white space), so its round trip is on its own
  // output: text whose words all cut into pieces decodes to words that encode to the same ids.
  const std::vector<int32_t> ids = wpm.tok.encode(text, false, false);
  bool has_unk = false;
  for (int32_t id : ids) has_unk |= id == 1;
  if (!has_unk && wpm.tok.encode(wpm.tok.decode(ids), false, false) != ids) std::abort();
  return 0;
}

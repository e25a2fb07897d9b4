// Tokenizer: the vocabulary from GGUF metadata, the split of text around special tokens,
// and decoding. The two encoders are in tokenizer_spm.cpp and tokenizer_bpe.cpp.
#include <algorithm>
#include <cstring>

#include "model/tokenizer_impl.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

// Optional id key: absent or out of range (GGUF files write u32 -1 for "none") gives `dflt`
// when that is a valid id, else -1.
int32_t optional_id(const gguf::File& f, const char* key, int32_t dflt, int32_t n_vocab) {
  if (!f.has(key)) return dflt < n_vocab ? dflt : -1;
  const int64_t v = f.get_int(key);
  return v >= 0 && v < n_vocab ? int32_t(v) : -1;
}

// SentencePiece writes spaces as U+2581 LOWER ONE EIGHTH BLOCK.
constexpr std::string_view kSpmSpace = "\xe2\x96\x81";

std::string spm_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    if (c == ' ')
      out += kSpmSpace;
    else
      out += c;
  }
  return out;
}

std::string spm_unescape(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    if (s.compare(i, 3, kSpmSpace) == 0) {
      out += ' ';
      i += 3;
    } else {
      out += s[i++];
    }
  }
  return out;
}

// Decodes UTF-8 code points of a BPE token back to the bytes they stand for.
std::string bpe_unmap(const std::string& s) {
  std::string out;
  for (size_t i = 0; i < s.size();) {
    const unsigned char c = s[i];
    const size_t n = std::min(utf8_len(c), s.size() - i);
    uint32_t cp = n == 1 ? c : c & (0xff >> (n + 1));
    for (size_t j = 1; j < n; ++j) cp = (cp << 6) | (uint8_t(s[i + j]) & 0x3f);
    const int b = unicode_to_byte(cp);
    if (b >= 0)
      out += char(b);
    else
      out.append(s, i, n);  // a character that stands for no byte: keep it as is
    i += n;
  }
  return out;
}

constexpr const char* kPreTokenizerNames =
    "gpt-2, phi-2, mpt, olmo, llama-bpe, llama3, llama-v3, falcon3, pixtral, dbrx, smaug-bpe, "
    "qwen2, deepseek-r1-qwen, stablelm2, qwen35, deepseek-llm, deepseek-coder, falcon, starcoder, "
    "refact, command-r, smollm, codeshell, exaone, minerva-7b, gpt-4o, llama4, kanana2, talkie, "
    "minimax-m2, tekken";

// What tokenizer.ggml.pre says, as llama.cpp's llama_vocab::load maps the name: the split,
// whether whole-word tokens bypass the merges, and whether BOS is added when the file has no
// tokenizer.ggml.add_bos_token.
struct PreTokenizerName {
  const char* name;
  PreTokenizer split;
  bool ignore_merges = false;
  bool add_bos = false;
};

// The entry for `pre`, or null for a name not in kPreTokenizerNames.
const PreTokenizerName* pre_tokenizer_named(const std::string& pre) {
  using P = PreTokenizer;
  // A table: rows grouped by hand, not one field a line.
  // clang-format off
  static constexpr PreTokenizerName kTable[] = {
      {"gpt-2", P::gpt2},           {"phi-2", P::gpt2},
      {"mpt", P::gpt2},             {"olmo", P::gpt2},
      {"llama-bpe", P::llama3, true, true}, {"llama3", P::llama3, true, true},
      {"llama-v3", P::llama3, true, true},  {"falcon3", P::llama3, true, true},
      {"pixtral", P::llama3, true, true},   {"dbrx", P::llama3},
      {"smaug-bpe", P::llama3},     {"qwen2", P::qwen2},
      {"deepseek-r1-qwen", P::qwen2}, {"stablelm2", P::qwen2},
      {"qwen35", P::qwen35},        {"deepseek-llm", P::deepseek_llm},
      {"deepseek-coder", P::deepseek_coder},
      {"falcon", P::falcon},        {"starcoder", P::starcoder},
      {"refact", P::starcoder},     {"command-r", P::starcoder},
      {"smollm", P::starcoder},     {"codeshell", P::starcoder},
      {"exaone", P::starcoder},     {"minerva-7b", P::starcoder},
      // o200k: gpt-oss, Llama 4, Kanana 2, Talkie; MiniMax M2 is its own type in llama.cpp
      // with the same expression and flags.
      {"gpt-4o", P::gpt4o},         {"llama4", P::gpt4o},
      {"kanana2", P::gpt4o},        {"talkie", P::gpt4o},
      {"minimax-m2", P::gpt4o},
      {"tekken", P::tekken, true, true},  // Mistral Nemo, Small 3, Ministral, Devstral
  };
  // clang-format on
  for (const PreTokenizerName& e : kTable)
    if (pre == e.name) return &e;
  return nullptr;
}

// llama.cpp's end-of-generation set (llama_vocab::load; its issue 9606 says why by text): the
// FIM pad / repo / separator ids (by their keys, else by the texts llama.cpp looks for), every
// token whose text is a turn ender some model uses, EOS, EOT and EOM. Where <|return|> and
// <|call|> are both there (gpt-oss's o200k_harmony) or <|calls|> and <|flush|> (solar-open),
// <|end|> closes a message inside an answer and is dropped; where <|tool_response> is (Gemma 4),
// </s> is.
std::vector<int32_t> end_of_generation_ids(const Tokenizer::Impl& t, const gguf::File& f) {
  const int32_t nv = int32_t(t.tokens.size());
  std::vector<int32_t> eog;
  const auto id_of = [&](std::string_view s) { return t.find(s); };
  struct Fim {
    const char* key;
    std::vector<const char*> texts;
  };
  const Fim fims[] = {{"tokenizer.ggml.fim_pad_token_id",
                       {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"}},
                      {"tokenizer.ggml.fim_rep_token_id",
                       {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"}},
                      {"tokenizer.ggml.fim_sep_token_id", {"<|file_sep|>"}}};
  for (const Fim& fim : fims) {
    int32_t id = optional_id(f, fim.key, -1, nv);
    for (size_t i = 0; id < 0 && i < fim.texts.size(); ++i) id = id_of(fim.texts[i]);
    if (id >= 0) eog.push_back(id);
  }
  if (const int32_t id = optional_id(f, "tokenizer.ggml.eom_token_id", -1, nv); id >= 0)
    eog.push_back(id);
  static constexpr const char* kEnders[] = {"<|eot_id|>",
                                            "<|im_end|>",
                                            "<|end|>",
                                            "<|return|>",
                                            "<|call|>",
                                            "<|flush|>",
                                            "<|calls|>",
                                            "<end_of_turn>",
                                            "<|endoftext|>",
                                            "</s>",
                                            "<|eom_id|>",
                                            "<EOT>",
                                            "_<EOT>",
                                            "[EOT]",
                                            "[EOS]",
                                            "<|end_of_text|>",
                                            "<end_of_utterance>",
                                            "<eos>",
                                            "<turn|>",
                                            "<|tool_response>",
                                            "<｜end▁of▁sentence｜>",
                                            "[e~["};
  for (const char* s : kEnders)
    if (const int32_t id = id_of(s); id >= 0) eog.push_back(id);
  for (int32_t id : {t.eos, t.eot})
    if (id >= 0) eog.push_back(id);
  std::sort(eog.begin(), eog.end());
  eog.erase(std::unique(eog.begin(), eog.end()), eog.end());
  const auto in = [&](std::string_view s) {
    const int32_t id = id_of(s);
    return id >= 0 && std::binary_search(eog.begin(), eog.end(), id);
  };
  const auto drop = [&](std::string_view s) {
    const int32_t id = id_of(s);
    eog.erase(std::remove(eog.begin(), eog.end(), id), eog.end());
  };
  const bool harmony = (in("<|return|>") && in("<|call|>")) || (in("<|calls|>") && in("<|flush|>"));
  if (harmony && in("<|end|>")) drop("<|end|>");
  if (in("<|tool_response>") && in("</s>")) drop("</s>");
  return eog;
}

}  // namespace

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

void Tokenizer::Impl::index_tokens() {
  size_t cap = 16;
  while (cap < 2 * tokens.size()) cap *= 2;
  id_slots.assign(cap, -1);
  const size_t mask = cap - 1;
  for (size_t id = 0; id < tokens.size(); ++id) {
    for (size_t i = std::hash<std::string_view>{}(tokens[id]) & mask;; i = (i + 1) & mask) {
      int32_t& slot = id_slots[i];
      if (slot < 0 || tokens[size_t(slot)] == tokens[id]) {
        slot = int32_t(id);  // a text listed twice: the later id, as llama.cpp
        break;
      }
    }
  }
}

Tokenizer Tokenizer::from_gguf(const gguf::File& f) {
  auto t = std::make_unique<Impl>();
  const std::string& path = f.name();
  SPATTN_CHECK(f.has("tokenizer.ggml.model"), path,
               ": no tokenizer.ggml.model (the file has no vocabulary)");
  const std::string model = f.get_string("tokenizer.ggml.model");
  if (model == "llama")
    t->kind = Kind::spm;
  else if (model == "gpt2" || model == "gemma4")
    t->kind = Kind::bpe;
  else if (model == "bert")
    t->kind = Kind::wpm;
  else
    detail::fail(path, ": tokenizer.ggml.model '", model,
                 "' is not supported (spattn reads 'llama', 'gpt2', 'gemma4' and 'bert')");
  t->tokens = f.get_string_array("tokenizer.ggml.tokens");
  const size_t n = t->tokens.size();
  SPATTN_CHECK(n > 0 && n < size_t(INT32_MAX), path, ": tokenizer.ggml.tokens has ", n, " entries");
  if (f.has("tokenizer.ggml.scores")) {
    t->scores = f.get_float_array("tokenizer.ggml.scores");
    SPATTN_CHECK(t->scores.size() == n, path, ": tokenizer.ggml.scores has ", t->scores.size(),
                 " entries for ", n, " tokens");
  } else {
    t->scores.assign(n, 0.0f);
  }
  t->types.assign(n, TokenType::normal);
  if (f.has("tokenizer.ggml.token_type")) {
    const std::vector<int64_t> ty = f.get_int_array("tokenizer.ggml.token_type");
    SPATTN_CHECK(ty.size() == n, path, ": tokenizer.ggml.token_type has ", ty.size(),
                 " entries for ", n, " tokens");
    for (size_t i = 0; i < n; ++i)
      t->types[i] = ty[i] >= 0 && ty[i] <= 6 ? TokenType(ty[i]) : TokenType::undefined;
  }
  t->index_tokens();

  const int32_t nv = int32_t(n);
  if (t->kind == Kind::spm) {
    // llama.cpp's defaults for a SentencePiece vocabulary.
    t->bos = optional_id(f, "tokenizer.ggml.bos_token_id", 1, nv);
    t->eos = optional_id(f, "tokenizer.ggml.eos_token_id", 2, nv);
    t->unk = optional_id(f, "tokenizer.ggml.unknown_token_id", 0, nv);
    t->add_bos = true;
    t->add_space_prefix = true;
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      t->byte_ids[b] = t->find(buf);
    }
  } else if (t->kind == Kind::wpm) {
    // ...for BERT's WordPiece: [CLS] text [SEP] when special tokens are added.
    t->bos = optional_id(f, "tokenizer.ggml.bos_token_id", 101, nv);
    t->eos = optional_id(f, "tokenizer.ggml.eos_token_id", -1, nv);
    t->unk = optional_id(f, "tokenizer.ggml.unknown_token_id", 100, nv);
    t->sep = optional_id(f, "tokenizer.ggml.seperator_token_id", 102, nv);  // GGUF's spelling
    t->add_bos = true;
    std::fill(std::begin(t->byte_ids), std::end(t->byte_ids), -1);
    // BERT's normaliser: lowercase by default; accents stripped when lowercasing unless the
    // file says otherwise (llama.cpp's reading of the two keys).
    if (f.has("tokenizer.ggml.normalizer.lowercase"))
      t->lowercase = f.get_bool("tokenizer.ggml.normalizer.lowercase");
    t->strip_accents = t->lowercase;
    if (f.has("tokenizer.ggml.normalizer.strip_accents"))
      t->strip_accents = f.get_bool("tokenizer.ggml.normalizer.strip_accents");
    for (const std::string& s : t->tokens)
      t->max_token_bytes = std::max(t->max_token_bytes, s.size());
  } else if (model == "gemma4") {
    // ...for Gemma 4's SentencePiece-style BPE: special ids only from the file, BOS always
    // added (llama.cpp overrides add_bos_token = false for it).
    t->spm_style_bpe = true;
    t->pre = PreTokenizer::gemma4;
    t->bos = optional_id(f, "tokenizer.ggml.bos_token_id", -1, nv);
    t->eos = optional_id(f, "tokenizer.ggml.eos_token_id", -1, nv);
    t->unk = optional_id(f, "tokenizer.ggml.unknown_token_id", -1, nv);
    for (int b = 0; b < 256; ++b) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "<0x%02X>", b);
      t->byte_ids[b] = t->find(buf);
    }
    SPATTN_CHECK(f.has("tokenizer.ggml.merges"), path,
                 ": a gemma4 tokenizer needs tokenizer.ggml.merges");
    t->set_merges(f.get_string_views("tokenizer.ggml.merges"), path);
  } else {
    // ...and for GPT-2's byte-level BPE.
    t->bos = optional_id(f, "tokenizer.ggml.bos_token_id", 11, nv);
    t->eos = optional_id(f, "tokenizer.ggml.eos_token_id", 11, nv);
    t->unk = optional_id(f, "tokenizer.ggml.unknown_token_id", -1, nv);
    t->add_bos = false;
    t->add_space_prefix = false;
    std::fill(std::begin(t->byte_ids), std::end(t->byte_ids), -1);
    // The word split: absent means GPT-2's. Other splits would give other ids silently, so
    // names spattn does not implement are refused. The names are llama.cpp's.
    const std::string pre =
        f.has("tokenizer.ggml.pre") ? f.get_string("tokenizer.ggml.pre") : "gpt-2";
    const PreTokenizerName* named = pre_tokenizer_named(pre);
    if (!named)
      detail::fail(path, ": tokenizer.ggml.pre '", pre,
                   "' is not supported (spattn splits words as ", kPreTokenizerNames, ")");
    t->pre = named->split;
    t->ignore_merges = named->ignore_merges;
    t->add_bos = named->add_bos;  // tokenizer.ggml.add_bos_token, below, overrides it
    SPATTN_CHECK(f.has("tokenizer.ggml.merges"), path,
                 ": a gpt2 tokenizer needs tokenizer.ggml.merges");
    t->set_merges(f.get_string_views("tokenizer.ggml.merges"), path);
  }
  t->eot = optional_id(f, "tokenizer.ggml.eot_token_id", -1, nv);
  t->eog = end_of_generation_ids(*t, f);
  if (f.has("tokenizer.ggml.add_bos_token"))
    t->add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
  if (f.has("tokenizer.ggml.add_space_prefix") && t->kind == Kind::spm)
    t->add_space_prefix = f.get_bool("tokenizer.ggml.add_space_prefix");
  if (t->spm_style_bpe) t->add_bos = t->bos >= 0;
  SPATTN_CHECK(!t->add_bos || t->bos >= 0, path,
               ": add_bos_token is set but the vocabulary has no BOS token");

  for (int32_t i = 0; i < nv; ++i) {
    const TokenType ty = t->types[size_t(i)];
    if ((ty == TokenType::control || ty == TokenType::user_defined || ty == TokenType::unknown) &&
        !t->tokens[size_t(i)].empty())
      t->special.push_back(i);
  }
  std::stable_sort(t->special.begin(), t->special.end(), [&](int32_t a, int32_t b) {
    return t->tokens[size_t(a)].size() > t->tokens[size_t(b)].size();
  });
  return Tokenizer(std::move(t));
}

std::vector<int32_t> Tokenizer::encode(std::string_view text) const {
  return encode(text, impl_->add_bos, false);
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool add_bos,
                                       bool parse_special) const {
  const Impl& t = *impl_;
  std::vector<int32_t> out;
  if (add_bos) {
    SPATTN_CHECK(t.bos >= 0, "tokenizer: add_bos asked but the vocabulary has no BOS token");
    out.push_back(t.bos);
  }
  // Cut the text at special tokens written in it, longest token first (llama.cpp's
  // tokenizer_st_partition); user-defined tokens are always recognised, control and unknown
  // ones only with parse_special.
  struct Frag {
    std::string_view text;
    int32_t id;  // -1: plain text
  };
  // No text, no fragment: an empty prompt is no tokens, even with a space prefix (llama.cpp).
  std::vector<Frag> frags;
  if (!text.empty()) frags.push_back({text, -1});
  for (int32_t id : t.special) {
    const TokenType ty = t.types[size_t(id)];
    if (!parse_special && ty != TokenType::user_defined) continue;
    const std::string& s = t.tokens[size_t(id)];
    std::vector<Frag> next;
    for (const Frag& fr : frags) {
      if (fr.id >= 0) {
        next.push_back(fr);
        continue;
      }
      size_t start = 0;
      for (size_t at; (at = fr.text.find(s, start)) != std::string_view::npos;
           start = at + s.size()) {
        if (at > start) next.push_back({fr.text.substr(start, at - start), -1});
        next.push_back({{}, id});
      }
      if (start < fr.text.size()) next.push_back({fr.text.substr(start), -1});
    }
    frags.swap(next);
  }
  bool prev_special = true;  // SentencePiece: a space goes in front of text that starts a run
  for (const Frag& fr : frags) {
    if (fr.id >= 0) {
      out.push_back(fr.id);
      prev_special = true;
      continue;
    }
    if (t.kind == Kind::spm) {
      std::string s;
      if (t.add_space_prefix && prev_special) s = " ";
      s.append(fr.text);
      t.encode_spm(spm_escape(s), out);
    } else if (t.kind == Kind::wpm) {
      t.encode_wpm(fr.text, out);
    } else if (t.spm_style_bpe) {
      t.encode_bpe(spm_escape(fr.text), out);
    } else {
      t.encode_bpe(fr.text, out);
    }
    prev_special = false;
  }
  if (add_bos && t.kind == Kind::wpm && t.sep >= 0) out.push_back(t.sep);
  return out;
}

std::string Tokenizer::piece(int32_t id, bool special) const {
  const Impl& t = *impl_;
  SPATTN_CHECK(id >= 0 && id < int32_t(t.tokens.size()), "tokenizer: token id ", id,
               " is out of range [0, ", t.tokens.size(), ")");
  const std::string& s = t.tokens[size_t(id)];
  switch (t.types[size_t(id)]) {
    case TokenType::control: return special ? s : std::string();
    case TokenType::unknown:
      return t.kind == Kind::spm ? std::string("\xe2\x96\x85") : (special ? s : std::string());
    case TokenType::byte:
      if ((t.kind == Kind::spm || t.spm_style_bpe) && s.size() == 6 && s.compare(0, 3, "<0x") == 0)
        return std::string(1, char(std::strtol(s.substr(3, 2).c_str(), nullptr, 16)));
      return s;
    case TokenType::user_defined: return s;
    case TokenType::normal:
    case TokenType::undefined:
    case TokenType::unused: break;
  }
  return t.kind == Kind::bpe && !t.spm_style_bpe ? bpe_unmap(s) : spm_unescape(s);
}

std::string Tokenizer::decode(const std::vector<int32_t>& ids) const {
  std::string out;
  bool first = true;
  for (int32_t id : ids) {
    std::string p = piece(id, false);
    if (impl_->types[size_t(id)] == TokenType::control) continue;
    // The space encode put in front of the text (SentencePiece), or WordPiece's first word.
    const bool spaced =
        (impl_->kind == Kind::spm && impl_->add_space_prefix) || impl_->kind == Kind::wpm;
    if (first && spaced && !p.empty() && p[0] == ' ') p.erase(0, 1);
    first = false;
    out += p;
  }
  return out;
}

Tokenizer::Kind Tokenizer::kind() const { return impl_->kind; }
int32_t Tokenizer::n_vocab() const { return int32_t(impl_->tokens.size()); }
int32_t Tokenizer::bos() const { return impl_->bos; }
int32_t Tokenizer::eos() const { return impl_->eos; }
bool Tokenizer::add_bos() const { return impl_->add_bos; }
bool Tokenizer::is_eog(int32_t id) const {
  return std::binary_search(impl_->eog.begin(), impl_->eog.end(), id);
}
Tokenizer::TokenType Tokenizer::type(int32_t id) const {
  SPATTN_CHECK(id >= 0 && id < n_vocab(), "tokenizer: token id ", id, " is out of range");
  return impl_->types[size_t(id)];
}
const std::string& Tokenizer::text(int32_t id) const {
  SPATTN_CHECK(id >= 0 && id < n_vocab(), "tokenizer: token id ", id, " is out of range");
  return impl_->tokens[size_t(id)];
}
float Tokenizer::score(int32_t id) const {
  SPATTN_CHECK(id >= 0 && id < n_vocab(), "tokenizer: token id ", id, " is out of range");
  return impl_->scores[size_t(id)];
}

}  // namespace spattn

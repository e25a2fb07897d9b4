// Byte-level BPE pre-tokenizers and GPT-2's byte-to-character map. Each split is the regex
// its model published (GPT-2's; Llama 3's, which llama.cpp calls llama-bpe; Qwen2's), run by
// PCRE2 in UTF mode with Unicode properties (\p{L} letters, \p{N} numbers, \s white space),
// so the character classes are the Unicode ones llama.cpp's splitter uses. Invalid UTF-8
// never matches; such bytes become words of their own.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include "model/tokenizer_impl.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

const char* pattern(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::gpt2:
      return "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";
    case PreTokenizer::llama3:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
             "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
    case PreTokenizer::qwen2:
      return "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
             "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+";
  }
  return "";
}

struct Regex {
  pcre2_code* code = nullptr;
  explicit Regex(PreTokenizer p) {
    const char* pat = pattern(p);
    int err = 0;
    PCRE2_SIZE off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF, &err, &off, nullptr);
    if (!code) detail::fail("BPE pre-tokenizer: regex does not compile (PCRE2 error ", err, ")");
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: falls back to the interpreter
  }
  ~Regex() { pcre2_code_free(code); }
};

const Regex& regex(PreTokenizer p) {
  static const Regex gpt2(PreTokenizer::gpt2), llama3(PreTokenizer::llama3),
      qwen2(PreTokenizer::qwen2);
  return p == PreTokenizer::llama3 ? llama3 : p == PreTokenizer::qwen2 ? qwen2 : gpt2;
}

struct ByteMap {
  std::string to_char[256];
  int16_t to_byte[324];  // code points up to 256 + 67
  ByteMap() {
    std::fill(std::begin(to_byte), std::end(to_byte), int16_t(-1));
    int extra = 0;
    for (int b = 0; b < 256; ++b) {
      const bool printable = (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || b >= 174;
      const uint32_t cp = printable ? uint32_t(b) : uint32_t(256 + extra++);
      to_byte[cp] = int16_t(b);
      std::string& s = to_char[b];
      if (cp < 0x80) {
        s = char(cp);
      } else {
        s += char(0xc0 | (cp >> 6));
        s += char(0x80 | (cp & 0x3f));
      }
    }
  }
};

const ByteMap& byte_map() {
  static const ByteMap m;
  return m;
}

}  // namespace

const std::string& byte_to_unicode(uint8_t b) { return byte_map().to_char[b]; }

int unicode_to_byte(uint32_t cp) {
  return cp < std::size(byte_map().to_byte) ? byte_map().to_byte[cp] : -1;
}

std::vector<std::string_view> pretokenize(std::string_view text, PreTokenizer p) {
  std::vector<std::string_view> words;
  const pcre2_code* code = regex(p).code;
  pcre2_match_data* md = pcre2_match_data_create_from_pattern(code, nullptr);
  SPATTN_CHECK(md != nullptr, "BPE pre-tokenizer: out of memory");
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(text.data());
  size_t pos = 0;
  while (pos < text.size()) {
    const int rc = pcre2_match(code, subject, text.size(), pos, 0, md, nullptr);
    if (rc < 0) {  // no match in the rest (only possible for invalid UTF-8)
      words.push_back(text.substr(pos));
      break;
    }
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[0] > pos) words.push_back(text.substr(pos, ov[0] - pos));  // unmatched bytes
    if (ov[1] == ov[0]) {  // the pattern cannot match empty, but never loop forever
      words.push_back(text.substr(ov[0], 1));
      pos = ov[0] + 1;
      continue;
    }
    words.push_back(text.substr(ov[0], ov[1] - ov[0]));
    pos = ov[1];
  }
  pcre2_match_data_free(md);
  return words;
}

}  // namespace spattn

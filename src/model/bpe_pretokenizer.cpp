// Byte-level BPE pre-tokenizers and GPT-2's byte-to-character map. Each split is the list of
// regexes its model published (GPT-2's; Llama 3's, which llama.cpp calls llama-bpe; Qwen2's,
// Qwen3.5's, DeepSeek's, Falcon's, StarCoder's, GPT-4o's, Mistral's Tekken), run by PCRE2 in
// UTF mode with Unicode properties (\p{L} letters, \p{N} numbers, \p{P} punctuation, \p{M}
// marks, \s white space), so the character classes are the Unicode ones llama.cpp's splitter
// uses. Invalid UTF-8 never matches; such bytes become words of their own.
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>

#include <memory>

#include "model/tokenizer_impl.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

// llama.cpp's custom splitter for GPT-2's expression also takes a lone white space that
// (?!\S) leaves, so the trailing \s+ here gives the same words.
#define SPATTN_GPT2_RE \
  "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+"

// GPT-4o's and Tekken's letter runs: capitals then small letters, or capitals alone, so
// "HelloWorld" is two words. They publish the cases as Unicode classes (\p{Lu}\p{Lt}\p{Lm}\p{Lo}
// \p{M} and \p{Ll}\p{Lm}\p{Lo}\p{M}); llama.cpp, whose std::regex knows no such classes, runs
// them as "a letter that is not a-z" and "a letter that is not A-Z", so every letter outside
// ASCII is of both cases and marks are no part of a word. These are llama.cpp's classes, so the
// ids are its, written as plain classes: its lookahead groups, ((?=[\p{L}])([^a-z]))*, run
// PCRE2's JIT out of stack (error -46) on a word of 1,000 letters.
#define SPATTN_CAPITAL "[^\\P{L}a-z]"
#define SPATTN_SMALL "[^\\P{L}A-Z]"
// The published (?i:'s|'t|'re|'ve|'m|'ll|'d) case by case, as llama.cpp writes it: PCRE2's
// caseless s would also take U+017F LONG S.
#define SPATTN_CONTRACTION "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

// The expressions of each split, applied one after the other: each one cuts every word the
// previous ones left into its matches and the runs between them (llama.cpp's
// unicode_regex_split). The lists are the models' published pre-tokenizers (their
// tokenizer.json) as llama.cpp's llm_tokenizer_bpe writes them.
std::vector<const char*> patterns(PreTokenizer p) {
  switch (p) {
    case PreTokenizer::gpt2: return {SPATTN_GPT2_RE};
    case PreTokenizer::llama3:
      return {
          "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+"
          "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreTokenizer::qwen2:
      return {
          "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+"
          "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreTokenizer::qwen35:  // Qwen2's with combining marks (\p{M}) kept in words
      return {
          "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}"
          "\\p{M}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreTokenizer::gemma4:  // no word split: lines, and runs of newlines
      return {"[^\\n]+|[\\n]+"};
    case PreTokenizer::deepseek_llm:
      return {
          "[\r\n]",
          "\\s?[A-Za-zµÀ-ÖØ-öø-ƺƼ-ƿǄ-ʓʕ-ʯͰ-ͳͶͷͻ-ͽͿΆΈ-ΊΌΎ-ΡΣ-ϵϷ-ҁҊ-ԯԱ-ՖႠ-ჅᎠ-Ᏽᏸ-ᏽᲐ-ᲺᲽ-Ჿᴀ-ᴫᵫ-ᵷᵹ-ᶚḀ-ἕἘ-Ἕἠ-ὅὈ-Ὅὐ-ὗὙὛὝὟ-ώᾀ-ᾴᾶ-ᾼιῂ-ῄῆ-ῌῐ-ΐῖ-Ίῠ-Ῥῲ-ῴῶ-ῼℂℇℊ-ℓℕℙ-ℝℤΩℨK-ℭℯ-ℴℹℼ-ℿⅅ-ⅉⅎↃↄⰀ-ⱻⱾ-ⳤⳫ-ⳮⳲⳳꙀ-ꙭꚀ-ꚛꜢ-ꝯꝱ-ꞇꞋ-ꞎꭰ-ꮿﬀ-ﬆﬓ-ﬗＡ-Ｚａ-ｚ𐐀-𐑏𐒰-𐓓𐓘-𐓻𐲀-𐲲𐳀-𐳲𑢠-𑣟𞤀-𞥃]+",
          "\\s?[!-/:-~！-／：-～‘-‟　-。]+",
          "\\s+$",
          "[一-龥ࠀ-一가-퟿]+",
          "\\p{N}+",
      };
    case PreTokenizer::deepseek_coder:
      return {"[\r\n]", "\\s?\\p{L}+", "\\s?\\p{P}+", "[一-龥ࠀ-一가-퟿]+", "\\p{N}"};
    case PreTokenizer::falcon:
      return {"[\\p{P}\\$\\+<=>\\^~\\|`]+", SPATTN_GPT2_RE, "[0-9][0-9][0-9]"};
    case PreTokenizer::starcoder:  // also refact and command-r: single digits, then GPT-2's
      return {"\\p{N}", SPATTN_GPT2_RE};
    case PreTokenizer::gpt4o:  // OpenAI's o200k: contractions stay on their word, digits in threes
      return {"[^\\r\\n\\p{L}\\p{N}]?" SPATTN_CAPITAL "*" SPATTN_SMALL "+" SPATTN_CONTRACTION
              "?"
              "|[^\\r\\n\\p{L}\\p{N}]?" SPATTN_CAPITAL "+" SPATTN_SMALL "*" SPATTN_CONTRACTION
              "?"
              "|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
    case PreTokenizer::tekken:  // Mistral's: GPT-4o's without contractions, single digits
      return {"[^\\r\\n\\p{L}\\p{N}]?" SPATTN_CAPITAL "*" SPATTN_SMALL
              "+"
              "|[^\\r\\n\\p{L}\\p{N}]?" SPATTN_CAPITAL "+" SPATTN_SMALL
              "*"
              "|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n/]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"};
  }
  return {};
}

// One compiled expression; PCRE2 in UTF mode with Unicode properties, $ only at the very end
// of a word (ECMAScript's $, which llama.cpp's std::regex uses).
struct Regex {
  pcre2_code* code = nullptr;
  explicit Regex(const char* pat) {
    int err = 0;
    PCRE2_SIZE off = 0;
    code = pcre2_compile(reinterpret_cast<PCRE2_SPTR>(pat), PCRE2_ZERO_TERMINATED,
                         PCRE2_UTF | PCRE2_UCP | PCRE2_MATCH_INVALID_UTF | PCRE2_DOLLAR_ENDONLY,
                         &err, &off, nullptr);
    if (!code) detail::fail("BPE pre-tokenizer: regex does not compile (PCRE2 error ", err, ")");
    pcre2_jit_compile(code, PCRE2_JIT_COMPLETE);  // optional: falls back to the interpreter
  }
  Regex(const Regex&) = delete;
  Regex& operator=(const Regex&) = delete;
  ~Regex() { pcre2_code_free(code); }
};

// The number of splits: the enum's values run from 0, and patterns() has a case (-Wswitch
// says so) with at least one regex for each, so the first value without one is the end. A
// split added to the enum is counted with no edit here.
int split_count() {
  int n = 0;
  while (!patterns(PreTokenizer(n)).empty()) ++n;
  return n;
}

const std::vector<std::unique_ptr<Regex>>& regexes(PreTokenizer p) {
  static const auto all = [] {
    const int n = split_count();
    std::vector<std::vector<std::unique_ptr<Regex>>> v(static_cast<size_t>(n));
    for (int i = 0; i < n; ++i)
      for (const char* pat : patterns(PreTokenizer(i)))
        v[size_t(i)].push_back(std::make_unique<Regex>(pat));
    return v;
  }();
  return all[size_t(p)];
}

// Cuts `word` into the matches of `code` and the runs between them, appending to `out`.
void split(std::string_view word, const pcre2_code* code, pcre2_match_data* md,
           std::vector<std::string_view>& out) {
  const auto* subject = reinterpret_cast<PCRE2_SPTR>(word.data());
  size_t pos = 0;
  while (pos < word.size()) {
    const int rc = pcre2_match(code, subject, word.size(), pos, 0, md, nullptr);
    if (rc == PCRE2_ERROR_NOMATCH) {  // no match in the rest: one run
      out.push_back(word.substr(pos));
      break;
    }
    // Any other failure (JIT stack, match limit) would quietly make the rest one word.
    if (rc < 0) detail::fail("BPE pre-tokenizer: PCRE2 match error ", rc, " at byte ", pos);
    const PCRE2_SIZE* ov = pcre2_get_ovector_pointer(md);
    if (ov[0] > pos) out.push_back(word.substr(pos, ov[0] - pos));  // the run before it
    if (ov[1] == ov[0]) {  // no pattern matches empty, but never loop forever
      out.push_back(word.substr(ov[0], 1));
      pos = ov[0] + 1;
      continue;
    }
    out.push_back(word.substr(ov[0], ov[1] - ov[0]));
    pos = ov[1];
  }
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
  std::vector<std::string_view> words{text}, next;
  if (text.empty()) return {};
  for (const auto& re : regexes(p)) {
    pcre2_match_data* md = pcre2_match_data_create_from_pattern(re->code, nullptr);
    SPATTN_CHECK(md != nullptr, "BPE pre-tokenizer: out of memory");
    next.clear();
    for (std::string_view w : words) split(w, re->code, md, next);
    pcre2_match_data_free(md);
    words.swap(next);
  }
  return words;
}

}  // namespace spattn

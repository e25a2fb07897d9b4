// WordPiece encoding (tokenizer.ggml.model = "bert") as llama.cpp's llm_tokenizer_wpm does it.
// BERT's normaliser first: with strip_accents each character becomes the first code point of
// its canonical decomposition (NFD) and combining marks are dropped; white space ends a word;
// NUL, U+FFFD and other/format characters (\p{C} but unassigned) vanish; with lowercase each
// character takes its simple lowercase mapping; punctuation, ASCII symbols and CJK
// ideographs are words of one character. Each word, behind a U+2581 (GGUF writes BERT's
// word-initial pieces with it and continuation pieces without "##"), is then cut greedily
// into the longest vocabulary pieces; a word that cannot be cut entirely is [UNK].
// The Unicode character data is ICU's (the same Unicode tables llama.cpp generates its own
// from).
#include <unicode/uchar.h>
#include <unicode/unorm2.h>
#include <unicode/utf8.h>

#include "model/tokenizer_impl.hpp"
#include "spattn/error.hpp"

namespace spattn {

namespace {

// The code point NFD starts `c` with (c itself when it does not decompose).
UChar32 nfd_first(UChar32 c) {
  static const UNormalizer2* nfd = [] {
    UErrorCode err = U_ZERO_ERROR;
    const UNormalizer2* n = unorm2_getNFDInstance(&err);
    SPATTN_CHECK(U_SUCCESS(err) && n != nullptr, "WordPiece: ICU's NFD data is missing (",
                 u_errorName(err), ")");
    return n;
  }();
  UChar buf[32];
  UErrorCode err = U_ZERO_ERROR;
  const int32_t len = unorm2_getDecomposition(nfd, c, buf, 32, &err);
  if (len <= 0 || U_FAILURE(err)) return c;
  UChar32 first;
  int32_t i = 0;
  U16_NEXT(buf, i, len, first);
  return first;
}

// llama.cpp's is_chinese_char: the CJK ideograph blocks BERT splits one by one (with its
// 0x2B920 where the Unicode block starts at 0x2B820, as Hugging Face's tokenizers have it).
bool is_cjk(UChar32 c) {
  return (c >= 0x4E00 && c <= 0x9FFF) || (c >= 0x3400 && c <= 0x4DBF) ||
         (c >= 0x20000 && c <= 0x2A6DF) || (c >= 0x2A700 && c <= 0x2B73F) ||
         (c >= 0x2B740 && c <= 0x2B81F) || (c >= 0x2B920 && c <= 0x2CEAF) ||
         (c >= 0xF900 && c <= 0xFAFF) || (c >= 0x2F800 && c <= 0x2FA1F);
}

void append_utf8(std::string& s, UChar32 c) {
  char buf[4];
  int32_t n = 0;
  U8_APPEND_UNSAFE(buf, n, c);
  s.append(buf, size_t(n));
}

// BERT's normaliser and split: the words of `text`.
std::vector<std::string> wpm_words(std::string_view text, bool lowercase, bool strip_accents) {
  std::vector<std::string> words(1);
  const auto* p = reinterpret_cast<const uint8_t*>(text.data());
  const int32_t n = int32_t(text.size());
  for (int32_t i = 0; i < n;) {
    UChar32 c;
    U8_NEXT(p, i, n, c);
    if (c < 0) continue;  // invalid UTF-8: llama.cpp reads U+FFFD, which is dropped
    if (strip_accents) c = nfd_first(c);
    if (u_isUWhiteSpace(c)) {
      if (!words.back().empty()) words.emplace_back();
      continue;
    }
    const uint32_t gc = U_GET_GC_MASK(c);
    if (c == 0 || c == 0xFFFD || (gc & (U_GC_C_MASK & ~U_GC_CN_MASK)) != 0) continue;
    if (strip_accents && (gc & U_GC_M_MASK) != 0) continue;
    if (lowercase) c = u_tolower(c);
    if ((gc & U_GC_P_MASK) != 0 || (c < 0x7F && (gc & U_GC_S_MASK) != 0) || is_cjk(c)) {
      if (!words.back().empty()) words.emplace_back();
      append_utf8(words.back(), c);
      words.emplace_back();
    } else {
      append_utf8(words.back(), c);
    }
  }
  if (words.back().empty()) words.pop_back();
  return words;
}

}  // namespace

void Tokenizer::Impl::encode_wpm(std::string_view text, std::vector<int32_t>& out) const {
  for (const std::string& w : wpm_words(text, lowercase, strip_accents)) {
    const std::string word = "\xe2\x96\x81" + w;
    const size_t start = out.size();
    // Longest piece first at each byte offset; pieces never start inside a character, since
    // no vocabulary entry is a broken UTF-8 sequence.
    for (size_t i = 0; i < word.size();) {
      size_t len = std::min(word.size() - i, max_token_bytes);
      for (; len > 0; --len) {
        const int32_t id = find(std::string_view(word).substr(i, len));
        if (id >= 0) {
          out.push_back(id);
          break;
        }
      }
      if (len == 0) {  // this word cannot be cut into pieces: all of it is [UNK]
        out.resize(start);
        break;
      }
      i += len;
    }
    if (out.size() == start && unk >= 0) out.push_back(unk);
  }
}

}  // namespace spattn

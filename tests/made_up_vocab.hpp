// A tokenizer over a vocabulary the test writes itself (gguf::Writer bytes): the bytes, the
// file viewing them and the tokenizer read from it, kept together for the test's lifetime.
#pragma once
#include <cstdint>
#include <utility>
#include <vector>

#include "spattn/gguf.hpp"
#include "spattn/tokenizer.hpp"

namespace spattn::test {

struct MadeUpVocab {
  std::vector<uint8_t> bytes;
  gguf::File file;
  Tokenizer tok;
  explicit MadeUpVocab(std::vector<uint8_t> b)
      : bytes(std::move(b)),
        file(gguf::File::from_memory(bytes.data(), bytes.size())),
        tok(Tokenizer::from_gguf(file)) {}
};

}  // namespace spattn::test

// libFuzzer target: the GGUF reader, then everything a model loader reads from a parsed
// file (every metadata value, every tensor's first row), the tokenizer built from its
// vocabulary, and the model loader itself on the bytes as a file (a memfd, mapped as `spattn
// run` maps a model: the loader releases pages of what it repacks, which it may do to a
// mapping, not to the fuzzer's buffer). Any input must either parse or raise spattn::Error; a
// crash, leak or sanitizer report is a bug.
#include <sys/mman.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "spattn/error.hpp"
#include "spattn/gguf.hpp"
#include "spattn/model.hpp"
#include "spattn/tokenizer.hpp"

using namespace spattn;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const gguf::File f = gguf::File::from_memory(data, size, "fuzz.gguf");
    for (const std::string& k : f.keys()) {
      (void)f.describe(k);
      try {
        if (f.type_of(k) == gguf::ValueType::array) {
          const gguf::ValueType e = f.array_type_of(k);
          if (e == gguf::ValueType::string)
            (void)f.get_string_array(k);
          else if (e == gguf::ValueType::f32 || e == gguf::ValueType::f64)
            (void)f.get_float_array(k);
          else if (e != gguf::ValueType::boolean)
            (void)f.get_int_array(k);
        } else {
          (void)f.get_uint(k);
        }
      } catch (const Error&) {}
    }
    std::vector<float> row;
    for (const auto& t : f.tensors()) {
      if (t.ne[0] > 4096 || t.nbytes == 0) continue;
      row.resize(size_t(t.ne[0]));
      gguf::dequantize_row(t.type, t.data, row.data(), t.ne[0]);
    }
    if (f.has("tokenizer.ggml.model")) {
      const Tokenizer tok = Tokenizer::from_gguf(f);
      const std::vector<int32_t> ids =
          tok.encode("Hello w\xc3\xb6rld  \n\tx <|endoftext|>", true, true);
      (void)tok.decode(ids);
    }
    if (f.has("general.architecture")) {
      const int fd = memfd_create("fuzz.gguf", 0);
      if (fd >= 0) {
        bool whole = true;
        for (size_t done = 0; done < size && whole;) {
          const ssize_t n = write(fd, data + done, size - done);
          whole = n > 0;
          if (whole) done += size_t(n);
        }
        try {
          if (whole) (void)model::load_model("/proc/self/fd/" + std::to_string(fd));
        } catch (const Error&) {}
        close(fd);
      }
    }
  } catch (const Error&) {}
  return 0;
}

// libFuzzer target: the .safetensors reader (its JSON header included).
#include "fuzz_file.hpp"
#include "spattn/error.hpp"
#include "spattn/io.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string& path = spattn::fuzz::input_path(data, size);
  for (spattn::Layout l : {spattn::Layout::hsd, spattn::Layout::shd}) {
    try {
      (void)spattn::read_safetensors(path, l);
    } catch (const spattn::Error&) {}
  }
  return 0;
}

// libFuzzer target: BLASST calibration files (JSON), and the thresholds a loaded one gives.
#include <cstdint>
#include <string>

#include "spattn/calibration.hpp"
#include "spattn/error.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const spattn::Calibration c = spattn::calibration_from_json(
        std::string(reinterpret_cast<const char*>(data), size), "fuzz");
    for (int64_t len : {int64_t(1024), int64_t(65536)})
      for (double s : {0.0, 0.5, 0.9}) {
        try {
          // The law's inverse too (a root of the quadratic in s since version 5).
          (void)c.predicted_sparsity(c.lambda_for(s, len), len);
        } catch (const spattn::Error&) {}
      }
  } catch (const spattn::Error&) {}
  return 0;
}

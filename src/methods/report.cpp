#include "spattn/report.hpp"

namespace spattn {

const char* kernel_path_name(KernelPath path) {
  return path == KernelPath::decode ? "decode" : "prefill";
}

}  // namespace spattn

// Method::run: the one entry point on either device (method.hpp). Where the tensors live picks
// the path; the method's own logic stays in its run_host / run_cuda.
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/method.hpp"

namespace spattn {

MethodReport Method::run(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const AttnOptions& opt, float* lse) const {
  if (cuda::is_device_pointer(q.data)) return run_cuda(q, k, v, out, opt, lse);
  return run_host(q, k, v, out, opt, lse);
}

MethodReport Method::run_cuda(const TensorView&, const TensorView&, const TensorView&,
                              const TensorView&, const AttnOptions&, float*) const {
  detail::fail(name(),
               ": no GPU path yet (on CUDA tensors: dense, blasst, momo, vertical_slash, grid, "
               "mminference and the block-mask methods such as a_shape, mean_pool, xattention, "
               "flexprefill)");
}

}  // namespace spattn

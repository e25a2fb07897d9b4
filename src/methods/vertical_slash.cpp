// vertical_slash: MInference's vertical-slash head (MMInference appendix C.3). The estimate from
// the last last_q = 64 queries (section 4.1) runs inside run(), so it is part of the method's
// time; the token-level kernel then computes the chosen columns and diagonals.
// Defaults vertical = 1000, slash = 2048: one of MInference's configurations (MMInference
// Table 2 searches vertical in {1000, 2000, 4000}, slash in {1024, 2048, 4096, 6144}; Table 3
// lists (1000, 2048)). sink = 30 and local = 100 are what MInference's code always keeps.
// On CUDA tensors the estimate (cuda::vertical_slash_index, src/cuda/vertical_slash.cu) and
// the token-level kernel (cuda::attention_vertical_slash) run on the device, the same rules;
// the index is read back to the host between them, where the kernel's pieces are built.
#include <memory>
#include <utility>

#include "methods/registry.hpp"
#include "spattn/cuda.hpp"
#include "spattn/masks.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {
namespace {

class VerticalSlash final : public Method {
 public:
  explicit VerticalSlash(const MethodSpec& spec) {
    ParamReader r(spec);
    const int64_t big = int64_t(1) << 40;
    cfg_.vertical_size = r.get_int("vertical", 1000, 0, big);
    cfg_.slash_size = r.get_int("slash", 2048, 1, big);
    cfg_.last_q = r.get_int("last_q", 64, 1, big);
    cfg_.sink = r.get_int("sink", 30, 0, big);
    cfg_.local = r.get_int("local", 100, 1, big);
    cfg_.tile_rows = r.get_int("tile_rows", 64, 1, 128);
    r.finish();
    check_vertical_slash_config(cfg_);
  }
  std::string name() const override { return "vertical_slash"; }

  // Reports the index's coverage (token level: exactly the columns and diagonal tile ranges the
  // kernel computed) and its block view (tile_rows x 64 blocks), which `spattn mask` draws.
  MethodReport run_host(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    VerticalSlashIndex index = vertical_slash_index(q, k, cfg_, opt);
    MethodReport r;
    attention_vertical_slash(q, k, v, out, index, opt, lse, &r.stats);
    report_index(std::move(index), q.seq, k.seq, opt, r);
    return r;
  }

  MethodReport run_cuda(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse) const override {
    VerticalSlashIndex index = cuda::vertical_slash_index(q, k, cfg_, opt, opt.stream);
    MethodReport r;
    r.extras["mask_device"] = 1.0;
    cuda::attention_vertical_slash(q, k, v, out, index, opt, lse, &r.stats, opt.stream);
    report_index(std::move(index), q.seq, k.seq, opt, r);
    return r;
  }

 private:
  static void report_index(VerticalSlashIndex index, int64_t q_len, int64_t kv_len,
                           const AttnOptions& opt, MethodReport& r) {
    r.mask = std::make_shared<const BlockMask>(
        vertical_slash_block_mask(index, q_len, kv_len, 64, opt.threads));
    r.coverage = vertical_slash_coverage(std::move(index), q_len, kv_len);
  }

  VerticalSlashConfig cfg_;
};

}  // namespace

std::unique_ptr<Method> make_vertical_slash(const MethodSpec& spec) {
  return std::make_unique<VerticalSlash>(spec);
}

}  // namespace spattn

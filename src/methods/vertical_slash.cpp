// vertical_slash: MInference's vertical-slash head (seeds/002 appendix C.3). The estimate from
// the last last_q = 64 queries (section 4.1) runs inside run(), so it is part of the method's
// time; the token-level kernel then computes the chosen columns and diagonals.
// Defaults vertical = 1000, slash = 2048: one of MInference's configurations (seeds/002
// Table 2 searches vertical in {1000, 2000, 4000}, slash in {1024, 2048, 4096, 6144}; Table 3
// lists (1000, 2048)). sink = 30 and local = 100 are what MInference's code always keeps.
#include <optional>

#include "methods/registry.hpp"
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

  void run(const TensorView& q, const TensorView& k, const TensorView& v, const TensorView& out,
           const AttnOptions& opt, float* lse, Stats* stats) override {
    index_.reset();
    mask_.reset();
    index_ = vertical_slash_index(q, k, cfg_, opt);
    q_len_ = q.seq;
    kv_len_ = k.seq;
    attention_vertical_slash(q, k, v, out, *index_, opt, lse, stats);
  }
  // Token level: exactly the columns and diagonal tile ranges the kernel computed.
  std::unique_ptr<Coverage> coverage(int64_t q_len, int64_t kv_len, bool causal) const override {
    if (!index_) return Method::coverage(q_len, kv_len, causal);
    return vertical_slash_coverage(*index_, q_len_, kv_len_);
  }
  // The index rounded out to tile_rows x 64 blocks, built on first request (pictures), so it
  // costs run() nothing.
  const BlockMask* last_mask() const override {
    if (!index_) return nullptr;
    if (!mask_) mask_ = vertical_slash_block_mask(*index_, q_len_, kv_len_);
    return &*mask_;
  }

 private:
  VerticalSlashConfig cfg_;
  std::optional<VerticalSlashIndex> index_;
  mutable std::optional<BlockMask> mask_;
  int64_t q_len_ = 0, kv_len_ = 0;
};

}  // namespace

std::unique_ptr<Method> make_vertical_slash(const MethodSpec& spec) {
  return std::make_unique<VerticalSlash>(spec);
}

}  // namespace spattn

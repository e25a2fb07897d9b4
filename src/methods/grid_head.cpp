// attention_grid: the grid head's two disjoint passes and their exact merge (spattn/grid.hpp).
// Pass 1 runs the sink tiles and the local band in natural order (block-sparse); pass 2 packs
// each head's keys by residue class and runs the row groups of its permuted layout; (O, LSE)
// merge joins them. Heads of a GQA group with the same stride and phase share one pack.
#include <limits>

#include "spattn/error.hpp"
#include "spattn/grid.hpp"
#include "spattn/merge.hpp"
#include "spattn/packed_kv.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {

void attention_grid(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const std::vector<GridLines>& lines, const GridConfig& c,
                    const AttnOptions& opt, float* lse, Stats* stats) {
  check_grid_config(c);
  SPATTN_CHECK(opt.causal, "grid: needs causal attention");
  SPATTN_CHECK(int64_t(lines.size()) == q.heads, "grid: ", lines.size(), " grids for ", q.heads,
               " q heads");
  validate_attention_args(q, k, v, out, opt);
  const int64_t lq = q.seq, lk = k.seq, group = q.heads / k.heads;
  for (const GridLines& g : lines) check_grid_lines(g, lk);

  // Pass 1: sink and local band, natural order.
  Tensor o1(DType::f32, q.heads, lq, q.dim), o2(DType::f32, q.heads, lq, q.dim);
  std::vector<float> lse1(size_t(q.heads * lq));
  std::vector<float> lse2(size_t(q.heads * lq), -std::numeric_limits<float>::infinity());
  Stats band, lines_st;
  attention_block_sparse(q, k, v, o1, grid_band_mask(c, q.heads, lq, lk), opt, lse1.data(), &band);

  // Pass 2: the grid's lines on the permuted layout, keys outside the band only.
  AttnOptions o = opt;
  o.check_finite = false;  // pass 1 checked q, k and v
  o.q_start = lk - lq;     // rows keep their positions; key positions are the grid's
  PackedKV* kv = nullptr;
  std::unique_ptr<PackedKV> pack;
  GridLayout layout;
  int64_t packed_kvh = -1;
  GridLines packed_lines{};
  for (int64_t h = 0; h < q.heads; ++h) {
    const int64_t kvh = h / group;
    const GridLines& g = lines[size_t(h)];
    if (!kv || kvh != packed_kvh || g.stride != packed_lines.stride ||
        g.phase != packed_lines.phase) {
      layout = grid_layout(g, c, lq, lk);
      if (layout.order.empty()) {
        kv = nullptr;
        continue;
      }
      pack =
          std::make_unique<PackedKV>(1, k.dim, k.dtype, int64_t(layout.order.size()), opt.bf16_dot);
      pack->append_rows(k.head_range(kvh, 1), v.head_range(kvh, 1), layout.order, layout.positions,
                        opt.threads);
      kv = pack.get();
      packed_kvh = kvh, packed_lines = g;
    }
    attention_row_groups(q.head_range(h, 1), *kv, layout.groups, o2.view().head_range(h, 1), o,
                         lse2.data() + h * lq, &lines_st);
  }
  // The problem's entries are pass 1's count; pass 2 adds only what it computed.
  if (stats) {
    lines_st.causal_entries = 0;
    band.add(lines_st);
    stats->add(band);
  }
  merge_attention(o1, lse1.data(), o2, lse2.data(), out, lse);
}

}  // namespace spattn

// MMInference's grid head on the device ("MMInference: Modality-Aware Permutation Sparse
// Attention", section 3.1, Algorithm 5; spattn/grid.hpp's attention_grid, whose two passes and
// merge this repeats with the device's kernels): pass 1, the sink tiles and the local band in
// natural order through the block-sparse kernel; pass 2, each q head's permuted layout
// (grid_layout: keys by residue class, with the positions its causal rule compares) as row
// groups gathered by the kernel against gathered keys (attention_gathered_groups: the
// permutation lives in the kernel's loads and stores, no copy of Q, K or V in permuted order);
// then the exact (O, LSE) merge. The layout is built on the host from the lines alone.
//
// grid_estimate: Algorithm 1's search with its A_hat on the device (ahat_sums.cu over the keys
// the grid pass could add), the sums read back and the stride and phase chosen on the host
// (grid_choose_lines, the CPU's own choice: a few passes over kv_len doubles per stride).
#include <algorithm>
#include <limits>
#include <vector>

#include "cuda/ahat_sums.hpp"
#include "cuda/check.cuh"
#include "cuda/inputs.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/grid.hpp"

namespace spattn::cuda {

std::vector<GridLines> grid_estimate(const TensorView& q, const TensorView& k, const GridConfig& c,
                                     const AttnOptions& opt, void* stream) {
  const char* who = "cuda grid_estimate";
  check_grid_config(c);
  SPATTN_CHECK(opt.causal, "grid: needs causal attention");
  check_qkv_out(q, k, k, q, nullptr, true, who);  // q and k alone: k as v, q as out
  SPATTN_CHECK(q.seq > 0 && q.heads * k.seq < (int64_t(1) << 31), who,
               ": q heads x kv_len must be below 2^31 and q_len positive");
  const cudaStream_t s = stream_of(stream, opt);
  const int64_t lk = k.seq, hq = q.heads;
  DeviceBuffer<double> vert, slash;
  vert.alloc(size_t(hq * lk), s), slash.alloc(size_t(hq * lk), s);
  ahat_sums(q, k, opt, std::min(c.last_q, q.seq), {grid_sink_end(c, lk), c.local_blocks},
            vert.get(), slash.get(), s);
  const std::vector<double> hv = vert.to_host(s), hs = slash.to_host(s);
  const std::vector<int64_t> strides = grid_stride_space(c, lk);
  std::vector<double> bucket;
  std::vector<GridLines> out(static_cast<size_t>(hq));
  for (int64_t h = 0; h < hq; ++h) {
    const double* v = hv.data() + h * lk;
    double total = 0;
    for (int64_t j = 0; j < lk; ++j) total += v[j];
    out[size_t(h)] = grid_choose_lines(v, hs.data() + h * lk, total, c, lk, strides, bucket);
  }
  return out;
}

void attention_grid(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const std::vector<GridLines>& lines, const GridConfig& c,
                    const AttnOptions& opt, float* lse, Stats* stats, void* stream) {
  const char* who = "cuda attention_grid";
  check_grid_config(c);
  SPATTN_CHECK(opt.causal, "grid: needs causal attention");
  SPATTN_CHECK(int64_t(lines.size()) == q.heads, "grid: ", lines.size(), " grids for ", q.heads,
               " q heads");
  check_qkv_out(q, k, v, out, lse, opt.causal, who);
  const int64_t lq = q.seq, lk = k.seq, hq = q.heads, group = q.heads / k.heads;
  for (const GridLines& g : lines) check_grid_lines(g, lk);
  const cudaStream_t s = stream_of(stream, opt);

  // Pass 1 into out itself (and lse, or a scratch LSE).
  DeviceBuffer<float> lse1, lse2;
  if (!lse) lse1.alloc(size_t(hq * lq), s);
  float* l1 = lse ? lse : lse1.get();
  Stats band, lines_st;
  attention_block_sparse(q, k, v, out, grid_band_mask(c, hq, lq, lk), opt, l1,
                         stats ? &band : nullptr, s);

  // Pass 2: rows no group lists keep LSE -inf and output 0 (the merge takes pass 1's).
  const DeviceTensor o2(q.dtype, hq, lq, q.dim);
  lse2.upload(std::vector<float>(size_t(hq * lq), -std::numeric_limits<float>::infinity()), s);
  AttnOptions o = opt;
  o.q_start = lk - lq;  // rows keep their positions; key positions are the layout's
  for (int64_t h = 0; h < hq; ++h) {
    const GridLayout layout = grid_layout(lines[size_t(h)], c, lq, lk);
    if (layout.order.empty()) continue;
    std::vector<GatheredGroup> groups;
    for (const RowGroup& rg : layout.groups) {
      GatheredGroup& g = groups.emplace_back();
      g.rows = rg.rows;
      for (const KeyRange& r : rg.keys)
        for (int64_t i = r.begin; i < r.end; ++i) {
          g.keys.push_back(layout.order[size_t(i)]);
          g.positions.push_back(layout.positions[size_t(i)]);
        }
    }
    const int64_t kvh = h / group;
    attention_gathered_groups(q.head_range(h, 1), k.head_range(kvh, 1), v.head_range(kvh, 1),
                              groups, o2.view().head_range(h, 1), o, lse2.get() + h * lq,
                              stats ? &lines_st : nullptr, s);
  }
  // The problem's entries are pass 1's count; pass 2 adds only what it computed.
  if (stats) {
    lines_st.causal_entries = 0;
    band.add(lines_st);
    stats->add(band);
  }
  merge_attention(out, l1, o2, lse2.get(), out, lse, s);
}

}  // namespace spattn::cuda

// MInference's vertical-slash estimate on the device (the host's is
// src/masks/vertical_slash.cpp's estimate_vertical_slash, which this mirrors; "MInference 1.0",
// section 3.2, as MMInference appendix C.3 restates it): the last last_q queries' causal softmax
// against every key, A_hat, summed per key column (vertical[j] = sum_r A_hat[r][j]) and per
// diagonal (slash[o] = sum_r A_hat[r][p_r - o]); the first `sink` columns and the diagonals
// 0..local-1 forced; the largest vertical_size columns and slash_size diagonals per head (ties
// to the smaller index: CUB's radix sort is stable), read back ascending. MMInference's
// boundary pieces (modality_boundary.hpp) run the same estimate over listed rows and candidate
// keys (vertical_slash_estimate), as the host's estimate_vertical_slash does.
//
// The sums are ahat_sums.cu's (shared with the grid search).
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <functional>
#include <numeric>
#include <vector>

#include "cuda/ahat_sums.hpp"
#include "cuda/check.cuh"
#include "cuda/inputs.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"

namespace spattn::cuda {
namespace {

// The forced entries +inf (the first `forced` of each head's `len`) and every entry's index,
// for the sort; one thread an entry of a [Hq][len] array.
__global__ void force_kernel(double* sums, int* idx, int64_t n, int len, int forced) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i % len);
    if (j < forced) sums[i] = INFINITY;
    idx[i] = j;
  }
}

// Each head's `len` sums sorted descending with their indices (ties: the smaller index), the
// forced first; the indices into `sorted`.
void sort_heads(DeviceBuffer<double>& sums, int64_t heads, int64_t len, int64_t forced,
                DeviceBuffer<int>& sorted, cudaStream_t s) {
  const int64_t n = heads * len;
  DeviceBuffer<int> idx, seg;
  DeviceBuffer<double> keys_out;
  idx.alloc(size_t(n), s), sorted.alloc(size_t(n), s), keys_out.alloc(size_t(n), s);
  force_kernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, s>>>(
      sums.get(), idx.get(), n, int(len), int(forced));
  check(cudaGetLastError(), "force_kernel launch");
  std::vector<int> offsets(size_t(heads) + 1);
  for (int64_t h = 0; h <= heads; ++h) offsets[size_t(h)] = int(h * len);
  seg.upload(offsets, s);
  size_t temp_bytes = 0;
  auto sort = [&](void* temp) {
    check(cub::DeviceSegmentedRadixSort::SortPairsDescending(
              temp, temp_bytes, sums.get(), keys_out.get(), idx.get(), sorted.get(), int(n),
              int(heads), seg.get(), seg.get() + 1, 0, 64, s),
          "cub SortPairsDescending");
  };
  sort(nullptr);  // the scratch's size
  DeviceBuffer<unsigned char> temp;
  temp.alloc(std::max<size_t>(temp_bytes, 1), s);
  sort(temp.get());
}

// The first `keep` indices of each head's sorted segment, ascending, on the host.
std::vector<std::vector<int64_t>> first_of_segments(const DeviceBuffer<int>& sorted, int64_t heads,
                                                    int64_t len, int64_t keep, cudaStream_t s) {
  std::vector<int> host(size_t(heads * keep));
  if (keep > 0)
    check(cudaMemcpy2DAsync(host.data(), size_t(keep) * sizeof(int), sorted.get(),
                            size_t(len) * sizeof(int), size_t(keep) * sizeof(int), size_t(heads),
                            cudaMemcpyDeviceToHost, s),
          "cudaMemcpy2DAsync");
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(heads));
  for (int64_t h = 0; h < heads; ++h) {
    out[size_t(h)].assign(host.begin() + h * keep, host.begin() + (h + 1) * keep);
    std::sort(out[size_t(h)].begin(), out[size_t(h)].end());
  }
  return out;
}

}  // namespace

VerticalSlashIndex vertical_slash_estimate(const TensorView& q, const TensorView& k,
                                           const VerticalSlashConfig& c, const AttnOptions& opt,
                                           const std::vector<int64_t>& est_rows,
                                           const std::vector<int64_t>* keys, void* stream) {
  const char* who = "cuda vertical_slash_estimate";
  check_vertical_slash_config(c);
  SPATTN_CHECK(opt.causal, "vertical_slash: needs causal attention");
  check_qkv_out(q, k, k, q, nullptr, true, who);  // q and k alone: k as v, q as out
  const int64_t hq = q.heads, lk = k.seq, nk = keys ? int64_t(keys->size()) : lk;
  SPATTN_CHECK(q.seq > 0 && hq * lk < (int64_t(1) << 31), who,
               ": q heads x kv_len must be below 2^31 and q_len positive");
  const auto ascending = [](const std::vector<int64_t>& v, int64_t end) {
    return !v.empty() && v.front() >= 0 && v.back() < end &&
           std::adjacent_find(v.begin(), v.end(), std::greater_equal<>()) == v.end();
  };
  SPATTN_CHECK(ascending(est_rows, q.seq), who,
               ": the estimate's rows must be strictly ascending rows of q, got ", est_rows.size());
  SPATTN_CHECK(!keys || ascending(*keys, lk), who,
               ": the candidate keys must be strictly ascending positions below ", lk);
  const cudaStream_t s = stream_of(stream, opt);
  const int64_t n_rows = int64_t(est_rows.size());
  // MInference's rows (the last ones) and every key run the kernel's own order.
  const bool last_rows = est_rows.front() == q.seq - n_rows && est_rows.back() == q.seq - 1;
  DeviceBuffer<int> rows_d, keys_d;
  AHatLists lists;
  if (!last_rows) {
    rows_d.upload(std::vector<int>(est_rows.begin(), est_rows.end()), s);
    lists.rows = rows_d.get();
  }
  if (keys) {
    keys_d.upload(std::vector<int>(keys->begin(), keys->end()), s);
    lists.keys = keys_d.get(), lists.n_keys = nk;
  }
  DeviceBuffer<double> vertical, slash;
  vertical.alloc(size_t(hq * nk), s), slash.alloc(size_t(hq * lk), s);
  ahat_sums(q, k, opt, n_rows, {}, vertical.get(), slash.get(), s, lists);

  const int64_t sink = std::min(c.sink, nk), local = std::min(c.local, lk);
  DeviceBuffer<int> vsorted, ssorted;
  sort_heads(vertical, hq, nk, sink, vsorted, s);
  sort_heads(slash, hq, lk, local, ssorted, s);
  VerticalSlashIndex x;
  x.heads = hq;
  x.tile_rows = c.tile_rows;
  x.columns = first_of_segments(vsorted, hq, nk, std::min(nk, std::max(c.vertical_size, sink)), s);
  x.offsets = first_of_segments(ssorted, hq, lk, std::min(lk, std::max(c.slash_size, local)), s);
  if (keys)
    for (std::vector<int64_t>& cols : x.columns)
      for (int64_t& j : cols) j = (*keys)[size_t(j)];  // ascending still: so are the keys
  return x;
}

VerticalSlashIndex vertical_slash_index(const TensorView& q, const TensorView& k,
                                        const VerticalSlashConfig& c, const AttnOptions& opt,
                                        void* stream) {
  SPATTN_CHECK(q.seq > 0, "cuda vertical_slash_index: q_len must be positive");
  std::vector<int64_t> rows(size_t(std::min(c.last_q, q.seq)));
  std::iota(rows.begin(), rows.end(), q.seq - int64_t(rows.size()));
  return vertical_slash_estimate(q, k, c, opt, rows, nullptr, stream);
}

}  // namespace spattn::cuda

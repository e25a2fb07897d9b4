// MInference's vertical-slash estimate on the device (the host's is
// src/masks/vertical_slash.cpp's estimate_vertical_slash, which this mirrors; "MInference 1.0",
// section 3.2, as MMInference appendix C.3 restates it): the last last_q queries' causal softmax
// against every key, A_hat, summed per key column (vertical[j] = sum_r A_hat[r][j]) and per
// diagonal (slash[o] = sum_r A_hat[r][p_r - o]); the first `sink` columns and the diagonals
// 0..local-1 forced; the largest vertical_size columns and slash_size diagonals per head (ties
// to the smaller index: CUB's radix sort is stable), read back ascending.
//
// The sums are ahat_sums.cu's (shared with the grid search).
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <cmath>
#include <vector>

#include "cuda/ahat_sums.hpp"
#include "cuda/check.cuh"
#include "cuda/inputs.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/masks.hpp"

namespace spattn::cuda {
namespace {

// The forced entries +inf (columns [0, sink), diagonals [0, local)) and every entry's index,
// for the sort; one thread an entry of the [Hq][kv_len] arrays.
__global__ void force_kernel(double* vertical, double* slash, int* vidx, int* sidx, int64_t n,
                             int kv_len, int sink, int local) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(gridDim.x) * blockDim.x) {
    const int j = int(i % kv_len);
    if (j < sink) vertical[i] = INFINITY;
    if (j < local) slash[i] = INFINITY;
    vidx[i] = sidx[i] = j;
  }
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

VerticalSlashIndex vertical_slash_index(const TensorView& q, const TensorView& k,
                                        const VerticalSlashConfig& c, const AttnOptions& opt,
                                        void* stream) {
  const char* who = "cuda vertical_slash_index";
  check_vertical_slash_config(c);
  SPATTN_CHECK(opt.causal, "vertical_slash: needs causal attention");
  check_qkv_out(q, k, k, q, nullptr, true, who);  // q and k alone: k as v, q as out
  SPATTN_CHECK(q.seq > 0 && int64_t(q.heads) * k.seq < (int64_t(1) << 31), who,
               ": q heads x kv_len must be below 2^31 and q_len positive");
  const cudaStream_t s = stream_of(stream, opt);
  const int64_t hq = q.heads, lk = k.seq, n = int64_t(q.heads) * lk;
  DeviceBuffer<double> vertical, slash, vsorted, ssorted;
  DeviceBuffer<int> vidx, sidx, vidx_sorted, sidx_sorted, seg;
  vertical.alloc(size_t(n), s), slash.alloc(size_t(n), s);
  ahat_sums(q, k, opt, std::min(c.last_q, q.seq), {}, vertical.get(), slash.get(), s);

  const int64_t sink = std::min(c.sink, lk), local = std::min(c.local, lk);
  vidx.alloc(size_t(n), s), sidx.alloc(size_t(n), s);
  force_kernel<<<unsigned(std::min<int64_t>((n + 255) / 256, 4096)), 256, 0, s>>>(
      vertical.get(), slash.get(), vidx.get(), sidx.get(), n, int(lk), int(sink), int(local));
  check(cudaGetLastError(), "force_kernel launch");
  std::vector<int> offsets(size_t(hq) + 1);
  for (int64_t h = 0; h <= hq; ++h) offsets[size_t(h)] = int(h * lk);
  seg.upload(offsets, s);
  vsorted.alloc(size_t(n), s), ssorted.alloc(size_t(n), s);
  vidx_sorted.alloc(size_t(n), s), sidx_sorted.alloc(size_t(n), s);
  size_t temp_bytes = 0;
  auto sort = [&](void* temp, const DeviceBuffer<double>& keys, DeviceBuffer<double>& keys_out,
                  const DeviceBuffer<int>& idx, DeviceBuffer<int>& idx_out) {
    check(cub::DeviceSegmentedRadixSort::SortPairsDescending(
              temp, temp_bytes, keys.get(), keys_out.get(), idx.get(), idx_out.get(), int(n),
              int(hq), seg.get(), seg.get() + 1, 0, 64, s),
          "cub SortPairsDescending");
  };
  sort(nullptr, vertical, vsorted, vidx, vidx_sorted);  // the scratch's size
  DeviceBuffer<unsigned char> temp;
  temp.alloc(std::max<size_t>(temp_bytes, 1), s);
  sort(temp.get(), vertical, vsorted, vidx, vidx_sorted);
  sort(temp.get(), slash, ssorted, sidx, sidx_sorted);

  VerticalSlashIndex x;
  x.heads = hq;
  x.tile_rows = c.tile_rows;
  const int64_t n_cols = std::min(lk, std::max(c.vertical_size, sink));
  const int64_t n_diag = std::min(lk, std::max(c.slash_size, local));
  x.columns = first_of_segments(vidx_sorted, hq, lk, n_cols, s);
  x.offsets = first_of_segments(sidx_sorted, hq, lk, n_diag, s);
  return x;
}

}  // namespace spattn::cuda

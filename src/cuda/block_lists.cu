// Device block lists to the block-sparse kernel (block_lists.hpp): per kernel tile its 64-key
// tiles (a count pass, an exclusive scan, a fill pass), then the kernel over them.
#include "cuda/block_lists.hpp"

#include <algorithm>
#include <climits>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/flash_fwd.cuh"
#include "cuda/forms.hpp"
#include "cuda/inputs.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

// Per kernel tile (h, t) of `tile_rows` rows, its 64-key tiles: each listed block's, less those
// no row of the tile reaches (as BlockSparsePlan). counts only (tiles null), or the tiles at
// tiles[offsets[item]...].
__global__ void list_tiles_kernel(const int* list, const int* list_count, int cap, int nqb,
                                  int n_qt, int heads, int tile_rows, int chi, int beta, int q_len,
                                  int kv_len, bool causal, int* counts, const int* offsets,
                                  int* tiles) {
  const int64_t item = int64_t(blockIdx.x) * blockDim.x + threadIdx.x;
  if (item >= int64_t(heads) * n_qt) return;
  const int h = int(item / n_qt), t = int(item % n_qt);
  const int qb = int(int64_t(t) * tile_rows / chi);
  const int last_row = min(q_len, (t + 1) * tile_rows) - 1;
  const int reach = causal ? min(kv_len, kv_len - q_len + last_row + 1) : kv_len;
  const int per = beta / kBN;
  const int64_t li = int64_t(h) * nqb + qb;
  const int* blocks = list + li * cap;
  int n = 0;
  int* out = tiles ? tiles + offsets[item] : nullptr;
  for (int i = 0; i < list_count[li]; ++i)
    for (int j = 0; j < per; ++j) {
      const int kt = blocks[i] * per + j;
      if (kt * kBN < reach) {
        if (out) out[n] = kt;
        ++n;
      }
    }
  if (!tiles) counts[item] = n;
}

// Exclusive prefix sums of counts[0, n) into offsets[0, n] (one block of 1024 threads).
__global__ void list_scan_kernel(const int* counts, int n, int* offsets) {
  __shared__ int part[1024];
  const int tid = threadIdx.x, per = (n + 1023) / 1024;
  const int b = min(n, tid * per), e = min(n, b + per);
  int s = 0;
  for (int i = b; i < e; ++i) s += counts[i];
  part[tid] = s;
  __syncthreads();
  for (int off = 1; off < 1024; off <<= 1) {
    const int add = tid >= off ? part[tid - off] : 0;
    __syncthreads();
    part[tid] += add;
    __syncthreads();
  }
  int run = part[tid] - s;  // exclusive
  for (int i = b; i < e; ++i) offsets[i] = run, run += counts[i];
  if (tid == 1023) offsets[n] = part[1023];
}

// Per item (one block each) its list to flat[offsets[item]...].
__global__ void list_compact_kernel(const int* list, const int* count, int cap, const int* offsets,
                                    int* flat) {
  const int64_t item = blockIdx.x;
  const int n = min(count[item], cap);
  for (int i = threadIdx.x; i < n; i += blockDim.x) flat[offsets[item] + i] = list[item * cap + i];
}

}  // namespace

void run_block_lists(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, float* lse,
                     const DeviceBlockLists& lists, BlockListRecords* records, cudaStream_t s) {
  const int H = int(q.heads), L = int(q.seq), Lkv = int(k.seq);
  SPATTN_CHECK(lists.block_q % kGroupRows == 0 && lists.block_k % kBN == 0,
               "cuda block lists: block_q=", lists.block_q, " and block_k=", lists.block_k,
               " must be multiples of 64 on the GPU (its 64-row and 64-key tiles)");
  const int tile_rows = lists.block_q % 128 == 0 ? 128 : 64;
  const int n_qt = (L + tile_rows - 1) / tile_rows;
  const int n_kt = (Lkv + kBN - 1) / kBN;
  const int items = H * n_qt;
  const int64_t max_tiles = std::min<int64_t>(n_kt, int64_t(lists.cap) * (lists.block_k / kBN));
  SPATTN_CHECK(int64_t(items) * max_tiles < INT32_MAX, "cuda block lists: ", items,
               " query tiles of up to ", max_tiles,
               " key tiles overflow the kernel's 32-bit list offsets");
  DeviceBuffer<int> counts, offsets, tiles;
  counts.alloc(size_t(items), s);
  offsets.alloc(size_t(items) + 1, s);
  tiles.alloc(size_t(items) * size_t(std::max<int64_t>(max_tiles, 1)), s);
  const unsigned tb = 128, tgrid = unsigned((items + tb - 1) / tb);
  list_tiles_kernel<<<tgrid, tb, 0, s>>>(lists.list, lists.count, lists.cap, lists.nqb, n_qt, H,
                                         tile_rows, int(lists.block_q), int(lists.block_k), L, Lkv,
                                         opt.causal, counts.get(), nullptr, nullptr);
  list_scan_kernel<<<1, 1024, 0, s>>>(counts.get(), items, offsets.get());
  list_tiles_kernel<<<tgrid, tb, 0, s>>>(lists.list, lists.count, lists.cap, lists.nqb, n_qt, H,
                                         tile_rows, int(lists.block_q), int(lists.block_k), L, Lkv,
                                         opt.causal, nullptr, offsets.get(), tiles.get());
  check(cudaGetLastError(), "list_tiles_kernel launch");
  FlashParams p = base_params(q, k, v, out, opt, lse, tile_rows);
  p.list_offsets = offsets.get(), p.list_tiles = tiles.get();
  if (records) {
    records->visited.alloc(size_t(H) * p.n_qt64, s);
    records->entries.alloc(size_t(H) * p.n_qt64, s);
    records->dim = q.dim, records->causal_entries = dense_entries(H, L, Lkv, opt.causal);
    p.visited = records->visited.get(), p.entries = records->entries.get();
  }
  launch_block_sparse(q.dtype, q.dim, tile_rows, p, s);
  // The scratch lists are freed in stream order, after the kernel.
}

Stats BlockListRecords::read(cudaStream_t s) const {
  Stats st;
  for (int x : visited.to_host(s)) st.tiles_visited += x;
  for (unsigned long long e : entries.to_host(s)) st.score_entries += int64_t(e);
  st.flops = 4.0 * double(dim) * double(st.score_entries);
  st.causal_entries = causal_entries;
  return st;
}

std::vector<std::vector<int32_t>> read_block_lists(const DeviceBlockLists& lists, cudaStream_t s) {
  // Compacted on the device first (a scan of the counts, then each list to its offset): the
  // lists' buffer holds cap entries per item, most of them unused where the mask is sparse.
  const int items = lists.heads * lists.nqb;
  std::vector<std::vector<int32_t>> out(size_t(std::max(items, 0)));
  if (items <= 0) return out;
  DeviceBuffer<int> offsets;
  offsets.alloc(size_t(items) + 1, s);
  list_scan_kernel<<<1, 1024, 0, s>>>(lists.count, items, offsets.get());
  check(cudaGetLastError(), "list_scan_kernel launch");
  const std::vector<int> offs = offsets.to_host(s);
  DeviceBuffer<int> flat;
  flat.alloc(size_t(std::max(offs[size_t(items)], 1)), s);
  list_compact_kernel<<<unsigned(items), 128, 0, s>>>(lists.list, lists.count, lists.cap,
                                                      offsets.get(), flat.get());
  check(cudaGetLastError(), "list_compact_kernel launch");
  const std::vector<int> blocks = flat.to_host(s);
  for (int i = 0; i < items; ++i)
    out[size_t(i)].assign(blocks.begin() + offs[size_t(i)], blocks.begin() + offs[size_t(i) + 1]);
  return out;
}

}  // namespace spattn::cuda

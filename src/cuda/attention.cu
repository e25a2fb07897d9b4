// Host side of the GPU attention forms (spattn/cuda.hpp): input checks that turn a host
// pointer, a device mismatch or an unsupported shape into a named Error before any launch,
// the BlockMask -> kernel tile lists conversion, the dispatch over dtype, head dim and policy,
// and the read-back of skip and work statistics.
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <vector>

#include "cuda/check.cuh"
#include "cuda/flash_fwd.cuh"
#include "cuda/forms.hpp"
#include "cuda/inputs.hpp"
#include "cuda/sm90/launch.hpp"
#include "kernels/flash_common.hpp"
#include "spattn/cuda.hpp"
#include "spattn/error.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn::cuda {

bool built() { return true; }

int device_count() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // no driver or no device: not an error here
    return 0;
  }
  return n;
}

std::string device_description(int device) {
  SPATTN_CHECK(device >= 0 && device < device_count(), "cuda: no CUDA device ", device,
               " (devices: ", device_count(), ")");
  cudaDeviceProp prop{};
  check(cudaGetDeviceProperties(&prop, device), "cudaGetDeviceProperties");
  int drv = 0, rt = 0;
  check(cudaDriverGetVersion(&drv), "cudaDriverGetVersion");
  check(cudaRuntimeGetVersion(&rt), "cudaRuntimeGetVersion");
  std::ostringstream os;
  os << prop.name << ", sm_" << prop.major << prop.minor << ", " << prop.multiProcessorCount
     << " SMs, driver " << drv / 1000 << "." << (drv % 1000) / 10 << ", runtime " << rt / 1000
     << "." << (rt % 1000) / 10;
  return os.str();
}

std::string prefill_kernel() {
  SPATTN_CHECK(device_count() > 0, "cuda prefill_kernel: no CUDA device");
  if (!sm90::selected()) return "mma";
  const std::string sched = sm90::schedule_name();
  return sched == "plain" ? "wgmma" : "wgmma_" + sched;
}

int check_qkv_out(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out, const float* lse, bool causal, const char* who,
                  int64_t out_rows) {
  SPATTN_CHECK(q.dtype == DType::bf16 || q.dtype == DType::f16, who,
               ": the CUDA kernels take bf16 or f16 inputs, got q ", q.shape_str());
  SPATTN_CHECK(k.dtype == q.dtype && v.dtype == q.dtype && out.dtype == q.dtype, who,
               ": q, k, v and out must share one dtype (q ", q.shape_str(), ", k ", k.shape_str(),
               ", v ", v.shape_str(), ", out ", out.shape_str(), ")");
  SPATTN_CHECK(q.dim == 64 || q.dim == 128, who, ": the CUDA kernels take head dim 64 or 128, got ",
               q.dim);
  SPATTN_CHECK(k.dim == q.dim && v.dim == q.dim && out.dim == q.dim, who, ": head dims differ (q ",
               q.dim, ", k ", k.dim, ", v ", v.dim, ", out ", out.dim, ")");
  SPATTN_CHECK(q.heads > 0 && k.heads > 0 && q.heads % k.heads == 0, who, ": q heads (", q.heads,
               ") must be a positive multiple of kv heads (", k.heads, ")");
  SPATTN_CHECK(v.heads == k.heads && k.seq == v.seq, who, ": k ", k.shape_str(), " and v ",
               v.shape_str(), " differ");
  SPATTN_CHECK(out.heads == q.heads && out.seq == (out_rows < 0 ? q.seq : out_rows), who, ": out ",
               out.shape_str(), " must be [", q.heads, ", ", out_rows < 0 ? q.seq : out_rows, ", ",
               q.dim, "]");
  SPATTN_CHECK(!causal || q.seq <= k.seq, who, ": causal attention needs q_len <= kv_len (", q.seq,
               " > ", k.seq, ")");
  SPATTN_CHECK(q.seq >= 0 && k.seq >= 0 && q.seq < (int64_t(1) << 30) && k.seq < (int64_t(1) << 30),
               who, ": sequence lengths out of range (", q.seq, ", ", k.seq, ")");
  for (const TensorView* t : {&q, &k, &v, &out}) {
    SPATTN_CHECK(t->stride_dim == 1, who, ": the head dimension must be contiguous (stride_dim ",
                 t->stride_dim, ")");
    SPATTN_CHECK(t->stride_seq % 8 == 0 && t->stride_head % 8 == 0, who,
                 ": row and head strides must be multiples of 8 elements (16 bytes)");
    SPATTN_CHECK(reinterpret_cast<uintptr_t>(t->data) % 16 == 0, who,
                 ": tensor data must be 16-byte aligned");
  }
  const int dev = device_of(q.data, "q", who);
  SPATTN_CHECK(device_of(k.data, "k", who) == dev && device_of(v.data, "v", who) == dev &&
                   device_of(out.data, "out", who) == dev &&
                   (!lse || device_of(lse, "lse", who) == dev),
               who, ": q, k, v, out and lse must be on one device");
  int cur = 0;
  check(cudaGetDevice(&cur), "cudaGetDevice");
  SPATTN_CHECK(cur == dev, who, ": the tensors are on device ", dev, " but device ", cur,
               " is current");
  return dev;
}

bool env_switch(const char* name) {
  const char* env = std::getenv(name);
  SPATTN_CHECK(!env || !*env || std::strcmp(env, "0") == 0 || std::strcmp(env, "1") == 0, name, "=",
               env, ": expected 0 or 1");
  return env && std::strcmp(env, "1") == 0;
}

int64_t dense_entries(int64_t heads, int64_t q_len, int64_t kv_len, bool causal) {
  int64_t n = 0;
  for (int64_t r = 0; r < q_len; ++r) n += causal_limit(r, q_len, kv_len, causal);
  return n * heads;
}

FlashParams base_params(const TensorView& q, const TensorView& k, const TensorView& v,
                        const TensorView& out, const AttnOptions& opt, float* lse, int rows) {
  FlashParams p;
  p.q = q.data, p.k = k.data, p.v = v.data, p.o = out.data, p.lse = lse;
  p.q_h = q.stride_head, p.q_s = q.stride_seq;
  p.k_h = k.stride_head, p.k_s = k.stride_seq;
  p.v_h = v.stride_head, p.v_s = v.stride_seq;
  p.o_h = out.stride_head, p.o_s = out.stride_seq;
  p.lse_h = q.seq;
  p.q_len = int(q.seq), p.kv_len = int(k.seq);
  p.heads = int(q.heads), p.group = int(q.heads / k.heads);
  p.n_qt = int((q.seq + rows - 1) / rows);
  p.n_qt64 = int((q.seq + kGroupRows - 1) / kGroupRows);
  p.n_kt = int((k.seq + kBN - 1) / kBN);
  p.pos_offset = int(k.seq - q.seq);
  p.causal = opt.causal;
  const float scale = softmax_scale(opt, q.dim);
  SPATTN_CHECK(scale > 0 && std::isfinite(scale),
               "cuda attention: the softmax scale must be positive and finite, got ", scale);
  p.scale_log2 = scale * 1.4426950408889634f;
  return p;
}

namespace {

template <class T, int D, int kMT, bool kList, bool kSkip, bool kRows = false, int kKBufs = 1,
          bool kGather = false, bool kTopK = false>
void launch(const FlashParams& p, cudaStream_t stream) {
  // Q, K and V tiles; kTopK: a heap of sel_k 8-byte keys per row after them.
  const size_t smem = size_t(kWarps * 16 * kMT + (1 + kKBufs) * kBN) * D * sizeof(T) +
                      (kTopK ? size_t(kWarps * 16 * kMT) * size_t(p.sel_k) * 8 : 0);
  auto* kernel = flash_fwd_kernel<T, D, kMT, kList, kSkip, kRows, kKBufs, kGather, kTopK>;
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        "cudaFuncSetAttribute");
  const dim3 grid(unsigned(p.n_qt), unsigned(p.heads), 1);
  kernel<<<grid, kThreads, smem, stream>>>(p);
  check(cudaGetLastError(), "flash_fwd_kernel launch");
}

// The kernel for a dtype and head dim.
template <int kMT, bool kList, bool kSkip, bool kRows = false, int kKBufs = 1, bool kGather = false,
          bool kTopK = false>
void launch_for(DType dtype, int64_t d, const FlashParams& p, cudaStream_t stream) {
  if (dtype == DType::bf16)
    d == 64
        ? launch<__nv_bfloat16, 64, kMT, kList, kSkip, kRows, kKBufs, kGather, kTopK>(p, stream)
        : launch<__nv_bfloat16, 128, kMT, kList, kSkip, kRows, kKBufs, kGather, kTopK>(p, stream);
  else
    d == 64 ? launch<__half, 64, kMT, kList, kSkip, kRows, kKBufs, kGather, kTopK>(p, stream)
            : launch<__half, 128, kMT, kList, kSkip, kRows, kKBufs, kGather, kTopK>(p, stream);
}

// Query rows a block: 128 (two m16 tiles a warp) by default, 64 where a block-sparse mask's
// rows come in 64s. On a Hopper GPU 128-row tiles run the wgmma kernel (cuda/sm90/). BLASST
// double-buffers K in the mma.sync kernel: a skipped tile has no P V to hide the next K load
// under (measured: BENCHMARKS.md).
template <bool kList, bool kSkip>
void dispatch(DType dtype, int64_t d, int rows, const FlashParams& p, cudaStream_t stream) {
  if (p.n_qt == 0) return;
  if (rows == 128 && sm90::selected())
    sm90::launch(dtype, d, kList, kSkip, p, stream);
  else if constexpr (!kList && kSkip)
    rows == 64 ? launch_for<1, false, true, false, 2>(dtype, d, p, stream)
               : launch_for<2, false, true, false, 2>(dtype, d, p, stream);
  else if (!kList || rows == 128)
    launch_for<2, kList, kSkip>(dtype, d, p, stream);
  else if constexpr (kList)
    launch_for<1, kList, kSkip>(dtype, d, p, stream);
}

}  // namespace

void launch_query_sparse(DType dtype, int64_t d, const FlashParams& p, cudaStream_t stream) {
  if (p.sel_k > 0)
    launch_for<1, false, false, true, 1, false, true>(dtype, d, p, stream);
  else
    launch_for<1, false, false, true>(dtype, d, p, stream);
}

void launch_block_sparse(DType dtype, int64_t d, int rows, const FlashParams& p,
                         cudaStream_t stream) {
  dispatch<true, false>(dtype, d, rows, p, stream);
}

namespace {

// Per-item records on the device, read back after the kernel.
struct Records {
  DeviceBuffer<int> visited, skipped;
  DeviceBuffer<unsigned long long> entries;
  DeviceBuffer<uint8_t> skip_map;
  size_t items = 0;

  void attach(FlashParams& p, bool want_stats, bool want_skip, bool want_map, cudaStream_t s) {
    items = size_t(p.heads) * size_t(p.n_qt64);
    if (!want_stats && !want_skip) return;
    visited.alloc(items, s);
    skipped.alloc(items, s);
    entries.alloc(items, s);
    p.visited = visited.get(), p.skipped = skipped.get(), p.entries = entries.get();
    if (want_map) {
      skip_map.alloc(items * size_t(p.n_kt), s);
      p.skip_map = skip_map.get();
    }
  }
  // full_q_len: q's rows, for the dense problem's entries (query-sparse runs fewer).
  void read(const FlashParams& p, int64_t dim, Stats* stats, SkipStats* skip, cudaStream_t s,
            int64_t full_q_len = -1) {
    if (!stats && !skip) return;
    std::vector<int> vis = visited.to_host(s), skp = skipped.to_host(s);
    std::vector<unsigned long long> ent = entries.to_host(s);
    if (stats) {
      Stats st;
      for (size_t i = 0; i < items; ++i) {
        st.score_entries += int64_t(ent[i]);
        st.tiles_visited += vis[i];
        st.tiles_skipped += skp[i];
      }
      st.causal_entries =
          dense_entries(p.heads, full_q_len < 0 ? p.q_len : full_q_len, p.kv_len, p.causal);
      st.flops = 4.0 * double(dim) * double(st.score_entries);
      stats->add(st);
    }
    if (skip) {
      skip->reset(p.heads, p.n_qt64, kGroupRows);
      for (size_t i = 0; i < items; ++i) skip->visited[i] = vis[i], skip->skipped[i] = skp[i];
      if (skip->record_tiles) {
        std::vector<uint8_t> map = skip_map.to_host(s);
        for (size_t i = 0; i < items; ++i)
          for (int kt = 0; kt < p.n_kt; ++kt)
            if (map[i * size_t(p.n_kt) + size_t(kt)]) skip->skipped_tiles[i].push_back(kt);
      }
    }
  }
};

}  // namespace

void attention_dense(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt, float* lse, Stats* stats,
                     void* stream) {
  check_qkv_out(q, k, v, out, lse, opt.causal, "cuda attention_dense");
  SPATTN_CHECK(opt.window == 0, "cuda attention_dense: sliding windows have no GPU path yet");
  const cudaStream_t s = stream_of(stream, opt);
  FlashParams p = base_params(q, k, v, out, opt, lse, 128);
  Records rec;
  rec.attach(p, stats != nullptr, false, false, s);
  dispatch<false, false>(q.dtype, q.dim, 128, p, s);
  rec.read(p, q.dim, stats, nullptr, s);
}

namespace {
// A device copy of a host vector (at least one element, so the pointer is never null).
template <class E>
E* upload(const std::vector<E>& host, cudaStream_t s) {
  E* d = nullptr;
  check(cudaMalloc(reinterpret_cast<void**>(&d), std::max<size_t>(1, host.size()) * sizeof(E)),
        "cudaMalloc");
  if (!host.empty()) {
    const cudaError_t e =
        cudaMemcpyAsync(d, host.data(), host.size() * sizeof(E), cudaMemcpyHostToDevice, s);
    if (e != cudaSuccess) cudaFree(d);
    check(e, "cudaMemcpyAsync");
  }
  return d;
}
}  // namespace

BlockSparsePlan::BlockSparsePlan(const BlockMask& mask, void* stream)
    : heads_(mask.heads), q_len_(mask.q_len), kv_len_(mask.kv_len), causal_(mask.causal) {
  const char* who = "cuda BlockSparsePlan";
  SPATTN_CHECK(mask.block_q % kGroupRows == 0 && mask.block_k % kBN == 0, who,
               ": mask blocks must be multiples of 64 rows and 64 keys (got ", mask.block_q, "x",
               mask.block_k, ")");
  mask.validate();
  // Each kernel tile (128 rows where the mask's rows come in 128s, so that both 64-row groups
  // share a list; else 64) takes its mask block's list, each listed block as its 64-key tiles,
  // minus tiles no row of the kernel tile may see (the diagonal block's far half, say): the
  // kernel masks inside a tile, these it need not visit at all.
  tile_rows_ = mask.block_q % 128 == 0 ? 128 : 64;
  const int64_t n_qt = (q_len_ + tile_rows_ - 1) / tile_rows_;
  std::vector<int> offsets(size_t(heads_ * n_qt) + 1, 0), tiles;
  const int64_t per_block = mask.block_k / kBN;
  for (int64_t h = 0; h < heads_; ++h) {
    for (int64_t t = 0; t < n_qt; ++t) {
      const int64_t last_row = std::min<int64_t>(q_len_, (t + 1) * tile_rows_) - 1;
      const int64_t reach = causal_ ? causal_limit(last_row, q_len_, kv_len_) : kv_len_;
      for (int32_t blk : mask.row(h, t * tile_rows_ / mask.block_q))
        for (int64_t j = 0; j < per_block; ++j) {
          const int64_t kt = blk * per_block + j;
          if (kt * kBN < reach) tiles.push_back(int(kt));
        }
      offsets[size_t(h * n_qt + t) + 1] = int(tiles.size());
    }
  }
  tiles_ = int64_t(tiles.size());
  // 64-row lists paired into 128-row tiles: the sorted union, with whose entry each tile is.
  std::vector<int> pair_offsets, pair_tiles;
  std::vector<uint8_t> pair_groups;
  if (tile_rows_ == 64) {
    const int64_t n_pairs = (n_qt + 1) / 2;
    pair_offsets.assign(size_t(heads_ * n_pairs) + 1, 0);
    for (int64_t h = 0; h < heads_; ++h)
      for (int64_t t = 0; t < n_pairs; ++t) {
        const size_t a = size_t(h * n_qt + 2 * t);
        const bool second = 2 * t + 1 < n_qt;  // the pair's second 64-row tile exists
        int i = offsets[a], i_end = offsets[a + 1];
        int j = second ? offsets[a + 1] : 0, j_end = second ? offsets[a + 2] : 0;
        while (i < i_end || j < j_end) {
          const int ti = i < i_end ? tiles[size_t(i)] : INT32_MAX;
          const int tj = j < j_end ? tiles[size_t(j)] : INT32_MAX;
          pair_tiles.push_back(std::min(ti, tj));
          pair_groups.push_back(uint8_t((ti <= tj ? 1 : 0) | (tj <= ti ? 2 : 0)));
          i += ti <= tj;
          j += tj <= ti;
        }
        pair_offsets[size_t(h * n_pairs + t) + 1] = int(pair_tiles.size());
      }
  }
  const auto s = static_cast<cudaStream_t>(stream);
  try {
    offsets_ = upload(offsets, s);
    list_ = upload(tiles, s);
    if (tile_rows_ == 64) {
      pair_offsets_ = upload(pair_offsets, s);
      pair_list_ = upload(pair_tiles, s);
      pair_groups_ = upload(pair_groups, s);
    }
    check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
  } catch (...) {
    for (void* ptr : {static_cast<void*>(offsets_), static_cast<void*>(list_),
                      static_cast<void*>(pair_offsets_), static_cast<void*>(pair_list_),
                      static_cast<void*>(pair_groups_)})
      cudaFree(ptr);
    throw;
  }
}

BlockSparsePlan::~BlockSparsePlan() {
  cudaFree(offsets_);
  cudaFree(list_);
  cudaFree(pair_offsets_);
  cudaFree(pair_list_);
  cudaFree(pair_groups_);
}

namespace {
// The kernel over a plan whose geometry matches inputs already checked.
void run_block_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const BlockSparsePlan& plan, const AttnOptions& opt,
                      float* lse, Stats* stats, cudaStream_t s) {
  int rows = int(plan.tile_rows());
  // The wgmma kernel takes a 64-row plan as pairs: 128-row tiles over the union of the two
  // lists, each group computing its own entries.
  const bool paired = rows == 64 && plan.device_pair_offsets() && sm90::selected();
  if (paired) rows = 128;
  FlashParams p = base_params(q, k, v, out, opt, lse, rows);
  if (paired) {
    p.list_offsets = plan.device_pair_offsets(), p.list_tiles = plan.device_pair_tiles();
    p.list_groups = plan.device_pair_groups();
  } else {
    p.list_offsets = plan.device_offsets(), p.list_tiles = plan.device_tiles();
  }
  Records rec;
  rec.attach(p, stats != nullptr, false, false, s);
  dispatch<true, false>(q.dtype, q.dim, rows, p, s);
  rec.read(p, q.dim, stats, nullptr, s);
}
}  // namespace

void attention_block_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const BlockSparsePlan& plan,
                            const AttnOptions& opt, float* lse, Stats* stats, void* stream) {
  const char* who = "cuda attention_block_sparse";
  check_qkv_out(q, k, v, out, lse, opt.causal, who);
  SPATTN_CHECK(plan.heads() == q.heads && plan.q_len() == q.seq && plan.kv_len() == k.seq &&
                   plan.causal() == opt.causal,
               who, ": the mask is for ", plan.heads(), " heads, ", plan.q_len(), " queries over ",
               plan.kv_len(), " keys, ", plan.causal() ? "causal" : "non-causal",
               "; the inputs are ", q.heads, " heads, ", q.seq, " over ", k.seq, ", ",
               opt.causal ? "causal" : "non-causal");
  run_block_sparse(q, k, v, out, plan, opt, lse, stats, stream_of(stream, opt));
}

void attention_block_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const BlockMask& mask, const AttnOptions& opt,
                            float* lse, Stats* stats, void* stream) {
  const char* who = "cuda attention_block_sparse";
  check_qkv_out(q, k, v, out, lse, opt.causal, who);  // before the plan touches the device
  mask.check_matches(q.heads, q.seq, k.seq, opt.causal);
  const cudaStream_t s = stream_of(stream, opt);
  const BlockSparsePlan plan(mask, s);
  run_block_sparse(q, k, v, out, plan, opt, lse, stats, s);
  // The plan's lists are freed when it goes: wait for the kernel that reads them.
  check(cudaStreamSynchronize(s), "cudaStreamSynchronize");
}

void attention_query_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const std::vector<int64_t>& rows, const TensorView& out,
                            const AttnOptions& opt, float* lse, Stats* stats, void* stream) {
  const char* who = "cuda attention_query_sparse";
  SPATTN_CHECK(!rows.empty(), who, ": the row list is empty");
  for (size_t i = 0; i < rows.size(); ++i) {
    SPATTN_CHECK(rows[i] >= 0 && rows[i] < q.seq, who, ": row ", rows[i], " outside [0, ", q.seq,
                 ")");
    SPATTN_CHECK(i == 0 || rows[i] > rows[i - 1], who, ": rows must be strictly increasing (",
                 rows[i - 1], " then ", rows[i], ")");
  }
  check_qkv_out(q, k, v, out, lse, opt.causal, who, int64_t(rows.size()));
  SPATTN_CHECK(opt.window == 0, who, ": sliding windows have no GPU path yet");
  const cudaStream_t s = stream_of(stream, opt);
  FlashParams p = base_params(q, k, v, out, opt, lse, 64);
  // The kernel's rows are the listed ones; positions stay q's.
  const int n = int(rows.size());
  p.q_len = n;
  p.n_qt = p.n_qt64 = (n + kGroupRows - 1) / kGroupRows;
  p.lse_h = n;
  DeviceBuffer<int> d_rows;
  d_rows.upload(std::vector<int>(rows.begin(), rows.end()), s);
  p.rows = d_rows.get();
  Records rec;
  rec.attach(p, stats != nullptr, false, false, s);
  launch_query_sparse(q.dtype, q.dim, p, s);  // 64 listed rows a block
  rec.read(p, q.dim, stats, nullptr, s, q.seq);
}

namespace {
// Appends keys as gathered token-level pieces of up to 64 (FlashParams::piece_start): each
// piece's descriptor to starts and lens, its keys to gathered.
void add_gathered_pieces(const std::vector<int64_t>& keys, std::vector<int>& starts,
                         std::vector<int>& lens, std::vector<int>& gathered) {
  for (size_t c = 0; c < keys.size(); c += kBN) {
    starts.push_back(-int(gathered.size()) - 1);
    lens.push_back(int(std::min<size_t>(kBN, keys.size() - c)));
    for (size_t i = c; i < std::min(keys.size(), c + kBN); ++i) gathered.push_back(int(keys[i]));
  }
}
}  // namespace

void attention_vertical_slash(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const VerticalSlashIndex& index,
                              const AttnOptions& opt, float* lse, Stats* stats, void* stream) {
  const char* who = "cuda attention_vertical_slash";
  check_qkv_out(q, k, v, out, lse, opt.causal, who);
  SPATTN_CHECK(opt.causal, who, ": only causal attention is supported (as on the CPU)");
  SPATTN_CHECK(opt.window == 0, who, ": sliding windows have no GPU path yet");
  index.validate(q.heads, q.seq, k.seq);
  SPATTN_CHECK(index.tile_rows == kGroupRows, who, ": tile_rows=", index.tile_rows,
               " (the GPU kernel's query tiles are ", kGroupRows, " rows)");
  SPATTN_CHECK(!index.rows, who,
               ": an index over a row list (MMInference's per-modality "
               "indexes) has no GPU path yet");
  const cudaStream_t s = stream_of(stream, opt);
  FlashParams p = base_params(q, k, v, out, opt, lse, kGroupRows);
  // Each 64-row tile's keys (vertical_slash_tile_keys: what the CPU kernel computes) as pieces
  // of at most 64: its coalesced slash ranges in runs of 64 keys from each range's start, and
  // what is left of each range (a slash range is as wide as the tile and rarely on the 64-key
  // grid, so most leave a short piece) gathered with the columns outside the ranges, 64 keys a
  // piece, as the CPU kernel packs its fragments (kPackFragments): a tile's time for 64 keys,
  // not for a piece of a few.
  std::vector<int> offsets(size_t(p.heads) * size_t(p.n_qt) + 1, 0), starts, lens, gathered;
  std::vector<KeyRange> ranges;
  std::vector<int64_t> columns, loose;
  for (int64_t h = 0; h < q.heads; ++h)
    for (int64_t t = 0; t < p.n_qt; ++t) {
      vertical_slash_tile_keys(index, h, t, q.seq, k.seq, ranges, columns);
      loose.clear();
      for (const KeyRange& r : ranges) {
        int64_t b = r.begin;
        for (; r.end - b >= kBN; b += kBN) starts.push_back(int(b)), lens.push_back(kBN);
        for (; b < r.end; ++b) loose.push_back(b);
      }
      loose.insert(loose.end(), columns.begin(), columns.end());
      add_gathered_pieces(loose, starts, lens, gathered);
      SPATTN_CHECK(starts.size() < size_t(INT_MAX) && gathered.size() < size_t(INT_MAX), who,
                   ": the index has too many pieces");
      offsets[size_t(h * p.n_qt + t) + 1] = int(starts.size());
    }
  DeviceBuffer<int> d_offsets, d_starts, d_lens, d_gathered;
  d_offsets.upload(offsets, s), d_starts.upload(starts, s), d_lens.upload(lens, s);
  d_gathered.upload(gathered.empty() ? std::vector<int>{0} : gathered, s);
  p.piece_offsets = d_offsets.get(), p.piece_start = d_starts.get();
  p.piece_len = d_lens.get(), p.gather_keys = d_gathered.get();
  Records rec;
  rec.attach(p, stats != nullptr, false, false, s);
  launch_for<1, false, false, false, 1, true>(q.dtype, q.dim, p, s);
  rec.read(p, q.dim, stats, nullptr, s);
  // The pieces' device copies are freed in stream order, after the kernel.
}

void attention_gathered_groups(const TensorView& q, const TensorView& k, const TensorView& v,
                               const std::vector<GatheredGroup>& groups, const TensorView& out,
                               const AttnOptions& opt, float* lse, Stats* stats, void* stream) {
  const char* who = "cuda attention_gathered_groups";
  check_qkv_out(q, k, v, out, lse, opt.causal, who);
  SPATTN_CHECK(q.heads == 1 && k.heads == 1, who, ": one q head and its kv head a call (got ",
               q.heads, " and ", k.heads, ")");
  SPATTN_CHECK(opt.causal, who, ": only causal attention is supported");
  SPATTN_CHECK(opt.window == 0, who, ": sliding windows have no GPU path yet");
  // Each group's rows padded to whole 64-row tiles (slots -1), every tile of it visiting the
  // group's keys as gathered pieces of 64 (descriptors repeated per tile, keys stored once).
  std::vector<int> rows, offsets{0}, starts, lens, keys, positions, group_starts, group_lens;
  std::vector<uint8_t> taken(size_t(q.seq), 0);
  for (const GatheredGroup& g : groups) {
    SPATTN_CHECK(g.keys.size() == g.positions.size(), who, ": a group has ", g.keys.size(),
                 " keys and ", g.positions.size(), " positions");
    for (size_t i = 0; i < g.rows.size(); ++i) {
      const int64_t r = g.rows[i];
      SPATTN_CHECK(r >= 0 && r < q.seq && (i == 0 || r > g.rows[i - 1]) && !taken[size_t(r)], who,
                   ": row ", r, " is out of [0, ", q.seq, "), out of order or in two groups");
      taken[size_t(r)] = 1;
    }
    for (size_t i = 0; i < g.keys.size(); ++i) {
      SPATTN_CHECK(g.keys[i] >= 0 && g.keys[i] < k.seq && g.positions[i] >= 0 &&
                       g.positions[i] < (int64_t(1) << 30),
                   who, ": key ", g.keys[i], " (position ", g.positions[i], ") out of range");
      positions.push_back(int(g.positions[i]));
    }
    group_starts.clear(), group_lens.clear();
    add_gathered_pieces(g.keys, group_starts, group_lens, keys);
    for (size_t t = 0; t < g.rows.size(); t += kGroupRows) {
      for (size_t i = t; i < t + kGroupRows; ++i)
        rows.push_back(i < g.rows.size() ? int(g.rows[i]) : -1);
      starts.insert(starts.end(), group_starts.begin(), group_starts.end());
      lens.insert(lens.end(), group_lens.begin(), group_lens.end());
      SPATTN_CHECK(starts.size() < size_t(INT_MAX) && rows.size() < size_t(INT_MAX), who,
                   ": too many rows or pieces");
      offsets.push_back(int(starts.size()));
    }
  }
  if (rows.empty()) return;  // no row to compute: out and lse untouched
  const cudaStream_t s = stream_of(stream, opt);
  FlashParams p = base_params(q, k, v, out, opt, lse, kGroupRows);
  if (opt.q_start >= 0) p.pos_offset = int(opt.q_start);
  p.q_len = int(rows.size());  // the slots; rows keep q's positions and are written back there
  p.n_qt = p.n_qt64 = p.q_len / kGroupRows;
  p.rows_scatter = true;
  DeviceBuffer<int> d_rows, d_offsets, d_starts, d_lens, d_keys, d_pos;
  d_rows.upload(rows, s), d_offsets.upload(offsets, s);
  d_starts.upload(starts.empty() ? std::vector<int>{0} : starts, s);
  d_lens.upload(lens.empty() ? std::vector<int>{0} : lens, s);
  d_keys.upload(keys.empty() ? std::vector<int>{0} : keys, s);
  d_pos.upload(positions.empty() ? std::vector<int>{0} : positions, s);
  p.rows = d_rows.get(), p.piece_offsets = d_offsets.get(), p.piece_start = d_starts.get();
  p.piece_len = d_lens.get(), p.gather_keys = d_keys.get(), p.gather_pos = d_pos.get();
  Records rec;
  rec.attach(p, stats != nullptr, false, false, s);
  launch_for<1, false, false, true, 1, true>(q.dtype, q.dim, p, s);
  rec.read(p, q.dim, stats, nullptr, s, q.seq);
}

namespace {
// BLASST's query tile on the GPU: 128 rows (two 64-row groups that share K and V tiles: a tile
// costs its time unless both groups skip it), or with SPATTN_CUDA_BLASST_ROWS=64 one group a
// block, which skips alone at the price of reading each K and V tile for 64 rows only (issue
// 62 item 4: which wins at ~70% skipped is for a GPU to measure; 128 until then).
int blasst_tile_rows() {
  const char* env = std::getenv("SPATTN_CUDA_BLASST_ROWS");
  if (!env || !*env) return 128;
  SPATTN_CHECK(std::strcmp(env, "64") == 0 || std::strcmp(env, "128") == 0,
               "SPATTN_CUDA_BLASST_ROWS=", env, ": expected 64 or 128");
  return std::atoi(env);
}
}  // namespace

void attention_blasst(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, double lambda, const AttnOptions& opt, float* lse,
                      Stats* stats, SkipStats* skip, BlasstOrder order, void* stream) {
  const char* who = "cuda attention_blasst";
  check_qkv_out(q, k, v, out, lse, opt.causal, who);
  SPATTN_CHECK(opt.window == 0, who, ": sliding windows have no GPU path yet");
  const float threshold = kernels::blasst_log2_threshold(lambda, who);
  kernels::check_blasst_order(order, who);
  SPATTN_CHECK(order == BlasstOrder::in_order || opt.causal, who,
               ": local_first is causal-only on the GPU");
  const cudaStream_t s = stream_of(stream, opt);
  const int rows = blasst_tile_rows();
  FlashParams p = base_params(q, k, v, out, opt, lse, rows);
  p.threshold = threshold;
  // At lambda 0 nothing can be skipped: the CPU runs in order; so does this.
  p.local_first = order == BlasstOrder::local_first && threshold != -INFINITY;
  Records rec;
  rec.attach(p, stats != nullptr, skip != nullptr, skip && skip->record_tiles, s);
  dispatch<false, true>(q.dtype, q.dim, rows, p, s);
  rec.read(p, q.dim, stats, skip, s);
}

}  // namespace spattn::cuda

// The CUDA backend (issue 25, first stage): dense, block-sparse and BLASST attention on NVIDIA
// GPUs (sm_80 and later), over tensors that live in device memory. Same shapes, options and
// results as the CPU entry points (attention.hpp, sparse_attention.hpp, blasst.hpp):
// q [Hq, Lq, d], k and v [Hkv, Lkv, d] as TensorViews whose `data` is a device pointer (any
// head and row strides, the head dimension contiguous, rows 16-byte aligned), bf16 or f16,
// d 64 or 128, GQA, causal bottom-right or not; out has q's shape and dtype; lse, when given,
// is a device array [Hq, Lq] of f32 natural-log LSE (-inf and an output of 0 for a row that
// sees no key). Accumulation is f32.
//
// Built when CMake finds a CUDA compiler (SPATTN_CUDA=auto|on|off); without it, or without a
// GPU, every call throws Error saying so (built() and device_count() tell beforehand).
// `stream` is a cudaStream_t (null: AttnOptions::stream, the one Method::run passes; null too:
// the default stream). Calls are asynchronous unless a Stats or SkipStats is asked for (those
// are read back, which waits for the kernel).
#pragma once
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/blasst.hpp"
#include "spattn/block_mask.hpp"
#include "spattn/decode.hpp"
#include "spattn/select.hpp"
#include "spattn/select_observer.hpp"
#include "spattn/sparse_attention.hpp"

namespace spattn {
struct VerticalSlashConfig;  // spattn/masks.hpp
struct GridConfig;           // spattn/grid.hpp
struct GridLines;
struct PairPlan;  // spattn/modality_boundary.hpp
}  // namespace spattn

namespace spattn::cuda {

// Whether this build holds the CUDA backend.
bool built();
// GPUs visible (0 without the backend, a driver or a device).
int device_count();
// "NVIDIA H100 80GB HBM3, sm_90, 132 SMs, driver 13.0, runtime 13.0"; throws Error without one.
std::string device_description(int device = 0);
// The prefill kernel 128-row query tiles run on the current device: "wgmma" on a Hopper GPU
// (sm_90, FlashAttention-3's warp-specialized structure), else "mma" (mma.sync,
// FlashAttention-2's). The environment variable SPATTN_CUDA_KERNEL=mma picks the second on a
// Hopper too (=wgmma insists on the first: an Error elsewhere). Throws Error without a GPU.
std::string prefill_kernel();

// Whether p points into CUDA device (or managed) memory; false without a GPU or the backend.
bool is_device_pointer(const void* p);
// A host copy of a device view (contiguous [heads, seq, dim], same dtype); waits for the copy.
Tensor to_host(const TensorView& device_view, void* stream = nullptr);

// The device this thread's calls run on, and setting it; throw Error naming a device that
// does not exist.
int current_device();
void set_device(int device);
// Makes `device` current for the guard's lifetime and restores the previous one after (the
// Python package runs on the device a torch tensor lives on, whatever is current).
class DeviceGuard {
 public:
  explicit DeviceGuard(int device);
  ~DeviceGuard();
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = -1;
};

// Waits for everything queued on `stream` (null: the default stream).
void synchronize(void* stream = nullptr);

// An owning, contiguous [heads, seq, dim] tensor in device memory of the current device,
// zero-filled: what `spattn bench --device cuda` uploads its inputs into and writes outputs to.
class DeviceTensor {
 public:
  DeviceTensor() = default;
  DeviceTensor(DType t, int64_t heads, int64_t seq, int64_t dim);
  // A device copy of a host view, converted to dtype t on the host first; waits for the copy.
  static DeviceTensor upload(const TensorView& host, DType t);
  ~DeviceTensor();
  DeviceTensor(DeviceTensor&& o) noexcept { *this = std::move(o); }
  DeviceTensor& operator=(DeviceTensor&& o) noexcept;
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
  TensorView view() const { return view_; }
  operator TensorView() const { return view_; }

 private:
  TensorView view_;
};

// GPU time between two points of a stream (CUDA events): start() and stop() record, ms() waits
// for the stop and returns the milliseconds between. Host work between the two calls that
// holds the stream back (a mask built on the CPU before its kernel is queued) is in the time.
class EventTimer {
 public:
  EventTimer();
  ~EventTimer();
  EventTimer(const EventTimer&) = delete;
  EventTimer& operator=(const EventTimer&) = delete;
  void start(void* stream = nullptr);
  void stop(void* stream = nullptr);
  double ms() const;

 private:
  void* start_ = nullptr;
  void* stop_ = nullptr;
};

void attention_dense(const TensorView& q, const TensorView& k, const TensorView& v,
                     const TensorView& out, const AttnOptions& opt = {}, float* lse = nullptr,
                     Stats* stats = nullptr, void* stream = nullptr);

// Exactly the mask's blocks (causal inside diagonal blocks), as the CPU attention_block_sparse.
// The mask stays on the host; its lists go to the device per call (64-row, 64-key kernel
// tiles: block_q and block_k must be multiples of 64).
void attention_block_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const BlockMask& mask,
                            const AttnOptions& opt = {}, float* lse = nullptr,
                            Stats* stats = nullptr, void* stream = nullptr);

// The same with the mask's lists already on the device (FlashInfer's plan/run split): build
// the plan once per mask, run it on any inputs of the mask's geometry. Masks whose rows come in
// 128s run on 128-row kernel tiles, others on 64-row ones. Holds device memory
// until destroyed; the device current at construction must be current at run.
class BlockSparsePlan {
 public:
  BlockSparsePlan(const BlockMask& mask, void* stream = nullptr);
  ~BlockSparsePlan();
  BlockSparsePlan(const BlockSparsePlan&) = delete;
  BlockSparsePlan& operator=(const BlockSparsePlan&) = delete;
  int64_t heads() const { return heads_; }
  int64_t q_len() const { return q_len_; }
  int64_t kv_len() const { return kv_len_; }
  bool causal() const { return causal_; }
  int64_t tiles() const { return tiles_; }          // 64-key tiles listed, all heads
  int64_t tile_rows() const { return tile_rows_; }  // query rows per listed tile: 64 or 128
  const int* device_offsets() const { return offsets_; }
  const int* device_tiles() const { return list_; }
  // 64-row plans also as 128-row tiles (the wgmma kernel's): per pair of 64-row tiles the
  // union of their lists, each entry's bit g set where 64-row tile g of the pair lists it.
  // Null for 128-row plans.
  const int* device_pair_offsets() const { return pair_offsets_; }
  const int* device_pair_tiles() const { return pair_list_; }
  const uint8_t* device_pair_groups() const { return pair_groups_; }

 private:
  int64_t heads_ = 0, q_len_ = 0, kv_len_ = 0, tiles_ = 0, tile_rows_ = 64;
  bool causal_ = true;
  int* offsets_ = nullptr;
  int* list_ = nullptr;
  int* pair_offsets_ = nullptr;
  int* pair_list_ = nullptr;
  uint8_t* pair_groups_ = nullptr;
};
void attention_block_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const TensorView& out, const BlockSparsePlan& plan,
                            const AttnOptions& opt = {}, float* lse = nullptr,
                            Stats* stats = nullptr, void* stream = nullptr);

// A subset of query rows against all their causal keys (MOMO's query-sparse pass; the CPU's
// attention_query_sparse): rows strictly increasing in [0, Lq), out [Hq, rows.size(), d] and
// lse [Hq, rows.size()] compact (row i is q row rows[i]). Tiles of 64 listed rows, as the CPU's.
void attention_query_sparse(const TensorView& q, const TensorView& k, const TensorView& v,
                            const std::vector<int64_t>& rows, const TensorView& out,
                            const AttnOptions& opt = {}, float* lse = nullptr,
                            Stats* stats = nullptr, void* stream = nullptr);
// MInference's token-level vertical-slash form (sparse_attention.hpp's attention_vertical_slash)
// over an index built on the host: each 64-row tile computes exactly the keys the CPU kernel
// computes for it (its slash ranges and its columns), the ranges read in runs of 64 keys and
// the columns gathered 64 at a time. Causal; tile_rows 64; no row list (rows) yet.
void attention_vertical_slash(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const VerticalSlashIndex& index,
                              const AttnOptions& opt = {}, float* lse = nullptr,
                              Stats* stats = nullptr, void* stream = nullptr);
// Query rows in groups against gathered keys (row_groups.hpp's form over one head's own K and V,
// no pack: MMInference's grid head): group g's rows (ascending q rows, each in at most one
// group) attend to its keys, rows of k and v in any order, each with the position the causal
// rule compares against the row's (AttnOptions::q_start, else bottom-right). Output and LSE go
// to each row's own index; rows in no group are left as they are. One q head and its kv head a
// call; causal.
struct GatheredGroup {
  std::vector<int64_t> rows, keys, positions;
};
void attention_gathered_groups(const TensorView& q, const TensorView& k, const TensorView& v,
                               const std::vector<GatheredGroup>& groups, const TensorView& out,
                               const AttnOptions& opt = {}, float* lse = nullptr,
                               Stats* stats = nullptr, void* stream = nullptr);
// MMInference's grid search (grid.hpp's grid_estimate, Algorithm 1) with its A_hat on the
// device; the stride and phase per q head chosen on the host from the sums read back.
std::vector<GridLines> grid_estimate(const TensorView& q, const TensorView& k, const GridConfig& c,
                                     const AttnOptions& opt = {}, void* stream = nullptr);
// MMInference's grid head (grid.hpp's attention_grid: the same two passes and merge) on the
// device: the sink and local band through the block-sparse kernel, each head's permuted layout
// through attention_gathered_groups, merged exactly. lines: one per q head (grid_estimate).
void attention_grid(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const std::vector<GridLines>& lines, const GridConfig& c,
                    const AttnOptions& opt = {}, float* lse = nullptr, Stats* stats = nullptr,
                    void* stream = nullptr);
// MMInference's Q-boundary and 2D-boundary heads (modality_boundary.hpp's
// attention_modality_pairs: the same pieces, merged exactly) on the device: each piece's tiles
// through attention_gathered_groups, its keys at their original positions. One head; causal.
void attention_modality_pairs(const TensorView& q, const TensorView& k, const TensorView& v,
                              const TensorView& out, const std::vector<PairPlan>& plans,
                              const AttnOptions& opt = {}, float* lse = nullptr,
                              Stats* stats = nullptr, void* stream = nullptr);
// MInference's estimate of that index on the device (masks.hpp's vertical_slash_index, the
// same rules): the last last_q queries' softmax against every key summed per column and per
// diagonal on tensor cores, the sink columns and local diagonals forced, the largest per head
// kept (ties to the smaller index); the index is read back to the host.
VerticalSlashIndex vertical_slash_index(const TensorView& q, const TensorView& k,
                                        const VerticalSlashConfig& c, const AttnOptions& opt,
                                        void* stream = nullptr);
// The same estimate over listed rows and candidate keys (the host's per-modality form, which
// MMInference's boundary pieces read: modality_boundary.hpp): q rows est_rows (ascending)
// against the keys at positions `keys` (ascending; null: every key), each row's softmax over the
// candidates it sees, the first `sink` candidates forced as columns; the columns are key
// positions.
VerticalSlashIndex vertical_slash_estimate(const TensorView& q, const TensorView& k,
                                           const VerticalSlashConfig& c, const AttnOptions& opt,
                                           const std::vector<int64_t>& est_rows,
                                           const std::vector<int64_t>* keys,
                                           void* stream = nullptr);

// BLASST's skip rule inside the dense loop (blasst.hpp): the same 64x64 tiles, threshold
// lambda in [0, 1], visiting order in_order or local_first (causal). `skip`, when given, is
// filled as the CPU kernel fills it (record_tiles too).
void attention_blasst(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, double lambda, const AttnOptions& opt = {},
                      float* lse = nullptr, Stats* stats = nullptr, SkipStats* skip = nullptr,
                      BlasstOrder order = BlasstOrder::in_order, void* stream = nullptr);

// Decode (spattn/decode.hpp's attention_decode) on the device: 1 <= Lq <= 16 queries at the
// end of the cache, flash-decoding's split-K over the CPU's plan (splits of at most 32 key
// tiles, each its own running max; partials merged exactly). With dopt.lambda > 0 it is
// BLASST's decode: `batch` (1..4 on the GPU) tiles scored, the running max taken over them, and
// only the kept tiles' V read. Rows are packed per kv head in chunks of whole q heads of at
// most 16 rows (the CPU's: 128), so both skip the same tiles whenever group x Lq <= 16. stats
// and skip as the CPU fills them.
void attention_decode(const TensorView& q, const TensorView& k, const TensorView& v,
                      const TensorView& out, const AttnOptions& opt = {},
                      const DecodeOptions& dopt = {}, float* lse = nullptr, Stats* stats = nullptr,
                      SkipStats* skip = nullptr, void* stream = nullptr);

// MOMO's prefill on the device ("Measure Once, Mask Once: Delta Refined Block Sparse
// Attention", Algorithm 1; the method, its parameters and its geometry are src/methods/momo.cpp's,
// whose run_cuda calls this): the query-sparse pass over `rows` with each row's key-tile LSE,
// each row's exact top-k of its candidate beta-blocks by S(j) (Eq. 3; ties: the smaller block,
// as ExactTopK), the union and trim per query block (Algorithm 2, with the CPU's trim, blend,
// pool, topp and min_share), the block-sparse pass over the selected blocks and the delta
// correction (Eq. 2), all on `stream` with no copy to the host between them. causal only.
struct MomoGpuPlan {
  int64_t chi = 128, beta = 64, k = 128, k_trim = 128;
  bool trim_mass = true;   // trim=mass (else mean)
  int blend = 2;           // 0 none, 1 mean_pool, 2 moments
  bool pool_above = true;  // pool=above (else block)
  bool delta = true;
  double topp = 0, min_share = 0;    // 0: absent
  std::vector<int64_t> rows;         // the sampled rows, strided_rows(q_len, gamma)
  std::vector<ForcedBlocks> forced;  // per query block of chi rows
  std::vector<int64_t> first_row;    // per query block + 1: its rows start at rows[first_row]
  // The most bytes the query-sparse pass's tile LSEs (4 per head, sampled row and key tile) may
  // take at once: the pass and the selection run over chunks of heads that fit (whole kv
  // groups, else part of one; at least one head). 1 GiB: 128K tokens with 32 heads and gamma
  // 128 take 268 MB in one chunk; 1M tokens take 17 GB in all, 0.5 GB a head.
  int64_t scratch_bytes = int64_t(1) << 30;
  // The selection inside the query-sparse pass (the paper's fused form: a heap of the k best
  // blocks per sampled row in shared memory as the tiles arrive, no tile LSEs stored) instead
  // of the pass, then a selection kernel. Also set by SPATTN_CUDA_MOMO_FUSED=1. Taken only
  // where k <= 256 (64 rows x k 8-byte keys of shared memory); MomoGpuResult says which ran.
  bool fused_select = false;
};
// What a run read back once it was done (the pipeline itself never waits for the host).
struct MomoGpuResult {
  std::vector<std::vector<int32_t>> lists;  // per (q head, query block), ascending: the mask
  std::vector<int64_t> row_blocks;          // per (q head, query block): its rows' selections
  std::vector<int64_t> kept_blocks;         // per (q head, query block): kept by the trim
  // Per (q head, sampled row), best first; filled only when want_rows was given.
  std::vector<std::vector<BlockScore>> row_selection;
  Stats fused, sparse;  // the two passes' score entries and tiles (causal_entries: q's problem)
  bool fused_select = false;  // the selection ran inside the query-sparse pass
};
void momo_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                    const TensorView& out, const MomoGpuPlan& plan, const AttnOptions& opt,
                    float* lse, MomoGpuResult& result, bool want_rows = false,
                    void* stream = nullptr);

// The estimating block-mask methods on the device (src/methods/xattention.cpp and
// mean_pool.cpp, whose run_cuda call these; src/cuda/xattention.cu and mean_pool.cu): the
// estimate, the selection with the method's budget (topk, topp or min_share: the host's rules,
// masks/block_budget.hpp) and the block-sparse pass over the selected blocks, all on `stream`
// with no copy to the host between them. The lists and the pass's stats are read back once
// everything is queued. Blocks must be multiples of 64 (the kernel's tiles).
struct GpuBlockBudget {
  int64_t topk = 0;      // when neither below is set: that many blocks beside the forced ones
  double topp = 0;       // > 0: the fewest blocks whose estimated mass reaches topp
  double min_share = 0;  // > 0: every block of at least min_share of its query block's mass
};
struct BlockSelectResult {
  std::vector<std::vector<int32_t>> lists;  // per (q head, query block), ascending: the mask
  Stats stats;                              // the block-sparse pass's
  // A method's per-q-head choices and its values, as its host path reports them
  // (flexprefill's pattern per head).
  std::map<std::string, std::vector<double>> per_head;
  std::map<std::string, double> extras;
};
// XAttention ("XAttention: Block Sparse Attention with Antidiagonal Scoring", Sec. 2): the
// antidiagonal estimate at `stride`, the sink block and the blocks of each row's `local` most
// recent keys (1: the diagonal blocks, the paper's) kept, then budget (topp: the paper's tau; or
// min_share; or, where neither is set, topk blocks by mass).
struct XAttentionGpuPlan {
  int64_t stride = 8, block_q = 128, block_k = 128, local = 1;
  GpuBlockBudget budget{0, 0.9, 0};
};
void xattention_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                          const TensorView& out, const XAttentionGpuPlan& plan,
                          const AttnOptions& opt, float* lse, BlockSelectResult& result,
                          void* stream = nullptr);
// mean_pool (spattn/masks.hpp's mean_pool_mask): sink and local keys kept, then topk blocks by
// the pooled scores, or topp / min_share over the antidiagonal estimate at `stride` (0: the
// pooled scores' masses, est=pooled).
struct MeanPoolGpuPlan {
  int64_t block_q = 64, block_k = 64, sink = 64, local = 64;
  GpuBlockBudget budget{128, 0, 0};
  int64_t stride = 4;
};
void mean_pool_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const MeanPoolGpuPlan& plan, const AttnOptions& opt,
                         float* lse, BlockSelectResult& result, void* stream = nullptr);
// FlexPrefill ("FlexPrefill: A Context-Aware Sparse Attention Mechanism for Efficient
// Long-Sequence Inference", Sec. 3.2; src/methods/flexprefill.cpp's rules): from the last
// `block` queries the estimated and pooled block distributions, per q head its pattern
// (query-aware where their sqrt(JSD) < tau, else vertical-slash), vertical blocks and slash
// bands by the budget with min_budget's floor, a query-aware head's pooled map by the budget
// (per query block, or flattened over the head: the paper's, qa_per_block false), then the
// block-sparse pass. per_head reports js_distance, query_aware, vertical_blocks, slash_bands.
struct FlexPrefillGpuPlan {
  int64_t block = 128, min_budget = 1024;
  GpuBlockBudget budget{0, 0.9, 0};  // gamma as topp; or topk, a count; or min_share
  double tau = 0.1;
  bool qa_per_block = false;
};
void flexprefill_attention(const TensorView& q, const TensorView& k, const TensorView& v,
                           const TensorView& out, const FlexPrefillGpuPlan& plan,
                           const AttnOptions& opt, float* lse, BlockSelectResult& result,
                           void* stream = nullptr);

// The exact (O, LSE) merge of merge.hpp on the device: o_a, o_b, out [H, L, d] of one dtype
// (bf16, f16 or f32), lse arrays [H, L] f32. out may alias o_a, lse_out lse_a.
void merge_attention(const TensorView& o_a, const float* lse_a, const TensorView& o_b,
                     const float* lse_b, const TensorView& out, float* lse_out,
                     void* stream = nullptr);

}  // namespace spattn::cuda

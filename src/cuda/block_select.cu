// One kernel per (query block, q head) selects its key blocks on the device (block_select.hpp):
// the forced blocks, the estimate's row (read, or the pooled rows' products), the budget
// (block_budget.cuh) and the ascending list, as the host's mean_pool_mask and xattention's
// build_mask do per query block.
#include "cuda/block_select.hpp"

#include <algorithm>

#include "cuda/inputs.hpp"
#include "spattn/error.hpp"

namespace spattn::cuda {
namespace {

constexpr int kThreads = 256;

struct SelectParams {
  const double* mass;
  const float* qpool;
  const float* kpool;
  float scale;
  bool pooled_mass, causal;
  int nqb, nkb, dim, group, q_len, kv_len, block_q, block_k, slots, cap;
  long long sink, local;
  BudgetRule rule;
  int* list;
  int* count;
};

__global__ void __launch_bounds__(kThreads) block_select_kernel(const SelectParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  double* val = reinterpret_cast<double*>(smem);
  int* idx = reinterpret_cast<int*>(val + p.slots);
  uint8_t* keep = reinterpret_cast<uint8_t*>(idx + p.slots);
  __shared__ float red[32];
  const int qb = blockIdx.x, h = blockIdx.y, tid = threadIdx.x;
  const int warp = tid / 32, lane = tid % 32, warps = blockDim.x / 32;
  // The query block's positions, the keys it sees and its visible blocks (BlockMask's).
  const long long off = (long long)p.kv_len - p.q_len;
  const long long p0 = off + (long long)qb * p.block_q;
  const long long p1 = off + min((long long)(qb + 1) * p.block_q, (long long)p.q_len) - 1;
  const long long visible_end = p.causal ? p1 + 1 : p.kv_len;
  const long long seen = min((long long)p.kv_len, max(visible_end, 0ll));
  const int limit = p.causal ? int((seen + p.block_k - 1) / p.block_k) : p.nkb;
  for (int kb = tid; kb < p.slots; kb += blockDim.x)
    keep[kb] = kb < p.nkb &&
               (keys_touch_block(0, min(p.sink, visible_end), kb, p.block_k, p.nkb) ||
                keys_touch_block(p0 - p.local + 1, min(p1 + 1, visible_end), kb, p.block_k, p.nkb));
  // The estimate's row.
  const int64_t item = int64_t(h) * p.nqb + qb;
  if (p.mass) {
    const double* m = p.mass + item * p.nkb;
    for (int kb = tid; kb < limit; kb += blockDim.x) val[kb] = m[kb];
  } else {
    const float* qv = p.qpool + item * p.dim;
    const float* kv = p.kpool + int64_t(h / p.group) * p.nkb * p.dim;
    float mx = -INFINITY;
    for (int kb = warp; kb < limit; kb += warps) {
      float dot = 0.f;
      for (int c = lane; c < p.dim; c += 32) dot = fmaf(qv[c], kv[int64_t(kb) * p.dim + c], dot);
      for (int o = 16; o > 0; o /= 2) dot += __shfl_xor_sync(0xffffffffu, dot, o);
      const float s = dot * p.scale;
      if (lane == 0) val[kb] = double(s);
      mx = fmaxf(mx, s);
    }
    if (p.pooled_mass) {
      // The row's max (exact in any order), then each block's mass.
      if (lane == 0) red[warp] = mx;
      __syncthreads();
      mx = -INFINITY;
      for (int w = 0; w < warps; ++w) mx = fmaxf(mx, red[w]);
      for (int kb = tid; kb < limit; kb += blockDim.x) {
        const long long n = min(seen, (long long)(kb + 1) * p.block_k) - (long long)kb * p.block_k;
        val[kb] = double(n > 0 ? n : 0) * exp(val[kb] - double(mx));
      }
    }
  }
  __syncthreads();
  spend_budget(val, idx, p.slots, limit, keep, p.rule);
  // The list, ascending.
  if (warp == 0) {
    const int at = write_kept(keep, 0, limit, p.list + item * p.cap, 0);
    if (lane == 0) p.count[item] = at;
  }
}

}  // namespace

int select_slots(int64_t nkb) {
  int p = 2;
  while (p < nkb) p <<= 1;
  return p;
}

void allow_select_smem(const void* kernel, size_t smem, int64_t nkb, const char* who) {
  int dev = 0, cap = 0;
  check(cudaGetDevice(&dev), "cudaGetDevice");
  check(cudaDeviceGetAttribute(&cap, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev),
        "cudaDeviceGetAttribute");
  SPATTN_CHECK(smem + 1024 <= size_t(cap), who, ": ", nkb, " key blocks need ", smem,
               " bytes of shared memory a block; this device has ", cap,
               " (a larger block_k, or a shorter kv_len)");
  check(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)),
        "cudaFuncSetAttribute");
}

void select_blocks(const TensorView& q, const TensorView& k, const AttnOptions& opt,
                   const BlockSelect& sel, SelectedLists& out, cudaStream_t s) {
  const char* who = "cuda block selection";
  SPATTN_CHECK(sel.block_q >= 1 && sel.block_k >= 1 && sel.sink >= 0 && sel.local >= 1, who,
               ": bad geometry");
  SPATTN_CHECK((sel.mass != nullptr) != (sel.qpool != nullptr && sel.kpool != nullptr), who,
               ": one estimate, masses or pooled rows");
  const int64_t nqb = (q.seq + sel.block_q - 1) / sel.block_q;
  const int64_t nkb = (k.seq + sel.block_k - 1) / sel.block_k;
  const int slots = select_slots(nkb);
  const size_t smem = select_smem(slots);
  allow_select_smem(reinterpret_cast<const void*>(block_select_kernel), smem, nkb, who);
  SPATTN_CHECK(int64_t(q.heads) * nqb * nkb < (int64_t(1) << 40) && nqb < INT32_MAX, who,
               ": too many blocks");
  out.list.alloc(size_t(q.heads) * size_t(nqb) * size_t(nkb), s);
  out.count.alloc(size_t(q.heads) * size_t(nqb), s);
  SelectParams p{};
  p.mass = sel.mass, p.qpool = sel.qpool, p.kpool = sel.kpool, p.scale = sel.scale;
  p.pooled_mass = sel.pooled_mass, p.causal = opt.causal;
  p.nqb = int(nqb), p.nkb = int(nkb), p.dim = int(q.dim), p.group = int(q.heads / k.heads);
  p.q_len = int(q.seq), p.kv_len = int(k.seq);
  p.block_q = int(sel.block_q), p.block_k = int(sel.block_k), p.slots = slots, p.cap = int(nkb);
  p.sink = sel.sink, p.local = sel.local, p.rule = sel.rule;
  p.list = out.list.get(), p.count = out.count.get();
  block_select_kernel<<<dim3(unsigned(nqb), unsigned(q.heads)), kThreads, smem, s>>>(p);
  check(cudaGetLastError(), "block_select_kernel launch");
  out.view.list = out.list.get(), out.view.count = out.count.get();
  out.view.heads = int(q.heads), out.view.nqb = int(nqb), out.view.cap = int(nkb);
  out.view.block_q = sel.block_q, out.view.block_k = sel.block_k;
}

void run_selected(const TensorView& q, const TensorView& k, const TensorView& v,
                  const TensorView& out, const AttnOptions& opt, float* lse, const BlockSelect& sel,
                  BlockSelectResult& result, cudaStream_t s) {
  SelectedLists lists;
  select_blocks(q, k, opt, sel, lists, s);
  BlockListRecords records;
  run_block_lists(q, k, v, out, opt, lse, lists.view, &records, s);
  result.lists = read_block_lists(lists.view, s);
  result.stats = records.read(s);
}

void check_select_inputs(const TensorView& q, const TensorView& k, const TensorView& v,
                         const TensorView& out, const float* lse, const AttnOptions& opt,
                         int64_t block_q, int64_t block_k, const char* who) {
  check_qkv_out(q, k, v, out, lse, opt.causal, who);
  SPATTN_CHECK(opt.window == 0, who, ": sliding windows have no GPU path");
  SPATTN_CHECK(block_q % 64 == 0 && block_k % 64 == 0, who, ": block_q=", block_q,
               " and block_k=", block_k,
               " must be multiples of 64 on the GPU (its 64-row and 64-key tiles)");
}

}  // namespace spattn::cuda

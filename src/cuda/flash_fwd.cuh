// The GPU attention kernel: FlashAttention-2's forward structure ("FlashAttention-2: Faster
// Attention with Better Parallelism and Work Partitioning", section 3) on tensor-core mma.sync,
// one kernel whose variants are policies, as the CPU kernels (src/kernels/flash-inl.h):
//   - which key tiles a query tile visits, in which order: every causal tile (dense), a list
//     per query tile (block-sparse over a BlockMask), in order or BLASST's local-first order;
//   - which query rows a tile holds: consecutive ones, or a sorted row list (query-sparse:
//     MOMO's sampled rows, "MOMO", section 3), gathered in and written out compactly;
//   - or, token-level (MInference's vertical-slash, "MInference 1.0", section 3.2 and its
//     kernel; MMInference appendix C.3), pieces of up to 64 keys per query tile: runs of
//     consecutive keys (a slash's key range, in 64s) or gathered keys (vertical columns, the
//     ranges' remainders; a grid head's permuted keys);
//   - whether a tile may be skipped after its scores are known (BLASST, "BLASST: Dynamic
//     Blocked Attention Sparsity via Softmax Thresholding", section 3: the tile's max against
//     the running max before it), in which case its softmax and P V are not computed;
//   - one K buffer or two (K(next) loaded under P V only, or from the top of the tile);
//   - query-sparse only: each row's tile LSEs written out, or folded into block scores and
//     their top k kept in shared memory as the tiles arrive (MOMO's fused selection: kTopK).
//
// One thread block: four warps over a query tile of 64 * kMT rows, each warp kMT m16 tiles
// (kMT 2: 32 rows a warp, FlashAttention-2's 128-row tile for head dim 128: every K and V
// fragment read from shared memory feeds two mma; kMT 1: 64 rows, the CPU kernels' tile, for
// block-sparse masks in 64-row blocks); key tiles of kBN = 64 keys. Q, K and V tiles sit in
// shared memory with their 16-byte chunks XOR-swizzled by row (ldmatrix reads 8 rows of one
// logical chunk: 8 distinct bank groups). Scores, the online softmax (m, l in log2 units) and O
// stay in registers; P goes from the score accumulators straight into mma A operands (the C
// layout of two n8 tiles is the A layout of one k16 step). Each 64-row group of warps keeps
// the CPU's 64x64 tile semantics: it visits a key tile only if one of its rows may see a key
// of it, BLASST decides per group, and statistics are recorded per 64-row tile.
#pragma once
#include <cuda_bf16.h>
#include <cuda_fp16.h>

#include <cstdint>

#include "cuda/ptx.cuh"
#include "cuda/row_topk.cuh"

namespace spattn::cuda {

constexpr int kBN = 64;         // keys per tile (the CPU kernels' 64-key tile, BLASST's unit)
constexpr int kGroupRows = 64;  // rows per group of warps: the CPU's query tile

struct FlashParams {
  const void* q = nullptr;
  const void* k = nullptr;
  const void* v = nullptr;
  void* o = nullptr;
  float* lse = nullptr;  // [batch][heads][q_len] natural log, or null
  // Strides in elements; the head dimension is contiguous.
  int64_t q_b = 0, q_h = 0, q_s = 0;
  int64_t k_b = 0, k_h = 0, k_s = 0;
  int64_t v_b = 0, v_h = 0, v_s = 0;
  int64_t o_b = 0, o_h = 0, o_s = 0;
  int64_t lse_b = 0, lse_h = 0;
  int q_len = 0, kv_len = 0;
  int heads = 0;       // q heads
  int group = 1;       // q heads per kv head (GQA)
  int n_qt = 0;        // kernel query tiles per head (64 * kMT rows each)
  int n_qt64 = 0;      // 64-row tiles per head: the records' unit
  int n_kt = 0;        // key tiles
  int pos_offset = 0;  // kv_len - q_len: position of query row 0 (causal, bottom-right)
  bool causal = true;
  float scale_log2 = 0;  // softmax scale * log2(e)
  // Block-sparse: per kernel tile (b, h, t) (index (b * heads + h) * n_qt + t) the key tiles
  // list_tiles[list_offsets[i], list_offsets[i + 1]), ascending.
  const int* list_offsets = nullptr;
  const int* list_tiles = nullptr;
  // Optional, beside the lists (the wgmma kernel's 128-row tiles over a 64-row mask): bit g
  // of entry j set where the tile's 64-row group g has list entry j; null: both groups.
  const uint8_t* list_groups = nullptr;
  // Query-sparse: the kernel's rows are rows[0, q_len) of q (ascending), written compactly
  // (out and lse row i is q row rows[i]); pos_offset stays q's own.
  const int* rows = nullptr;
  // Query-sparse only, optional: each listed row's LSE over each key tile it computed, natural
  // log, at tile_lse[((b * heads + h) * q_len + row) * n_kt + key tile] (MOMO's block scores
  // S(j), Eq. 3, before the selection: momo.cu). Taken as the CPU kernel's observer takes it:
  // ln 2 (m + log2 sum 2^(s - m)) with m the running max after the tile; -inf where the row saw
  // no key of the tile. Tiles a row does not reach are not written.
  float* tile_lse = nullptr;
  // Query-sparse only, optional, instead of tile_lse (MOMO's selection fused into the pass:
  // row_topk.cuh; the kernel's kTopK form): each listed row's sel_k best candidate blocks by
  // S(j), best first, at sel_block and sel_score [((b * heads + h) * q_len + row) * sel_k ...],
  // their count at sel_count[(b * heads + h) * q_len + row]. A row's candidates come from
  // sel_qblocks[q row / sel_chi], blocks of sel_beta keys (a multiple of 64).
  int sel_k = 0, sel_beta = 0, sel_chi = 0;
  const QBlock* sel_qblocks = nullptr;
  int* sel_block = nullptr;
  float* sel_score = nullptr;
  int* sel_count = nullptr;
  // Token-level (kGather): per kernel tile i the key pieces [piece_offsets[i],
  // piece_offsets[i + 1]), visited in order; piece j holds piece_len[j] (1..64) keys, keys
  // [start, start + len) where start = piece_start[j] >= 0, else gather_keys[-start - 1 + c]
  // for c < len (any order). Keys past a row's causal limit are masked as everywhere.
  const int* piece_offsets = nullptr;
  const int* piece_start = nullptr;
  const int* piece_len = nullptr;
  const int* gather_keys = nullptr;
  // kGather, optional: the position the causal rule compares for gathered key gather_keys[i]
  // (a permuted layout's: MMInference's grid head); null: the key's own index.
  const int* gather_pos = nullptr;
  // kRows: write row i's output and LSE at q row rows[i] (its own index, lse_h = q's length)
  // instead of compactly; there rows[i] < 0 is a padding slot (a group's last tile): nothing
  // loaded, computed or written.
  bool rows_scatter = false;
  // BLASST: log2(lambda) (-inf: skip nothing) and the visiting order.
  float threshold = -INFINITY;
  bool local_first = false;
  // Optional records per 64-row tile (b, h, t64) (index (b * heads + h) * n_qt64 + t64): tiles
  // visited and skipped, score entries that entered the softmax; skip_map [.. * n_kt + key
  // tile] set to 1 where a tile was skipped (zeroed by the caller).
  int* visited = nullptr;
  int* skipped = nullptr;
  unsigned long long* entries = nullptr;
  uint8_t* skip_map = nullptr;
};

namespace detail {

// Element offset of (row, col) in a [rows][D] tile whose 8-element chunks are swizzled by row.
template <int D>
__device__ __forceinline__ int swz(int row, int col) {
  return row * D + ((((col >> 3) ^ (row & 7))) << 3) + (col & 7);
}

// Rows [row0, row0 + kRows) of a [seq][D] matrix (row stride `stride` elements) into a
// swizzled tile, by kThreads threads; rows at or past `rows` are zero-filled. A thread copies
// chunk tid % kChunks of rows tid / kChunks + n * kStep: kStep is a multiple of 8, so the
// swizzle is the same for all its rows and its addresses step by constants.
template <class T, int D, int kRows, int kThreads>
__device__ __forceinline__ void load_tile(T* smem, const T* g, int64_t stride, int row0, int rows,
                                          int tid) {
  constexpr int kChunks = D / 8, kStep = kThreads / kChunks;
  static_assert(kStep % 8 == 0 && kRows % kStep == 0, "rows per pass");
  const int c = tid % kChunks, r = tid / kChunks;
  const uint32_t dst = ptx::smem_u32(smem + swz<D>(r, c * 8));
  const T* src = g + int64_t(row0 + r) * stride + c * 8;
  const int64_t step = int64_t(kStep) * stride;
#pragma unroll
  for (int n = 0; n < kRows / kStep; ++n) {
    const bool valid = row0 + r + n * kStep < rows;
    ptx::cp_async_16(dst + n * kStep * D * sizeof(T), valid ? src + n * step : g, valid);
  }
}

// The same for Q's rows of a query-sparse tile: tile row i is matrix row rows[row0 + i].
template <class T, int D, int kRows, int kThreads>
__device__ __forceinline__ void load_rows(T* smem, const T* g, int64_t stride, const int* rows,
                                          int row0, int n_rows, int tid) {
  constexpr int kChunks = D / 8, kStep = kThreads / kChunks;
  const int c = tid % kChunks, r = tid / kChunks;
  const uint32_t dst = ptx::smem_u32(smem + swz<D>(r, c * 8));
#pragma unroll
  for (int n = 0; n < kRows / kStep; ++n) {
    const int i = row0 + r + n * kStep;
    const bool valid = i < n_rows && rows[i] >= 0;
    ptx::cp_async_16(dst + n * kStep * D * sizeof(T),
                     valid ? g + int64_t(rows[i]) * stride + c * 8 : g, valid);
  }
}

// The keys of a token-level piece (FlashParams::piece_start) into a swizzled [kBN][D] tile,
// rows at or past len zero-filled; copies as load_tile's.
template <class T, int D, int kThreads>
__device__ __forceinline__ void load_piece(T* smem, const T* g, int64_t stride, int start, int len,
                                           const int* gather_keys, int tid) {
  constexpr int kChunks = D / 8, kStep = kThreads / kChunks;
  const int c = tid % kChunks, r = tid / kChunks;
  const uint32_t dst = ptx::smem_u32(smem + swz<D>(r, c * 8));
#pragma unroll
  for (int n = 0; n < kBN / kStep; ++n) {
    const int i = r + n * kStep;
    const bool valid = i < len;
    const int key = !valid ? 0 : start >= 0 ? start + i : gather_keys[-start - 1 + i];
    ptx::cp_async_16(dst + n * kStep * D * sizeof(T), valid ? g + int64_t(key) * stride + c * 8 : g,
                     valid);
  }
}

// The position the causal rule compares for key c of a token-level piece (the key's index, or
// its gathered position where gather_pos is given), or INT_MAX past the piece's length.
__device__ __forceinline__ int piece_key(int start, int len, const int* gather_keys,
                                         const int* gather_pos, int c) {
  if (c >= len) return 0x7fffffff;
  if (start >= 0) return start + c;
  return gather_pos ? gather_pos[-start - 1 + c] : gather_keys[-start - 1 + c];
}

// The i-th key tile a query tile visits. Dense: tiles [0, n) (n from the causal limit);
// lists: the listed ones. local_first: the last (the diagonal's) first, then tile 0 (the
// sink) when it is among them, then the rest from nearest to farthest, as
// blasst_local_first orders the CPU kernels' visits (src/kernels/flash_common.hpp).
__device__ __forceinline__ int tile_at(int i, int n, const int* list, bool local_first) {
  auto at = [&](int j) { return list ? list[j] : j; };
  if (!local_first) return at(i);
  if (i == 0) return at(n - 1);
  if (at(0) == 0) return i == 1 ? at(0) : at(n - i);
  return at(n - 1 - i);
}

}  // namespace detail

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;

template <class T, int D, int kMT, bool kList, bool kSkip, bool kRows = false, int kKBufs = 1,
          bool kGather = false, bool kTopK = false>
__global__ void __launch_bounds__(kThreads) flash_fwd_kernel(const FlashParams p) {
  static_assert(D == 64 || D == 128, "head dim 64 or 128");
  static_assert(!kGather || (kMT == 1 && !kList && !kSkip && kKBufs == 1),
                "token-level pieces: 64-row tiles, nothing else but a row list");
  static_assert(kMT == 1 || kMT == 2, "one or two m16 tiles a warp");
  static_assert(kKBufs == 1 || kKBufs == 2, "one or two K buffers");
  static_assert(!kTopK || (kRows && kMT == 1 && !kList && !kSkip && !kGather),
                "the fused selection: the query-sparse pass's 64-row form");
  using namespace detail;
  constexpr int kBM = kWarps * 16 * kMT;                // query rows a block
  constexpr int kGroupWarps = kGroupRows / (16 * kMT);  // warps a 64-row group
  constexpr int kGroupThreads = kGroupWarps * 32;
  extern __shared__ __align__(16) unsigned char smem_raw[];
  T* sQ = reinterpret_cast<T*>(smem_raw);
  T* sK = sQ + kBM * D;
  T* sV = sK + kKBufs * kBN * D;
  __shared__ int warp_below[kWarps];  // the skip vote

  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, grp = warp / kGroupWarps;
  // Causal: the longest query tiles first, so the last wave is short ones.
  const int t = p.causal ? p.n_qt - 1 - int(blockIdx.x) : int(blockIdx.x);
  const int h = blockIdx.y, b = blockIdx.z;
  const int kvh = h / p.group;
  const int64_t item = (int64_t(b) * p.heads + h) * p.n_qt + t;
  const int t64 = t * (kBM / kGroupRows) + grp;  // this group's 64-row tile
  const int64_t item64 = (int64_t(b) * p.heads + h) * p.n_qt64 + t64;
  const int row0 = t * kBM;
  const int rows_here = min(kBM, p.q_len - row0);

  const T* gQ = static_cast<const T*>(p.q) + b * p.q_b + h * p.q_h;
  const T* gK = static_cast<const T*>(p.k) + b * p.k_b + kvh * p.k_h;
  const T* gV = static_cast<const T*>(p.v) + b * p.v_b + kvh * p.v_h;

  // The key tiles this query tile visits.
  const int* list = nullptr;
  int n_visit;
  int piece0 = 0;  // kGather: this tile's first piece
  if constexpr (kGather) {
    piece0 = p.piece_offsets[item];
    n_visit = p.piece_offsets[item + 1] - piece0;
  } else if constexpr (kList) {
    const int begin = p.list_offsets[item];
    list = p.list_tiles + begin;
    n_visit = p.list_offsets[item + 1] - begin;
  } else if (p.causal) {
    // The newest row's position.
    const int last_pos =
        p.pos_offset + (kRows ? p.rows[row0 + rows_here - 1] : row0 + rows_here - 1);
    n_visit = last_pos < 0 ? 0 : min(p.n_kt, last_pos / kBN + 1);
  } else {
    n_visit = p.n_kt;
  }
  const bool local_first = kSkip && p.local_first;

  // This thread's rows: of m16 tile mt, lane / 4 (r = 0) and lane / 4 + 8 (r = 1); the keys
  // [0, lim) a row sees. Recomputed where needed rather than held: registers go to O and S.
  const int row_base = row0 + warp * 16 * kMT + lane / 4;
  auto row_of = [&](int mt, int r) { return row_base + mt * 16 + r * 8; };
  // The q row of kernel row i (query-sparse: from the list; rows past the end: the last).
  auto q_row = [&](int i) {
    if constexpr (kRows)
      return p.rows[min(i, p.q_len - 1)];
    else
      return i;
  };
  auto lim_calc = [&](int mt, int r) {
    const int qr = q_row(row_of(mt, r));
    if (kRows && qr < 0) return 0;  // a padding slot sees nothing
    return p.causal ? min(p.kv_len, p.pos_offset + qr + 1) : p.kv_len;
  };
  // Query-sparse rows' limits are read from the list once; consecutive rows' are arithmetic.
  int lim_held[kRows ? kMT : 1][2];
  if constexpr (kRows) {
#pragma unroll
    for (int mt = 0; mt < kMT; ++mt)
      lim_held[mt][0] = lim_calc(mt, 0), lim_held[mt][1] = lim_calc(mt, 1);
  }
  // kTopK: each of this thread's two rows' candidates, fold and heap (its 64 rows' heaps follow
  // V in shared memory; a quad's first lane keeps its rows').
  Candidates cand[kTopK ? 2 : 1];
  BlockFold fold[kTopK ? 2 : 1];
  int n_kept[kTopK ? 2 : 1] = {};
  unsigned long long* heaps = reinterpret_cast<unsigned long long*>(sV + kBN * D);
  auto heap_of = [&](int r) { return heaps + (row_of(0, r) - row0) * p.sel_k; };
  if constexpr (kTopK) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int qr = q_row(row_of(0, r));
      cand[r] =
          candidates_of(qr, p.sel_qblocks[qr / p.sel_chi], p.kv_len, p.pos_offset, p.sel_beta);
    }
  }
  auto lim_of = [&](int mt, int r) {
    if constexpr (kRows)
      return lim_held[mt][r];
    else
      return lim_calc(mt, r);
  };
  const int lim_min = lim_of(0, 0);  // the warp's first rows see the fewest keys
  // Keys [0, reach) some row of 64-row group g sees: a key tile at or past it is no tile of
  // the group's (the CPU's 64-row tile never visits it).
  auto reach_of = [&](int g) {
    const int last = min(p.q_len, row0 + (g + 1) * kGroupRows) - 1;
    return last < row0 + g * kGroupRows
               ? 0
               : (p.causal ? max(0, min(p.kv_len, p.pos_offset + q_row(last) + 1)) : p.kv_len);
  };
  const int reach = reach_of(grp);

  float o[kMT][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
    for (int i = 0; i < D / 8; ++i) o[mt][i][0] = o[mt][i][1] = o[mt][i][2] = o[mt][i][3] = 0.f;
  float m[kMT][2], l[kMT][2];  // m in scaled log2 units
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) m[mt][0] = m[mt][1] = -INFINITY, l[mt][0] = l[mt][1] = 0.f;
  int n_visited = 0, n_skipped = 0;
  unsigned long long n_entries = 0;
  const float sl2 = p.scale_log2;

  if (n_visit > 0) {
    if constexpr (kRows)
      load_rows<T, D, kBM, kThreads>(sQ, gQ, p.q_s, p.rows, row0, p.q_len, tid);
    else
      load_tile<T, D, kBM, kThreads>(sQ, gQ, p.q_s, row0, p.q_len, tid);
    ptx::cp_async_commit();
    int kt = kGather ? 0 : tile_at(0, n_visit, list, local_first);
    // kGather: the piece at kt (its start and length), read where its K and V load.
    auto piece_start = [&](int j) { return p.piece_start[piece0 + j]; };
    auto piece_len = [&](int j) { return p.piece_len[piece0 + j]; };
    if constexpr (kGather)
      load_piece<T, D, kThreads>(sK, gK, p.k_s, piece_start(0), piece_len(0), p.gather_keys, tid);
    else
      load_tile<T, D, kBN, kThreads>(sK, gK, p.k_s, kt * kBN, p.kv_len, tid);
    ptx::cp_async_commit();
    int g_start = 0, g_len = 0;  // kGather: the piece being scored
    ptx::cp_async_wait<0>();
    __syncthreads();

    // One m16 tile: Q's A operands stay in registers, one per k16 step. Two: they are read
    // from shared memory at each step (registers go to the second tile's accumulators).
    uint32_t qf[kMT == 1 ? D / 16 : 1][4];
    if constexpr (kMT == 1) {
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk)
        ptx::ldmatrix_x4(
            qf[kk], ptx::smem_u32(sQ + swz<D>(warp * 16 + lane % 16, kk * 16 + (lane / 16) * 8)));
    }

    // ldmatrix addresses. A lane reads rows whose swizzle key (row & 7) is lane % 8 in every
    // fragment, and 16-byte chunk 2j + c (c in {0, 1}) of them, so the XOR touches only j's low
    // two bits: four byte offsets per operand, the rest (chunk + 8, +16 rows) immediates. Left
    // to itself the compiler keeps every unrolled fragment's address in a register and spills.
    constexpr uint32_t kRowBytes = D * sizeof(T);
    uint32_t k_off[4], v_off[4], q_off[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      k_off[j] = ptx::smem_u32(sK) + ((lane % 8) + (lane / 16) * 8) * kRowBytes +
                 (((2 * j + (lane / 8) % 2) ^ (lane % 8)) * 16);
      v_off[j] = ptx::smem_u32(sV) + ((lane % 8) + ((lane / 8) % 2) * 8) * kRowBytes +
                 (((2 * j + lane / 16) ^ (lane % 8)) * 16);
      q_off[j] = ptx::smem_u32(sQ) + (warp * 16 * kMT + lane % 16) * kRowBytes +
                 (((2 * j + lane / 16) ^ (lane % 8)) * 16);
    }

    // S = Q K^T of the key tile at kbase (K in buffer kbuf), masked past each row's limit, and
    // each row's max in scaled log2 units.
    auto scores = [&](uint32_t kbuf, int kbase, float(&s)[kMT][kBN / 8][4], float(&mx)[kMT][2]) {
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
          s[mt][j][0] = s[mt][j][1] = s[mt][j][2] = s[mt][j][3] = 0.f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        uint32_t qa[kMT][4];
        if constexpr (kMT == 1) {
#pragma unroll
          for (int e = 0; e < 4; ++e) qa[0][e] = qf[kk][e];
        } else {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
            ptx::ldmatrix_x4(qa[mt], q_off[kk & 3] + (kk >> 2) * 128 + mt * 16 * kRowBytes);
        }
#pragma unroll
        for (int np = 0; np < kBN / 16; ++np) {
          uint32_t bk[4];  // keys np * 16 + [0, 16), dims kk * 16 + [0, 16)
          ptx::ldmatrix_x4(bk, k_off[kk & 3] + kbuf + (kk >> 2) * 128 + np * 16 * kRowBytes);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) {
            ptx::mma_16816<T>(s[mt][2 * np], qa[mt], bk[0], bk[1]);
            ptx::mma_16816<T>(s[mt][2 * np + 1], qa[mt], bk[2], bk[3]);
          }
        }
      }
      if constexpr (kGather) {
        // Each column's key: past the piece, or past the row's limit, masked.
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int key = piece_key(g_start, g_len, p.gather_keys, p.gather_pos,
                                      j * 8 + (lane % 4) * 2 + (e & 1));
            if (key >= lim_of(0, e >> 1)) s[0][j][e] = -INFINITY;
          }
      } else if (kbase + kBN > lim_min) {
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int key = kbase + j * 8 + (lane % 4) * 2 + (e & 1);
              if (key >= lim_of(mt, e >> 1)) s[mt][j][e] = -INFINITY;
            }
      }
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) {
        mx[mt][0] = mx[mt][1] = -INFINITY;
#pragma unroll
        for (int j = 0; j < kBN / 8; ++j) {
          mx[mt][0] = fmaxf(mx[mt][0], fmaxf(s[mt][j][0], s[mt][j][1]));
          mx[mt][1] = fmaxf(mx[mt][1], fmaxf(s[mt][j][2], s[mt][j][3]));
        }
#pragma unroll
        for (int r = 0; r < 2; ++r) {
          mx[mt][r] = fmaxf(mx[mt][r], __shfl_xor_sync(0xffffffffu, mx[mt][r], 1));
          mx[mt][r] = fmaxf(mx[mt][r], __shfl_xor_sync(0xffffffffu, mx[mt][r], 2));
          mx[mt][r] *= sl2;  // the scale is positive: the max commutes
        }
      }
    };

    // local_first visits the block's tiles in one order, the CPU's for the block's last 64-row
    // group: its diagonal tile, the sink, then nearest to farthest. The first group's diagonal
    // (one tile before) comes after the sink in it, where the CPU's 64-row tile visits it
    // first. So that group takes its diagonal's row maxima before the loop (m's seed: the
    // running max the CPU has after that first tile), decides the sink against them, and never
    // skips its diagonal (the CPU's first tile, met with nothing before it): the CPU's
    // decisions, tile for tile.
    int seed_tile = -1;  // this group's diagonal, where it took the seed
    if constexpr (kSkip && !kList && !kRows && kMT == 2 && kKBufs == 2) {
      const int reach0 = reach_of(0);  // uniform over the block
      const int diag0 = reach0 > 0 ? (reach0 - 1) / kBN : 0;
      if (local_first && p.threshold != -INFINITY && diag0 > 0 && diag0 < n_visit - 1) {
        // The second K buffer is free until the loop's first K(next).
        load_tile<T, D, kBN, kThreads>(sK + kBN * D, gK, p.k_s, diag0 * kBN, p.kv_len, tid);
        ptx::cp_async_commit();
        ptx::cp_async_wait<0>();
        __syncthreads();
        if (grp == 0) {
          float s[kMT][kBN / 8][4], mx[kMT][2];
          scores(kBN * kRowBytes, diag0 * kBN, s, mx);
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt) m[mt][0] = mx[mt][0], m[mt][1] = mx[mt][1];
          seed_tile = diag0;
        }
        __syncthreads();  // every warp is done with the buffer
      }
    }

    // FlashAttention-2's schedule, two barriers a tile: V(kt) loads while S is computed, K(next)
    // while the softmax and P V run. BLASST's prefill keeps it: a skipped tile saves its
    // softmax and P V but not its V load, as the paper's prefill kernel (section 4.1): loading
    // V only after the vote puts the load's latency into the loop of a compute-bound kernel
    // (measured: BENCHMARKS.md). Not loading skipped V tiles is the decode kernel's saving
    // (flash_decode.cuh). With two K buffers (kKBufs, BLASST's) K(next) loads from the top of
    // the tile, under S as well: a skipped tile has no softmax and P V to hide it under.
    for (int i = 0; i < n_visit; ++i) {
      // Here K(kt) is resident and every warp is done with the previous tile's V.
      const int kbase = kt * kBN;
      if constexpr (kGather) {
        g_start = piece_start(kt), g_len = piece_len(kt);
        load_piece<T, D, kThreads>(sV, gV, p.v_s, g_start, g_len, p.gather_keys, tid);
      } else {
        load_tile<T, D, kBN, kThreads>(sV, gV, p.v_s, kbase, p.kv_len, tid);
      }
      ptx::cp_async_commit();
      const int next =
          i + 1 < n_visit ? (kGather ? i + 1 : tile_at(i + 1, n_visit, list, local_first)) : -1;
      // K(kt)'s buffer; with two, K(next) loads into the other one from here on, under S.
      const uint32_t kbuf = kKBufs == 2 ? (i & 1) * kBN * kRowBytes : 0;
      if constexpr (kKBufs == 2) {
        if (next >= 0)
          load_tile<T, D, kBN, kThreads>(sK + ((i + 1) & 1) * kBN * D, gK, p.k_s, next * kBN,
                                         p.kv_len, tid);
        ptx::cp_async_commit();  // an empty group at the end keeps the wait counts
      }
      // Whether this warp's group has the tile at all (uniform over the group).
      const bool mine = kGather || kbase < reach;
      float s[kMT][kBN / 8][4];
      float mx[kMT][2];  // the tile's row maxima, scaled log2 units
      uint32_t pf[kMT][kBN / 16][4];
#pragma unroll
      for (int mt = 0; mt < kMT; ++mt) mx[mt][0] = mx[mt][1] = -INFINITY;
      if (mine) scores(kbuf, kbase, s, mx);

      // BLASST: a group skips the tile when each of its rows is ln(lambda) below its running
      // max (the CPU rule, blasst_skips: a NaN difference, -inf against -inf, counts as
      // below; a -inf threshold, lambda 0, skips nothing).
      bool skip = false;
      if constexpr (kSkip) {
        bool below = true;
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
          for (int r = 0; r < 2; ++r)
            below = below && (row_of(mt, r) >= p.q_len || !(mx[mt][r] - m[mt][r] >= p.threshold));
        const bool warp_all = __all_sync(0xffffffffu, below);
        if (lane == 0) warp_below[warp] = warp_all || !mine;
        ptx::cp_async_wait<kKBufs - 1>();  // V(kt)
        __syncthreads();  // the vote; every warp is done with K(kt); V(kt) is visible
        bool grp_below = true;
#pragma unroll
        for (int w = 0; w < kWarps; ++w)
          if (w / kGroupWarps == grp) grp_below = grp_below && warp_below[w];
        skip = mine && p.threshold != -INFINITY && grp_below && kt != seed_tile;
        if (mine && tid % kGroupThreads == 0) {
          ++n_visited;
          if (skip) {
            ++n_skipped;
            if (p.skip_map) p.skip_map[item64 * p.n_kt + kt] = 1;
          }
        }
      } else {
        ptx::cp_async_wait<kKBufs - 1>();  // V(kt)
        __syncthreads();                   // every warp is done with K; V(kt) is visible
        if (mine && tid % kGroupThreads == 0) ++n_visited;
      }
      if (kKBufs == 1 && next >= 0) {
        if constexpr (kGather)
          load_piece<T, D, kThreads>(sK, gK, p.k_s, piece_start(next), piece_len(next),
                                     p.gather_keys, tid);
        else
          load_tile<T, D, kBN, kThreads>(sK, gK, p.k_s, next * kBN, p.kv_len, tid);
        ptx::cp_async_commit();
      }
      const bool compute = mine && !skip;
      if (compute) {
        if (p.entries && lane % 4 == 0) {
#pragma unroll
          for (int mt = 0; mt < kMT; ++mt)
#pragma unroll
            for (int r = 0; r < 2; ++r)
              if (row_of(mt, r) < p.q_len) {
                if constexpr (kGather) {
                  // The piece's keys below the row's limit (positions need not ascend).
                  int n = 0;
                  for (int c = 0; c < g_len; ++c)
                    n += piece_key(g_start, g_len, p.gather_keys, p.gather_pos, c) < lim_of(mt, r);
                  n_entries += n;
                } else {
                  n_entries += max(0, min(lim_of(mt, r), kbase + kBN) - kbase);
                }
              }
        }
        // The online softmax: running max and sums, O rescaled, P into mma A operands. A row
        // that has seen only masked keys keeps m = -inf: its base is 0, so 2^(-inf - 0) = 0
        // and no NaN arises.
#pragma unroll
        for (int mt = 0; mt < kMT; ++mt) {
          float base[2], alpha[2], sum[2] = {0.f, 0.f};
#pragma unroll
          for (int r = 0; r < 2; ++r) {
            const float mn = fmaxf(m[mt][r], mx[mt][r]);
            base[r] = mn == -INFINITY ? 0.f : mn;
            alpha[r] = ptx::ex2(m[mt][r] - base[r]);
            m[mt][r] = mn;
          }
#pragma unroll
          for (int j = 0; j < kBN / 8; ++j) {
            const float p0 = ptx::ex2(fmaf(s[mt][j][0], sl2, -base[0]));
            const float p1 = ptx::ex2(fmaf(s[mt][j][1], sl2, -base[0]));
            const float p2 = ptx::ex2(fmaf(s[mt][j][2], sl2, -base[1]));
            const float p3 = ptx::ex2(fmaf(s[mt][j][3], sl2, -base[1]));
            sum[0] += p0 + p1;
            sum[1] += p2 + p3;
            pf[mt][j / 2][(j % 2) * 2 + 0] = ptx::pack2<T>(p0, p1);
            pf[mt][j / 2][(j % 2) * 2 + 1] = ptx::pack2<T>(p2, p3);
          }
          if constexpr (kRows) {
            if (kTopK || p.tile_lse) {
#pragma unroll
              for (int r = 0; r < 2; ++r) {
                float ts = sum[r];
                ts += __shfl_xor_sync(0xffffffffu, ts, 1);
                ts += __shfl_xor_sync(0xffffffffu, ts, 2);
                const int row = row_of(mt, r);
                const float t_lse =
                    ts > 0.f ? (base[r] + log2f(ts)) * 0.693147180559945309f : -INFINITY;
                if (lane % 4 != 0 || row >= p.q_len) continue;
                if constexpr (kTopK) {
                  if (kbase < lim_of(mt, r))  // the tiles below the row's limit only
                    fold[r].add(kt, t_lse, p.sel_beta, cand[r], heap_of(r), n_kept[r], p.sel_k);
                } else {
                  p.tile_lse[((int64_t(b) * p.heads + h) * p.q_len + row) * p.n_kt + kt] = t_lse;
                }
              }
            }
          }
          // This thread's share of the row sums; the quad's sum is taken at the end.
          l[mt][0] = l[mt][0] * alpha[0] + sum[0];
          l[mt][1] = l[mt][1] * alpha[1] + sum[1];
#pragma unroll
          for (int j = 0; j < D / 8; ++j) {
            o[mt][j][0] *= alpha[0];
            o[mt][j][1] *= alpha[0];
            o[mt][j][2] *= alpha[1];
            o[mt][j][3] *= alpha[1];
          }
        }
        // O += P V.
#pragma unroll
        for (int kk = 0; kk < kBN / 16; ++kk) {
#pragma unroll
          for (int dp = 0; dp < D / 16; ++dp) {
            uint32_t bv[4];  // keys kk * 16 + [0, 16), dims dp * 16 + [0, 16)
            ptx::ldmatrix_x4_trans(bv, v_off[dp & 3] + (dp >> 2) * 128 + kk * 16 * kRowBytes);
#pragma unroll
            for (int mt = 0; mt < kMT; ++mt) {
              ptx::mma_16816<T>(o[mt][2 * dp], pf[mt][kk], bv[0], bv[1]);
              ptx::mma_16816<T>(o[mt][2 * dp + 1], pf[mt][kk], bv[2], bv[3]);
            }
          }
        }
      }
      ptx::cp_async_wait<0>();  // K(next)
      __syncthreads();          // K(next) is visible; every warp is done with V
      kt = next;
    }
  }

  if constexpr (kTopK) {
    // Each row's last block, then its heap best first, as the selection kernel writes them.
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      const int row = row_of(0, r);
      if (lane % 4 != 0 || row >= p.q_len) continue;
      unsigned long long* keys = heap_of(r);
      fold[r].finish(cand[r], keys, n_kept[r], p.sel_k);
      heap_sort_desc(keys, n_kept[r]);
      const int64_t at = (int64_t(b) * p.heads + h) * p.q_len + row;
      for (int i = 0; i < n_kept[r]; ++i) {
        p.sel_block[at * p.sel_k + i] = key_block(keys[i]);
        p.sel_score[at * p.sel_k + i] = key_score(keys[i]);
      }
      p.sel_count[at] = n_kept[r];
    }
  }

  // Final: divide by the row sums; an empty row (l = 0) gets 0 and LSE -inf.
  constexpr float kLn2 = 0.693147180559945309f;
  float* lse = p.lse ? p.lse + b * p.lse_b + h * p.lse_h : nullptr;
  T* gO = static_cast<T*>(p.o) + b * p.o_b + h * p.o_h;
#pragma unroll
  for (int mt = 0; mt < kMT; ++mt) {
#pragma unroll
    for (int r = 0; r < 2; ++r) {
      float lr = l[mt][r];
      lr += __shfl_xor_sync(0xffffffffu, lr, 1);
      lr += __shfl_xor_sync(0xffffffffu, lr, 2);
      const float inv = lr > 0.f ? 1.f / lr : 0.f;
      // The row written: the kernel's, or (scattered) the listed q row.
      const int dst =
          row_of(mt, r) < p.q_len && p.rows_scatter ? q_row(row_of(mt, r)) : row_of(mt, r);
      if (row_of(mt, r) < p.q_len && dst >= 0) {
        T* orow = gO + int64_t(dst) * p.o_s;
#pragma unroll
        for (int j = 0; j < D / 8; ++j)
          *reinterpret_cast<uint32_t*>(orow + j * 8 + (lane % 4) * 2) =
              ptx::pack2<T>(o[mt][j][2 * r] * inv, o[mt][j][2 * r + 1] * inv);
        if (lse && lane % 4 == 0) lse[dst] = lr > 0.f ? (m[mt][r] + log2f(lr)) * kLn2 : -INFINITY;
      }
    }
  }
  if (p.entries) {
#pragma unroll
    for (int off = 16; off > 0; off /= 2) n_entries += __shfl_xor_sync(0xffffffffu, n_entries, off);
    if (lane == 0 && n_entries) atomicAdd(p.entries + item64, n_entries);
  }
  if (tid % kGroupThreads == 0 && t64 < p.n_qt64) {
    if (p.visited) p.visited[item64] = n_visited;
    if (p.skipped) p.skipped[item64] = n_skipped;
  }
}

}  // namespace spattn::cuda

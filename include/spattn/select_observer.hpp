// The online block selection of "Measure Once, Mask Once: Delta Refined Block Sparse Attention"
// (MOMO), Algorithm 1, step 1, as a BlockLseObserver: while the query-sparse pass runs, each
// sampled row's key blocks of beta keys get their block score S(j) = log sum_{l in B(j)}
// exp(q . k_l) (Section 3, Eq. 3: the log-add-exp of the row's per-tile LSE the kernel reports)
// and go to the row's own online top-k selector (spattn/select.hpp). The momo method and the
// selector micro-benchmark (the paper's Fig. 4) both run it.
#pragma once
#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

#include "spattn/attention.hpp"
#include "spattn/select.hpp"

namespace spattn {

// The key blocks a query block always keeps, [0, sink_end) and [local_begin, causal_end) (the S
// and W of MOMO's Eq. 9); they are not pushed to the selectors and do not count against k.
struct ForcedBlocks {
  int64_t sink_end = 0, local_begin = 0, causal_end = 0;
  bool forced(int64_t j) const { return j < sink_end || j >= local_begin; }
  // Forced blocks among [0, nb), nb <= causal_end.
  int64_t count(int64_t nb) const {
    const int64_t s = std::min(sink_end, nb);
    return s + std::max<int64_t>(0, nb - std::max(local_begin, s));
  }
};

// Per (q head, sampled row) a selector of `params` (total_blocks: the row's causal blocks less
// its forced ones), created at the row's first pushed block. rows: the pass's row list
// (compact index = position in it), causal bottom-right over kv_len keys; forced[qb] applies to
// the rows of query block qb = row / chi. beta: a multiple of the kernel's 64-key tile.
//
// Tiles may come in any order in which at most 4 blocks of a row are in progress at once (in
// order: one; BLASST's local-first order: the diagonal's, the sink's and the current one),
// each tile exactly once (a tile skipped under BLASST's rule comes with LSE -inf). A block is
// pushed when its last tile below the row's causal limit has come; its score is the
// log-add-exp of its tiles in arrival order. A block whose tiles were all skipped (score -inf)
// is not pushed. Rows are independent: the kernel's threads may report different rows at once.
//
// Cost. Per call (one strip of rows, a batch of key tiles: the kernels send up to 16 at once,
// observe_tiles) the selector kind is dispatched once. Per row and tile, a tile outside its
// candidates costs one compare (Span), and a block its selector would drop unchanged costs one
// more, against the selector's gate() kept in a dense array, without touching the selector. For the exact selectors (exact, tree) the others are not pushed at
// once: each row buffers up to kBuffer of them and pushes them in one go, in arrival order,
// when the buffer is full or its last candidate tile has come. A row's pushes then run back to
// back on its selector, whose k slots stay in cache across them, where pushing one row after
// another within a tile evicts them between pushes; each selector still sees exactly the
// pushes, in the order, that it would see unbuffered, so its result is the same bits. (The gate
// a block is tested against may be older than the selector's state; gate() never decreases, so
// an old gate drops only what the current one would.)
class BlockSelectObserver final : public BlockLseObserver {
 public:
  BlockSelectObserver(int64_t heads, const std::vector<int64_t>& rows, int64_t q_len,
                      int64_t kv_len, int64_t beta, const std::vector<ForcedBlocks>& forced,
                      int64_t chi, const TopKParams& params);

  void observe(int64_t q_head, int64_t row_begin, int64_t rows, int64_t key_block,
               const float* block_lse) override;
  void observe_tiles(int64_t q_head, int64_t row_begin, int64_t rows, const int64_t* key_blocks,
                     int64_t tiles, const float* block_lse, int64_t stride) override;

  // The blocks row r (compact index) of q head h selected, best first (empty if it had none to
  // choose from). Safe to call from several threads at once once the pass is over; throws
  // Error if some of the row's candidate tiles have not been observed.
  void result(int64_t h, int64_t r, std::vector<BlockScore>& out) const;

 private:
  static constexpr int kPending = 4;
  static constexpr int kBuffer = 16;  // pushes a row holds back (BlockScore each)
  // Only the exact selectors' pushes are held back: theirs touch k slots' worth of state, the
  // estimate's a few words, for which buffering measured slower than pushing at once.
  template <class S>
  static constexpr bool kBuffered =
      std::is_same_v<S, ExactTopK> || std::is_same_v<S, TournamentTopK>;
  struct Row {
    std::optional<TopKSelector> sel;
    int32_t tiles_left = 0;  // candidate tiles still to come
    int32_t buffered = 0;    // pushes held in its kBuffer entries of buffer_
    // Beta-blocks in progress: block (-1: free slot), tiles still to come, LSE so far.
    struct Pending {
      int32_t block = -1, left = 0;
      float acc = 0.0f;
    };
    Pending pending[kPending];
    bool fold(int32_t j, int32_t tiles, float& score);
  };
  // A row's invariants, worked out once: a tile starting at key key0 is one of its candidates
  // (below the causal limit, in no forced block) iff key0 - lo < span as unsigned, one compare.
  struct Span {
    int64_t lo = 0;
    uint64_t span = 0;
    int64_t limit = 0;         // the row's causal limit (keys)
    int64_t total_blocks = 0;  // its causal blocks less its forced ones (the selector's)
  };
  // observe_tiles() for the selector type S every row holds (params_.kind), dispatched once a
  // call.
  template <class S>
  void observe_rows(Row* state, uint64_t* gates, BlockScore* buffer, const Span* spans,
                    int64_t rows, const int64_t* key_blocks, int64_t tiles, const float* block_lse,
                    int64_t stride);
  // The row's selector, created at its first push.
  template <class S>
  S& selector(Row& s, const Span& sp);
  // Pushes a row's buffered blocks (buf, s.buffered of them) to its selector, in order.
  template <class S>
  void flush(Row& s, uint64_t& gate, const BlockScore* buf, const Span& sp);

  int64_t rows_, beta_;
  TopKParams params_;
  std::vector<Span> spans_;
  std::vector<Row> state_;
  // Per (q head, row), its selector's gate() (0 before it has one), kept apart from state_ so
  // that the common case, a block that loses, reads one dense word and not the selector.
  std::vector<uint64_t> gate_;
  // Per (q head, row), kBuffer pushes held back.
  std::vector<BlockScore> buffer_;
};

}  // namespace spattn

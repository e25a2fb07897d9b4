// Context parallelism: one prompt's tokens split over P processes (ranks), every rank holding
// the weights and a KV cache of only its own tokens; attention over the whole prompt is
// assembled exactly from per-rank partial results by their (O, LSE) (spattn/merge.hpp).
//
//   prefill  The prompt is cut into 2P chunks; rank r owns chunks r and 2P-1-r (the zigzag
//            order that gives every rank the same causal work: an early chunk sees few keys, a
//            late one many). Per layer each rank runs the linear parts on its own rows, then
//            attention. Dense: the chunks in position order, each sent by its owner to the
//            ranks whose queries see it while the chunk before is computed, every row's online
//            softmax (m, l, O) carried from chunk to chunk: one process's bits, two chunks in
//            hand. The sparse methods: a pass-KV ring, P steps, in each the rank's queries
//            attend to the K/V shard in hand while that shard is forwarded to the next rank
//            and the previous rank's arrives, the partial results merged by (O, LSE). The
//            logits rows asked for are gathered to every rank.
//   decode   Every rank computes the new token's q, k, v (the same bits everywhere); the K/V
//            goes to the rank that holds the fewest tokens (the lowest such rank); every rank
//            attends with the q to its own shard and one all-gather of (O, LSE) lets each
//            merge the P partials in rank order, so every rank holds the same output bits and
//            the ranks stay in lockstep (the same logits, the same sampled token).
//
// The transport is a Group: MPI's world (mpi_world, src/dist/mpi_group.cpp, the only file that
// includes mpi.h; without MPI at build time it refuses --cp > 1 by name). Nothing else in
// spattn knows about MPI.
#pragma once
#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace spattn::dist {

// What a rank spent on communication: bytes it sent and received (the ring's K/V shards,
// decode's (O, LSE), the gathered logits rows, the agreements), messages, and the wall time
// spent inside communication calls (posting, waiting, collectives). Time overlapped with
// compute is not in comm_ms: only the part the compute did not hide.
struct CommStats {
  int64_t bytes_sent = 0, bytes_recv = 0, messages = 0;
  double comm_ms = 0;
  // The ring's share: K/V bytes sent during prefill, and the layers they were sent for (so
  // bytes per layer per rank = ring_bytes_sent / ring_layers).
  int64_t ring_bytes_sent = 0, ring_layers = 0;
  double ring_comm_ms = 0;        // the part of comm_ms spent in the ring (the rest: agreements,
                                  // the logits gather, which also absorb ranks arriving late)
  int64_t logits_bytes_recv = 0;  // logits rows gathered from other ranks
  // BLASST across ranks: the sink tile's K rows each rank received for the running max's seed
  // (once per layer; not in ring_bytes_sent, in bytes_recv).
  int64_t blasst_seed_bytes_recv = 0;
  void add(const CommStats& o);
};

// A fixed set of ranks that exchange bytes. Every call but rank() / size() / stats() is
// collective or paired: every rank must make it, in the same order.
class Group {
 public:
  virtual ~Group() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Starts sending `send_bytes` from `send` to rank `to` and receiving `recv_bytes` into `recv`
  // from rank `from`; both buffers must stay untouched until finish_exchange() returns.
  virtual void start_exchange(const void* send, size_t send_bytes, int to, void* recv,
                              size_t recv_bytes, int from) = 0;
  virtual void finish_exchange() = 0;
  // Lets an exchange in flight move on (MPI moves large messages only inside its calls): the
  // ring calls it between pieces of its compute. No effect when nothing is in flight.
  virtual void progress() {}
  // Messages of a schedule that is not a ring (the dense prefill's chunks, sent by their owner
  // to every rank that needs them, in position order: ring_attention.cpp). post_send starts
  // sending `bytes` from `data` to rank `to` (the buffer untouched until wait_sends(), which
  // waits for every send posted); post_recv starts receiving exactly `bytes` from rank `from`
  // (one at a time; the buffer untouched until wait_recv()). progress() moves them too.
  virtual void post_send(const void* data, size_t bytes, int to) = 0;
  virtual void wait_sends() = 0;
  virtual void post_recv(void* data, size_t bytes, int from) = 0;
  virtual void wait_recv() = 0;
  // One message from this rank to rank `to` (blocking), and its receipt on rank `from`'s side:
  // at most `capacity` bytes into recv, returning how many came. For a chain of state where
  // only one rank computes at a time (chunked_h2o's memory set, src/dist/h2o_chain.cpp).
  virtual void send(const void* data, size_t bytes, int to) = 0;
  virtual size_t recv(void* data, size_t capacity, int from) = 0;
  // Every rank's `bytes` bytes, in rank order, into recv (size() * bytes).
  virtual void allgather(const void* send, size_t bytes, void* recv) = 0;
  // Rank i's counts[i] bytes, in rank order, into recv (the sum of counts).
  virtual void allgatherv(const void* send, size_t bytes, void* recv,
                          const std::vector<size_t>& counts) = 0;
  // Ends every rank at once with `code` (the transport's abort): for a failure one rank met
  // alone, which would leave the others waiting on it.
  [[noreturn]] virtual void abort(int code) = 0;

  CommStats& stats() { return stats_; }
  const CommStats& stats() const { return stats_; }
  // Set once every rank has thrown the same agreed Error (agree below): the ranks are in step,
  // so they may shut the transport down together instead of aborting.
  bool failed_together() const { return failed_together_; }
  void set_failed_together() { failed_together_ = true; }

 private:
  CommStats stats_;
  bool failed_together_ = false;
};

// True when spattn was built with MPI (CMake found it).
bool mpi_available();
// MPI's world as a Group of `ranks` ranks: MPI is initialised on the first call (and finalised
// at exit; later calls return the same group), and every rank checks that mpirun started exactly `ranks` processes and that
// every rank asked for the same count. Throws Error naming --cp on a mismatch (on every rank),
// or when this build has no MPI.
std::shared_ptr<Group> mpi_world(int ranks);

// Runs `body` on every rank and agrees on the outcome: when it throws on any rank, every rank
// throws an Error naming the first rank that failed, `what` and its message, and the group is
// marked failed_together. Every rank must call it.
void agree(Group& g, const std::string& what, const std::function<void()>& body);

// The zigzag split of n tokens into 2P chunks: chunk c is [begin(c), begin(c + 1)) with
// begin(c) = c n / (2P); rank r owns chunks r and 2P-1-r, in that order (ascending positions).
// grid > 1 (chunked_h2o: its -ub chunks must never straddle two ranks) splits whole chunks of
// `grid` tokens instead: ceil(n / grid) of them, each rank ceil or floor of that over P (the
// lower ranks the extra ones), the first half of its share in its early run and the rest in
// its late one; a run may then be empty, a rank is empty only when the chunks are fewer than P.
struct Zigzag {
  int64_t n = 0;
  int ranks = 1;
  int64_t grid = 1;
  int64_t begin(int64_t chunk) const {
    if (grid <= 1) return chunk * n / (2 * int64_t(ranks));
    int64_t before = 0;
    for (int64_t c = 0; c < chunk; ++c) before += grid_chunks(c);
    return std::min(n, before * grid);
  }
  // grid > 1: the grid chunks in zigzag chunk c.
  int64_t grid_chunks(int64_t c) const {
    const int64_t C = (n + grid - 1) / grid, P = ranks, r = owner(c);
    const int64_t share = C / P + (r < C % P ? 1 : 0), early = share / 2;
    return c < P ? early : share - early;
  }
  // True when some rank holds no token.
  bool empty_rank() const {
    for (int r = 0; r < ranks; ++r)
      if (rows(r) == 0) return true;
    return false;
  }
  // The rank that owns chunk c.
  int owner(int64_t c) const { return c < ranks ? int(c) : int(2 * int64_t(ranks) - 1 - c); }
  struct Run {
    int64_t pos = 0, len = 0;
  };
  // Rank r's two runs of positions.
  Run first(int r) const { return {begin(r), begin(r + 1) - begin(r)}; }
  Run second(int r) const {
    const int64_t c = 2 * int64_t(ranks) - 1 - r;
    return {begin(c), begin(c + 1) - begin(c)};
  }
  int64_t rows(int r) const { return first(r).len + second(r).len; }
  std::vector<int64_t> positions(int r) const;
};

// 64-bit FNV-1a of bytes: what the ranks compare to agree they were given the same prompt.
uint64_t fingerprint(const void* data, size_t bytes, uint64_t seed = 1469598103934665603ull);

}  // namespace spattn::dist

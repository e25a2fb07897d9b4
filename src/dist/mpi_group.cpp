// MPI's world as a spattn::dist::Group: the only file that includes mpi.h. Built with MPI when
// CMake finds it (SPATTN_HAVE_MPI); without, mpi_world refuses by name and nothing else
// changes. MPI is initialised with MPI_THREAD_FUNNELED: only the thread that drives the session
// calls MPI (the pool's workers compute, never communicate).
#include <chrono>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <vector>

#include "spattn/context_parallel.hpp"
#include "spattn/error.hpp"

#if SPATTN_HAVE_MPI
#include <mpi.h>
#endif

namespace spattn::dist {

#if SPATTN_HAVE_MPI
namespace {

using Clock = std::chrono::steady_clock;
double ms_since(Clock::time_point t0) {
  return std::chrono::duration<double, std::milli>(Clock::now() - t0).count();
}

int count_of(size_t bytes) {
  SPATTN_CHECK(bytes <= size_t(INT_MAX), "--cp: one message of ", bytes,
               " bytes is past MPI's int count");
  return int(bytes);
}

void check(int rc, const char* call) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  MPI_Error_string(rc, text, &len);
  detail::fail("--cp: ", call, " failed: ", std::string(text, size_t(len)));
}

class MpiGroup final : public Group {
 public:
  MpiGroup() {
    MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
    MPI_Comm_size(MPI_COMM_WORLD, &size_);
  }
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void start_exchange(const void* send, size_t send_bytes, int to, void* recv, size_t recv_bytes,
                      int from) override {
    SPATTN_CHECK(n_req_ == 0, "internal: an exchange is already in flight");
    const auto t0 = Clock::now();
    check(MPI_Irecv(recv, count_of(recv_bytes), MPI_BYTE, from, kTag, MPI_COMM_WORLD, &req_[0]),
          "MPI_Irecv");
    check(MPI_Isend(send, count_of(send_bytes), MPI_BYTE, to, kTag, MPI_COMM_WORLD, &req_[1]),
          "MPI_Isend");
    n_req_ = 2;
    recv_bytes_ = recv_bytes;
    stats().bytes_sent += int64_t(send_bytes);
    stats().messages += 1;
    stats().comm_ms += ms_since(t0);
  }
  void progress() override {
    if ((n_req_ == 0 || done_) && sends_.empty() && recv_ == MPI_REQUEST_NULL) return;
    const auto t0 = Clock::now();
    int flag = 0;
    if (n_req_ > 0 && !done_) {
      check(MPI_Testall(n_req_, req_, &flag, st_), "MPI_Testall");
      done_ = flag != 0;  // then st_ holds both statuses and the requests are freed
    }
    // A completed request becomes MPI_REQUEST_NULL; its status is read in wait_recv.
    if (recv_ != MPI_REQUEST_NULL && !recv_done_) {
      check(MPI_Test(&recv_, &flag, &recv_st_), "MPI_Test");
      recv_done_ = flag != 0;
    }
    if (!sends_.empty())
      check(MPI_Testall(int(sends_.size()), sends_.data(), &flag, MPI_STATUSES_IGNORE),
            "MPI_Testall");
    stats().comm_ms += ms_since(t0);
  }
  void post_send(const void* data, size_t bytes, int to) override {
    const auto t0 = Clock::now();
    sends_.push_back(MPI_REQUEST_NULL);
    check(MPI_Isend(data, count_of(bytes), MPI_BYTE, to, kChunkTag, MPI_COMM_WORLD, &sends_.back()),
          "MPI_Isend");
    stats().bytes_sent += int64_t(bytes);
    stats().messages += 1;
    stats().comm_ms += ms_since(t0);
  }
  void wait_sends() override {
    const auto t0 = Clock::now();
    if (!sends_.empty())
      check(MPI_Waitall(int(sends_.size()), sends_.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    sends_.clear();
    stats().comm_ms += ms_since(t0);
  }
  void post_recv(void* data, size_t bytes, int from) override {
    SPATTN_CHECK(recv_ == MPI_REQUEST_NULL && !recv_done_,
                 "internal: a receive is already "
                 "in flight");
    const auto t0 = Clock::now();
    check(MPI_Irecv(data, count_of(bytes), MPI_BYTE, from, kChunkTag, MPI_COMM_WORLD, &recv_),
          "MPI_Irecv");
    recv_bytes_posted_ = bytes;
    recv_from_ = from;
    stats().comm_ms += ms_since(t0);
  }
  void wait_recv() override {
    const auto t0 = Clock::now();
    if (!recv_done_) check(MPI_Wait(&recv_, &recv_st_), "MPI_Wait");
    recv_done_ = false;
    recv_ = MPI_REQUEST_NULL;
    int got = 0;
    MPI_Get_count(&recv_st_, MPI_BYTE, &got);
    SPATTN_CHECK(size_t(got) == recv_bytes_posted_, "--cp: expected ", recv_bytes_posted_,
                 " bytes from rank ", recv_from_, ", got ", got);
    stats().bytes_recv += int64_t(got);
    stats().comm_ms += ms_since(t0);
  }
  void finish_exchange() override {
    const auto t0 = Clock::now();
    if (!done_) check(MPI_Waitall(n_req_, req_, st_), "MPI_Waitall");
    int got = 0;
    MPI_Get_count(&st_[0], MPI_BYTE, &got);
    n_req_ = 0;
    done_ = false;
    SPATTN_CHECK(size_t(got) == recv_bytes_, "--cp: expected ", recv_bytes_,
                 " bytes from the previous rank, got ", got);
    stats().bytes_recv += int64_t(recv_bytes_);
    stats().comm_ms += ms_since(t0);
  }
  void send(const void* data, size_t bytes, int to) override {
    const auto t0 = Clock::now();
    check(MPI_Send(data, count_of(bytes), MPI_BYTE, to, kChainTag, MPI_COMM_WORLD), "MPI_Send");
    stats().bytes_sent += int64_t(bytes);
    stats().messages += 1;
    stats().comm_ms += ms_since(t0);
  }
  size_t recv(void* data, size_t capacity, int from) override {
    const auto t0 = Clock::now();
    MPI_Status st;
    check(MPI_Recv(data, count_of(capacity), MPI_BYTE, from, kChainTag, MPI_COMM_WORLD, &st),
          "MPI_Recv");
    int got = 0;
    MPI_Get_count(&st, MPI_BYTE, &got);
    stats().bytes_recv += got;
    stats().comm_ms += ms_since(t0);
    return size_t(got);
  }
  void allgather(const void* send, size_t bytes, void* recv) override {
    const auto t0 = Clock::now();
    check(MPI_Allgather(send, count_of(bytes), MPI_BYTE, recv, count_of(bytes), MPI_BYTE,
                        MPI_COMM_WORLD),
          "MPI_Allgather");
    stats().bytes_sent += int64_t(bytes) * (size_ - 1);
    stats().bytes_recv += int64_t(bytes) * (size_ - 1);
    stats().messages += 1;
    stats().comm_ms += ms_since(t0);
  }
  void allgatherv(const void* send, size_t bytes, void* recv,
                  const std::vector<size_t>& counts) override {
    SPATTN_CHECK(int(counts.size()) == size_, "internal: allgatherv needs one count per rank");
    std::vector<int> c(counts.size()), at(counts.size());
    size_t off = 0, others = 0;
    for (size_t i = 0; i < counts.size(); ++i) {
      c[i] = count_of(counts[i]);
      at[i] = count_of(off);
      off += counts[i];
      if (int(i) != rank_) others += counts[i];
    }
    SPATTN_CHECK(bytes == counts[size_t(rank_)], "internal: allgatherv count");
    const auto t0 = Clock::now();
    check(MPI_Allgatherv(send, count_of(bytes), MPI_BYTE, recv, c.data(), at.data(), MPI_BYTE,
                         MPI_COMM_WORLD),
          "MPI_Allgatherv");
    stats().bytes_sent += int64_t(bytes) * (size_ - 1);
    stats().bytes_recv += int64_t(others);
    stats().messages += 1;
    stats().comm_ms += ms_since(t0);
  }
  [[noreturn]] void abort(int code) override {
    MPI_Abort(MPI_COMM_WORLD, code);
    std::_Exit(code);
  }

 private:
  static constexpr int kTag = 26, kChainTag = 27, kChunkTag = 28;
  int rank_ = 0, size_ = 1;
  MPI_Request req_[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
  MPI_Status st_[2];
  int n_req_ = 0;
  bool done_ = false;
  size_t recv_bytes_ = 0;
  // post_send / post_recv: the sends in flight, and the one receive.
  std::vector<MPI_Request> sends_;
  MPI_Request recv_ = MPI_REQUEST_NULL;
  MPI_Status recv_st_;
  bool recv_done_ = false;
  size_t recv_bytes_posted_ = 0;
  int recv_from_ = -1;
};

std::mutex g_mutex;
std::shared_ptr<Group> g_world;  // for the process's life: MPI is initialised once

// MPI_Finalize at exit, after main has returned: an error every rank met together has then
// been printed by every rank before any leaves (Finalize waits for all), so mpirun, which ends
// the job when a first rank exits with an error, cuts no rank short of saying why.
void finalize_at_exit() {
  int done = 0;
  MPI_Finalized(&done);
  if (!done) MPI_Finalize();
}

}  // namespace

bool mpi_available() { return true; }

std::shared_ptr<Group> mpi_world(int ranks) {
  SPATTN_CHECK(ranks >= 1, "--cp must be >= 1, got ", ranks);
  std::lock_guard<std::mutex> lock(g_mutex);
  std::shared_ptr<Group> g = g_world;
  if (!g) {
    int init = 0, done = 0;
    MPI_Initialized(&init);
    MPI_Finalized(&done);
    SPATTN_CHECK(!done, "--cp: MPI was already shut down in this process");
    if (!init) {
      int provided = 0;
      check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided), "MPI_Init_thread");
      std::atexit(finalize_at_exit);
    }
    // Errors come back as codes (check() turns them into Error) instead of ending the job.
    MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
    g = std::make_shared<MpiGroup>();
    g_world = g;
  }
  // Every rank says what it was asked for, so a rank given another --cp fails with the rest.
  std::vector<int> asked(size_t(g->size()));
  g->allgather(&ranks, sizeof ranks, asked.data());
  for (int r = 0; r < g->size(); ++r)
    if (asked[size_t(r)] != g->size()) {
      g->set_failed_together();
      detail::fail("--cp ", asked[size_t(r)], " (rank ", r, ") does not match the ", g->size(),
                   " process", g->size() == 1 ? "" : "es", " MPI started (launch with mpirun -np ",
                   asked[size_t(r)], ")");
    }
  g->stats() = CommStats{};
  return g;
}

#else  // no MPI at build time

bool mpi_available() { return false; }

std::shared_ptr<Group> mpi_world(int ranks) {
  detail::fail("--cp ", ranks,
               ": this spattn was built without MPI (install libopenmpi-dev, "
               "scripts/deps.sh, and rebuild)");
}

#endif

}  // namespace spattn::dist

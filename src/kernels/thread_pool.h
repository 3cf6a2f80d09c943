// A fixed pool of worker threads for splitting one kernel call across the cores.
// parallel_for blocks until every piece is done; the calling thread works too.
//
// A decode step calls parallel_for hundreds of times, so between calls the workers spin for a
// short while (the next job usually follows within microseconds) and only then sleep, so an
// idle engine costs no CPU. The range is cut into several pieces per thread, claimed one at a
// time, so a thread slowed down by something else on the machine takes fewer pieces; the
// pieces shrink toward the end so the threads finish together. The caller waits for the
// pieces to be done, not for the workers to wake: a descheduled worker costs nothing.
//
// The protocol (thread_pool.cpp states and argues each step):
// - One 64-bit word `work_` holds generation | piece count | next unclaimed piece. A piece is
//   claimed by a CAS on that word, so a claim is valid only for the job that published it:
//   a worker that wakes late cannot take a piece of a newer job, nor read a newer job's count.
// - Sleeping goes through one mutex and two condition variables, never std::atomic::wait.
//   A sleeper announces itself (a counter or a flag) and re-checks its condition under the
//   mutex; the waker changes the state first, then reads the announcement, and wakes under the
//   mutex. Both sides use sequentially consistent atomics, so either the sleeper sees the new
//   state or the waker sees the sleeper.
// - One caller at a time: concurrent callers queue on a mutex. A job that calls parallel_for
//   on the pool that runs it (nested use) is refused with std::logic_error, which reaches the
//   outer caller like any exception a job throws.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <exception>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lumen::kernels {

class ThreadPool {
 public:
  // n_threads counts the caller: 1 means no extra threads.
  explicit ThreadPool(int n_threads);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int size() const { return int(workers_.size()) + 1; }
  // Calls fn(begin, end) over disjoint pieces covering [0, n) and returns when all are done.
  // Safe to call from several threads (calls are serialised). fn must not call parallel_for
  // on this pool (std::logic_error). The first exception fn throws is rethrown here after
  // every piece has finished.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool, sized to the hardware threads (or LUMEN_THREADS).
  static ThreadPool& global();

  static constexpr int64_t kMaxParts = 64;

 private:
  void worker_loop();
  void run_parts(uint32_t generation);
  void record_error(std::exception_ptr error);

  std::vector<std::thread> workers_;
  // generation << 32 | piece count << 16 | index of the next unclaimed piece.
  std::atomic<uint64_t> work_{0};
  std::atomic<int64_t> done_parts_{0};
  std::atomic<int> sleepers_{0};              // workers inside the sleep path
  std::atomic<bool> caller_sleeping_{false};  // the caller inside its sleep path
  std::atomic<bool> stopping_{false};
  std::mutex sleep_mu_;
  std::condition_variable work_cv_;  // workers sleep here until the generation moves
  std::condition_variable done_cv_;  // the caller sleeps here until the last piece is done
  std::mutex call_mu_;               // one parallel_for at a time
  std::mutex error_mu_;
  std::exception_ptr error_;
  uint32_t generation_ = 0;  // the caller's count of jobs (written under call_mu_)
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  // Piece i of the current job is [bounds_[i], bounds_[i + 1]); written before the job is
  // published, read only by threads that claimed a piece of it.
  int64_t bounds_[kMaxParts + 1] = {};
};

}  // namespace lumen::kernels

// A fixed pool of worker threads for splitting one kernel call across the cores.
// parallel_for blocks until every chunk is done; the calling thread works too.
//
// Synchronisation is cheap because a decode step calls it hundreds of times: between calls
// the workers spin for a short while (a new job usually follows within microseconds), then
// sleep on a futex (std::atomic::wait) so an idle engine costs no CPU. The range is cut into
// several parts per thread, claimed with an atomic counter, so a thread slowed down by
// something else on the machine takes fewer parts and all threads finish together; the parts
// shrink toward the end of the range so the last one to finish is short. The
// caller waits for the parts to be done, not for the workers to wake: on a loaded machine a
// descheduled worker costs nothing, the caller simply does its parts.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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
  // Calls fn(begin, end) over disjoint pieces covering [0, n). Not reentrant: fn must not
  // call parallel_for on the same pool.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool, sized to the hardware threads (or LUMEN_THREADS).
  static ThreadPool& global();

 private:
  void worker_loop();
  void run_parts(uint32_t generation);

  std::vector<std::thread> workers_;
  // generation << 32 | index of the next unclaimed part. Claiming a part is a CAS on this
  // word, so a worker that wakes late can never take a part of a newer job.
  std::atomic<uint64_t> work_{0};
  std::atomic<int64_t> done_parts_{0};
  std::atomic<int64_t> job_parts_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<bool> caller_waiting_{false};
  std::atomic<bool> stopping_{false};
  uint32_t generation_ = 0;  // the caller's count of jobs
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  static constexpr int64_t kMaxParts = 64;
  // Part i of the current job is [bounds_[i], bounds_[i + 1]); written before the job is
  // published, read only by threads that claimed a part of it.
  int64_t bounds_[kMaxParts + 1] = {};
};

}  // namespace lumen::kernels

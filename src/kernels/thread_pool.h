// A fixed pool of worker threads for splitting one kernel call across the cores.
// parallel_for blocks until every chunk is done; the calling thread works too.
//
// Synchronisation is cheap because a decode step calls it hundreds of times: between calls
// the workers spin for a short while (a new job usually follows within microseconds), then
// sleep on a futex (std::atomic::wait) so an idle engine costs no CPU. The range is cut into
// several parts per thread, claimed with an atomic counter, so a thread slowed down by
// something else on the machine takes fewer parts and all threads finish together.
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
  void run_parts();

  std::vector<std::thread> workers_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<int> sleepers_{0};
  std::atomic<int> finished_{0};
  std::atomic<int64_t> next_part_{0};
  std::atomic<bool> stopping_{false};
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  int64_t job_parts_ = 0;
};

}  // namespace lumen::kernels

// A fixed pool of worker threads for splitting one kernel call across the cores.
// parallel_for blocks until every chunk is done; the calling thread works too.
#pragma once

#include <condition_variable>
#include <cstdint>
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
  // Calls fn(begin, end) over [0, n) split into size() contiguous chunks.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn);

  // The process-wide pool, sized to the hardware threads (or LUMEN_THREADS).
  static ThreadPool& global();

 private:
  void worker_loop(int index);

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable wake_;
  std::condition_variable done_;
  const std::function<void(int64_t, int64_t)>* job_ = nullptr;
  int64_t job_n_ = 0;
  uint64_t generation_ = 0;
  int pending_ = 0;
  bool stopping_ = false;
};

}  // namespace lumen::kernels

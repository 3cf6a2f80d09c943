#include "kernels/thread_pool.h"

#include <algorithm>
#include <cstdlib>

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define LUMEN_PAUSE() _mm_pause()
#else
#define LUMEN_PAUSE() ((void)0)
#endif

namespace lumen::kernels {
namespace {
// About 50-100 microseconds of spinning before a worker sleeps.
constexpr int kSpinIterations = 20000;
constexpr int64_t kPartsPerThread = 8;
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  for (int i = 1; i < std::max(1, n_threads); ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_parts() {
  const auto& fn = *job_;
  const int64_t n = job_n_, parts = job_parts_;
  for (;;) {
    const int64_t i = next_part_.fetch_add(1);
    if (i >= parts) return;
    const int64_t begin = n * i / parts, end = n * (i + 1) / parts;
    if (begin < end) fn(begin, end);
  }
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  for (;;) {
    uint64_t gen;
    int spins = 0;
    while ((gen = generation_.load()) == seen) {
      if (++spins < kSpinIterations) {
        LUMEN_PAUSE();
        continue;
      }
      sleepers_.fetch_add(1);
      generation_.wait(seen);  // returns at once if the generation already moved
      sleepers_.fetch_sub(1);
    }
    seen = gen;
    if (stopping_.load()) return;
    run_parts();
    finished_.fetch_add(1);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (workers_.empty() || n <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  job_ = &fn;
  job_n_ = n;
  job_parts_ = std::min<int64_t>(n, kPartsPerThread * size());
  next_part_.store(0);
  finished_.store(0);
  generation_.fetch_add(1);
  if (sleepers_.load() > 0) generation_.notify_all();
  run_parts();
  const int workers = int(workers_.size());
  while (finished_.load() != workers) LUMEN_PAUSE();
}

ThreadPool& ThreadPool::global() {
  static ThreadPool pool([] {
    if (const char* env = std::getenv("LUMEN_THREADS")) {
      int n = std::atoi(env);
      if (n > 0) return n;
    }
    return int(std::max(1u, std::thread::hardware_concurrency()));
  }());
  return pool;
}

}  // namespace lumen::kernels

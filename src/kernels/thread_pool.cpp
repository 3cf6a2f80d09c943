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
// Tens of microseconds of spinning before a thread sleeps: matmuls of one decode step
// follow each other closer than that; a longer spin only steals a shared core.
constexpr int kSpinIterations = 4000;
constexpr int64_t kPartsPerThread = 8;
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  for (int i = 1; i < std::max(1, n_threads); ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  stopping_.store(true);
  work_.store(uint64_t(++generation_) << 32);
  work_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::run_parts(uint32_t generation) {
  for (;;) {
    uint64_t w = work_.load();
    if (uint32_t(w >> 32) != generation) return;
    const int64_t i = int64_t(w & 0xffffffffu), parts = job_parts_.load();
    if (i >= parts) return;
    if (!work_.compare_exchange_weak(w, w + 1)) continue;
    // The part is ours; the job cannot change until it is reported done.
    const int64_t begin = job_n_ * i / parts, end = job_n_ * (i + 1) / parts;
    if (begin < end) (*job_)(begin, end);
    done_parts_.fetch_add(1);
    if (caller_waiting_.load()) done_parts_.notify_all();
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    uint64_t w;
    while (uint32_t((w = work_.load()) >> 32) == seen) {
      if (++spins < kSpinIterations) {
        LUMEN_PAUSE();
        continue;
      }
      sleepers_.fetch_add(1);
      work_.wait(w);  // returns at once if the word already moved
      sleepers_.fetch_sub(1);
    }
    if (stopping_.load()) return;
    seen = uint32_t(w >> 32);
    run_parts(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (workers_.empty() || n <= 1) {
    if (n > 0) fn(0, n);
    return;
  }
  const int64_t parts = std::min<int64_t>(n, kPartsPerThread * size());
  job_ = &fn;
  job_n_ = n;
  job_parts_.store(parts);
  done_parts_.store(0);
  const uint32_t generation = ++generation_;
  work_.store(uint64_t(generation) << 32);
  if (sleepers_.load() > 0) work_.notify_all();
  run_parts(generation);
  int spins = 0;
  for (;;) {
    const int64_t done = done_parts_.load();
    if (done == parts) break;
    if (++spins < kSpinIterations) {
      LUMEN_PAUSE();
      continue;
    }
    caller_waiting_.store(true);
    done_parts_.wait(done);
    caller_waiting_.store(false);
  }
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

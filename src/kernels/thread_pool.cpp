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
// The smallest piece is 1/(kTailPartsPerThread x threads) of the range.
constexpr int64_t kTailPartsPerThread = 16;
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
    const int64_t begin = bounds_[size_t(i)], end = bounds_[size_t(i) + 1];
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
  // Guided pieces: each takes 1/(2 x threads) of what is left, down to a floor, so the first
  // pieces are long (few claims, long streams for the prefetcher) and the last ones short
  // (the threads finish within one short piece of each other).
  const int64_t threads = size();
  const int64_t floor_piece = std::max<int64_t>(1, n / (kTailPartsPerThread * threads));
  int64_t parts = 0;
  bounds_[0] = 0;
  while (bounds_[size_t(parts)] < n) {
    const int64_t begin = bounds_[size_t(parts)];
    const int64_t piece = parts + 1 == kMaxParts ? n - begin : std::max(floor_piece, (n - begin) / (2 * threads));
    bounds_[size_t(++parts)] = std::min(n, begin + piece);
  }
  job_ = &fn;
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

#include "kernels/thread_pool.h"

#include <algorithm>
#include <cstdlib>
#include <stdexcept>
#include <utility>

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

uint32_t generation_of(uint64_t w) { return uint32_t(w >> 32); }
int64_t parts_of(uint64_t w) { return int64_t((w >> 16) & 0xffffu); }
int64_t next_of(uint64_t w) { return int64_t(w & 0xffffu); }
uint64_t make_work(uint32_t generation, int64_t parts) { return uint64_t(generation) << 32 | uint64_t(parts) << 16; }

// The pool whose job this thread is running (worker or caller), to refuse nested use.
thread_local const ThreadPool* t_running_pool = nullptr;

struct RunningGuard {
  const ThreadPool* saved;
  explicit RunningGuard(const ThreadPool* pool) : saved(t_running_pool) { t_running_pool = pool; }
  ~RunningGuard() { t_running_pool = saved; }
};
}  // namespace

ThreadPool::ThreadPool(int n_threads) {
  static_assert(kMaxParts < (1 << 16), "a piece count must fit its 16 bits of work_");
  for (int i = 1; i < std::max(1, n_threads); ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  // stopping_ is stored before the generation moves, so a worker that sees the new generation
  // sees stopping_ too. The notify is under the mutex: see the wake argument in parallel_for.
  stopping_.store(true);
  work_.store(make_work(++generation_, 0));
  {
    std::lock_guard lock(sleep_mu_);
    work_cv_.notify_all();
  }
  for (auto& t : workers_) t.join();
}

void ThreadPool::record_error(std::exception_ptr error) {
  std::lock_guard lock(error_mu_);
  if (!error_) error_ = std::move(error);
}

// Claims and runs pieces of job `generation` until none is left. The piece count is read
// from the same word as the generation, so it always belongs to the job being claimed from;
// a successful CAS on (generation, next) proves the job is still live (its caller waits for
// this piece), so job_ and bounds_ cannot change under us.
void ThreadPool::run_parts(uint32_t generation) {
  RunningGuard running(this);
  for (;;) {
    uint64_t w = work_.load();
    if (generation_of(w) != generation) return;
    const int64_t i = next_of(w), parts = parts_of(w);
    if (i >= parts) return;
    if (!work_.compare_exchange_weak(w, w + 1)) continue;
    const int64_t begin = bounds_[size_t(i)], end = bounds_[size_t(i) + 1];
    try {
      if (begin < end) (*job_)(begin, end);
    } catch (...) {
      record_error(std::current_exception());
    }
    // Wake argument (the caller's side is in parallel_for): the count moves first, then the
    // flag is read; the caller sets the flag first, then reads the count under the mutex.
    if (done_parts_.fetch_add(1) + 1 == parts && caller_sleeping_.load()) {
      std::lock_guard lock(sleep_mu_);
      done_cv_.notify_one();
    }
  }
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  for (;;) {
    int spins = 0;
    uint64_t w;
    while (generation_of(w = work_.load()) == seen) {
      if (++spins < kSpinIterations) {
        LUMEN_PAUSE();
        continue;
      }
      // Sleep path: announce, then re-check under the mutex (the caller publishes, then reads
      // sleepers_, then notifies under the same mutex).
      std::unique_lock lock(sleep_mu_);
      sleepers_.fetch_add(1);
      work_cv_.wait(lock, [&] { return generation_of(work_.load()) != seen; });
      sleepers_.fetch_sub(1);
      spins = 0;
    }
    if (stopping_.load()) return;
    seen = generation_of(w);
    run_parts(seen);
  }
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t)>& fn) {
  if (t_running_pool == this)
    throw std::logic_error("ThreadPool::parallel_for called from inside a job of the same pool (nested use)");
  if (workers_.empty() || n <= 1) {
    RunningGuard running(this);
    if (n > 0) fn(0, n);
    return;
  }
  std::lock_guard call(call_mu_);
  RunningGuard running(this);
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
  done_parts_.store(0);
  const uint32_t generation = ++generation_;
  // Publish, then wake. A worker increments sleepers_ and re-reads work_ under sleep_mu_; we
  // store work_ and then read sleepers_, all sequentially consistent. Either the worker's
  // re-read sees the new generation, or our read sees it asleep (or about to be) and the
  // notify under the mutex reaches it inside wait().
  work_.store(make_work(generation, parts));
  if (sleepers_.load() > 0) {
    std::lock_guard lock(sleep_mu_);
    work_cv_.notify_all();
  }
  run_parts(generation);
  int spins = 0;
  while (done_parts_.load() != parts) {
    if (++spins < kSpinIterations) {
      LUMEN_PAUSE();
      continue;
    }
    // The mirror of the workers' sleep: flag first, then the count, under the mutex; the
    // worker that finishes the last piece bumps the count, then reads the flag.
    std::unique_lock lock(sleep_mu_);
    caller_sleeping_.store(true);
    done_cv_.wait(lock, [&] { return done_parts_.load() == parts; });
    caller_sleeping_.store(false);
  }
  job_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard lock(error_mu_);
    error = std::exchange(error_, nullptr);
  }
  if (error) std::rethrow_exception(error);
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

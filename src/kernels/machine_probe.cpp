#include "kernels/machine_probe.h"

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <vector>

#include <time.h>

#include "kernels/thread_pool.h"

namespace lumen::kernels {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

uint64_t read_sum_scalar(const void* data, size_t bytes) {
  const auto* p = static_cast<const uint64_t*>(data);
  uint64_t s = 0;
  for (size_t i = 0; i < bytes / 8; ++i) s += p[i];
  return s;
}

}  // namespace

double measure_read_bandwidth(size_t bytes, int repeats) {
  ThreadPool& pool = ThreadPool::global();
  const int64_t slices = pool.size();
  bytes = bytes / (size_t(slices) * 4096) * size_t(slices) * 4096;
  auto* raw = static_cast<std::byte*>(std::aligned_alloc(4096, bytes));
  std::unique_ptr<std::byte, decltype(&std::free)> buf(raw, &std::free);
  // Touch every page from the threads that will read it (first-touch placement).
  pool.parallel_for(slices, [&](int64_t s0, int64_t s1) {
    std::memset(raw + size_t(s0) * (bytes / slices), 1, size_t(s1 - s0) * (bytes / slices));
  });
  const Isa isa = active_isa();
  auto reader = isa == Isa::Avx512 ? detail::read_sum_avx512 : isa == Isa::Avx2 ? detail::read_sum_avx2 : read_sum_scalar;
  double best = 0;
  std::atomic<uint64_t> sink{0};
  for (int r = 0; r < repeats; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(slices, [&](int64_t s0, int64_t s1) {
      sink += reader(raw + size_t(s0) * (bytes / slices), size_t(s1 - s0) * (bytes / slices));
    });
    best = std::max(best, double(bytes) / seconds_since(t0));
  }
  if (sink.load() == 42) std::abort();  // keeps the sums alive
  return best;
}

double measure_int8_peak(Isa isa, int repeats, double* per_core_cpu) {
  if (isa == Isa::Scalar) return 0;
  ThreadPool& pool = ThreadPool::global();
  auto run = isa == Isa::Avx512 ? detail::int8_macs_avx512 : detail::int8_macs_avx2;
  const long iterations = 4'000'000;
  double best = 0, best_cpu = 0;
  std::atomic<int> sink{0};
  auto thread_cpu = [] {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
  };
  for (int r = 0; r < repeats; ++r) {
    std::atomic<double> macs{0}, cpu_rate{0};
    const auto t0 = std::chrono::steady_clock::now();
    pool.parallel_for(pool.size(), [&](int64_t s0, int64_t s1) {
      for (int64_t s = s0; s < s1; ++s) {
        int local = 0;
        const double c0 = thread_cpu();
        const double m = run(iterations, &local);
        const double rate = m / std::max(1e-9, thread_cpu() - c0);
        double cur = macs.load();
        while (!macs.compare_exchange_weak(cur, cur + m)) {}
        cur = cpu_rate.load();
        while (rate > cur && !cpu_rate.compare_exchange_weak(cur, rate)) {}
        sink += local;
      }
    });
    best = std::max(best, 2.0 * macs.load() / seconds_since(t0));
    best_cpu = std::max(best_cpu, 2.0 * cpu_rate.load());
  }
  if (per_core_cpu) *per_core_cpu = best_cpu;
  if (sink.load() == 42) std::abort();
  return best;
}

}  // namespace lumen::kernels

// The kernels' thread pool: coverage, the sleep/wake protocol under stress, refusals.
//
// The stress tests mix back-to-back calls (workers still spinning) with pauses long enough
// for the workers and the caller to reach the sleep path, so both wake-ups are exercised
// millions of times; a lost wake-up shows as a hang (CTest's per-test TIMEOUT names it).
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "kernels/thread_pool.h"
#include "kv/contiguous_cache.h"
#include "tiny_model.h"

namespace lumen {
namespace {

using kernels::ThreadPool;

#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__)
constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)
constexpr bool kSanitized = true;
#else
constexpr bool kSanitized = false;
#endif
#else
constexpr bool kSanitized = false;
#endif

// LUMEN_POOL_STRESS_CALLS overrides the number of calls (the runs use millions).
int64_t stress_calls(int64_t release_default) {
  if (const char* env = std::getenv("LUMEN_POOL_STRESS_CALLS")) return std::max<int64_t>(1, std::atoll(env));
  return kSanitized ? release_default / 10 : release_default;
}

// Runs one call over [0, n) marking each index; checks every index was visited exactly once.
void run_and_check(ThreadPool& pool, int64_t n, std::vector<std::atomic<int32_t>>& marks, int32_t stamp) {
  pool.parallel_for(n, [&](int64_t b, int64_t e) {
    ASSERT_LE(0, b);
    ASSERT_LT(b, e);
    ASSERT_LE(e, n);
    for (int64_t i = b; i < e; ++i) marks[size_t(i)].fetch_add(stamp);
  });
  for (int64_t i = 0; i < n; ++i) {
    const int32_t got = marks[size_t(i)].exchange(0);
    if (got != stamp) FAIL() << "n=" << n << " index " << i << " visited " << got / stamp << " times";
  }
}

TEST(ThreadPoolStress, AMillionCallsOfEverySizeEachCoverTheRangeOnce) {
  for (int threads : {2, 3}) {
    ThreadPool pool(threads);
    std::vector<std::atomic<int32_t>> marks(4096);
    std::mt19937 rng(42 + uint32_t(threads));
    // Sizes: empty, one, fewer pieces than threads, about as many, many, past the piece cap.
    const int64_t sizes[] = {0, 1, 2, 3, 5, 17, 64, 65, 200, 1000, 4096};
    std::uniform_int_distribution<int> pick(0, int(std::size(sizes)) - 1), pause(0, 511);
    // Half a million calls per pool size: a million in all.
    const int64_t calls = stress_calls(500'000);
    for (int64_t c = 0; c < calls; ++c) {
      const int64_t n = sizes[pick(rng)];
      run_and_check(pool, n, marks, 1 + int32_t(c % 7));
      if (HasFatalFailure()) return;
      // Now and then, idle long enough for everyone to reach the sleep path.
      if (pause(rng) == 0) std::this_thread::sleep_for(std::chrono::microseconds(50 + 150 * (c % 3)));
    }
  }
}

TEST(ThreadPoolStress, TinyJobsBackToBackWithSleepingWorkers) {
  // The shape of the PagedCache hang: many short calls, each finishing before a sleeping
  // worker wakes, the caller sometimes sleeping on the last piece.
  ThreadPool pool(2);
  std::atomic<int64_t> total{0};
  const int64_t calls = stress_calls(300'000);
  for (int64_t c = 0; c < calls; ++c) {
    pool.parallel_for(2 + c % 3, [&](int64_t b, int64_t e) {
      if ((c & 1023) == 0) std::this_thread::sleep_for(std::chrono::microseconds(200));
      total.fetch_add(e - b);
    });
    if ((c & 255) == 0) std::this_thread::sleep_for(std::chrono::microseconds(300));
  }
  int64_t want = 0;
  for (int64_t c = 0; c < calls; ++c) want += 2 + c % 3;
  EXPECT_EQ(total.load(), want);
}

TEST(ThreadPool, ConcurrentCallersAreSerialisedAndEachGetsItsOwnAnswer) {
  ThreadPool pool(3);
  const int64_t calls = stress_calls(20'000);
  auto caller = [&](int64_t offset, int64_t& errors) {
    for (int64_t c = 0; c < calls; ++c) {
      const int64_t n = 1 + (c * 37 + offset) % 300;
      std::atomic<int64_t> sum{0};
      pool.parallel_for(n, [&](int64_t b, int64_t e) {
        int64_t s = 0;
        for (int64_t i = b; i < e; ++i) s += i + offset;
        sum.fetch_add(s);
      });
      if (sum.load() != n * (n - 1) / 2 + n * offset) ++errors;
    }
  };
  int64_t errors_a = 0, errors_b = 0;
  std::thread a(caller, 0, std::ref(errors_a)), b(caller, 1000, std::ref(errors_b));
  a.join();
  b.join();
  EXPECT_EQ(errors_a, 0);
  EXPECT_EQ(errors_b, 0);
}

TEST(ThreadPool, NestedUseIsRefusedWithAClearError) {
  ThreadPool pool(2);
  try {
    pool.parallel_for(8, [&](int64_t, int64_t) { pool.parallel_for(4, [](int64_t, int64_t) {}); });
    FAIL() << "nested parallel_for was not refused";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("nested"), std::string::npos) << e.what();
  }
  // Refused even when the inner range would run inline, and on a one-thread pool.
  ThreadPool single(1);
  EXPECT_THROW(single.parallel_for(3, [&](int64_t, int64_t) { single.parallel_for(1, [](int64_t, int64_t) {}); }),
               std::logic_error);
  // A job may use a different pool.
  std::atomic<int64_t> inner{0};
  pool.parallel_for(4, [&](int64_t b, int64_t e) {
    single.parallel_for(e - b, [&](int64_t x, int64_t y) { inner.fetch_add(y - x); });
  });
  EXPECT_EQ(inner.load(), 4);
  // The pool still works after the refusal.
  std::atomic<int64_t> count{0};
  pool.parallel_for(100, [&](int64_t b, int64_t e) { count.fetch_add(e - b); });
  EXPECT_EQ(count.load(), 100);
}

TEST(ThreadPool, AnExceptionInAPieceReachesTheCallerAfterEveryPieceFinished) {
  ThreadPool pool(3);
  for (int round = 0; round < 200; ++round) {
    std::atomic<int64_t> finished{0};
    try {
      pool.parallel_for(1000, [&](int64_t b, int64_t e) {
        if (b <= 500 && 500 < e) throw std::runtime_error("piece failed");
        finished.fetch_add(e - b);
      });
      FAIL() << "the exception was lost";
    } catch (const std::runtime_error& e) {
      EXPECT_STREQ(e.what(), "piece failed");
    }
    EXPECT_LT(finished.load(), 1000);
    EXPECT_GT(finished.load(), 0);
  }
  std::atomic<int64_t> count{0};
  pool.parallel_for(1000, [&](int64_t b, int64_t e) { count.fetch_add(e - b); });
  EXPECT_EQ(count.load(), 1000);
}

TEST(ThreadPool, DestructionWhileIdleSpinningOrAsleep) {
  for (int i = 0; i < 200; ++i) {
    ThreadPool never_used(1 + i % 4);
  }
  for (int i = 0; i < 200; ++i) {
    ThreadPool pool(2 + i % 3);
    std::atomic<int64_t> count{0};
    pool.parallel_for(64, [&](int64_t b, int64_t e) { count.fetch_add(e - b); });
    EXPECT_EQ(count.load(), 64);
    // Odd rounds: let the workers fall asleep first; even rounds: destroy while they spin.
    if (i % 2) std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
}

TEST(ThreadPool, ZeroLengthRangeCallsNothing) {
  ThreadPool pool(2);
  bool called = false;
  pool.parallel_for(0, [&](int64_t, int64_t) { called = true; });
  pool.parallel_for(-5, [&](int64_t, int64_t) { called = true; });
  EXPECT_FALSE(called);
}

TEST(ThreadPool, TwoThreadsRunningForwardAtOnceGetTheLogitsEachGetsAlone) {
  // forward() is const and keeps its scratch per call; only the global pool is shared.
  const spec::ModelSpec s = test_support::tiny_model_spec(512, 3, 64);
  test_support::TinyModel tiny(s, 5);
  const model::GemmaModel& m = tiny.model();
  auto logits_of = [&](const std::vector<int32_t>& tokens) {
    kv::ContiguousCache cache(s);
    model::SequenceKv* caches[] = {&cache};
    std::vector<float> out;
    for (size_t i = 0; i < tokens.size(); ++i) {
      std::vector<model::BatchRow> row = {{0, int32_t(i), tokens[i], true}};
      m.forward(row, caches, out);
    }
    return out;
  };
  const std::vector<int32_t> a = {2, 100, 7, 300, 41, 9, 511, 3}, b = {5, 6, 200, 7, 8, 400};
  const auto want_a = logits_of(a), want_b = logits_of(b);
  const int rounds = kSanitized ? 20 : 200;
  int64_t mismatches = 0;
  std::thread ta([&] {
    for (int r = 0; r < rounds; ++r) mismatches += logits_of(a) != want_a;
  });
  int64_t mismatches_b = 0;
  std::thread tb([&] {
    for (int r = 0; r < rounds; ++r) mismatches_b += logits_of(b) != want_b;
  });
  ta.join();
  tb.join();
  EXPECT_EQ(mismatches, 0);
  EXPECT_EQ(mismatches_b, 0);
}

}  // namespace
}  // namespace lumen

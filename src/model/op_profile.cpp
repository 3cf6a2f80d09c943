#include "model/op_profile.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <ctime>

namespace lumen::model {
namespace {

const char* const kOpNames[] = {"embedding lookup", "input + final rms norms",    "q/k/v projections", "rope + q/k norms + kv store",
                                "attention",        "o projection", "gate/up projections", "gelu x up",
                                "down projection",  "norms + residual adds", "output projection", "logit softcap",
                                "moe router + experts", "per-layer inputs (table, projection)", "per-layer gates"};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == size_t(Op::kCount));

struct Kind {
  std::array<double, size_t(Op::kCount)> seconds{}, cpu{};
  long steps = 0;
  int64_t rows = 0;
  void print(const char* what) const {
    if (steps == 0) return;
    double total = 0, total_cpu = 0;
    for (size_t i = 0; i < seconds.size(); ++i) {
      total += seconds[i];
      total_cpu += cpu[i];
    }
    std::fprintf(stderr, "LUMEN_PROFILE: %ld %s steps (%lld rows), %.3f ms per step, %.3f CPU-ms per row (timed ops)\n",
                 steps, what, (long long)rows, 1e3 * total / double(steps), 1e3 * total_cpu / double(rows));
    for (size_t i = 0; i < seconds.size(); ++i)
      std::fprintf(stderr, "  %-30s %9.3f ms/step %6.1f%%   CPU %6.1f%%\n", kOpNames[i], 1e3 * seconds[i] / double(steps),
                   total > 0 ? 100 * seconds[i] / total : 0.0, total_cpu > 0 ? 100 * cpu[i] / total_cpu : 0.0);
  }
};

struct Totals {
  std::mutex mu;
  Kind decode, prefill;
  ~Totals() {
    decode.print("decode");
    prefill.print("prefill");
  }
};

Totals& totals() {
  static Totals t;
  return t;
}

}  // namespace

bool op_profile_enabled() {
  static const bool on = [] {
    const char* e = std::getenv("LUMEN_PROFILE");
    return e && *e && *e != '0';
  }();
  return on;
}

void op_profile_add(Op op, bool prefill, double seconds, double cpu_seconds) {
  Totals& t = totals();
  std::lock_guard lock(t.mu);
  Kind& k = prefill ? t.prefill : t.decode;
  k.seconds[size_t(op)] += seconds;
  k.cpu[size_t(op)] += cpu_seconds;
}

void op_profile_step(int64_t rows) {
  Totals& t = totals();
  std::lock_guard lock(t.mu);
  Kind& k = rows > 1 ? t.prefill : t.decode;
  ++k.steps;
  k.rows += rows;
}

double process_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return double(ts.tv_sec) + 1e-9 * double(ts.tv_nsec);
}

}  // namespace lumen::model

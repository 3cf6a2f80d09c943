#include "model/op_profile.h"

#include <array>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace lumen::model {
namespace {

const char* const kOpNames[] = {"embedding lookup", "input + final rms norms",    "q/k/v projections", "rope + q/k norms + kv store",
                                "attention",        "o projection", "gate/up projections", "gelu x up",
                                "down projection",  "norms + residual adds", "output projection", "logit softcap",
                                "moe router",       "moe experts",  "per-layer inputs (table, projection)",
                                "per-layer gates"};
static_assert(sizeof(kOpNames) / sizeof(kOpNames[0]) == size_t(Op::kCount));

struct Totals {
  std::mutex mu;
  std::array<double, size_t(Op::kCount)> seconds{};
  long steps = 0;
  ~Totals() {
    if (steps == 0) return;
    double total = 0;
    for (double s : seconds) total += s;
    std::fprintf(stderr, "LUMEN_PROFILE: %ld decode steps, %.3f ms per step (timed ops)\n", steps, 1e3 * total / double(steps));
    for (size_t i = 0; i < seconds.size(); ++i)
      std::fprintf(stderr, "  %-30s %9.3f ms/step %6.1f%%\n", kOpNames[i], 1e3 * seconds[i] / double(steps),
                   total > 0 ? 100 * seconds[i] / total : 0.0);
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

void op_profile_add(Op op, double seconds) {
  Totals& t = totals();
  std::lock_guard lock(t.mu);
  t.seconds[size_t(op)] += seconds;
}

void op_profile_step() {
  Totals& t = totals();
  std::lock_guard lock(t.mu);
  ++t.steps;
}

}  // namespace lumen::model

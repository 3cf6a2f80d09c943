#include "kernels/cpu_features.h"

#include <atomic>
#include <cstdlib>
#include <cstring>

namespace lumen::kernels {
namespace {

bool detect_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

Isa initial_isa() {
  const char* forced = std::getenv("LUMEN_ISA");
  if (forced && std::strcmp(forced, "scalar") == 0) return Isa::Scalar;
  return detect_avx2() ? Isa::Avx2 : Isa::Scalar;
}

std::atomic<Isa>& current() {
  static std::atomic<Isa> isa{initial_isa()};
  return isa;
}

}  // namespace

bool cpu_supports(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return true;
    case Isa::Avx2: return detect_avx2();
  }
  return false;
}

Isa active_isa() { return current().load(std::memory_order_relaxed); }

void set_isa(Isa isa) { current().store(cpu_supports(isa) ? isa : Isa::Scalar); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
  }
  return "?";
}

}  // namespace lumen::kernels

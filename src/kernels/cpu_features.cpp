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

bool detect_avx512() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return detect_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

Isa best_supported(Isa wanted) {
  if (wanted == Isa::Avx512 && detect_avx512()) return Isa::Avx512;
  if (wanted != Isa::Scalar && detect_avx2()) return Isa::Avx2;
  return Isa::Scalar;
}

Isa initial_isa() {
  Isa forced = Isa::Avx512;
  if (const char* env = std::getenv("LUMEN_ISA")) parse_isa(env, forced);
  return best_supported(forced);
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
    case Isa::Avx512: return detect_avx512();
  }
  return false;
}

Isa active_isa() { return current().load(std::memory_order_relaxed); }

void set_isa(Isa isa) { current().store(best_supported(isa)); }

const char* isa_name(Isa isa) {
  switch (isa) {
    case Isa::Scalar: return "scalar";
    case Isa::Avx2: return "avx2";
    case Isa::Avx512: return "avx512";
  }
  return "?";
}

bool parse_isa(const char* name, Isa& out) {
  for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512})
    if (std::strcmp(name, isa_name(isa)) == 0) {
      out = isa;
      return true;
    }
  return false;
}

}  // namespace lumen::kernels

// Which instruction-set variant of the kernels runs. Chosen once from CPUID; the
// environment variable LUMEN_ISA=scalar|avx2 forces a variant (tests compare them).
#pragma once

namespace lumen::kernels {

enum class Isa { Scalar, Avx2 };

// The variant in use: the best the CPU supports, unless LUMEN_ISA or set_isa() says otherwise.
Isa active_isa();
// Forces a variant (falls back to Scalar if the CPU lacks it). For tests and benchmarks.
void set_isa(Isa isa);
bool cpu_supports(Isa isa);
const char* isa_name(Isa isa);

}  // namespace lumen::kernels

// Which instruction-set variant of the kernels runs. Chosen once from CPUID; the
// environment variable LUMEN_ISA=scalar|avx2|avx512 (or `lumen --isa`) forces a variant
// (tests compare them).
#pragma once

namespace lumen::kernels {

// Avx2: AVX2 + FMA + F16C. Avx512: AVX-512 F/BW/VL with VNNI (int8 dot products), on top
// of everything Avx2 needs.
enum class Isa { Scalar, Avx2, Avx512 };

// The variant in use: the best the CPU supports, unless LUMEN_ISA or set_isa() says otherwise.
Isa active_isa();
// Forces a variant (falls back to the best supported one below it if the CPU lacks it).
void set_isa(Isa isa);
bool cpu_supports(Isa isa);
const char* isa_name(Isa isa);
// "scalar" | "avx2" | "avx512" -> the Isa; false when the name is unknown.
bool parse_isa(const char* name, Isa& out);

}  // namespace lumen::kernels

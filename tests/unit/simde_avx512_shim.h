// SIMDe (Debian's libsimde-dev) in place of <immintrin.h>, so the unit tests can run the
// AVX-512 kernels' own source on machines without AVX-512 (simde_avx512.cpp). Compiled with
// -mavx2 -mfma: SIMDe then builds each 512-bit operation from two native 256-bit ones, FMA
// included, so results are the same bits as the real instructions.
#pragma once

#define SIMDE_ENABLE_NATIVE_ALIASES
#include <simde/x86/avx512.h>

// Conversions SIMDe 0.7 has no AVX-512 version of: two 256-bit halves (same rounding: MXCSR's
// nearest even, as the hardware's).
inline simde__m512 lumen_simde_mm512_cvtepi32_ps(simde__m512i a) {
  simde__m512i_private in = simde__m512i_to_private(a);
  simde__m512_private out;
  for (int i = 0; i < 2; ++i) out.m256[i] = simde_mm256_cvtepi32_ps(in.m256i[i]);
  return simde__m512_from_private(out);
}
inline simde__m512i lumen_simde_mm512_cvtps_epi32(simde__m512 a) {
  simde__m512_private in = simde__m512_to_private(a);
  simde__m512i_private out;
  for (int i = 0; i < 2; ++i) out.m256i[i] = simde_mm256_cvtps_epi32(in.m256[i]);
  return simde__m512i_from_private(out);
}
#define _mm512_cvtepi32_ps(a) lumen_simde_mm512_cvtepi32_ps(a)
#define _mm512_cvtps_epi32(a) lumen_simde_mm512_cvtps_epi32(a)

// SIMDe 0.7 defines this alias with the masked form's four arguments.
#undef _mm512_madd_epi16
#define _mm512_madd_epi16(a, b) simde_mm512_madd_epi16(a, b)
// Zero-extending casts SIMDe 0.7 lacks.
#define _mm512_zextsi256_si512(a) simde_mm512_inserti64x4(simde_mm512_setzero_si512(), (a), 0)
#define _mm512_zextpd256_pd512(a) simde_mm512_insertf64x4(simde_mm512_setzero_pd(), (a), 0)

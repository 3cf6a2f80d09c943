// AVX-512 VNNI pieces of the prefill machinery (prefill.h): the R16 tile (Q4 and Q8 weights)
// and the ActBlock quantizer. Compiled for AVX-512 F/BW/VL/VNNI; called only when CPUID says so.
//
// A zmm lane is a row of the 16-row slab. Per 32-column block the 8 weight vectors (dword j =
// columns 4j .. 4j+3, u8) are loaded once per pass and each meets the token's dword j
// broadcast from memory (vpdpbusd's {1to16} operand): 8 vpdpbusd give each lane the block's
// exact integer sum, started at the token's -8 (Q4) or -128 (Q8) x sum correction; then one
// convert, one multiply (row scales x the token's scale) and one FMA. The 8 weight loads and
// the scale load are shared by the pass's tokens, and j runs outside the token loop so the
// tokens' sums are independent dependency chains.
//
// The unit tests also compile this file through SIMDe (LUMEN_TEST_SIMDE_AVX512) so that
// machines without AVX-512 run this exact code against the scalar reference.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#ifdef LUMEN_TEST_SIMDE_AVX512
#include "simde_avx512_shim.h"
#define LUMEN_AVX512_NAME(name) name##_emulated
#else
#include <immintrin.h>
#define LUMEN_AVX512_NAME(name) name
#endif

#include <algorithm>
#include <cstring>

#include "kernels/prefill.h"

namespace lumen::kernels::detail {
namespace {

inline int32_t dword_at(const int8_t* p) {
  int32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

// Tokens t0 .. t0 + n - 1 (NT computed, the missing ones repeat the last token and are not
// stored) over the slab's blocks [b0, b1), continuing the sums in a.out unless `first`.
template <int NT, bool Q8>
void r16_pass(const PrefillTileArgs& a, int t0, int n, int64_t b0, int64_t b1, bool first) {
  const int64_t kb0 = a.k0 / 32;
  const ActBlock* act[NT];
  #pragma GCC unroll 16
  for (int t = 0; t < NT; ++t)
    act[t] = reinterpret_cast<const ActBlock*>(a.act + size_t(t0 + std::min(t, n - 1)) * a.act_stride) + kb0;
  __m512 acc[NT];
  #pragma GCC unroll 16
  for (int t = 0; t < NT; ++t)
    acc[t] = !first && t < n ? _mm512_loadu_ps(a.out + (t0 + t) * kR16Rows) : _mm512_setzero_ps();
  for (int64_t kb = b0; kb < b1; ++kb) {
    const std::byte* blk = a.scratch + size_t(kb) * kR16BlockBytes;
    __m512i sum[NT];
    #pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) sum[t] = _mm512_set1_epi32(Q8 ? act[t][kb].neg128 : act[t][kb].neg8);
    #pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) {
      const __m512i w = _mm512_loadu_si512(blk + j * 64);
      #pragma GCC unroll 16
      for (int t = 0; t < NT; ++t)
        sum[t] = _mm512_dpbusd_epi32(sum[t], w, _mm512_set1_epi32(dword_at(act[t][kb].q + 4 * j)));
    }
    const __m512 dw = _mm512_loadu_ps(reinterpret_cast<const float*>(blk + 512));
    #pragma GCC unroll 16
    for (int t = 0; t < NT; ++t)
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(sum[t]), _mm512_mul_ps(dw, _mm512_set1_ps(act[t][kb].d)), acc[t]);
  }
  for (int t = 0; t < n; ++t) _mm512_storeu_ps(a.out + (t0 + t) * kR16Rows, acc[t]);
}

// Blocks in L1-sized runs that every pass of tokens goes over before the next run (the
// prepared weights then come from L1 for all but the first pass); sums carry over in a.out.
template <bool Q8>
void r16_tile(const PrefillTileArgs& a) {
  const int64_t nb = (std::min(a.k1, a.w->cols) - a.k0 + 31) / 32;
  for (int64_t b0 = 0; b0 < nb; b0 += kR16L1Blocks) {
    const int64_t b1 = std::min(nb, b0 + kR16L1Blocks);
    for (int t0 = 0; t0 < a.nt; t0 += 8) {
      const int n = std::min(8, a.nt - t0);
      if (n > 4) r16_pass<8, Q8>(a, t0, n, b0, b1, b0 == 0);
      else r16_pass<4, Q8>(a, t0, n, b0, b1, b0 == 0);
    }
  }
}

inline float max16(__m512 v) {
  const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

inline int32_t hsum16(__m512i v) {
  const __m256i h = _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1));
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(h), _mm256_extracti128_si256(h, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void LUMEN_AVX512_NAME(r16_tile_avx512)(const PrefillTileArgs& a, bool corr_q8) {
  corr_q8 ? r16_tile<true>(a) : r16_tile<false>(a);
}

void LUMEN_AVX512_NAME(quantize_act_blocks_avx512)(const float* x, int64_t cols, ActBlock* out) {
  const __m512i abs_mask = _mm512_set1_epi32(0x7fffffff);
  for (int64_t b = 0; b < cols / 32; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
    const __m512 a0 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v0), abs_mask));
    const __m512 a1 = _mm512_castsi512_ps(_mm512_and_si512(_mm512_castps_si512(v1), abs_mask));
    const float amax = max16(_mm512_max_ps(a0, a1));
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m512 idv = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, idv));  // nearest even
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, idv));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q), _mm512_cvtsepi32_epi8(q0));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(out[b].q + 16), _mm512_cvtsepi32_epi8(q1));
    const int32_t sum = hsum16(_mm512_add_epi32(q0, q1));
    out[b].d = amax / 127.0f;
    out[b].neg8 = -8 * sum;
    out[b].neg128 = -128 * sum;
    out[b].unused = 0;
  }
}

}  // namespace lumen::kernels::detail

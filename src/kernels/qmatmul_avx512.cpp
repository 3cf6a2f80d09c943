// AVX-512 VNNI versions of the int8 kernels (qmatmul.h); compiled for AVX-512 F/BW/VL/VNNI
// and called only when CPUID reports them. vpdpbusd multiplies unsigned weights by signed
// activations and adds into int32 lanes without saturation; the accumulator starts at the
// activation lanes' correction (-8 x sum for Q4 nibbles, -128 x sum for Q8 stored as q+128).
// GCC 12's AVX-512 intrinsics (cvtph, permutexvar, extract) start from _mm512_undefined_*
// and trip -Wuninitialized falsely once inlined; the warning says nothing about this file.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/qmatmul.h"
#include "quant/repack.h"

namespace lumen::kernels::detail {
namespace {

// Horizontal reductions by halves (GCC 12's _mm512_reduce_* warn falsely under -Wall).
inline float sum16(__m512 v) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}
inline float max16(__m512 v) {
  const __m256 h = _mm256_max_ps(_mm512_castps512_ps256(v),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(v), 1)));
  __m128 s = _mm_max_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
  s = _mm_max_ps(s, _mm_movehl_ps(s, s));
  s = _mm_max_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

template <int NT, bool Q4>
void tile(const std::byte* group, int64_t chunks, const ActChunk* const* acts, float (*out)[4]) {
  const size_t chunk_bytes = Q4 ? quant::kQ4x4ChunkBytes : quant::kQ8x4ChunkBytes;
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  const __m512i flip = _mm512_set1_epi8(char(0x80));
  // Lane l of row r takes scale r * 4 + l / 4 of the chunk's 16.
  __m512i scale_index[4];
  for (int r = 0; r < 4; ++r)
    scale_index[r] = _mm512_add_epi32(_mm512_set1_epi32(r * 4),
                                      _mm512_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3, 3, 3, 3));
  __m512 acc[4][NT];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    const std::byte* ch = group + size_t(c) * chunk_bytes;
    const __m512 scales = _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ch)));
    for (int r = 0; r < 4; ++r) {
      const __m512 scale = _mm512_permutexvar_ps(scale_index[r], scales);
      __m512i wa, wb;
      if constexpr (Q4) {
        const __m512i raw = _mm512_loadu_si512(ch + 32 + r * 64);
        wa = _mm512_and_si512(raw, low4);
        wb = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
      } else {
        wa = _mm512_xor_si512(_mm512_loadu_si512(ch + 32 + r * 128), flip);
        wb = _mm512_xor_si512(_mm512_loadu_si512(ch + 32 + r * 128 + 64), flip);
      }
      for (int t = 0; t < NT; ++t) {
        const ActChunk& a = acts[t][c];
        __m512i p = _mm512_load_si512(Q4 ? a.neg8 : a.neg128);
        p = _mm512_dpbusd_epi32(p, wa, _mm512_load_si512(a.q));
        p = _mm512_dpbusd_epi32(p, wb, _mm512_load_si512(a.q + 64));
        const __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(p), _mm512_load_ps(a.dx));
        acc[r][t] = _mm512_fmadd_ps(f, scale, acc[r][t]);
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < 4; ++r) out[t][r] = sum16(acc[r][t]);
}

}  // namespace

void q4_tile_avx512(const std::byte* g, int64_t chunks, const ActChunk* const* acts, int nt, float (*out)[4]) {
  nt == 2 ? tile<2, true>(g, chunks, acts, out) : tile<1, true>(g, chunks, acts, out);
}
void q8_tile_avx512(const std::byte* g, int64_t chunks, const ActChunk* const* acts, int nt, float (*out)[4]) {
  nt == 2 ? tile<2, false>(g, chunks, acts, out) : tile<1, false>(g, chunks, acts, out);
}

void quantize_chunk_avx512(const float* x, int64_t /*valid: always 128*/, ActChunk* out) {
  for (int b = 0; b < 4; ++b) {
    const __m512 v0 = _mm512_loadu_ps(x + b * 32), v1 = _mm512_loadu_ps(x + b * 32 + 16);
    const __m512 sign = _mm512_set1_ps(-0.0f);
    const float amax = max16(_mm512_castsi512_ps(_mm512_andnot_si512(
        _mm512_castps_si512(sign), _mm512_castps_si512(_mm512_max_ps(_mm512_abs_ps(v0), _mm512_abs_ps(v1))))));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m512 idv = _mm512_set1_ps(id);
    const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, idv));
    const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, idv));
    _mm_store_si128(reinterpret_cast<__m128i*>(out->q + b * 16), _mm512_cvtsepi32_epi8(q0));
    _mm_store_si128(reinterpret_cast<__m128i*>(out->q + 64 + b * 16), _mm512_cvtsepi32_epi8(q1));
    _mm_store_ps(out->dx + b * 4, _mm_set1_ps(d));
  }
  // Lane sums: vpdpbusd of all-ones (unsigned) with the activations sums each lane's 4 bytes.
  const __m512i ones = _mm512_set1_epi8(1);
  __m512i s = _mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, _mm512_load_si512(out->q));
  s = _mm512_dpbusd_epi32(s, ones, _mm512_load_si512(out->q + 64));
  _mm512_store_si512(out->neg8, _mm512_mullo_epi32(s, _mm512_set1_epi32(-8)));
  _mm512_store_si512(out->neg128, _mm512_mullo_epi32(s, _mm512_set1_epi32(-128)));
}

}  // namespace lumen::kernels::detail

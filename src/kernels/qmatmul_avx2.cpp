// AVX2 versions of the int8 kernels (qmatmul.h); compiled with -mavx2 -mfma -mf16c and
// called only when CPUID reports them. u8 x s8 products go through vpmaddubsw, whose int16
// pair sums cannot saturate here: Q4 nibbles are <= 15, Q8 uses |w| x sign(x, w) with
// |x| <= 127, so a pair is at most 2 * 128 * 127 < 32767.
#include <immintrin.h>

#include <cmath>

#include "kernels/qmatmul.h"
#include "quant/repack.h"

namespace lumen::kernels::detail {
namespace {

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_shuffle_ps(s, s, 1));
  return _mm_cvtss_f32(s);
}

// Row r's 4 block scales of a chunk, each repeated over 4 lanes: blocks 0,1 and blocks 2,3.
inline void row_scales(const std::byte* chunk, int r, __m256& s01, __m256& s23) {
  const __m128 s4 = _mm_cvtph_ps(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(chunk + r * 8)));
  const __m256 s = _mm256_castps128_ps256(s4);
  s01 = _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(0, 0, 0, 0, 1, 1, 1, 1));
  s23 = _mm256_permutevar8x32_ps(s, _mm256_setr_epi32(2, 2, 2, 2, 3, 3, 3, 3));
}

template <int NT, bool Q4>
void tile(const std::byte* group, int64_t chunks, const ActChunk* const* acts, float (*out)[4]) {
  const size_t chunk_bytes = Q4 ? quant::kQ4x4ChunkBytes : quant::kQ8x4ChunkBytes;
  const __m256i low4 = _mm256_set1_epi8(0x0f);
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[4][NT];
  for (int r = 0; r < 4; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
  for (int64_t c = 0; c < chunks; ++c) {
    const std::byte* ch = group + size_t(c) * chunk_bytes;
    for (int r = 0; r < 4; ++r) {
      __m256 scale[2];
      row_scales(ch, r, scale[0], scale[1]);
      for (int h = 0; h < 2; ++h) {
        __m256i wa, wb;
        if constexpr (Q4) {
          const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ch + 32 + r * 64 + h * 32));
          wa = _mm256_and_si256(raw, low4);
          wb = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low4);
        } else {
          wa = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ch + 32 + r * 128 + h * 32));
          wb = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(ch + 32 + r * 128 + 64 + h * 32));
        }
        for (int t = 0; t < NT; ++t) {
          const ActChunk& a = acts[t][c];
          const __m256i xa = _mm256_load_si256(reinterpret_cast<const __m256i*>(a.q + h * 32));
          const __m256i xb = _mm256_load_si256(reinterpret_cast<const __m256i*>(a.q + 64 + h * 32));
          __m256i p;
          if constexpr (Q4) {
            p = _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(wa, xa), ones16),
                                 _mm256_madd_epi16(_mm256_maddubs_epi16(wb, xb), ones16));
            p = _mm256_add_epi32(p, _mm256_load_si256(reinterpret_cast<const __m256i*>(a.neg8 + h * 8)));
          } else {
            p = _mm256_add_epi32(
                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wa), _mm256_sign_epi8(xa, wa)), ones16),
                _mm256_madd_epi16(_mm256_maddubs_epi16(_mm256_abs_epi8(wb), _mm256_sign_epi8(xb, wb)), ones16));
          }
          const __m256 f = _mm256_mul_ps(_mm256_cvtepi32_ps(p), _mm256_load_ps(a.dx + h * 8));
          acc[r][t] = _mm256_fmadd_ps(f, scale[h], acc[r][t]);
        }
      }
    }
  }
  for (int t = 0; t < NT; ++t)
    for (int r = 0; r < 4; ++r) out[t][r] = hsum(acc[r][t]);
}

}  // namespace

void q4_tile_avx2(const std::byte* g, int64_t chunks, const ActChunk* const* acts, int nt, float (*out)[4]) {
  nt == 2 ? tile<2, true>(g, chunks, acts, out) : tile<1, true>(g, chunks, acts, out);
}
void q8_tile_avx2(const std::byte* g, int64_t chunks, const ActChunk* const* acts, int nt, float (*out)[4]) {
  nt == 2 ? tile<2, false>(g, chunks, acts, out) : tile<1, false>(g, chunks, acts, out);
}

void quantize_chunk_avx2(const float* x, int64_t /*valid: always 128*/, ActChunk* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int b = 0; b < 4; ++b) {
    const float* xb = x + b * 32;
    __m256 v[4], m = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xb + 8 * i);
      m = _mm256_max_ps(m, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_shuffle_ps(m4, m4, 1));
    const float amax = _mm_cvtss_f32(m4);
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    alignas(32) int32_t q[32];
    for (int i = 0; i < 4; ++i)
      _mm256_store_si256(reinterpret_cast<__m256i*>(q + 8 * i), _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv)));
    for (int i = 0; i < 32; ++i) out->q[(i < 16 ? 0 : 64) + b * 16 + (i % 16)] = int8_t(q[i]);
    for (int l = 0; l < 4; ++l) out->dx[b * 4 + l] = d;
  }
  for (int l = 0; l < 16; ++l) {
    int32_t s = 0;
    for (int j = 0; j < 4; ++j) s += out->q[4 * l + j] + out->q[64 + 4 * l + j];
    out->neg8[l] = -8 * s;
    out->neg128[l] = -128 * s;
  }
}

}  // namespace lumen::kernels::detail

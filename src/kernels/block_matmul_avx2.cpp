// AVX2 tiles of the block-format kernels (block_matmul_simd.h with vpmaddubsw + vpmaddwd;
// 16 registers: 2 rows x 4 tokens per sub-tile) and the AVX2 activation quantizer.
#include "kernels/block_matmul_simd.h"

namespace lumen::kernels::detail {

BlockTileFn block_tile_avx2(quant::WeightFormat format) { return simd::tile_of<2, 4>(format); }
BlockPrefillFns block_prefill_avx2(quant::WeightFormat format) { return simd::prefill_of<4, 2>(format); }

bool decode_block_row_avx2(quant::WeightFormat format, const void* row, int64_t n, int8_t* w, float* sw, float* mw) {
  using F = quant::WeightFormat;
  switch (format) {
    case F::Q4_0: simd::decode_row<F::Q4_0>(row, n, w, sw, mw); return true;
    case F::Q4_1: simd::decode_row<F::Q4_1>(row, n, w, sw, mw); return true;
    case F::Q5_0: simd::decode_row<F::Q5_0>(row, n, w, sw, mw); return true;
    case F::Q5_1: simd::decode_row<F::Q5_1>(row, n, w, sw, mw); return true;
    case F::Q8_0: simd::decode_row<F::Q8_0>(row, n, w, sw, mw); return true;
    case F::Q2_K: simd::decode_row<F::Q2_K>(row, n, w, sw, mw); return true;
    case F::Q3_K: simd::decode_row<F::Q3_K>(row, n, w, sw, mw); return true;
    case F::Q4_K: simd::decode_row<F::Q4_K>(row, n, w, sw, mw); return true;
    case F::Q5_K: simd::decode_row<F::Q5_K>(row, n, w, sw, mw); return true;
    case F::Q6_K: simd::decode_row<F::Q6_K>(row, n, w, sw, mw); return true;
    case F::IQ4_NL: simd::decode_row<F::IQ4_NL>(row, n, w, sw, mw); return true;
    case F::IQ4_XS: simd::decode_row<F::IQ4_XS>(row, n, w, sw, mw); return true;
    default: return false;
  }
}

void quantize_block_activations_avx2(const float* x, int64_t K, int8_t* q, float* d, float* half_sums,
                                     int32_t* lane_sums, int64_t group) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  const __m256i ones8 = _mm256_set1_epi8(1);
  const __m256i ones16 = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < K / group; ++g) {
    // The group's largest magnitude (max is exact, so any order gives the scalar code's value).
    __m256 m = _mm256_setzero_ps();
    for (int64_t i = g * group; i < (g + 1) * group; i += 8) m = _mm256_max_ps(m, _mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)));
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
    const float amax = _mm_cvtss_f32(m4);
    const float dx = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    for (int64_t c = g * (group / 32); c < (g + 1) * (group / 32); ++c) {
      const float* v = x + 32 * c;
      constexpr int kRound = _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC;
      const __m256i i0 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v), idv), kRound));
      const __m256i i1 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + 8), idv), kRound));
      const __m256i i2 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + 16), idv), kRound));
      const __m256i i3 = _mm256_cvtps_epi32(_mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(v + 24), idv), kRound));
      // packs interleave the 128-bit lanes; the permute puts the 32 bytes back in order.
      const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(i0, i1), _mm256_packs_epi32(i2, i3));
      const __m256i qv = _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + 32 * c), qv);
      d[c] = dx;
      const __m256i lanes = _mm256_madd_epi16(_mm256_maddubs_epi16(ones8, qv), ones16);
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(lane_sums + 8 * c), lanes);
      alignas(32) int32_t l[8];
      _mm256_store_si256(reinterpret_cast<__m256i*>(l), lanes);
      half_sums[2 * c] = dx * float(l[0] + l[1] + l[2] + l[3]);
      half_sums[2 * c + 1] = dx * float(l[4] + l[5] + l[6] + l[7]);
    }
  }
}

}  // namespace lumen::kernels::detail

// AVX2 pieces of the prefill machinery (prefill.h): the R16 tile for Q4 weights and the
// ActBlock quantizer. Compiled with -mavx2 -mfma -mf16c; called only when CPUID says so.
//
// Without VNNI the int8 dot is vpmaddubsw (u8 x s8 -> pairs summed into int16) then vpmaddwd
// with ones (-> int32). Q4 weights are <= 15 and activations |q| <= 127, so a pair is at most
// 3810 and the 8 steps of a block (j = 0..7) can be summed in int16 (<= 30480) before the one
// vpmaddwd per block: 8 maddubs + 7 adds + 1 madd per 8 rows x 32 columns x token.
#include <immintrin.h>

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

// All 16 rows of the slab (two ymm of 8) against tokens t0 .. t0 + n - 1 (NT computed, the
// missing ones repeat the last token and are not stored) over the slab's blocks [b0, b1),
// continuing the sums in a.out unless `first`. Each broadcast activation dword serves both
// halves; j runs outside the tokens so their int16 sums are independent chains.
template <int NT>
void r16_pass(const PrefillTileArgs& a, int t0, int n, int64_t b0, int64_t b1, bool first) {
  const int64_t kb0 = a.k0 / 32;
  const ActBlock* act[NT];
  #pragma GCC unroll 16
  for (int t = 0; t < NT; ++t)
    act[t] = reinterpret_cast<const ActBlock*>(a.act + size_t(t0 + std::min(t, n - 1)) * a.act_stride) + kb0;
  const __m256i ones = _mm256_set1_epi16(1);
  __m256 acc[NT][2];
  #pragma GCC unroll 16
  for (int t = 0; t < NT; ++t) {
    const bool load = !first && t < n;
    acc[t][0] = load ? _mm256_loadu_ps(a.out + (t0 + t) * kR16Rows) : _mm256_setzero_ps();
    acc[t][1] = load ? _mm256_loadu_ps(a.out + (t0 + t) * kR16Rows + 8) : _mm256_setzero_ps();
  }
  for (int64_t kb = b0; kb < b1; ++kb) {
    const std::byte* blk = a.scratch + size_t(kb) * kR16BlockBytes;
    __m256i s16[NT][2];
    #pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) {
      const __m256i w0 = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + j * 64));
      const __m256i w1 = _mm256_load_si256(reinterpret_cast<const __m256i*>(blk + j * 64 + 32));
      #pragma GCC unroll 16
      for (int t = 0; t < NT; ++t) {
        const __m256i x = _mm256_set1_epi32(dword_at(act[t][kb].q + 4 * j));
        const __m256i p0 = _mm256_maddubs_epi16(w0, x), p1 = _mm256_maddubs_epi16(w1, x);
        s16[t][0] = j == 0 ? p0 : _mm256_add_epi16(s16[t][0], p0);
        s16[t][1] = j == 0 ? p1 : _mm256_add_epi16(s16[t][1], p1);
      }
    }
    #pragma GCC unroll 16
    for (int t = 0; t < NT; ++t) {
      const ActBlock& x = act[t][kb];
      const __m256i corr = _mm256_set1_epi32(x.neg8);
      const __m256 dx = _mm256_set1_ps(x.d);
      #pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256 dw = _mm256_load_ps(reinterpret_cast<const float*>(blk + 512 + h * 32));
        const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(s16[t][h], ones), corr);
        acc[t][h] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(sum), _mm256_mul_ps(dw, dx), acc[t][h]);
      }
    }
  }
  for (int t = 0; t < n; ++t) {
    _mm256_storeu_ps(a.out + (t0 + t) * kR16Rows, acc[t][0]);
    _mm256_storeu_ps(a.out + (t0 + t) * kR16Rows + 8, acc[t][1]);
  }
}

inline int32_t hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4e));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xb1));
  return _mm_cvtsi128_si32(s);
}

}  // namespace

void r16_tile_avx2(const PrefillTileArgs& a) {
  constexpr int kPass = 2;  // 16 rows x 2 tokens: 4 int16 sums + 4 accumulators + 2 weight vectors
  // Blocks in L1-sized runs (9 KiB of prepared weights, the tile's activations of the run
  // beside them) that every pass of tokens goes over before the next run: the weights come
  // from L1, not L2, for all but the first pass. The sums carry over in a.out.
  const int64_t nb = (std::min(a.k1, a.w->cols) - a.k0 + 31) / 32;
  for (int64_t b0 = 0; b0 < nb; b0 += kR16L1Blocks)
    for (int t0 = 0; t0 < a.nt; t0 += kPass)
      r16_pass<kPass>(a, t0, std::min(kPass, a.nt - t0), b0, std::min(nb, b0 + kR16L1Blocks), b0 == 0);
}

void quantize_act_blocks_avx2(const float* x, int64_t cols, ActBlock* out) {
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t b = 0; b < cols / 32; ++b) {
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
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    const __m256 idv = _mm256_set1_ps(id);
    __m256i q[4];
    for (int i = 0; i < 4; ++i) q[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], idv));  // nearest even
    const int32_t sum = hsum_epi32(_mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3])));
    // int32 -> int8 (no saturation: |q| <= 127); the packs interleave 128-bit lanes, the
    // permute puts the dwords back in order.
    const __m256i p16a = _mm256_packs_epi32(q[0], q[1]), p16b = _mm256_packs_epi32(q[2], q[3]);
    const __m256i p8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p16a, p16b),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out[b].q), p8);
    out[b].d = amax / 127.0f;
    out[b].neg8 = -8 * sum;
    out[b].neg128 = -128 * sum;
    out[b].unused = 0;
  }
}

}  // namespace lumen::kernels::detail

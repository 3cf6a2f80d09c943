// AVX2 expansion of ggml blocks (layouts in quant/ggml_blocks.h). Each value is computed as
// the reference computes it: d * q for the 32-element formats, d1 * q - m1 with d1 = d * sc
// and m1 = dmin * m for Q4_K, (d * sc) * q for Q6_K, with separate multiplies and subtracts
// (no FMA), so results are bit-identical.
#include <immintrin.h>

#include <cstring>

#include "base/dtype.h"
#include "kernels/ggml_dequant.h"
#include "quant/ggml_blocks.h"

namespace lumen::kernels::detail {
namespace {

using quant::WeightFormat;

inline float half_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// 8 unsigned bytes -> 8 floats of (byte - bias).
inline __m256 u8_minus(__m128i bytes8, __m256i bias) {
  return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_cvtepu8_epi32(bytes8), bias));
}

void q8_0(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(half_at(b));
  for (int k = 0; k < 4; ++k) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b + 2 + 8 * k));
    _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
  }
}

void q4_0(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(half_at(b));
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 2));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i lo = _mm_and_si128(qs, mask);
  const __m128i hi = _mm_and_si128(_mm_srli_epi16(qs, 4), mask);
  const __m256i bias = _mm256_set1_epi32(8);
  _mm256_storeu_ps(y + 0, _mm256_mul_ps(u8_minus(lo, bias), d));
  _mm256_storeu_ps(y + 8, _mm256_mul_ps(u8_minus(_mm_srli_si128(lo, 8), bias), d));
  _mm256_storeu_ps(y + 16, _mm256_mul_ps(u8_minus(hi, bias), d));
  _mm256_storeu_ps(y + 24, _mm256_mul_ps(u8_minus(_mm_srli_si128(hi, 8), bias), d));
}

void q5_0(const uint8_t* b, float* y) {
  const __m256 d = _mm256_set1_ps(half_at(b));
  uint32_t qh;
  std::memcpy(&qh, b + 2, 4);
  const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 6));
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m128i nibbles[2] = {_mm_and_si128(qs, mask), _mm_and_si128(_mm_srli_epi16(qs, 4), mask)};
  const __m256i lanes = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
  const __m256i bits = _mm256_set1_epi32(int(qh));
  const __m256i one = _mm256_set1_epi32(1);
  const __m256i bias = _mm256_set1_epi32(16);
  for (int k = 0; k < 4; ++k) {  // elements 8k .. 8k+7; the fifth bit of element j is bit j of qh
    const __m128i src = (k & 1) ? _mm_srli_si128(nibbles[k >> 1], 8) : nibbles[k >> 1];
    const __m256i high = _mm256_slli_epi32(
        _mm256_and_si256(_mm256_srlv_epi32(bits, _mm256_add_epi32(lanes, _mm256_set1_epi32(8 * k))), one), 4);
    const __m256i q = _mm256_sub_epi32(_mm256_or_si256(_mm256_cvtepu8_epi32(src), high), bias);
    _mm256_storeu_ps(y + 8 * k, _mm256_mul_ps(_mm256_cvtepi32_ps(q), d));
  }
}

void q4_k(const uint8_t* b, float* y) {
  const float d = half_at(b);
  const float dmin = half_at(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  const __m128i mask = _mm_set1_epi8(0x0F);
  const __m256i zero = _mm256_setzero_si256();
  for (int is = 0; is < 8; is += 2, q += 32, y += 64) {
    uint8_t sc, m;
    quant::ggml_k_scale_min(is, scales, &sc, &m);
    const __m256 d1 = _mm256_set1_ps(d * float(sc)), m1 = _mm256_set1_ps(dmin * float(m));
    quant::ggml_k_scale_min(is + 1, scales, &sc, &m);
    const __m256 d2 = _mm256_set1_ps(d * float(sc)), m2 = _mm256_set1_ps(dmin * float(m));
    for (int h = 0; h < 2; ++h) {
      const __m128i bytes = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * h));
      const __m128i lo = _mm_and_si128(bytes, mask);
      const __m128i hi = _mm_and_si128(_mm_srli_epi16(bytes, 4), mask);
      for (int half = 0; half < 2; ++half) {
        const int off = 16 * h + 8 * half;
        const __m128i l8 = half ? _mm_srli_si128(lo, 8) : lo;
        const __m128i h8 = half ? _mm_srli_si128(hi, 8) : hi;
        _mm256_storeu_ps(y + off, _mm256_sub_ps(_mm256_mul_ps(d1, u8_minus(l8, zero)), m1));
        _mm256_storeu_ps(y + 32 + off, _mm256_sub_ps(_mm256_mul_ps(d2, u8_minus(h8, zero)), m2));
      }
    }
  }
}

void q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = half_at(b + 208);
  const __m256i mask4 = _mm256_set1_epi32(0x0F), mask2 = _mm256_set1_epi32(3), bias = _mm256_set1_epi32(32);
  for (int n = 0; n < 256; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; l += 8) {
      const int is = l / 16;
      const __m256i a = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql + l)));
      const __m256i c = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(ql + l + 32)));
      const __m256i h = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(qh + l)));
      auto combine = [&](__m256i low4, int shift) {
        const __m256i high2 = _mm256_and_si256(_mm256_srli_epi32(h, shift), mask2);
        return _mm256_cvtepi32_ps(_mm256_sub_epi32(_mm256_or_si256(low4, _mm256_slli_epi32(high2, 4)), bias));
      };
      const __m256 q1 = combine(_mm256_and_si256(a, mask4), 0);
      const __m256 q2 = combine(_mm256_and_si256(c, mask4), 2);
      const __m256 q3 = combine(_mm256_srli_epi32(a, 4), 4);
      const __m256 q4 = combine(_mm256_srli_epi32(c, 4), 6);
      _mm256_storeu_ps(y + l + 0, _mm256_mul_ps(_mm256_set1_ps(d * float(sc[is + 0])), q1));
      _mm256_storeu_ps(y + l + 32, _mm256_mul_ps(_mm256_set1_ps(d * float(sc[is + 2])), q2));
      _mm256_storeu_ps(y + l + 64, _mm256_mul_ps(_mm256_set1_ps(d * float(sc[is + 4])), q3));
      _mm256_storeu_ps(y + l + 96, _mm256_mul_ps(_mm256_set1_ps(d * float(sc[is + 6])), q4));
    }
  }
}

template <void (*Block)(const uint8_t*, float*), int64_t Elems, size_t Bytes>
void each_block(const void* row, int64_t n, float* out) {
  const auto* b = static_cast<const uint8_t*>(row);
  for (int64_t i = 0; i < n; i += Elems, b += Bytes, out += Elems) Block(b, out);
}

}  // namespace

bool dequantize_row_avx2(WeightFormat format, const void* row, int64_t n, float* out) {
  switch (format) {
    case WeightFormat::Q8_0: each_block<q8_0, 32, sizeof(quant::BlockQ8_0)>(row, n, out); return true;
    case WeightFormat::Q4_0: each_block<q4_0, 32, sizeof(quant::BlockQ4_0)>(row, n, out); return true;
    case WeightFormat::Q5_0: each_block<q5_0, 32, sizeof(quant::BlockQ5_0)>(row, n, out); return true;
    case WeightFormat::Q4_K: each_block<q4_k, 256, sizeof(quant::BlockQ4_K)>(row, n, out); return true;
    case WeightFormat::Q6_K: each_block<q6_k, 256, sizeof(quant::BlockQ6_K)>(row, n, out); return true;
    default: return false;
  }
}

}  // namespace lumen::kernels::detail

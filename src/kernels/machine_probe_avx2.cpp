#include <immintrin.h>

#include "kernels/machine_probe.h"

namespace lumen::kernels::detail {

uint64_t read_sum_avx2(const void* data, size_t bytes) {
  const auto* p = static_cast<const __m256i*>(data);
  __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
  for (size_t i = 0; i + 4 <= bytes / 32; i += 4) {
    a = _mm256_add_epi64(a, _mm256_load_si256(p + i));
    b = _mm256_add_epi64(b, _mm256_load_si256(p + i + 1));
    c = _mm256_add_epi64(c, _mm256_load_si256(p + i + 2));
    d = _mm256_add_epi64(d, _mm256_load_si256(p + i + 3));
  }
  a = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
  alignas(32) uint64_t out[4];
  _mm256_store_si256(reinterpret_cast<__m256i*>(out), a);
  return out[0] + out[1] + out[2] + out[3];
}

double int8_macs_avx2(long iterations, int* sink) {
  // vpmaddubsw + vpmaddwd + vpaddd: 32 MACs per 3 instructions, 12 independent chains.
  __m256i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm256_set1_epi32(i);
  __m256i w = _mm256_set1_epi8(3), x = _mm256_set1_epi8(5);
  const __m256i ones = _mm256_set1_epi16(1);
  __asm__ volatile("" : "+x"(w), "+x"(x));
  for (long it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i)
      acc[i] = _mm256_add_epi32(acc[i], _mm256_madd_epi16(_mm256_maddubs_epi16(w, x), ones));
  __m256i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm256_xor_si256(s, acc[i]);
  *sink = _mm256_extract_epi32(s, 0);
  return double(iterations) * 12 * 32;
}

}  // namespace lumen::kernels::detail

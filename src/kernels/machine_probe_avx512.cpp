#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "kernels/machine_probe.h"

namespace lumen::kernels::detail {

uint64_t read_sum_avx512(const void* data, size_t bytes) {
  const auto* p = static_cast<const std::byte*>(data);
  __m512i a = _mm512_setzero_si512(), b = a, c = a, d = a;
  for (size_t i = 0; i + 256 <= bytes; i += 256) {
    a = _mm512_add_epi64(a, _mm512_load_si512(p + i));
    b = _mm512_add_epi64(b, _mm512_load_si512(p + i + 64));
    c = _mm512_add_epi64(c, _mm512_load_si512(p + i + 128));
    d = _mm512_add_epi64(d, _mm512_load_si512(p + i + 192));
  }
  a = _mm512_add_epi64(_mm512_add_epi64(a, b), _mm512_add_epi64(c, d));
  alignas(64) uint64_t out[8];
  _mm512_store_si512(out, a);
  uint64_t s = 0;
  for (uint64_t v : out) s += v;
  return s;
}

double int8_macs_avx512(long iterations, int* sink) {
  // 12 independent vpdpbusd chains (more than latency x throughput), 64 MACs each.
  __m512i acc[12];
  for (int i = 0; i < 12; ++i) acc[i] = _mm512_set1_epi32(i);
  __m512i w = _mm512_set1_epi8(3), x = _mm512_set1_epi8(5);
  __asm__ volatile("" : "+v"(w), "+v"(x));
  for (long it = 0; it < iterations; ++it)
    for (int i = 0; i < 12; ++i) acc[i] = _mm512_dpbusd_epi32(acc[i], w, x);
  __m512i s = acc[0];
  for (int i = 1; i < 12; ++i) s = _mm512_xor_si512(s, acc[i]);
  alignas(64) int32_t out[16];
  _mm512_store_si512(out, s);
  *sink = out[0];
  return double(iterations) * 12 * 64;
}

}  // namespace lumen::kernels::detail

// AVX-512 VNNI decode kernel for Q4_0X4 (qmatmul_decode.h). Per 128-column chunk of a row
// group: 8 vpdpbusd (4 rows x 2 nibble halves, each started at the activations' -8 x lane-sum
// correction), an in-lane 4x4 transpose-add that leaves lane b*4 + r = row r's exact integer
// sum over block b, then one convert, one scale product (weight scales permuted to that lane
// order, times the activation block scales) and one FMA. Compiled for AVX-512 F/BW/VL/VNNI.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>
#include <algorithm>
#include <cstdlib>

#include "kernels/qmatmul_decode.h"
#include "quant/repack.h"

namespace lumen::kernels::detail {
namespace {

constexpr size_t kChunkBytes = quant::kQ4x4ChunkBytes;  // 288
// Software prefetch distance: 16 chunks (4.6 KB) ahead of the one being read, on top of the
// hardware prefetcher. On the shared machine 0, 2, 6 and 16 chunks could not be told apart
// (decode is DRAM-bound there); LUMEN_DECODE_PREFETCH_CHUNKS=N overrides it (0 = none) so a
// quiet machine can settle it.
size_t prefetch_bytes() {
  const char* e = std::getenv("LUMEN_DECODE_PREFETCH_CHUNKS");
  const long chunks = e && *e ? std::strtol(e, nullptr, 10) : 16;
  return size_t(std::clamp(chunks, 0L, 256L)) * kChunkBytes;
}

// Row r's 16 int32 lanes (lane l: 4 products of block l/4) for one chunk.
inline void row_products(const std::byte* ch, const __m512i a_lo, const __m512i a_hi, const __m512i corr,
                         __m512i p[4]) {
  const __m512i low4 = _mm512_set1_epi8(0x0f);
  for (int r = 0; r < 4; ++r) {
    const __m512i raw = _mm512_loadu_si512(ch + 32 + r * 64);
    const __m512i wa = _mm512_and_si512(raw, low4);
    const __m512i wb = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low4);
    p[r] = _mm512_dpbusd_epi32(_mm512_dpbusd_epi32(corr, wa, a_lo), wb, a_hi);
  }
}

// In each 128-bit lane (one block) sum each row's 4 int32 lanes: lane b*4 + r = row r, block b.
inline __m512i block_sums(const __m512i p[4]) {
  const __m512i u01 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[0], p[1]), _mm512_unpackhi_epi32(p[0], p[1]));
  const __m512i u23 = _mm512_add_epi32(_mm512_unpacklo_epi32(p[2], p[3]), _mm512_unpackhi_epi32(p[2], p[3]));
  return _mm512_add_epi32(_mm512_unpacklo_epi64(u01, u23), _mm512_unpackhi_epi64(u01, u23));
}

// The chunk's 16 f16 weight scales are stored [row][block]; the sums are [block][row].
inline __m512i scale_order() { return _mm512_setr_epi32(0, 4, 8, 12, 1, 5, 9, 13, 2, 6, 10, 14, 3, 7, 11, 15); }

inline void prefetch_chunk(const std::byte* p) {
  const char* c = reinterpret_cast<const char*>(p);
  _mm_prefetch(c, _MM_HINT_T0);
  _mm_prefetch(c + 64, _MM_HINT_T0);
  _mm_prefetch(c + 128, _MM_HINT_T0);
  _mm_prefetch(c + 192, _MM_HINT_T0);
  _mm_prefetch(c + 256, _MM_HINT_T0);
}

// One chunk: acc += (integer block sums) * d_w * d_x.
inline __m512 chunk_step(const std::byte* ch, const ActChunk& a, __m512i order, __m512 acc) {
  __m512i p[4];
  row_products(ch, _mm512_load_si512(a.q), _mm512_load_si512(a.q + 64), _mm512_load_si512(a.neg8), p);
  const __m512i sums = block_sums(p);
  const __m512 dw = _mm512_permutexvar_ps(
      order, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(ch))));
  // ActChunk::dx lane l holds block l / 4's scale: the same lane order as the sums.
  return _mm512_fmadd_ps(_mm512_cvtepi32_ps(sums), _mm512_mul_ps(dw, _mm512_load_ps(a.dx)), acc);
}

// Lanes b*4 + r summed over b: the 4 rows' results.
inline __m128 rows_of(__m512 acc) {
  const __m256 h = _mm256_add_ps(_mm512_castps512_ps256(acc),
                                 _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc), 1)));
  return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

inline __m128 group_dot(const std::byte* group, int64_t chunks, const ActChunk* act, __m512i order,
                        size_t prefetch_ahead) {
  // Two accumulators (even / odd chunks) so consecutive FMAs do not wait on each other.
  __m512 acc0 = _mm512_setzero_ps(), acc1 = _mm512_setzero_ps();
  int64_t c = 0;
  for (; c + 2 <= chunks; c += 2) {
    const std::byte* ch = group + size_t(c) * kChunkBytes;
    if (prefetch_ahead) {
      prefetch_chunk(ch + prefetch_ahead);
      prefetch_chunk(ch + prefetch_ahead + kChunkBytes);
    }
    acc0 = chunk_step(ch, act[c], order, acc0);
    acc1 = chunk_step(ch + kChunkBytes, act[c + 1], order, acc1);
  }
  if (c < chunks) acc0 = chunk_step(group + size_t(c) * kChunkBytes, act[c], order, acc0);
  return rows_of(_mm512_add_ps(acc0, acc1));
}

}  // namespace

void q4_decode_groups_avx512(const std::byte* base, int64_t chunks, const ActChunk* act, int64_t g0, int64_t g1,
                             int64_t rows, float* y) {
  const size_t group_bytes = size_t(chunks) * kChunkBytes;
  const __m512i order = scale_order();
  // Read on first use, not at static initialization: this file is compiled for AVX-512, and an
  // initializer here runs on every CPU (unoptimized builds emit AVX-512 for it: SIGILL at start).
  static const size_t prefetch_ahead = prefetch_bytes();
  for (int64_t g = g0; g < g1; ++g) {
    const __m128 r4 = group_dot(base + size_t(g) * group_bytes, chunks, act, order, prefetch_ahead);
    if (g * 4 + 4 <= rows) {
      _mm_storeu_ps(y + g * 4, r4);
    } else {
      alignas(16) float tmp[4];
      _mm_store_ps(tmp, r4);
      for (int64_t r = 0; g * 4 + r < rows; ++r) y[g * 4 + r] = tmp[r];
    }
  }
}

void q4_decode_block_sums_avx512(const std::byte* group, int64_t chunks, const ActChunk* act, int32_t* out) {
  for (int64_t c = 0; c < chunks; ++c) {
    const ActChunk& a = act[c];
    __m512i p[4];
    row_products(group + size_t(c) * kChunkBytes, _mm512_load_si512(a.q), _mm512_load_si512(a.q + 64),
                 _mm512_load_si512(a.neg8), p);
    _mm512_storeu_si512(out + c * 16, block_sums(p));
  }
}

}  // namespace lumen::kernels::detail

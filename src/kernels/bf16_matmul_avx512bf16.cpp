// The AVX-512 BF16 tile of bf16_matmul.h: per 32 columns each row's weights are loaded once
// and each token's two planes once, then one vdpbf16ps per (row, token, plane) into that pair's
// accumulator: 4 rows x 4 tokens = 16 accumulators, 4 weight and 2 activation registers.
// Compiled for AVX-512 F/BW/VL + BF16; called only when CPUID reports AVX-512 BF16.
//
// The unit tests also compile this file through SIMDe (tests/unit/simde_avx512.cpp) as
// bf16_tile_avx512bf16_emulated.
#ifdef LUMEN_TEST_SIMDE_AVX512
#include "simde_avx512_shim.h"
#define LUMEN_BF16_TILE bf16_tile_avx512bf16_emulated
#else
#include <immintrin.h>
#define LUMEN_BF16_TILE bf16_tile_avx512bf16
#endif

#include <cstring>

#include "kernels/bf16_matmul.h"

namespace lumen::kernels::detail {
namespace {

// 32 bf16 values (memcpy: one unaligned load, and the same code on SIMDe's vector types).
inline __m512bh load_bf16x32(const uint16_t* p) {
  __m512bh v;
  std::memcpy(&v, p, 64);
  return v;
}

template <int R, int NT>
void tile_fixed(const uint16_t* w, int64_t K, const Bf16Activations& a, int64_t t0, float* y, int64_t ldy) {
  __m512 acc[R][NT];
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm512_setzero_ps();
  const uint16_t* xh[NT];
  const uint16_t* xl[NT];
  for (int t = 0; t < NT; ++t) {
    xh[t] = a.hi + size_t(t0 + t) * size_t(a.K32);
    xl[t] = a.lo + size_t(t0 + t) * size_t(a.K32);
  }
  const int64_t full = K / 32 * 32;
  auto step = [&](int64_t c, const __m512bh (&wv)[R]) {
    #pragma GCC unroll 4
    for (int t = 0; t < NT; ++t) {
      const __m512bh h = load_bf16x32(xh[t] + c), l = load_bf16x32(xl[t] + c);
      #pragma GCC unroll 4
      for (int r = 0; r < R; ++r) acc[r][t] = _mm512_dpbf16_ps(_mm512_dpbf16_ps(acc[r][t], wv[r], h), wv[r], l);
    }
  };
  for (int64_t c = 0; c < full; c += 32) {
    __m512bh wv[R];
    #pragma GCC unroll 4
    for (int r = 0; r < R; ++r) wv[r] = load_bf16x32(w + size_t(r) * size_t(K) + c);
    step(c, wv);
  }
  if (full < K) {  // the last, partial 32 columns: the row's tail zero padded, as the activations are
    __m512bh wv[R];
    for (int r = 0; r < R; ++r) {
      uint16_t tail[32] = {};
      std::memcpy(tail, w + size_t(r) * size_t(K) + full, size_t(K - full) * 2);
      wv[r] = load_bf16x32(tail);
    }
    step(full, wv);
  }
  for (int r = 0; r < R; ++r)
    for (int t = 0; t < NT; ++t) {
      alignas(64) float lanes[16];
      _mm512_store_ps(lanes, acc[r][t]);
      y[(t0 + t) * ldy + r] = reduce_bf16_lanes(lanes);
    }
}

template <int R>
void tile_rows(const uint16_t* w, int64_t K, const Bf16Activations& a, int64_t t0, int nt, float* y, int64_t ldy) {
  switch (nt) {
    case 4: return tile_fixed<R, 4>(w, K, a, t0, y, ldy);
    case 3: return tile_fixed<R, 3>(w, K, a, t0, y, ldy);
    case 2: return tile_fixed<R, 2>(w, K, a, t0, y, ldy);
    default: return tile_fixed<R, 1>(w, K, a, t0, y, ldy);
  }
}

}  // namespace

void LUMEN_BF16_TILE(const uint16_t* w, int64_t K, int nr, const Bf16Activations& a, int64_t t0, int nt, float* y,
                     int64_t ldy) {
  if (nr == 4) return tile_rows<4>(w, K, a, t0, nt, y, ldy);
  for (int r = 0; r < nr; ++r) tile_rows<1>(w + size_t(r) * size_t(K), K, a, t0, nt, y + r, ldy);
}

}  // namespace lumen::kernels::detail

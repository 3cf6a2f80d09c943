// AVX2+FMA versions of elementwise ops (ops.h); compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cmath>

#include "kernels/ops.h"

namespace lumen::kernels::detail {
namespace {

// e^x for x in [-87, 87]: x = n ln2 + r, |r| <= ln2/2, e^r by a degree-6 polynomial
// (Taylor coefficients; relative error ~2e-7), times 2^n built in the exponent bits.
inline __m256 exp_avx2(__m256 x) {
  x = _mm256_max_ps(_mm256_min_ps(x, _mm256_set1_ps(87.0f)), _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.0f / 720);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 120));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 24));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f / 6));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(0.5f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.0f));
  const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(e));
}

}  // namespace

void gated_gelu_avx2(const float* gate, const float* up, int64_t n, float* out) {
  const __m256 k1 = _mm256_set1_ps(-2.0f * 0.7978845608028654f);
  const __m256 k3 = _mm256_set1_ps(-2.0f * 0.7978845608028654f * 0.044715f);
  const __m256 one = _mm256_set1_ps(1.0f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    // -2u = g * (k1 + k3 g^2); gelu = g / (1 + e^{-2u})
    const __m256 m2u = _mm256_mul_ps(g, _mm256_fmadd_ps(_mm256_mul_ps(g, g), k3, k1));
    const __m256 gelu = _mm256_div_ps(g, _mm256_add_ps(one, exp_avx2(m2u)));
    _mm256_storeu_ps(out + i, _mm256_mul_ps(gelu, _mm256_loadu_ps(up + i)));
  }
  if (i < n) gated_gelu_scalar(gate + i, up + i, n - i, out + i);
}

}  // namespace lumen::kernels::detail

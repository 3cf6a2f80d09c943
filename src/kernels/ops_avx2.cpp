// AVX2+FMA versions of elementwise ops (ops.h); compiled with -mavx2 -mfma -mf16c.
#include <immintrin.h>

#include <cmath>

#include "kernels/exp_avx2.h"
#include "kernels/ops.h"

namespace lumen::kernels::detail {

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

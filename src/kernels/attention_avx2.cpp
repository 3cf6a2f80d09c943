// AVX2/F16C pieces of the attention kernels (compiled with -mavx2 -mfma -mf16c; called
// only when CPUID reports them).
#include <immintrin.h>

#include "base/dtype.h"
#include "kernels/attention.h"

namespace lumen::kernels::detail {

void scale_axpy_avx2(float c, float a, const float* x, int64_t n, float* y) {
  const __m256 vc = _mm256_set1_ps(c), va = _mm256_set1_ps(a);
  int64_t i = 0;
  if (c == 1.0f) {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
  } else {
    for (; i + 8 <= n; i += 8)
      _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_mul_ps(vc, _mm256_loadu_ps(y + i))));
    for (; i < n; ++i) y[i] = y[i] * c + a * x[i];
  }
}

void f16_to_f32_avx2(const uint16_t* src, int64_t n, float* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(dst + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(src + i))));
  for (; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_avx2(const float* src, int64_t n, uint16_t* dst) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(dst + i),
                     _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
  for (; i < n; ++i) {
    // Scalar tail through F16C too, so the rounding is the same as the vector body.
    dst[i] = uint16_t(_mm_extract_epi16(_mm_cvtps_ph(_mm_set_ss(src[i]), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC), 0));
  }
}

}  // namespace lumen::kernels::detail

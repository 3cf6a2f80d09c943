// AVX2/F16C pieces of the attention kernels (compiled with -mavx2 -mfma -mf16c; called
// only when CPUID reports them).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

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

namespace lumen::kernels::detail {
namespace {

// e^x for x <= 0 (scores minus their max), 8 at a time: range reduction to x = n ln2 + r,
// a degree-6 polynomial for e^r, and 2^n built in the exponent bits. Relative error ~1e-7.
inline __m256 exp_nonpositive(__m256 x) {
  x = _mm256_max_ps(x, _mm256_set1_ps(-87.0f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.3981999507e-3f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  const __m256 r2 = _mm256_mul_ps(r, r);
  p = _mm256_fmadd_ps(p, r2, _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
  const __m256i bits = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(p, _mm256_castsi256_ps(bits));
}

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

inline float dot(const float* a, const float* b, int64_t n) {
  __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    s2 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 16), _mm256_loadu_ps(b + i + 16), s2);
    s3 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 24), _mm256_loadu_ps(b + i + 24), s3);
  }
  for (; i < n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
  return hsum(_mm256_add_ps(_mm256_add_ps(s0, s1), _mm256_add_ps(s2, s3)));
}

// acc[0..8*NB) = acc * c + sum_j w[j] * v[j][0..8*NB), accumulators held in registers.
template <int NB>
inline void weighted_rows(float c, const float* w, int32_t count, const float* v, int64_t stride, float* acc) {
  __m256 a[NB];
  const __m256 vc = _mm256_set1_ps(c);
  for (int b = 0; b < NB; ++b) a[b] = _mm256_mul_ps(vc, _mm256_loadu_ps(acc + 8 * b));
  for (int32_t j = 0; j < count; ++j) {
    const __m256 wj = _mm256_set1_ps(w[j]);
    const float* row = v + int64_t(j) * stride;
    for (int b = 0; b < NB; ++b) a[b] = _mm256_fmadd_ps(wj, _mm256_loadu_ps(row + 8 * b), a[b]);
  }
  for (int b = 0; b < NB; ++b) _mm256_storeu_ps(acc + 8 * b, a[b]);
}

}  // namespace

void online_softmax_tile_avx2(const AttentionParams& p, const float* const* q, const int32_t* qpos, const float* k,
                              const float* v, int64_t kv_stride, int32_t first_pos, int32_t count,
                              OnlineSoftmaxState& s) {
  thread_local std::vector<float> scores;
  if (scores.size() < size_t(count) + 8) scores.resize(size_t(count) + 8);
  const int64_t hd = p.head_dim;
  const int32_t last_pos = first_pos + count - 1;
  for (int i = 0; i < s.n; ++i) {
    const int32_t lo = std::max(attention_first_visible(p, qpos[i]), first_pos);
    const int32_t hi = std::min(qpos[i], last_pos);
    if (lo > hi) continue;
    const int32_t n = hi - lo + 1;
    const float* kr = k + int64_t(lo - first_pos) * kv_stride;
    float* sc = scores.data();
    float tile_max = -std::numeric_limits<float>::infinity();
    for (int32_t j = 0; j < n; ++j) {
      float x = dot(q[i], kr + int64_t(j) * kv_stride, hd) * p.scale;
      if (p.softcap > 0.0f) x = p.softcap * std::tanh(x / p.softcap);
      sc[j] = x;
      tile_max = std::max(tile_max, x);
    }
    const float new_max = std::max(s.max[i], tile_max);
    const float correction = s.max[i] == -std::numeric_limits<float>::infinity() ? 0.0f : std::exp(s.max[i] - new_max);
    const __m256 vm = _mm256_set1_ps(new_max);
    __m256 vsum = _mm256_setzero_ps();
    int32_t j = 0;
    for (; j + 8 <= n; j += 8) {
      const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(sc + j), vm));
      _mm256_storeu_ps(sc + j, e);
      vsum = _mm256_add_ps(vsum, e);
    }
    float sum = hsum(vsum);
    for (; j < n; ++j) {
      sc[j] = std::exp(sc[j] - new_max);
      sum += sc[j];
    }
    s.sum[i] = s.sum[i] * correction + sum;
    s.max[i] = new_max;
    float* acc = s.acc + int64_t(i) * hd;
    const float* vr = v + int64_t(lo - first_pos) * kv_stride;
    int64_t d = 0;
    for (; d + 64 <= hd; d += 64) weighted_rows<8>(correction, sc, n, vr + d, kv_stride, acc + d);
    for (; d < hd; d += 8) weighted_rows<1>(correction, sc, n, vr + d, kv_stride, acc + d);
  }
}

}  // namespace lumen::kernels::detail

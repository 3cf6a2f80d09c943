// AVX2/F16C pieces of the attention kernels (compiled with -mavx2 -mfma -mf16c; called
// only when CPUID reports them).
#include <immintrin.h>

#include <algorithm>
#include <climits>
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

void int8_to_f32_avx2(const int8_t* src, float scale, int64_t n, float* dst) {
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i));
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), vs));
  }
  for (; i < n; ++i) dst[i] = float(src[i]) * scale;
}

void int4_to_f32_avx2(const uint8_t* src, float scale, int64_t n, float* dst) {
  const __m256 vs = _mm256_set1_ps(scale);
  const __m128i low = _mm_set1_epi8(0xf), eight = _mm_set1_epi8(8);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {  // 8 bytes -> 16 values
    const __m128i b = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(src + i / 2));
    // Interleave low and high nibbles so value 2k is byte k's low nibble, 2k+1 its high one.
    const __m128i lo = _mm_and_si128(b, low), hi = _mm_and_si128(_mm_srli_epi16(b, 4), low);
    const __m128i codes = _mm_sub_epi8(_mm_unpacklo_epi8(lo, hi), eight);
    _mm256_storeu_ps(dst + i, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(codes)), vs));
    _mm256_storeu_ps(dst + i + 8,
                     _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(_mm_srli_si128(codes, 8))), vs));
  }
  for (; i < n; i += 2) {
    dst[i] = float(int(src[i / 2] & 0xf) - 8) * scale;
    dst[i + 1] = float(int(src[i / 2] >> 4) - 8) * scale;
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

}  // namespace

// Queries are taken four at a time (the heads of a GQA group and neighbouring rows share
// their keys): scores come from a 4-query x 3-key register block, so each key vector loaded
// serves four queries, and the weighted sum of values from a 4-query x 16-dimension block,
// so each value vector loaded serves four too. A query's visible keys are one interval
// [a, b] of the tile; outside it its weights are exactly 0.
void online_softmax_tile_avx2(const AttentionParams& p, const float* const* q, const int32_t* qpos, const float* k,
                              const float* v, int64_t kv_stride, int32_t first_pos, int32_t count,
                              OnlineSoftmaxState& s) {
  constexpr int QB = 4, KB = 3;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  thread_local std::vector<float> weights;
  if (weights.size() < size_t(QB) * (size_t(count) + 8)) weights.resize(size_t(QB) * (size_t(count) + 8));
  const int64_t hd = p.head_dim;
  const int32_t last_pos = first_pos + count - 1;
  for (int i0 = 0; i0 < s.n; i0 += QB) {
    const int nq = std::min(QB, s.n - i0);
    int32_t a[QB], b[QB];  // visible key positions of each query within this tile
    int32_t lo = INT32_MAX, hi = INT32_MIN;
    for (int i = 0; i < nq; ++i) {
      a[i] = std::max(attention_first_visible(p, qpos[i0 + i]), first_pos);
      b[i] = std::min(qpos[i0 + i], last_pos);
      if (a[i] <= b[i]) {
        lo = std::min(lo, a[i]);
        hi = std::max(hi, b[i]);
      }
    }
    if (lo > hi) continue;
    const int32_t n = hi - lo + 1;
    const int64_t ld = n + 8;  // row stride of the weights block
    const float* kr = k + int64_t(lo - first_pos) * kv_stride;
    const float* vr = v + int64_t(lo - first_pos) * kv_stride;
    const float* qv[QB];
    for (int i = 0; i < QB; ++i) qv[i] = q[i0 + std::min(i, nq - 1)];
    float* w = weights.data();
    // Scores, 4 queries x 3 keys per block (edge blocks repeat the last row; harmless).
    for (int32_t j0 = 0; j0 < n; j0 += KB) {
      const float* kj[KB];
      for (int t = 0; t < KB; ++t) kj[t] = kr + int64_t(std::min(j0 + t, n - 1)) * kv_stride;
      // The register blocks' loops are unrolled explicitly: at -O2 GCC keeps a loop-indexed
      // accumulator array in memory, and every multiply-add became load, FMA, store (~15% of
      // the FMA peak on the 270M's prefill).
      __m256 acc[QB][KB];
      #pragma GCC unroll 4
      for (int i = 0; i < QB; ++i)
        #pragma GCC unroll 3
        for (int t = 0; t < KB; ++t) acc[i][t] = _mm256_setzero_ps();
      for (int64_t d = 0; d < hd; d += 8) {
        const __m256 k0 = _mm256_loadu_ps(kj[0] + d), k1 = _mm256_loadu_ps(kj[1] + d), k2 = _mm256_loadu_ps(kj[2] + d);
        #pragma GCC unroll 4
        for (int i = 0; i < QB; ++i) {
          const __m256 x = _mm256_loadu_ps(qv[i] + d);
          acc[i][0] = _mm256_fmadd_ps(x, k0, acc[i][0]);
          acc[i][1] = _mm256_fmadd_ps(x, k1, acc[i][1]);
          acc[i][2] = _mm256_fmadd_ps(x, k2, acc[i][2]);
        }
      }
      // All QB x KB sums, constant bounds (registers): rows past nq and columns past n land in
      // the weights block's padding (QB rows, n + 8 columns), which nothing reads.
      #pragma GCC unroll 4
      for (int i = 0; i < QB; ++i)
        #pragma GCC unroll 3
        for (int t = 0; t < KB; ++t) w[i * ld + j0 + t] = hsum(acc[i][t]);
    }
    // Per query: mask, scale, cap, running max and sum, weights.
    float correction[QB];
    for (int i = 0; i < QB; ++i) correction[i] = 1.0f;
    for (int i = 0; i < nq; ++i) {
      float* wi = w + i * ld;
      const int32_t ja = a[i] - lo, jb = b[i] - lo;
      if (ja > jb) {  // this query sees nothing here
        std::fill(wi, wi + n, 0.0f);
        continue;
      }
      float tile_max = kNegInf;
      for (int32_t j = ja; j <= jb; ++j) {
        float x = wi[j] * p.scale;
        if (p.softcap > 0.0f) x = p.softcap * std::tanh(x / p.softcap);
        wi[j] = x;
        tile_max = std::max(tile_max, x);
      }
      float& m = s.max[i0 + i];
      const float new_max = std::max(m, tile_max);
      correction[i] = m == kNegInf ? 0.0f : std::exp(m - new_max);
      const __m256 vm = _mm256_set1_ps(new_max);
      __m256 vsum = _mm256_setzero_ps();
      int32_t j = ja;
      for (; j + 8 <= jb + 1; j += 8) {
        const __m256 e = exp_nonpositive(_mm256_sub_ps(_mm256_loadu_ps(wi + j), vm));
        _mm256_storeu_ps(wi + j, e);
        vsum = _mm256_add_ps(vsum, e);
      }
      float sum = hsum(vsum);
      for (; j <= jb; ++j) {
        wi[j] = std::exp(wi[j] - new_max);
        sum += wi[j];
      }
      std::fill(wi, wi + ja, 0.0f);
      std::fill(wi + jb + 1, wi + n, 0.0f);
      s.sum[i0 + i] = s.sum[i0 + i] * correction[i] + sum;
      m = new_max;
    }
    // Weighted values, 4 queries x 16 dimensions per block.
    for (int i = nq; i < QB; ++i) std::fill(w + i * ld, w + i * ld + n, 0.0f);
    float dummy[16] = {};
    for (int64_t d = 0; d < hd; d += 16) {
      const bool two = d + 16 <= hd;  // head dims are multiples of 8
      float* out[QB];
      for (int i = 0; i < QB; ++i) out[i] = i < nq ? s.acc + int64_t(i0 + i) * hd + d : dummy;
      __m256 acc0[QB], acc1[QB];
      #pragma GCC unroll 4
      for (int i = 0; i < QB; ++i) {
        const __m256 c = _mm256_set1_ps(correction[i]);
        acc0[i] = _mm256_mul_ps(c, _mm256_loadu_ps(out[i]));
        acc1[i] = two ? _mm256_mul_ps(c, _mm256_loadu_ps(out[i] + 8)) : _mm256_setzero_ps();
      }
      for (int32_t j = 0; j < n; ++j) {
        const float* row = vr + int64_t(j) * kv_stride + d;
        const __m256 v0 = _mm256_loadu_ps(row);
        const __m256 v1 = two ? _mm256_loadu_ps(row + 8) : _mm256_setzero_ps();
        #pragma GCC unroll 4
        for (int i = 0; i < QB; ++i) {
          const __m256 wj = _mm256_broadcast_ss(w + i * ld + j);
          acc0[i] = _mm256_fmadd_ps(wj, v0, acc0[i]);
          acc1[i] = _mm256_fmadd_ps(wj, v1, acc1[i]);
        }
      }
      #pragma GCC unroll 4
      for (int i = 0; i < QB; ++i) {  // rows past nq write to `dummy`
        _mm256_storeu_ps(out[i], acc0[i]);
        if (two) _mm256_storeu_ps(out[i] + 8, acc1[i]);
      }
    }
  }
}

}  // namespace lumen::kernels::detail

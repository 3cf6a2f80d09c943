#include "kernels/attention.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "base/dtype.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"

namespace lumen::kernels {
namespace {

// The AVX2 versions serve the AVX-512 level too (it includes everything they need).

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void scale_axpy(float c, float a, const float* x, int64_t n, float* y) {
  if (active_isa() != Isa::Scalar) return detail::scale_axpy_avx2(c, a, x, n, y);
  if (c == 1.0f) {
    for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = y[i] * c + a * x[i];
  }
}

float score(const AttentionParams& p, const float* q, const float* k) {
  float s = dot_f32(q, k, p.head_dim) * p.scale;
  if (p.softcap > 0.0f) s = p.softcap * std::tanh(s / p.softcap);
  return s;
}

uint16_t f32_to_f16_scalar(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t absx = x & 0x7fffffffu;
  if (absx >= 0x7f800000u) return uint16_t(sign | (absx > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (absx >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds past 65504: infinity
  if (absx < 0x38800000u) {  // below the smallest normal half: a multiple of 2^-24
    float a;
    std::memcpy(&a, &absx, 4);
    return uint16_t(sign | uint32_t(std::nearbyint(a * 16777216.0f)));
  }
  const uint32_t mant = absx & 0x7fffffu;
  const uint32_t exp = (absx >> 23) - 127 + 15;
  uint32_t h = (exp << 10) | (mant >> 13);
  const uint32_t rem = mant & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;  // nearest, ties to even
  return uint16_t(sign | h);
}

}  // namespace

void online_softmax_reset(const AttentionParams& p, OnlineSoftmaxState& s) {
  std::fill(s.max, s.max + s.n, kNegInf);
  std::fill(s.sum, s.sum + s.n, 0.0f);
  std::fill(s.acc, s.acc + int64_t(s.n) * p.head_dim, 0.0f);
}

void online_softmax_tile(const AttentionParams& p, const float* const* q, const int32_t* qpos,
                         const float* k, const float* v, int64_t kv_stride, int32_t first_pos, int32_t count,
                         OnlineSoftmaxState& s) {
  if (active_isa() != Isa::Scalar && p.head_dim % 8 == 0)
    return detail::online_softmax_tile_avx2(p, q, qpos, k, v, kv_stride, first_pos, count, s);
  thread_local std::vector<float> scores;
  if (scores.size() < size_t(count)) scores.resize(size_t(count));
  const int64_t hd = p.head_dim;
  const int32_t last_pos = first_pos + count - 1;
  for (int i = 0; i < s.n; ++i) {
    const int32_t lo = std::max(attention_first_visible(p, qpos[i]), first_pos);
    const int32_t hi = std::min(qpos[i], last_pos);
    if (lo > hi) continue;
    float tile_max = kNegInf;
    for (int32_t pos = lo; pos <= hi; ++pos) {
      const float sc = score(p, q[i], k + int64_t(pos - first_pos) * kv_stride);
      scores[size_t(pos - lo)] = sc;
      tile_max = std::max(tile_max, sc);
    }
    const float new_max = std::max(s.max[i], tile_max);
    // exp(-inf) = 0 clears the (empty) accumulator on the first tile.
    float correction = s.max[i] == kNegInf ? 0.0f : std::exp(s.max[i] - new_max);
    float sum = s.sum[i] * correction;
    float* acc = s.acc + int64_t(i) * hd;
    for (int32_t pos = lo; pos <= hi; ++pos) {
      const float w = std::exp(scores[size_t(pos - lo)] - new_max);
      sum += w;
      scale_axpy(correction, w, v + int64_t(pos - first_pos) * kv_stride, hd, acc);
      correction = 1.0f;
    }
    s.max[i] = new_max;
    s.sum[i] = sum;
  }
}

void online_softmax_finish(const AttentionParams& p, const OnlineSoftmaxState& s, float* const* out) {
  const int64_t hd = p.head_dim;
  for (int i = 0; i < s.n; ++i) {
    const float inv = s.sum[i] > 0.0f ? 1.0f / s.sum[i] : 0.0f;
    const float* acc = s.acc + int64_t(i) * hd;
    for (int64_t d = 0; d < hd; ++d) out[i][d] = acc[d] * inv;
  }
}

void online_softmax_merge(const AttentionParams& p, const OnlineSoftmaxState* parts, int n_parts, float* const* out) {
  const int64_t hd = p.head_dim;
  const int n = n_parts > 0 ? parts[0].n : 0;
  for (int i = 0; i < n; ++i) {
    float m = kNegInf;
    for (int j = 0; j < n_parts; ++j) m = std::max(m, parts[j].max[i]);
    std::fill(out[i], out[i] + hd, 0.0f);
    if (m == kNegInf) continue;
    float total = 0.0f;
    for (int j = 0; j < n_parts; ++j) {
      if (parts[j].max[i] == kNegInf) continue;
      const float w = std::exp(parts[j].max[i] - m);
      total += parts[j].sum[i] * w;
      const float* acc = parts[j].acc + int64_t(i) * hd;
      for (int64_t d = 0; d < hd; ++d) out[i][d] += w * acc[d];
    }
    const float inv = 1.0f / total;
    for (int64_t d = 0; d < hd; ++d) out[i][d] *= inv;
  }
}

void attention_naive(const AttentionParams& p, const float* q, int32_t qpos, const float* k, const float* v,
                     int64_t kv_stride, int32_t first_pos, int32_t count, float* out) {
  const int64_t hd = p.head_dim;
  std::vector<float> scores(size_t(count), 0.0f);
  std::vector<char> visible(size_t(count), 0);
  const int32_t lo = attention_first_visible(p, qpos);
  float m = kNegInf;
  for (int32_t j = 0; j < count; ++j) {
    const int32_t pos = first_pos + j;
    if (pos < lo || pos > qpos) continue;
    visible[size_t(j)] = 1;
    scores[size_t(j)] = score(p, q, k + int64_t(j) * kv_stride);
    m = std::max(m, scores[size_t(j)]);
  }
  double total = 0;
  for (int32_t j = 0; j < count; ++j) {
    scores[size_t(j)] = visible[size_t(j)] ? std::exp(scores[size_t(j)] - m) : 0.0f;
    total += scores[size_t(j)];
  }
  std::fill(out, out + hd, 0.0f);
  if (total <= 0) return;
  for (int32_t j = 0; j < count; ++j) {
    if (!visible[size_t(j)]) continue;
    const float w = float(scores[size_t(j)] / total);
    for (int64_t d = 0; d < hd; ++d) out[d] += w * v[int64_t(j) * kv_stride + d];
  }
}

void f16_to_f32_row(const uint16_t* src, int64_t n, float* dst) {
  if (active_isa() != Isa::Scalar) return detail::f16_to_f32_avx2(src, n, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(src[i]);
}

void f32_to_f16_row(const float* src, int64_t n, uint16_t* dst) {
  if (active_isa() != Isa::Scalar) return detail::f32_to_f16_avx2(src, n, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = f32_to_f16_scalar(src[i]);
}

void int8_to_f32_row(const int8_t* src, float scale, int64_t n, float* dst) {
  if (active_isa() != Isa::Scalar) return detail::int8_to_f32_avx2(src, scale, n, dst);
  for (int64_t i = 0; i < n; ++i) dst[i] = float(src[i]) * scale;
}

void int4_to_f32_row(const uint8_t* src, float scale, int64_t n, float* dst) {
  if (active_isa() != Isa::Scalar) return detail::int4_to_f32_avx2(src, scale, n, dst);
  for (int64_t i = 0; i < n / 2; ++i) {
    dst[2 * i] = float(int(src[i] & 0xf) - 8) * scale;
    dst[2 * i + 1] = float(int(src[i] >> 4) - 8) * scale;
  }
}

}  // namespace lumen::kernels

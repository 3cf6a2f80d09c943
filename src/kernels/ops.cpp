#include "kernels/ops.h"

#include <algorithm>
#include <cmath>

#include "kernels/cpu_features.h"
#include "kernels/thread_pool.h"

namespace lumen::kernels {

void detail::rms_norm_scalar(const float* x, int64_t n, const float* w, bool offset, float eps, float* out) {
  double sum_sq = 0;
  for (int64_t i = 0; i < n; ++i) sum_sq += double(x[i]) * x[i];
  const float inv = float(1.0 / std::sqrt(sum_sq / double(n) + double(eps)));
  if (!w) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv;
  } else if (offset) {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * (1.0f + w[i]);
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * inv * w[i];
  }
}

void rms_norm(const float* x, int64_t n, const float* w, bool offset, float eps, float* out) {
  (active_isa() != Isa::Scalar ? detail::rms_norm_avx2 : detail::rms_norm_scalar)(x, n, w, offset, eps, out);
}

void rope_rotate(float* x, int64_t head_dim, int64_t pairs, const float* cos, const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t i = 0; i < pairs; ++i) {
    const float a = x[i], b = x[i + half];
    x[i] = a * cos[i] - b * sin[i];
    x[i + half] = b * cos[i] + a * sin[i];
  }
}

void rope_angles(int64_t position, const float* inv_freq, int64_t pairs, float* cos, float* sin) {
  for (int64_t i = 0; i < pairs; ++i) {
    const float angle = float(position) * inv_freq[i];
    cos[i] = float(std::cos(double(angle)));
    sin[i] = float(std::sin(double(angle)));
  }
}

float gelu_tanh(float x) {
  constexpr float kSqrt2OverPi = 0.7978845608028654f;
  return 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + 0.044715f * x * x * x)));
}

void detail::gated_gelu_scalar(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gelu_tanh(gate[i]) * up[i];
}

void gated_gelu(const float* gate, const float* up, int64_t n, float* out) {
  // A prefill's FFN activation is millions of elements: split it over the pool in pieces of
  // at least 16K so decode-sized calls stay on one thread.
  auto fn = active_isa() != Isa::Scalar ? detail::gated_gelu_avx2 : detail::gated_gelu_scalar;
  constexpr int64_t kPiece = 16384;
  const int64_t pieces = (n + kPiece - 1) / kPiece;
  if (pieces <= 1) return fn(gate, up, n, out);
  ThreadPool::global().parallel_for(pieces, [&](int64_t p0, int64_t p1) {
    const int64_t b = p0 * kPiece, e = std::min(n, p1 * kPiece);
    fn(gate + b, up + b, e - b, out + b);
  });
}

void detail::softcap_scalar(float* x, int64_t n, float cap) {
  for (int64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}

void softcap(float* x, int64_t n, float cap) {
  (active_isa() != Isa::Scalar ? detail::softcap_avx2 : detail::softcap_scalar)(x, n, cap);
}

int64_t detail::argmax_scalar(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

int64_t argmax(const float* x, int64_t n) {
  return (active_isa() != Isa::Scalar ? detail::argmax_avx2 : detail::argmax_scalar)(x, n);
}

void softmax(float* x, int64_t n) {
  if (n <= 0) return;
  const float m = *std::max_element(x, x + n);
  double sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    x[i] = std::exp(x[i] - m);
    sum += x[i];
  }
  const float inv = float(1.0 / sum);
  for (int64_t i = 0; i < n; ++i) x[i] *= inv;
}

void axpy(float a, const float* x, int64_t n, float* y) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace lumen::kernels

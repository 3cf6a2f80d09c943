// Elementwise and per-vector operations of the decoder, in f32.
#pragma once

#include <cstdint>

namespace lumen::kernels {

// out = x / sqrt(mean(x^2) + eps) * g, where g = w (Gemma 4), 1 + w (Gemma 2/3, offset=true),
// or 1 when w is null (the weightless v-norm). out may alias x.
void rms_norm(const float* x, int64_t n, const float* w, bool offset, float eps, float* out);

// Rotary embedding, non-interleaved ("rotate_half"): dimension i pairs with i + head_dim/2.
// Only the first `pairs` pairs rotate (partial RoPE); cos/sin hold `pairs` entries.
void rope_rotate(float* x, int64_t head_dim, int64_t pairs, const float* cos, const float* sin);

// cos/sin of position * inv_freq[i] for i < pairs. The angle is formed in f32, as the
// reference does, then evaluated in double precision.
void rope_angles(int64_t position, const float* inv_freq, int64_t pairs, float* cos, float* sin);

// GELU with the tanh approximation ("gelu_pytorch_tanh").
float gelu_tanh(float x);
// out[i] = gelu_tanh(gate[i]) * up[i]
void gated_gelu(const float* gate, const float* up, int64_t n, float* out);

// x = cap * tanh(x / cap), in place. SIMD versions: tanh within ~1e-6 relative (tests).
void softcap(float* x, int64_t n, float cap);

// Index of the largest of x[0 .. n), n >= 1; the lowest index wins ties (std::max_element's
// rule, also when there are NaNs: then the scalar version decides).
int64_t argmax(const float* x, int64_t n);

// In-place softmax over n scores.
void softmax(float* x, int64_t n);

// y += a * x
void axpy(float a, const float* x, int64_t n, float* y);

namespace detail {
void gated_gelu_scalar(const float* gate, const float* up, int64_t n, float* out);
// gelu_tanh(g) = g * sigmoid(2u) with u = sqrt(2/pi) (g + 0.044715 g^3), exp by polynomial:
// within 2e-6 relative of the scalar form (tests), 8 lanes at a time.
void gated_gelu_avx2(const float* gate, const float* up, int64_t n, float* out);
// Scalar references and AVX2 versions of rms_norm / softcap / argmax (ops_vec_avx2.cpp). The
// AVX2 rms_norm sums squares in double like the scalar one, in another order.
void rms_norm_scalar(const float* x, int64_t n, const float* w, bool offset, float eps, float* out);
void rms_norm_avx2(const float* x, int64_t n, const float* w, bool offset, float eps, float* out);
void softcap_scalar(float* x, int64_t n, float cap);
void softcap_avx2(float* x, int64_t n, float cap);
int64_t argmax_scalar(const float* x, int64_t n);
int64_t argmax_avx2(const float* x, int64_t n);
}  // namespace detail

}  // namespace lumen::kernels

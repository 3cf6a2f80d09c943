// Matrix products against stored weights: y[t, r] = sum_c x[t, c] * W[r, c].
// x is [T, W.cols] f32 row-major; y is [T, W.rows] f32. Each weight row is read once per
// call whatever T is, so a batch of T rows costs one pass over the weights.
#pragma once

#include <cstdint>

#include "quant/weight_matrix.h"

namespace lumen::kernels {

// The fast path: the int8 kernels where the format has them, else matmul_exact.
void matmul(const float* x, int64_t T, const quant::WeightMatrix& w, float* y);

// The exact f32 reference every fast path is tested against (`--exact`): each weight row
// expanded to f32 exactly as ggml dequantizes it (any format, the interleaved layouts
// included), then dotted with every row of x in f32. Never quantizes the activations.
void matmul_exact(const float* x, int64_t T, const quant::WeightMatrix& w, float* y);

// f32 dot product of length n (the active ISA's version).
float dot_f32(const float* a, const float* b, int64_t n);

namespace detail {
float dot_f32_scalar(const float* a, const float* b, int64_t n);
float dot_f32_avx2(const float* a, const float* b, int64_t n);
void bf16_to_f32_avx2(const uint16_t* src, int64_t n, float* dst);
}  // namespace detail

}  // namespace lumen::kernels

// Matrix products against stored weights: y[t, r] = sum_c x[t, c] * W[r, c].
// x is [T, W.cols] f32 row-major; y is [T, W.rows] f32. Each weight row is read once per
// call whatever T is, so a batch of T rows costs one pass over the weights.
#pragma once

#include <cstdint>

#include "kernels/cpu_features.h"
#include "quant/weight_matrix.h"

namespace lumen::kernels {

// Every format is reached through the kernels' format table (block_matmul.h:
// format_kernels): int8 kernels for the ggml block formats and the X4 layouts, the f32 path
// for f32/f16/bf16. In exact mode every format takes the f32 path instead.
void matmul(const float* x, int64_t T, const quant::WeightMatrix& w, float* y);

// The reference path: each weight row expanded to f32 exactly as ggml dequantizes it, then
// f32 dot products (on the given ISA's f32 code).
void matmul_expanded(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa);

// Exact mode (`--exact`, env LUMEN_EXACT=1): every matmul takes the f32 reference path, the
// one every fast path is tested against.
bool exact_matmul();
void set_exact_matmul(bool exact);

// f32 dot product of length n (the active ISA's version).
float dot_f32(const float* a, const float* b, int64_t n);

namespace detail {
float dot_f32_scalar(const float* a, const float* b, int64_t n);
float dot_f32_avx2(const float* a, const float* b, int64_t n);
void bf16_to_f32_avx2(const uint16_t* src, int64_t n, float* dst);
}  // namespace detail

}  // namespace lumen::kernels

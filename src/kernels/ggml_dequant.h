// Fast expansion of ggml block rows to f32 for the matmul (dequantize a weight row once,
// then take its dot product with every activation row). The results are bit-identical to
// quant::dequantize_ggml_row (the reference, itself identical to ggml/gguf-py): the same f32
// products in the same order, no fused multiply-add.
#pragma once

#include <cstdint>

#include "quant/weight_matrix.h"

namespace lumen::kernels {

// Expands one row of n elements with the active ISA's code where it has one for `format`;
// false when it has none (the caller falls back to the reference expansion).
bool dequantize_row_fast(quant::WeightFormat format, const void* row, int64_t n, float* out);

namespace detail {
// AVX2 versions for Q8_0, Q4_0, Q5_0, Q4_K and Q6_K; false for any other format.
bool dequantize_row_avx2(quant::WeightFormat format, const void* row, int64_t n, float* out);
}  // namespace detail

}  // namespace lumen::kernels

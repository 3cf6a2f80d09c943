// Converting a weight matrix from any readable format into a storage target: the X4 layouts
// for the int8 kernels (Q4_0X4, Q8_0X4), row-major Q4_0 / Q8_0 blocks, or plain f32 / f16 / bf16
// (exact expansion, then round to nearest even; the searching quantizers are quant/quantize.h).
#pragma once

#include <cstddef>
#include <cstdint>

#include "quant/weight_matrix.h"

namespace lumen::quant {

// Converts rows [r0, r1) of `src` into `target`, writing the bytes those rows occupy in the
// target layout to dst. For the X4 targets r0 must be a multiple of 4 and r1 a multiple of 4
// or src.rows (the padding rows of the last group are written as zeros). Row-major Q4_0 /
// Q8_0 targets need cols a multiple of 32. Source ggml Q4_0
// (Q8_0) rows go to Q4_0X4 (Q8_0X4) unchanged; anything else is expanded to f32 and
// quantized with ggml's reference block quantizer.
void convert_rows(const WeightMatrix& src, WeightFormat target, int64_t r0, int64_t r1, std::byte* dst);
// Bytes convert_rows writes for rows [r0, r1).
size_t converted_bytes(WeightFormat target, int64_t cols, int64_t r0, int64_t r1);

}  // namespace lumen::quant

// Quantizers: rows of f32 weights into ggml's block formats (the tensor types of GGUF files,
// quant/ggml_blocks.h), byte-compatible with what llama.cpp writes and reads.
//
// Each block's scale (and offset) is searched, not rounded from the block's maximum: the
// codes and scales minimise the weighted squared error sum_i w_i (x_i - x^_i)^2
// (quant/quantize_search.h). The error weights are
//   - with importance (an imatrix: per-column mean of the squared activations that meet this
//     row, so w_i tracks what an error in column i costs the layer's output):
//     w_i = importance_i * sqrt(sigma^2 + x_i^2), sigma^2 the mean square of the (super-)block,
//     the form ggml uses (Q6_K: importance_i alone, as ggml);
//   - without: a per-format default that favours large weights (x_i^2 for Q6_K and IQ4,
//     rms + |x_i| for Q4_K/Q5_K, sqrt(sigma^2 + x_i^2) for the 32-element formats).
// K-quants then quantize the sub-block scales (and offsets) to their 6- or 8-bit codes with
// the same kind of search, and refine: codes re-rounded to the stored scales, the super-block
// scales refitted by least squares, each sub-block's scale codes re-picked, for as long as
// the block's error falls.
//
// Formats written: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS, and the
// float types F32, F16, BF16 (converted, no search).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lumen::quant {

// True for the ggml types quantize_row_ggml writes.
bool ggml_can_quantize(int ggml_type);

// Quantizes one row of n values (n a multiple of the type's block size) into ggml_type blocks
// at `out` (ggml_row_bytes(ggml_type, n) bytes). `importance`: n non-negative per-column
// weights, or nullptr. Throws lumen::Error for a type it cannot write, a bad n, or a value
// that is not finite (named by its index).
void quantize_row_ggml(int ggml_type, const float* x, int64_t n, const float* importance, void* out);

}  // namespace lumen::quant

// 4-bit formats of other sources, with reference quantize/dequantize, and their 1:1 mapping
// to ggml Q4_0 blocks (so the Q4 kernels run them unchanged).
//
// Per-channel int4: one f32 scale per output row, two elements per byte (element 2i in the
// low nibble of byte i, 2i+1 in the high one). zero_point 8: the nibble is offset binary,
// w = scale * (nibble - 8). zero_point 0: the nibble is two's-complement int4 (-8..7),
// w = scale * nibble. Both cover the same 16 values, so they differ only by nibble ^ 8.
//
// LiteRT fixed-scale int4: offset binary with a fixed scale, w = (nibble - 8) * 0.0625, same
// nibble order. It is per-channel int4 with zero point 8 and scale 1/16 everywhere.
//
// Mapping to Q4_0: each 32-element block gets d = f16(scale) (exact when the scale is an f16
// value, as 0.0625 is) and the nibbles reordered to ggml's layout.
#pragma once

#include <cstdint>

namespace lumen::quant {

constexpr float kLiteRtInt4Scale = 0.0625f;

// Reference quantizer of one row of n elements (n even): scale = max|w| / 7 (symmetric, so
// the grid is -7..7 times the scale, plus -8 unused by it); nibbles to `packed` (n / 2 bytes).
// Returns the scale.
float quantize_row_int4_per_channel(const float* w, int64_t n, int zero_point, uint8_t* packed);
void dequantize_row_int4_per_channel(const uint8_t* packed, int64_t n, float scale, int zero_point, float* out);

// LiteRT's fixed-scale int4: values are rounded to the grid k/16, k in -8..7 (clamped).
void quantize_row_litert_int4(const float* w, int64_t n, uint8_t* packed);
void dequantize_row_litert_int4(const uint8_t* packed, int64_t n, float* out);

// A per-channel int4 row as ggml Q4_0 blocks (n % 32 == 0): n / 32 blocks of 18 bytes.
void int4_per_channel_row_to_q4_0(const uint8_t* packed, int64_t n, float scale, int zero_point, uint8_t* blocks);

}  // namespace lumen::quant

// Lumen's own weight layouts for the int8 kernels, and the reference quantizers that make them.
//
// Q4_0X4 and Q8_0X4 hold exactly the numbers of ggml's Q4_0 / Q8_0 (32-element blocks, one
// f16 scale each; x = d * (nibble - 8) and x = d * q), rearranged so that a SIMD kernel
// streams them with aligned-size loads and no shuffles:
//
//   * rows are padded to a multiple of 4 and interleaved in groups of 4 ("X4");
//   * columns are padded to a multiple of 128 (a "chunk" = 4 blocks); padding is zero;
//   * one chunk of one row group is
//       f16 d[4 rows][4 blocks]                               (32 bytes)
//       Q4_0X4: u8 qs[4 rows][4 blocks][16]  ggml's qs per block (256 bytes)
//               byte i of a block: low nibble = element i, high nibble = element 16 + i
//       Q8_0X4: i8 q[4 rows][2 halves][4 blocks][16]                (512 bytes)
//               half 0 = elements 0..15 of each block, half 1 = elements 16..31
//   So for one row and one chunk, the 64 low nibbles (or Q8 half 0) are elements 0..15 of
//   blocks 0..3 in order and the high nibbles (half 1) elements 16..31: 4 consecutive bytes
//   always belong to one block, which is what an int8 dot instruction sums into one lane.
//
// Google's Q4_0 checkpoints map 1:1 (q4_0_rows_to_x4 moves bytes, it does not requantize).
// Other 4-bit sources (per-channel int4, LiteRT's fixed-scale int4) are Q4_0 with every block
// of a row sharing one scale, so they map 1:1 too (int4.h).
#pragma once

#include <cstddef>
#include <cstdint>

namespace lumen::quant {

constexpr int64_t kChunk = 128;     // columns per chunk
constexpr int64_t kRowGroup = 4;    // rows interleaved together
constexpr size_t kQ4x4ChunkBytes = 32 + 4 * 64;
constexpr size_t kQ8x4ChunkBytes = 32 + 4 * 128;

inline int64_t padded_rows(int64_t rows) { return (rows + kRowGroup - 1) / kRowGroup * kRowGroup; }
inline int64_t padded_cols(int64_t cols) { return (cols + kChunk - 1) / kChunk * kChunk; }

// IEEE half, round to nearest even (what F16C's _mm_cvtps_ph with mode 0 does).
uint16_t f32_to_f16(float f);

// ggml's reference block quantizers (quantize_row_q4_0_ref / q8_0_ref): the block's
// largest-magnitude value maps to -8 (Q4) or its magnitude to 127 (Q8).
// x: 32 floats. d: the f16 scale. Q4: qs as ggml stores it. Q8: 32 int8.
void quantize_block_q4_0(const float* x, uint16_t* d, uint8_t qs[16]);
void quantize_block_q8_0(const float* x, uint16_t* d, int8_t qs[32]);

// Bytes of a [rows, cols] matrix in an X4 layout.
size_t q4_0x4_bytes(int64_t rows, int64_t cols);
size_t q8_0x4_bytes(int64_t rows, int64_t cols);

// Reference quantization of a whole f32 matrix [rows, cols] (row-major) into X4 bytes.
void quantize_q4_0x4(const float* w, int64_t rows, int64_t cols, std::byte* dst);
void quantize_q8_0x4(const float* w, int64_t rows, int64_t cols, std::byte* dst);

// Converts ggml Q4_0 / Q8_0 rows (cols % 32 == 0) to the X4 layout without requantizing.
// rows_ptrs[r] points at row r's ggml blocks.
void q4_0_rows_to_x4(const void* const* rows_ptrs, int64_t rows, int64_t cols, std::byte* dst);
void q8_0_rows_to_x4(const void* const* rows_ptrs, int64_t rows, int64_t cols, std::byte* dst);

// Writes one row group from ggml Q4_0 (18-byte) / Q8_0 (34-byte) block rows: blocks[r] for
// r < 4 points at row r's cols/32 blocks, or is null for a padding row. cols % 32 == 0.
// dst: the group's bytes (chunks * chunk bytes). For streaming writers.
void pack_group_q4_0x4(const uint8_t* const blocks[4], int64_t cols, std::byte* dst);
void pack_group_q8_0x4(const uint8_t* const blocks[4], int64_t cols, std::byte* dst);

// Reference expansion of row r of an X4 matrix to `cols` floats.
void dequantize_row_q4_0x4(const std::byte* data, int64_t rows, int64_t cols, int64_t r, float* out);
void dequantize_row_q8_0x4(const std::byte* data, int64_t rows, int64_t cols, int64_t r, float* out);

}  // namespace lumen::quant

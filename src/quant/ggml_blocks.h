// ggml's block formats (the tensor types of GGUF files) and their reference dequantization
// to f32, exactly as ggml defines it (ggml-quants.c dequantize_row_*; gguf-py's quants.py
// gives the same numbers). This file knows nothing of GGUF files: it takes a ggml type id
// (ggml's numbering, the same as formats::GgmlType) and a pointer to a row of blocks.
//
// Supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K,
// IQ4_NL, IQ4_XS.
//
// Layouts (little-endian; "f16" is an IEEE half stored as u16):
//   Q4_0  32 elems, 18 bytes: f16 d; u8 qs[16]        x = d * (nibble - 8)
//   Q4_1  32 elems, 20 bytes: f16 d, m; u8 qs[16]     x = d * nibble + m
//   Q5_0  32 elems, 22 bytes: f16 d; u32 qh; qs[16]   x = d * ((nibble | bit << 4) - 16)
//   Q5_1  32 elems, 24 bytes: f16 d, m; u32 qh; qs[16]  x = d * (nibble | bit << 4) + m
//   Q8_0  32 elems, 34 bytes: f16 d; i8 qs[32]        x = d * q
//     (32-element blocks: element j < 16 is the low nibble of qs[j], j >= 16 the high
//     nibble of qs[j - 16]; Q5 high bit of element j is bit j of qh)
//   Q4_K 256 elems, 144 bytes: f16 d, dmin; u8 scales[12]; u8 qs[128]
//   Q5_K 256 elems, 176 bytes: f16 d, dmin; u8 scales[12]; u8 qh[32]; u8 qs[128]
//     8 sub-blocks of 32 with 6-bit scale sc and 6-bit min m packed in `scales`;
//     x = d * sc * q - dmin * m
//   Q6_K 256 elems, 210 bytes: u8 ql[128]; u8 qh[64]; i8 scales[16]; f16 d
//     16 sub-blocks of 16; x = d * scale * (q6 - 32)
//   Q2_K 256 elems, 84 bytes: u8 scales[16]; u8 qs[64]; f16 d, dmin
//     16 sub-blocks of 16, scale = low nibble, min = high nibble; x = d * sc * q2 - dmin * m
//   Q3_K 256 elems, 110 bytes: u8 hmask[32]; u8 qs[64]; u8 scales[12]; f16 d
//     16 sub-blocks of 16 with 6-bit scales s (packed in `scales`);
//     x = d * (s - 32) * (q2 - (hmask bit ? 0 : 4))
//   IQ4_NL 32 elems, 18 bytes: f16 d; u8 qs[16]        x = d * kIq4nlValues[nibble]
//   IQ4_XS 256 elems, 136 bytes: f16 d; u16 scales_h; u8 scales_l[4]; u8 qs[128]
//     8 sub-blocks of 32 with 6-bit scales ls (low 4 bits in scales_l, high 2 in scales_h);
//     x = d * (ls - 32) * kIq4nlValues[nibble], nibbles as in the 32-element blocks
//
// The arithmetic is plain f32 in ggml's order (d1 = d * sc, then d1 * q - m1); the
// translation unit must not be compiled with FMA contraction (the project does not),
// or results would differ from ggml's by an ulp.
#pragma once

#include <cstddef>
#include <cstdint>

namespace lumen::quant {

// ggml type ids this file knows (ggml's numbering).
namespace ggml_type {
constexpr int F32 = 0;
constexpr int F16 = 1;
constexpr int Q4_0 = 2;
constexpr int Q4_1 = 3;
constexpr int Q5_0 = 6;
constexpr int Q5_1 = 7;
constexpr int Q8_0 = 8;
constexpr int Q2_K = 10;
constexpr int Q3_K = 11;
constexpr int Q4_K = 12;
constexpr int Q5_K = 13;
constexpr int Q6_K = 14;
constexpr int IQ4_NL = 20;
constexpr int IQ4_XS = 23;
constexpr int BF16 = 30;
}  // namespace ggml_type

constexpr int64_t kQK_K = 256;  // elements per K-quant super-block

// The 16 values a 4-bit IQ4_NL / IQ4_XS code stands for (before the block scale).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// Block structs, for documentation and for code that builds blocks (tests, quantizers).
// Decoding reads bytes, so rows need no particular alignment.
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d; uint16_t m; uint8_t qs[16]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ5_1 { uint16_t d; uint16_t m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ4_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d; uint16_t dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d; uint16_t dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };
static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22 &&
              sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ4_K) == 144 &&
              sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ2_K) == 84 &&
              sizeof(BlockQ3_K) == 110 && sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);

// Byte offsets of a block's f16 scale fields (d, then dmin / m), -1 for none: what a test or
// benchmark that fills blocks with random bytes must set to finite scales.
struct GgmlScaleFields {
  int16_t offsets[2];
};
GgmlScaleFields ggml_block_scale_fields(int ggml_type);

// True for the types dequantize_ggml_row handles.
bool ggml_can_dequantize(int ggml_type);
// "Q4_K"; "ggml type N" for a type this file does not handle.
const char* ggml_blocks_type_name(int ggml_type);
// Elements per block (1 for F32/F16/BF16). Throws lumen::Error for an unsupported type.
int64_t ggml_block_size(int ggml_type);
// Bytes per block. Throws lumen::Error for an unsupported type.
size_t ggml_block_bytes(int ggml_type);
// Bytes of a row of n elements. Throws lumen::Error for an unsupported type or when n is
// negative or not a multiple of the block size.
size_t ggml_row_bytes(int ggml_type, int64_t n);

// Expands a row of n elements (n a multiple of the block size) to f32. Throws lumen::Error
// for an unsupported type or a bad n.
void dequantize_ggml_row(int ggml_type, const void* row, int64_t n, float* out);

// The 6-bit scale and min of sub-block j (0..7) of a Q4_K/Q5_K `scales` array.
void ggml_k_scale_min(int j, const uint8_t* scales, uint8_t* scale, uint8_t* min);
// The 16 signed scales (6-bit value - 32) of a Q3_K block's 12-byte `scales` array.
void ggml_q3_k_scales(const uint8_t* scales, int8_t out[16]);
// The 6-bit scale (0..63, before the - 32) of sub-block j (0..7) of an IQ4_XS block.
int ggml_iq4_xs_scale(const uint8_t* block, int j);

}  // namespace lumen::quant

// Matrix products against ggml's block formats as they are stored (Q4_0 ... IQ4_XS), without
// expanding the weights to f32: the activations are quantized on the fly to int8 blocks of 32
// (ggml's q8_0 idea), each 32-element block of a weight row is decoded in registers to 32
// small integers plus one or two scales, and the block's product is an exact integer dot,
// scaled in f32.
//
// The canonical arithmetic (what the scalar reference computes and every ISA must match):
// a weight block b of 32 elements decodes to integers w[0..32) and, per 16-element half h,
// a scale sw[h] and a "min" mw[h] (0 for the symmetric formats), so element j of half h is
// sw[h] * w[j] + mw[h]. The activations of the same 32 columns are dx * q[j] (q int8). Then
//   row · x = sum over blocks, halves of  sw[h] * dx * I[h] + mw[h] * S[h]
// with I[h] = sum of w[j] * q[j] over the half (an exact integer) and S[h] = dx * sum of q[j]
// (precomputed per token). Only the f32 summation order differs between ISAs.
//
// The 256-element formats (K-quants, IQ4_XS) are multiplied the way their integer sub-block
// scales allow (ggml's q8_K idea): their activations share one scale per 256 columns
// (activation_group), each element is d * (sc[h] * w[j]) + mw[h] with sc an integer, and
//   row · x = sum over blocks, conversion groups g of  (d * dx) * I[g] + sum over halves mw[h] * S[h]
// with I[g] = sum of sc[h] * w[j] * q[j] over the group's elements (an exact int32: 256
// elements for Q2_K-Q5_K, 128 for Q6_K and IQ4_XS, whose larger scale x weight products would
// overflow over 256). One conversion to f32 per group instead of one per 32 elements.
//
// Formats (element values; see quant/ggml_blocks.h for the bytes):
//   Q4_0 w = nibble - 8        Q4_1 w = nibble, mw = m      Q5_0 w = 5 bits - 16
//   Q5_1 w = 5 bits, mw = m    Q8_0 w = q                   IQ4_NL w = kIq4nlValues[nibble]
//   Q2_K w = 2 bits, sc 4 bits, mw = -dmin*m per 16         Q3_K w = 3 bits - 4, sc = s - 32 per 16
//   Q4_K/Q5_K w = 4/5 bits, sc 6 bits, mw = -dmin*m per 32  Q6_K w = 6 bits - 32, sc int8 per 16
//   IQ4_XS w = kIq4nlValues[nibble], sc = ls - 32 per 32     (sw = d * sc where one scale is meant)
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "kernels/cpu_features.h"
#include "quant/weight_matrix.h"

namespace lumen::kernels {

// T tokens' activations quantized per 32-element block: per token K int8 values, K/32 scales
// dx (max|x| / 127, values rounded to nearest even: bit-identical on every ISA), K/16 half
// sums S = dx * (sum of q over 16 elements), the same over 32, and K/4 lane sums (sum of 4 consecutive q, the
// correction for weights stored with an offset).
// Split activations (Int8x2) add a second int8 plane q_lo: token t's value is then
// d * Q with Q = 256 * q + q_lo (a 16-bit integer held as two int8 planes, so the int8
// instructions still apply), and the sums below are of Q.
struct BlockActivations {
  int64_t K = 0;
  int64_t T = 0;
  // Columns sharing one scale: 32, or 256 for the formats of activation_group(); d is still
  // stored per 32 columns (equal within a group), so every kernel indexes it the same way.
  int64_t group = 32;
  int8_t* q = nullptr;           // [T, K], 64-byte aligned rows
  int8_t* q_lo = nullptr;        // [T, K] split activations' low plane; null for single int8
  // [T, K] split activations: Q itself as int16, per 32-element block elements 4l, 4l + 1
  // (l = 0..7) then 4l + 2, 4l + 3 (the prefill kernels' order, block_matmul_simd.h).
  int16_t* q16 = nullptr;
  float* d = nullptr;            // [T, K/32]
  float* half_sums = nullptr;    // [T, K/16]
  float* block_sums = nullptr;   // [T, K/32]: dx * (sum of q over the block)
  int32_t* lane_sums = nullptr;  // [T, K/4]

  const int8_t* q_of(int64_t t) const { return q + t * K; }
  const int8_t* q_lo_of(int64_t t) const { return q_lo + t * K; }
  const int16_t* q16_of(int64_t t) const { return q16 + t * K; }
  const float* d_of(int64_t t) const { return d + t * (K / 32); }
  const float* half_sums_of(int64_t t) const { return half_sums + t * (K / 16); }
  const float* block_sums_of(int64_t t) const { return block_sums + t * (K / 32); }
  const int32_t* lane_sums_of(int64_t t) const { return lane_sums + t * (K / 4); }
};

// How the block kernels quantize activations.
//   Int8:   x ~ dx * q, one int8 per element (ggml's q8_0).
//   Int8x2: x ~ dx * q + (dx / 256) * q_lo = (dx / 256) * (256 q + q_lo), q_lo the int8
//           rounding of the residual x - dx * q at the fixed finer scale dx / 256 (the residual
//           is at most dx / 2, so q_lo spans int8; clamped to +-127). Each product is
//           256 * (int8 dot of q) + (int8 dot of q_lo), combined as integers: twice the int8
//           multiply-adds of Int8, one f32 multiply-add per block as for Int8, the weights read
//           once. The activations' rounding then costs nothing measurable (Gemma's hidden
//           states have per-block outliers that make single int8 lose ~1.7% perplexity on
//           the 270M). The default.
// LUMEN_BLOCK_ACT=int8|int8x2 chooses at start-up; set_block_activations() in tests.
enum class BlockActivationMode { Int8, Int8x2 };
BlockActivationMode block_activations();  // throws lumen::Error on a bad LUMEN_BLOCK_ACT
void set_block_activations(BlockActivationMode mode);

// Owns the storage of BlockActivations (reused across calls: grows, never shrinks).
class BlockActivationBuffer {
 public:
  // Quantizes x [T, K] (K a multiple of 32) with the given ISA's code, over the pool for T > 1.
  // Int8x2 fills q_lo as well (bit-identical on every ISA: the residual is formed by one
  // baseline-compiled piece of code).
  // `group` columns share a scale (32 or 256; K a multiple of it).
  const BlockActivations& quantize(const float* x, int64_t T, int64_t K, Isa isa,
                                   BlockActivationMode mode = BlockActivationMode::Int8, int64_t group = 32);

 private:
  std::vector<std::byte> storage_;
  BlockActivations acts_;
};

// The activation scale group a weight format is multiplied with: 256 for the K-quants and
// IQ4_XS (integer sub-block scales), 32 for the others.
int64_t activation_group(quant::WeightFormat format);

// One token's row x[0..K) into q, d, half sums and lane sums (the layouts above, one token),
// one scale per `group` columns (32 or 256).
void quantize_block_activations(const float* x, int64_t K, int8_t* q, float* d, float* half_sums,
                                int32_t* lane_sums, Isa isa, int64_t group = 32);

// The tile every ISA provides per format: rows [r0, r0 + nr) of the matrix (row-major ggml
// blocks, row_bytes apart) against tokens [t0, t0 + nt) of the activations; y[t * ldy + r]
// for the tile's rows and tokens. nr <= kBlockTileRows, nt <= kBlockTileTokens.
constexpr int kBlockTileRows = 4;
constexpr int kBlockTileTokens = 4;
using BlockTileFn = void (*)(const std::byte* rows, size_t row_bytes, int nr, const BlockActivations& acts,
                             int64_t t0, int nt, float* y, int64_t ldy);

// Prefill with split activations (block_matmul_simd.h): `decode` writes rows [0, nr) of a
// matrix (row_bytes apart) as the kernels' int16 rows, `block_bytes` per row and `block_elems`
// columns; `gemm` multiplies nr <= kBlockTileRows decoded rows (dec_row_bytes apart) by tokens
// [t0, t0 + nt) (any nt), y[t * ldy + r]. Bit-identical to the format's tile.
struct BlockPrefillFns {
  void (*decode)(const std::byte* rows, size_t row_bytes, int nr, int64_t K, std::byte* out) = nullptr;
  void (*gemm)(const std::byte* dec, size_t dec_row_bytes, int nr, const BlockActivations& acts, int64_t t0, int nt,
               float* y, int64_t ldy) = nullptr;
  size_t block_bytes = 0;
  size_t block_elems = 0;
};

// The activation type a weight format pairs with (a column of the format table).
enum class ActivationKind {
  F32,       // the f32 path: weights expanded, then dotted (f32, f16, the --exact reference)
  Q8x32,     // int8 per 32-element block with half and lane sums (BlockActivations)
  Q8Chunk,   // the X4 layouts' interleaved ActChunks (qmatmul.h)
  Bf16Pair,  // bf16 weights: activations as two bf16 planes for vdpbf16ps (bf16_matmul.h) where
             // the CPU has AVX-512 BF16, else the f32 path
};

// One row of the kernels' format table: how a weight format is multiplied on each ISA.
struct FormatKernels {
  quant::WeightFormat format;
  ActivationKind activations;
  // The per-ISA tiles (block formats; null elsewhere). An ISA without its own variant of a
  // format points at the next lower ISA's.
  BlockTileFn tile[3];
  // y = x W^T for any T on the given ISA: decode (T = 1) and prefill tiling, threaded.
  void (*matmul)(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa);
};

// The row of a format (every WeightFormat has one).
const FormatKernels& format_kernels(quant::WeightFormat format);

// y[t, r] = sum_c x[t, c] W[r, c] for a ggml block-format matrix on the given ISA, with the
// activations as block_activations() says or as given.
void block_matmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa);
void block_matmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa,
                      BlockActivationMode mode);

// y_i = x W_i^T for ggml block-format matrices sharing an input (q/k/v, gate/up; same column
// count, any formats): the activations are quantized once, and for one token every matrix's
// rows run in one pool call. Bit-identical to block_matmul_isa on each matrix.
void block_matmul_shared_isa(const float* x, int64_t T, std::span<const quant::WeightMatrix* const> ws,
                             std::span<float* const> ys, Isa isa, BlockActivationMode mode);

namespace detail {
// The decoded 32-element blocks of a row, the canonical integers and scales above:
// w [n], sw and mw [n / 16]. The scalar reference; the SIMD decoders must agree bit for bit.
void decode_block_row_scalar(quant::WeightFormat format, const void* row, int64_t n, int8_t* w, float* sw,
                             float* mw);
// The same with the ISA's SIMD decoders (tests). False when the ISA has no decoder for it.
bool decode_block_row_avx2(quant::WeightFormat format, const void* row, int64_t n, int8_t* w, float* sw,
                           float* mw);
BlockTileFn block_tile_scalar(quant::WeightFormat format);
BlockTileFn block_tile_avx2(quant::WeightFormat format);
BlockTileFn block_tile_avx512(quant::WeightFormat format);
// block_matmul_avx512.cpp's source built on SIMDe (unit tests on machines without AVX-512).
BlockTileFn block_tile_avx512_emulated(quant::WeightFormat format);
BlockPrefillFns block_prefill_avx2(quant::WeightFormat format);
BlockPrefillFns block_prefill_avx512(quant::WeightFormat format);
BlockPrefillFns block_prefill_avx512_emulated(quant::WeightFormat format);
void quantize_block_activations_avx2(const float* x, int64_t K, int8_t* q, float* d, float* half_sums,
                                     int32_t* lane_sums, int64_t group);
}  // namespace detail

}  // namespace lumen::kernels

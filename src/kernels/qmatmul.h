// Int8 matrix products against the X4 weight layouts (quant/repack.h): Q4_0X4 and Q8_0X4.
//
// Activations are quantized on the fly to int8 in 32-element blocks (scale = max|x| / 127,
// round to nearest even), laid out per 128-column chunk to match the weights: the 64 bytes
// of "half A" (elements 0..15 of each of the chunk's 4 blocks) then "half B" (16..31), the
// block scales repeated per 4-byte lane, and -8 / -128 times each lane's sum of activations
// (the correction that lets the kernel multiply unsigned weights: nibble - 8, q + 128).
//
// Per 32-element block the product is an exact integer; it is scaled by d_w * d_x in f32 and
// summed. The SIMD versions sum the blocks' f32 terms in a different order than the scalar
// one, so they agree with it to f32 rounding (tests: relative 1e-5), and exactly on the
// integer part (activation quantization is bit-identical on every ISA).
//
// Decode (T = 1, Q4) runs the matrix-vector kernels of qmatmul_decode.h; everything else goes
// through the prefill machinery (prefill.h), whose table holds the 4 x 2 tiles below (small
// T, Q8 without VNNI) and the 16-row tiles over slabs repacked per matmul (large T).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "quant/weight_matrix.h"

namespace lumen::kernels {

// One token's quantized activations for one 128-column chunk.
struct alignas(64) ActChunk {
  int8_t q[128];       // half A (64 bytes) then half B (64 bytes)
  float dx[16];        // lane l: scale of block l / 4
  int32_t neg8[16];    // lane l: -8 * (sum of A and B bytes 4l .. 4l+3)
  int32_t neg128[16];  // the same times 16
};
static_assert(sizeof(ActChunk) == 320);

// Quantizes x[0 .. K) (zero beyond K) into ceil(K/128) chunks, with the given ISA's code.
void quantize_activations(const float* x, int64_t K, ActChunk* out, Isa isa);

// How Q8 weights meet their activations (Q4 weights always take single int8 activations).
//   Int8:   x ~ d * q, one int8 per element (the Q4 path; error ~ d / 2 per element).
//   Int8x2: x ~ d1 * q1 + d2 * q2, q2 the int8 quantization of the residual x - d1 * q1 at its
//           own finer per-block scale (~ d1 / 254): the same exact int8 dot runs on both halves
//           and y = y1 + y2, so the product's error is the weights' (Q8_0) alone in practice.
//           Twice the multiply-adds of Int8; the weights are still read once (the two halves
//           go through the 2-token tile as a token pair). The default.
// LUMEN_Q8_ACT=int8|int8x2 chooses at start-up; set_q8_activations() in tests.
enum class Q8Activations { Int8, Int8x2 };
Q8Activations q8_activations();  // throws lumen::Error on a bad LUMEN_Q8_ACT
void set_q8_activations(Q8Activations mode);
const char* q8_activations_name(Q8Activations mode);
bool parse_q8_activations(const char* name, Q8Activations& out);

// Quantizes x[0 .. K) into hi (exactly what quantize_activations writes) and lo (the residual
// x - hi, quantized the same way), ceil(K/128) chunks each; bit-identical on every ISA.
void quantize_activations_split(const float* x, int64_t K, ActChunk* hi, ActChunk* lo, Isa isa);

// y[t, r] = sum_c x[t, c] W[r, c] for a Q4_0X4 or Q8_0X4 matrix, on the active ISA, threaded.
void qmatmul(const float* x, int64_t T, const quant::WeightMatrix& w, float* y);
// The same on a given ISA (tests), with Q8 activations as q8_activations() says or as given.
void qmatmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa);
void qmatmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa,
                 Q8Activations q8_mode);

namespace detail {
// The tile of one row group (4 rows) against `nt` (1 or 2) tokens over `chunks` chunks:
// out[t][r] for r < 4. group: the group's first byte.
using QTileFn = void (*)(const std::byte* group, int64_t chunks, const ActChunk* const* acts, int nt,
                         float (*out)[4]);
void q4_tile_scalar(const std::byte*, int64_t, const ActChunk* const*, int, float (*)[4]);
void q8_tile_scalar(const std::byte*, int64_t, const ActChunk* const*, int, float (*)[4]);
void q4_tile_avx2(const std::byte*, int64_t, const ActChunk* const*, int, float (*)[4]);
void q8_tile_avx2(const std::byte*, int64_t, const ActChunk* const*, int, float (*)[4]);
void q4_tile_avx512(const std::byte*, int64_t, const ActChunk* const*, int, float (*)[4]);
void q8_tile_avx512(const std::byte*, int64_t, const ActChunk* const*, int, float (*)[4]);
void quantize_chunk_scalar(const float* x, int64_t valid, ActChunk* out);
void quantize_chunk_avx2(const float* x, int64_t valid, ActChunk* out);
void quantize_chunk_avx512(const float* x, int64_t valid, ActChunk* out);
}  // namespace detail

}  // namespace lumen::kernels

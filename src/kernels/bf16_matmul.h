// bf16 weights multiplied as they are stored, with AVX-512 BF16's vdpbf16ps (32 products per
// instruction), for the unquantized checkpoints users run (Hugging Face bf16 safetensors, bf16
// GGUF tensors). The format table's BF16 row (block_matmul.h) comes here on CPUs with
// AVX-512 BF16 and takes the f32 path (rows expanded, then f32 dots) elsewhere.
//
// vdpbf16ps multiplies bf16 by bf16, so the activations become bf16 too. One bf16 plane keeps
// 8 significant bits (~0.4% per element, llama.cpp's precision for bf16 weights); here x is
// split into two planes, hi = bf16(x) and lo = bf16(x - hi), both rounded to nearest even:
// 16 significant bits, x - (hi + lo) within 2^-17 |x|. Each product w * hi, w * lo is exact in
// f32 (8 x 8 significant bits) and the hardware adds it to the f32 accumulator with one
// rounding, so a row's dot differs from the f32 path only by the split's 2^-17 and the order
// of the f32 sums. The weights are read once; the second plane costs compute only, which
// decode (bound by memory at 2 bytes a weight) has to spare.
//
// Every (row, token) has one 16-lane f32 accumulator that takes, per 32 columns, w * hi then
// w * lo, and is summed across its lanes at the end; the tile's shape never changes that
// order, so a token's outputs are the same in a batch of any size (decode = prefill).
#pragma once

#include <cstddef>
#include <cstdint>

#include "kernels/cpu_features.h"
#include "quant/weight_matrix.h"

namespace lumen::kernels {

// T tokens' activations as two bf16 planes, each row K32 = K rounded up to 32 long (zero
// padded), 64-byte aligned.
struct Bf16Activations {
  int64_t T = 0;
  int64_t K = 0;
  int64_t K32 = 0;
  const uint16_t* hi = nullptr;
  const uint16_t* lo = nullptr;
};

// True when the ISA is AVX-512 and the CPU has AVX-512 BF16 (the kernel's instruction).
bool bf16_kernel_available(Isa isa);

// y[t, r] = sum_c x[t, c] W[r, c] for a bf16 matrix: the vdpbf16ps kernel where
// bf16_kernel_available(isa), the f32 path (matmul_expanded) elsewhere.
void bf16_matmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa);

namespace detail {

// Rows [0, nr) (nr <= 4) of a bf16 matrix with K columns (rows K apart) against tokens
// [t0, t0 + nt) (nt <= 4): y[t * ldy + r].
using Bf16TileFn = void (*)(const uint16_t* w, int64_t K, int nr, const Bf16Activations& a, int64_t t0, int nt,
                            float* y, int64_t ldy);
constexpr int kBf16TileRows = 4;
constexpr int kBf16TileTokens = 4;

// x[0..K) into the two planes, zero from K to K32 (the same bytes on every ISA).
void split_bf16(const float* x, int64_t K, int64_t K32, uint16_t* hi, uint16_t* lo);

// The tiles: the scalar reference (the hardware's operations in its order, fmaf per product),
// the AVX-512 BF16 one, and the latter's own source built on SIMDe for the unit tests on
// machines without AVX-512 BF16 (tests/unit/simde_avx512.cpp; SIMDe adds the two products of
// a pair before the accumulator, so it agrees within rounding, not bit for bit).
void bf16_tile_scalar(const uint16_t* w, int64_t K, int nr, const Bf16Activations& a, int64_t t0, int nt, float* y,
                      int64_t ldy);
void bf16_tile_avx512bf16(const uint16_t* w, int64_t K, int nr, const Bf16Activations& a, int64_t t0, int nt,
                          float* y, int64_t ldy);
void bf16_tile_avx512bf16_emulated(const uint16_t* w, int64_t K, int nr, const Bf16Activations& a, int64_t t0,
                                   int nt, float* y, int64_t ldy);

// The driver with a given tile (tests run it with each): activations split once, tokens in
// blocks whose planes stay in L2, row groups of 4 over the pool.
void bf16_matmul_with(Bf16TileFn tile, const float* x, int64_t T, const quant::WeightMatrix& w, float* y);

bool cpu_has_avx512_bf16();
// An accumulator's 16 lanes summed in the one order every tile uses.
float reduce_bf16_lanes(const float* lanes);

}  // namespace detail
}  // namespace lumen::kernels

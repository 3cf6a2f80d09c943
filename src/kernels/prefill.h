// Many-token (prefill) matrix products against quantized weights: the tiling machinery and
// the table of tiles per weight format and ISA. docs/prefill.md has the design and figures.
//
// One call computes y_i = W_i x for every matrix W_i sharing the input x [T, cols] (q/k/v,
// gate/up): the activations are quantized once per distinct activation form, then every
// (matrix, block of row slabs) is one piece of a single pool call. Inside a piece:
//
//   for each column range (<= kPrefillColumnRange columns; partial sums added in order):
//     prepare each slab of the block into a per-thread scratch (a format may repack its
//       stored rows into the layout its tile likes best: done once per matmul, so its cost
//       is spread over all T tokens);
//     for each tile of tokens: for each slab: tile -> out[tokens][slab rows] -> y.
//
// A format plugs in by giving a PrefillKernel: its activation form (ActFormat), slab height,
// token tile, optional prepare step and the tile itself. The f32 summation order is fixed by
// the driver and each tile's per-row order, so tiles of one family (the R16 tiles below)
// give the same floats bit for bit on every ISA.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "kernels/cpu_features.h"
#include "kernels/qmatmul.h"
#include "quant/weight_matrix.h"

namespace lumen::kernels {

// ---- Activation forms -------------------------------------------------------------------

// One token's 32 columns quantized to int8 (scale max|x| / 127, round to nearest even: the
// same integers as ActChunk), with the sums the unsigned-weight tiles subtract.
struct alignas(16) ActBlock {
  int8_t q[32];
  float d;
  int32_t neg8;    // -8 * sum(q): for weights stored as nibble = w + 8
  int32_t neg128;  // -128 * sum(q): for weights stored as q + 128
  int32_t unused;
};
static_assert(sizeof(ActBlock) == 48);

// How a tile wants a token's activations. `virtual_tokens` = 2 for the split (hi, lo) forms:
// token t's bytes are two halves that the tiles see as two consecutive tokens, whose outputs
// the driver adds (hi + lo).
struct ActFormat {
  const char* name;
  int virtual_tokens;
  size_t (*bytes_per_token)(int64_t cols);
  void (*quantize)(const float* x, int64_t cols, std::byte* out, Isa isa);
};
extern const ActFormat kActBlocks;        // ActBlock per 32 columns
extern const ActFormat kActBlocksSplit;   // hi then lo ActBlocks (Q8 weights, Int8x2)
extern const ActFormat kActChunks;        // ActChunk per 128 columns (qmatmul.h)
extern const ActFormat kActChunksSplit;   // hi then lo ActChunks

// Quantizes x[0 .. cols) into ceil(cols / 32) ActBlocks (zeros past cols), bit-identical on
// every ISA.
void quantize_act_blocks(const float* x, int64_t cols, ActBlock* out, Isa isa);

// ---- The tile interface -------------------------------------------------------------------

struct PrefillTileArgs {
  const quant::WeightMatrix* w;
  int64_t slab;                // which slab of rows: rows [slab * slab_rows, ...)
  const std::byte* scratch;    // the prepared slab (null when the kernel has no prepare step)
  int64_t k0, k1;              // column range, k0 a multiple of 128, k1 <= padded cols
  const std::byte* act;        // virtual token 0's activations (the whole row of columns)
  size_t act_stride;           // bytes between virtual tokens
  int nt;                      // virtual tokens, 1 .. max_tokens
  float* out;                  // out[t * slab_rows + r]: the range's partial sums
};

struct PrefillKernel {
  const char* name;
  const ActFormat* act;
  int64_t slab_rows;   // rows one tile covers (a multiple of 4)
  int max_tokens;      // virtual tokens one tile call takes
  // Scratch bytes of one prepared slab over columns [k0, k1); null: no prepare step.
  size_t (*slab_bytes)(int64_t k0, int64_t k1);
  void (*prepare)(const quant::WeightMatrix& w, int64_t slab, int64_t k0, int64_t k1, std::byte* scratch);
  void (*tile)(const PrefillTileArgs& a);
};

// Columns per range: the prepared slabs and a token tile's activations of one range stay in
// L2 together.
constexpr int64_t kPrefillColumnRange = 4096;
// Below this many tokens the X4 formats use their direct 4 x 2 tile (no prepare step, whose
// cost would not be spread over enough tokens).
constexpr int64_t kPrefillMinTokensForR16 = 8;

// The table: the tile for a weight format on an ISA for T tokens, or null when the format has
// none (it then runs on the f32 path of kernels::matmul).
const PrefillKernel* prefill_kernel(quant::WeightFormat format, Isa isa, int64_t T, Q8Activations q8_mode);

// ys[i] = x W_i^T for matrices sharing x [T, cols], all with a prefill kernel on `isa`.
// Throws lumen::Error when a matrix has none or the columns differ.
void prefill_matmul(const float* x, int64_t T, std::span<const quant::WeightMatrix* const> ws,
                    std::span<float* const> ys, Isa isa, Q8Activations q8_mode);
// The same with the kernels given (tests pin a kernel); kernels[i] serves ws[i].
void prefill_matmul_with(const float* x, int64_t T, std::span<const quant::WeightMatrix* const> ws,
                         std::span<float* const> ys, std::span<const PrefillKernel* const> kernels, Isa isa);

// ---- R16: 16-row slabs repacked per matmul (Q4_0X4, Q8_0X4) -------------------------------
//
// A prepared slab holds, per 32-column block: u8 w[8][16][4] (dword j of row r = the row's
// weights + 8 (Q4) or + 128 (Q8) at columns 4j .. 4j+3 of the block) then f32 d[16] (the
// rows' block scales): 576 bytes. A tile lane is a row; the activations' dword j and scale are
// broadcast to all lanes, so per block and token: 8 int8 dot steps (exact integer), then
// y_r = fma(float(sum_r + corr), d_r * d_x, y_r), blocks in column order.
constexpr int64_t kR16Rows = 16;
constexpr size_t kR16BlockBytes = 8 * 64 + 16 * 4;
// Blocks the SIMD tiles take in one run over all their tokens (9 KiB of prepared weights and
// 16 tokens' activations of those blocks, 12 KiB, fit L1 together).
constexpr int64_t kR16L1Blocks = 16;

namespace detail {
size_t r16_slab_bytes(int64_t k0, int64_t k1);
void prepare_r16_q4(const quant::WeightMatrix& w, int64_t slab, int64_t k0, int64_t k1, std::byte* scratch);
void prepare_r16_q8(const quant::WeightMatrix& w, int64_t slab, int64_t k0, int64_t k1, std::byte* scratch);
// Tiles over a prepared slab: blocks [k0/32, ceil(min(k1, cols)/32)). corr_q8 picks neg128.
void r16_tile_scalar(const PrefillTileArgs& a, bool corr_q8);
void r16_tile_avx2(const PrefillTileArgs& a);  // Q4 only (u8 weights <= 15: no int16 overflow)
void r16_tile_avx512(const PrefillTileArgs& a, bool corr_q8);
void quantize_act_blocks_scalar(const float* x, int64_t cols, ActBlock* out);
void quantize_act_blocks_avx2(const float* x, int64_t cols, ActBlock* out);
void quantize_act_blocks_avx512(const float* x, int64_t cols, ActBlock* out);
#ifdef LUMEN_TEST_SIMDE_AVX512
// The AVX-512 code compiled through SIMDe (tests/unit/simde_avx512.cpp), so machines without
// AVX-512 still run the exact source of the AVX-512 tiles.
void r16_tile_avx512_emulated(const PrefillTileArgs& a, bool corr_q8);
void quantize_act_blocks_avx512_emulated(const float* x, int64_t cols, ActBlock* out);
#endif
}  // namespace detail

}  // namespace lumen::kernels

// AVX-512 VNNI tiles of the block-format kernels: block_matmul_simd.h with vpdpbusd on
// 256-bit registers (AVX512VL), which takes the offset correction as its accumulator (one
// instruction per row, token and block) and has 32 registers: 4 rows x 4 tokens per tile.
//
// The unit tests also compile this file through SIMDe (LUMEN_TEST_SIMDE_AVX512,
// tests/unit/simde_avx512.cpp) as block_tile_avx512_emulated, so machines without AVX-512 run
// this source against the scalar reference too.
// GCC 12's AVX-512 intrinsics start from _mm512_undefined_*(), which -Wmaybe-uninitialized
// reports as uninitialized once inlined (as in the other *_avx512.cpp files).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#ifdef LUMEN_TEST_SIMDE_AVX512
#include "simde_avx512_shim.h"
#define LUMEN_BLOCK_TILE_AVX512 block_tile_avx512_emulated
#define LUMEN_BLOCK_PREFILL_AVX512 block_prefill_avx512_emulated
#else
#define LUMEN_BLOCK_TILE_AVX512 block_tile_avx512
#define LUMEN_BLOCK_PREFILL_AVX512 block_prefill_avx512
#endif
#define LUMEN_BLOCK_VNNI 1
#include "kernels/block_matmul_simd.h"

namespace lumen::kernels::detail {

BlockTileFn LUMEN_BLOCK_TILE_AVX512(quant::WeightFormat format) { return simd::tile_of<4, 4>(format); }
BlockPrefillFns LUMEN_BLOCK_PREFILL_AVX512(quant::WeightFormat format) { return simd::prefill_of<4, 4>(format); }

}  // namespace lumen::kernels::detail

// AVX-512 VNNI tiles of the block-format kernels: block_matmul_simd.h with vpdpbusd on
// 256-bit registers (AVX512VL), which takes the offset correction as its accumulator (one
// instruction per row, token and block) and has 32 registers: 4 rows x 4 tokens per tile.
#define LUMEN_BLOCK_VNNI 1
#include "kernels/block_matmul_simd.h"

namespace lumen::kernels::detail {

BlockTileFn block_tile_avx512(quant::WeightFormat format) { return simd::tile_of<4, 4>(format); }

}  // namespace lumen::kernels::detail

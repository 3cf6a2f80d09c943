// Pseudo-random ggml blocks for tests: splitmix64 bytes with every f16 scale field replaced by
// a finite normal half (tools/ggml_dequant_vectors.py makes the same bytes for gguf-py).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/weight_matrix.h"

namespace lumen::test_blocks {

struct SplitMix64 {
  uint64_t state;
  uint64_t next() {
    uint64_t z = (state += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
};

// Byte offsets of the f16 scale fields of one block.
inline std::vector<size_t> half_fields(quant::WeightFormat f) {
  using F = quant::WeightFormat;
  switch (f) {
    case F::Q4_1: case F::Q5_1: case F::Q4_K: case F::Q5_K: return {0, 2};
    case F::Q2_K: return {80, 82};
    case F::Q3_K: return {108};
    case F::Q6_K: return {208};
    default: return {0};
  }
}

// `blocks` blocks of format f. max_exponent bounds the halves' exponent field (22 by default:
// up to ~2^7; smaller keeps sums of many blocks in a comfortable range).
inline std::vector<uint8_t> random_blocks(quant::WeightFormat f, int64_t blocks, uint64_t seed,
                                          int max_exponent = 22) {
  const auto& info = quant::format_info(f);
  SplitMix64 rng{seed};
  std::vector<uint8_t> out;
  out.reserve(size_t(blocks) * info.block_bytes);
  for (int64_t b = 0; b < blocks; ++b) {
    std::vector<uint8_t> block(info.block_bytes);
    for (auto& byte : block) byte = uint8_t(rng.next() & 0xFF);
    for (size_t off : half_fields(f)) {
      const uint64_t r = rng.next();
      const uint16_t half = uint16_t((r & 0x83FF) | ((8 + (r >> 16) % uint64_t(max_exponent - 7)) << 10));
      std::memcpy(&block[off], &half, 2);
    }
    out.insert(out.end(), block.begin(), block.end());
  }
  return out;
}

}  // namespace lumen::test_blocks

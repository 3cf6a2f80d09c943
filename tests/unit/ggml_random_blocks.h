// Pseudo-random ggml blocks for tests: splitmix64 bytes with every f16 scale field replaced by
// a finite normal half (tools/ggml_dequant_vectors.py makes the same bytes for gguf-py).
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "quant/ggml_blocks.h"
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
    for (int16_t off : quant::ggml_block_scale_fields(info.ggml_type).offsets) {
      if (off < 0) continue;
      const uint64_t r = rng.next();
      const uint16_t half = uint16_t((r & 0x83FF) | ((8 + (r >> 16) % uint64_t(max_exponent - 7)) << 10));
      std::memcpy(&block[off], &half, 2);
    }
    out.insert(out.end(), block.begin(), block.end());
  }
  return out;
}

}  // namespace lumen::test_blocks

#include "quant/repack.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "quant/ggml_blocks.h"

namespace lumen::quant {

uint16_t f32_to_f16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  const uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return uint16_t(sign | 0x7e00u);  // NaN
  if (abs >= 0x477ff000u) return uint16_t(sign | 0x7c00u);  // rounds to >= 65536: inf
  if (abs < 0x38800000u) {                                   // below the smallest normal half
    // Subnormal half: value / 2^-24, rounded to nearest even.
    float a;
    std::memcpy(&a, &abs, 4);
    const float scaled = a * 16777216.0f;  // exact: multiplies by 2^24
    return uint16_t(sign | uint32_t(std::nearbyint(scaled)));
  }
  // Normal: rebias the exponent, round the 13 dropped mantissa bits to nearest even.
  uint32_t h = ((abs >> 13) - ((127u - 15u) << 10));
  const uint32_t rest = abs & 0x1fffu;
  if (rest > 0x1000u || (rest == 0x1000u && (h & 1u))) ++h;
  return uint16_t(sign | h);
}

void quantize_block_q4_0(const float* x, uint16_t* d_out, uint8_t qs[16]) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < 32; ++j) {
    if (std::fabs(x[j]) > amax) {
      amax = std::fabs(x[j]);
      max = x[j];
    }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_out = f32_to_f16(d);
  for (int j = 0; j < 16; ++j) {
    const float x0 = x[j] * id, x1 = x[16 + j] * id;
    const int q0 = std::min(15, int(int8_t(x0 + 8.5f)));
    const int q1 = std::min(15, int(int8_t(x1 + 8.5f)));
    qs[j] = uint8_t(q0 | (q1 << 4));
  }
}

void quantize_block_q8_0(const float* x, uint16_t* d_out, int8_t qs[32]) {
  float amax = 0.0f;
  for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  *d_out = f32_to_f16(d);
  for (int j = 0; j < 32; ++j) qs[j] = int8_t(std::round(x[j] * id));
}

size_t q4_0x4_bytes(int64_t rows, int64_t cols) {
  return size_t(padded_rows(rows) / kRowGroup) * size_t(padded_cols(cols) / kChunk) * kQ4x4ChunkBytes;
}
size_t q8_0x4_bytes(int64_t rows, int64_t cols) {
  return size_t(padded_rows(rows) / kRowGroup) * size_t(padded_cols(cols) / kChunk) * kQ8x4ChunkBytes;
}

namespace {

uint16_t read_u16(const uint8_t* p) { return uint16_t(p[0] | (p[1] << 8)); }

}  // namespace

void pack_group_q4_0x4(const uint8_t* const blocks[4], int64_t cols, std::byte* dst) {
  const int64_t nblocks = cols / 32, chunks = padded_cols(cols) / kChunk;
  for (int64_t c = 0; c < chunks; ++c) {
    auto* out = reinterpret_cast<uint8_t*>(dst + size_t(c) * kQ4x4ChunkBytes);
    for (int r = 0; r < 4; ++r) {
      for (int b = 0; b < 4; ++b) {
        const int64_t blk = c * 4 + b;
        uint16_t d = 0;
        uint8_t* qs = out + 32 + r * 64 + b * 16;
        if (blocks[r] && blk < nblocks) {
          const uint8_t* src = blocks[r] + blk * 18;
          d = read_u16(src);
          std::memcpy(qs, src + 2, 16);
        } else {
          std::memset(qs, 0x88, 16);  // nibble 8 = 0
        }
        out[(r * 4 + b) * 2] = uint8_t(d);
        out[(r * 4 + b) * 2 + 1] = uint8_t(d >> 8);
      }
    }
  }
}

void pack_group_q8_0x4(const uint8_t* const blocks[4], int64_t cols, std::byte* dst) {
  const int64_t nblocks = cols / 32, chunks = padded_cols(cols) / kChunk;
  for (int64_t c = 0; c < chunks; ++c) {
    auto* out = reinterpret_cast<uint8_t*>(dst + size_t(c) * kQ8x4ChunkBytes);
    for (int r = 0; r < 4; ++r) {
      for (int b = 0; b < 4; ++b) {
        const int64_t blk = c * 4 + b;
        uint16_t d = 0;
        uint8_t* half0 = out + 32 + r * 128 + b * 16;
        uint8_t* half1 = half0 + 64;
        if (blocks[r] && blk < nblocks) {
          const uint8_t* src = blocks[r] + blk * 34;
          d = read_u16(src);
          std::memcpy(half0, src + 2, 16);
          std::memcpy(half1, src + 18, 16);
        } else {
          std::memset(half0, 0, 16);
          std::memset(half1, 0, 16);
        }
        out[(r * 4 + b) * 2] = uint8_t(d);
        out[(r * 4 + b) * 2 + 1] = uint8_t(d >> 8);
      }
    }
  }
}

namespace {

template <bool Q4>
void quantize_x4(const float* w, int64_t rows, int64_t cols, std::byte* dst) {
  const int64_t pc = (cols + 31) / 32 * 32, nb = pc / 32;
  const size_t block_bytes = Q4 ? 18 : 34;
  const size_t group_bytes = size_t(padded_cols(cols) / kChunk) * (Q4 ? kQ4x4ChunkBytes : kQ8x4ChunkBytes);
  std::vector<float> padded(size_t(pc), 0.0f);
  std::vector<uint8_t> blocks(4 * size_t(nb) * block_bytes);
  for (int64_t g = 0; g < padded_rows(rows) / 4; ++g) {
    const uint8_t* ptrs[4] = {nullptr, nullptr, nullptr, nullptr};
    for (int r = 0; r < 4; ++r) {
      const int64_t row = g * 4 + r;
      if (row >= rows) continue;
      std::memcpy(padded.data(), w + row * cols, size_t(cols) * 4);
      uint8_t* out = blocks.data() + size_t(r) * size_t(nb) * block_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = out + size_t(b) * block_bytes;
        uint16_t d;
        if constexpr (Q4) quantize_block_q4_0(padded.data() + b * 32, &d, blk + 2);
        else quantize_block_q8_0(padded.data() + b * 32, &d, reinterpret_cast<int8_t*>(blk + 2));
        blk[0] = uint8_t(d);
        blk[1] = uint8_t(d >> 8);
      }
      ptrs[r] = out;
    }
    if constexpr (Q4) pack_group_q4_0x4(ptrs, pc, dst + size_t(g) * group_bytes);
    else pack_group_q8_0x4(ptrs, pc, dst + size_t(g) * group_bytes);
  }
}

template <bool Q4>
void rows_to_x4(const void* const* row_ptrs, int64_t rows, int64_t cols, std::byte* dst) {
  const size_t group_bytes = size_t(padded_cols(cols) / kChunk) * (Q4 ? kQ4x4ChunkBytes : kQ8x4ChunkBytes);
  for (int64_t g = 0; g < padded_rows(rows) / 4; ++g) {
    const uint8_t* ptrs[4];
    for (int r = 0; r < 4; ++r)
      ptrs[r] = g * 4 + r < rows ? static_cast<const uint8_t*>(row_ptrs[g * 4 + r]) : nullptr;
    if constexpr (Q4) pack_group_q4_0x4(ptrs, cols, dst + size_t(g) * group_bytes);
    else pack_group_q8_0x4(ptrs, cols, dst + size_t(g) * group_bytes);
  }
}

}  // namespace

void quantize_q4_0x4(const float* w, int64_t rows, int64_t cols, std::byte* dst) { quantize_x4<true>(w, rows, cols, dst); }
void quantize_q8_0x4(const float* w, int64_t rows, int64_t cols, std::byte* dst) { quantize_x4<false>(w, rows, cols, dst); }
void q4_0_rows_to_x4(const void* const* r, int64_t rows, int64_t cols, std::byte* dst) { rows_to_x4<true>(r, rows, cols, dst); }
void q8_0_rows_to_x4(const void* const* r, int64_t rows, int64_t cols, std::byte* dst) { rows_to_x4<false>(r, rows, cols, dst); }

void dequantize_row_q4_0x4(const std::byte* data, int64_t /*rows*/, int64_t cols, int64_t r, float* out) {
  const int64_t chunks = padded_cols(cols) / kChunk;
  const auto* group = reinterpret_cast<const uint8_t*>(data) + size_t(r / 4) * size_t(chunks) * kQ4x4ChunkBytes;
  const int rr = int(r % 4);
  for (int64_t c = 0; c < chunks; ++c) {
    const uint8_t* chunk = group + size_t(c) * kQ4x4ChunkBytes;
    for (int b = 0; b < 4; ++b) {
      const float d = f16_to_f32(read_u16(chunk + (rr * 4 + b) * 2));
      const uint8_t* qs = chunk + 32 + rr * 64 + b * 16;
      for (int i = 0; i < 32; ++i) {
        const int64_t col = c * kChunk + b * 32 + i;
        if (col >= cols) return;
        const int q = i < 16 ? (qs[i] & 0x0f) : (qs[i - 16] >> 4);
        out[col] = d * float(q - 8);
      }
    }
  }
}

void dequantize_row_q8_0x4(const std::byte* data, int64_t /*rows*/, int64_t cols, int64_t r, float* out) {
  const int64_t chunks = padded_cols(cols) / kChunk;
  const auto* group = reinterpret_cast<const uint8_t*>(data) + size_t(r / 4) * size_t(chunks) * kQ8x4ChunkBytes;
  const int rr = int(r % 4);
  for (int64_t c = 0; c < chunks; ++c) {
    const uint8_t* chunk = group + size_t(c) * kQ8x4ChunkBytes;
    for (int b = 0; b < 4; ++b) {
      const float d = f16_to_f32(read_u16(chunk + (rr * 4 + b) * 2));
      const auto* q = reinterpret_cast<const int8_t*>(chunk + 32 + rr * 128 + b * 16);
      for (int i = 0; i < 32; ++i) {
        const int64_t col = c * kChunk + b * 32 + i;
        if (col >= cols) return;
        out[col] = d * float(i < 16 ? q[i] : q[64 + i - 16]);
      }
    }
  }
}

}  // namespace lumen::quant

#include "quant/int4.h"

#include <algorithm>
#include <cmath>

#include "base/error.h"
#include "quant/repack.h"

namespace lumen::quant {
namespace {

void check_zero_point(int zero_point) {
  if (zero_point != 0 && zero_point != 8)
    throw Error("int4 zero point " + std::to_string(zero_point) + " is not supported (0 or 8)");
}

// The stored nibble of element value k (-8..7).
uint8_t encode(int k, int zero_point) { return uint8_t(zero_point == 8 ? k + 8 : k & 0x0f); }
// The element value (-8..7) of a stored nibble.
int decode(uint8_t nibble, int zero_point) {
  return zero_point == 8 ? int(nibble) - 8 : (nibble & 0x08 ? int(nibble) - 16 : int(nibble));
}
uint8_t nibble_at(const uint8_t* packed, int64_t i) { return i % 2 ? packed[i / 2] >> 4 : packed[i / 2] & 0x0f; }

}  // namespace

float quantize_row_int4_per_channel(const float* w, int64_t n, int zero_point, uint8_t* packed) {
  check_zero_point(zero_point);
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(w[i]));
  const float scale = amax / 7.0f;
  const float inv = scale != 0.0f ? 1.0f / scale : 0.0f;
  for (int64_t i = 0; i < n; i += 2) {
    const int k0 = std::clamp(int(std::lrint(w[i] * inv)), -8, 7);
    const int k1 = std::clamp(int(std::lrint(w[i + 1] * inv)), -8, 7);
    packed[i / 2] = uint8_t(encode(k0, zero_point) | (encode(k1, zero_point) << 4));
  }
  return scale;
}

void dequantize_row_int4_per_channel(const uint8_t* packed, int64_t n, float scale, int zero_point, float* out) {
  check_zero_point(zero_point);
  for (int64_t i = 0; i < n; ++i) out[i] = scale * float(decode(nibble_at(packed, i), zero_point));
}

void quantize_row_litert_int4(const float* w, int64_t n, uint8_t* packed) {
  for (int64_t i = 0; i < n; i += 2) {
    const int k0 = std::clamp(int(std::lrint(w[i] / kLiteRtInt4Scale)), -8, 7);
    const int k1 = std::clamp(int(std::lrint(w[i + 1] / kLiteRtInt4Scale)), -8, 7);
    packed[i / 2] = uint8_t((k0 + 8) | ((k1 + 8) << 4));
  }
}

void dequantize_row_litert_int4(const uint8_t* packed, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = float(int(nibble_at(packed, i)) - 8) * kLiteRtInt4Scale;
}

void int4_per_channel_row_to_q4_0(const uint8_t* packed, int64_t n, float scale, int zero_point, uint8_t* blocks) {
  check_zero_point(zero_point);
  if (n % 32) throw Error("int4 row of " + std::to_string(n) + " elements is not a whole number of 32-element blocks");
  const uint16_t d = f32_to_f16(scale);
  for (int64_t b = 0; b < n / 32; ++b) {
    uint8_t* blk = blocks + b * 18;
    blk[0] = uint8_t(d);
    blk[1] = uint8_t(d >> 8);
    for (int j = 0; j < 16; ++j) {
      const int lo = decode(nibble_at(packed, b * 32 + j), zero_point) + 8;
      const int hi = decode(nibble_at(packed, b * 32 + 16 + j), zero_point) + 8;
      blk[2 + j] = uint8_t(lo | (hi << 4));
    }
  }
}

}  // namespace lumen::quant

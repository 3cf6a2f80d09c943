#include "kv/row_codec.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "kernels/attention.h"

namespace lumen::kv {

int64_t row_bytes(KvElem e, int64_t n, int block_size) { return kv_row_bytes(e, n, block_size) / 2; }

void encode_row(KvElem e, const float* src, int64_t n, int block_size, uint8_t* dst) {
  switch (e) {
    case KvElem::F32:
      std::memcpy(dst, src, size_t(n) * 4);
      return;
    case KvElem::F16:
      kernels::f32_to_f16_row(src, n, reinterpret_cast<uint16_t*>(dst));
      return;
    case KvElem::BF16: {
      auto* out = reinterpret_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) out[i] = f32_to_bf16(src[i]);
      return;
    }
    case KvElem::Int8:
    case KvElem::Int4: {
      const bool int4 = e == KvElem::Int4;
      const float qmax = int4 ? 7.0f : 127.0f;
      uint8_t* scales = dst + (int4 ? n / 2 : n);
      for (int64_t b = 0; b < n; b += block_size) {
        float amax = 0.0f;
        for (int64_t i = b; i < b + block_size; ++i) amax = std::max(amax, std::fabs(src[i]));
        const float scale = amax / qmax;
        const float inv = scale > 0.0f ? 1.0f / scale : 0.0f;
        std::memcpy(scales + (b / block_size) * 4, &scale, 4);
        for (int64_t i = b; i < b + block_size; ++i) {
          const int q = int(std::clamp(std::nearbyint(src[i] * inv), -qmax - (int4 ? 1.0f : 0.0f), qmax));
          if (!int4) {
            dst[i] = uint8_t(int8_t(q));
          } else if (i % 2 == 0) {
            dst[i / 2] = uint8_t(q + 8);
          } else {
            dst[i / 2] = uint8_t(dst[i / 2] | uint8_t((q + 8) << 4));
          }
        }
      }
      return;
    }
  }
}

void decode_row_slice(KvElem e, const uint8_t* row, int64_t n, int block_size, int64_t offset, int64_t count,
                      float* dst) {
  switch (e) {
    case KvElem::F32:
      std::memcpy(dst, row + offset * 4, size_t(count) * 4);
      return;
    case KvElem::F16:
      kernels::f16_to_f32_row(reinterpret_cast<const uint16_t*>(row) + offset, count, dst);
      return;
    case KvElem::BF16: {
      const auto* in = reinterpret_cast<const uint16_t*>(row) + offset;
      for (int64_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(in[i]);
      return;
    }
    case KvElem::Int8:
    case KvElem::Int4: {
      const bool int4 = e == KvElem::Int4;
      const uint8_t* scales = row + (int4 ? n / 2 : n);
      for (int64_t b = offset; b < offset + count; b += block_size) {
        float scale;
        std::memcpy(&scale, scales + (b / block_size) * 4, 4);
        float* out = dst + (b - offset);
        if (!int4) kernels::int8_to_f32_row(reinterpret_cast<const int8_t*>(row) + b, scale, block_size, out);
        else kernels::int4_to_f32_row(row + b / 2, scale, block_size, out);
      }
      return;
    }
  }
}

void round_trip_row(KvElem e, float* data, int64_t n, int block_size) {
  if (e == KvElem::F32) return;
  std::vector<uint8_t> tmp(size_t(row_bytes(e, n, block_size)));
  encode_row(e, data, n, block_size, tmp.data());
  decode_row_slice(e, tmp.data(), n, block_size, 0, n, data);
}

}  // namespace lumen::kv

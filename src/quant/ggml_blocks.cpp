#include "quant/ggml_blocks.h"

#include <cstring>
#include <string>

#include "base/dtype.h"
#include "base/error.h"

namespace lumen::quant {

namespace {

struct Layout {
  const char* name;
  int64_t block_size;
  size_t block_bytes;
};

// nullptr-named layout for types this file does not handle.
Layout layout_of(int type) {
  switch (type) {
    case ggml_type::F32: return {"F32", 1, 4};
    case ggml_type::F16: return {"F16", 1, 2};
    case ggml_type::BF16: return {"BF16", 1, 2};
    case ggml_type::Q4_0: return {"Q4_0", 32, sizeof(BlockQ4_0)};
    case ggml_type::Q4_1: return {"Q4_1", 32, sizeof(BlockQ4_1)};
    case ggml_type::Q5_0: return {"Q5_0", 32, sizeof(BlockQ5_0)};
    case ggml_type::Q5_1: return {"Q5_1", 32, sizeof(BlockQ5_1)};
    case ggml_type::Q8_0: return {"Q8_0", 32, sizeof(BlockQ8_0)};
    case ggml_type::Q2_K: return {"Q2_K", kQK_K, sizeof(BlockQ2_K)};
    case ggml_type::Q3_K: return {"Q3_K", kQK_K, sizeof(BlockQ3_K)};
    case ggml_type::Q4_K: return {"Q4_K", kQK_K, sizeof(BlockQ4_K)};
    case ggml_type::Q5_K: return {"Q5_K", kQK_K, sizeof(BlockQ5_K)};
    case ggml_type::Q6_K: return {"Q6_K", kQK_K, sizeof(BlockQ6_K)};
    case ggml_type::IQ4_NL: return {"IQ4_NL", 32, sizeof(BlockIQ4_NL)};
    case ggml_type::IQ4_XS: return {"IQ4_XS", kQK_K, sizeof(BlockIQ4_XS)};
    default: return {nullptr, 0, 0};
  }
}

Layout require_layout(int type, const char* caller) {
  Layout layout = layout_of(type);
  if (layout.name == nullptr)
    throw Error(std::string(caller) + ": ggml type " + std::to_string(type) +
                " is not supported (supported: F32, F16, BF16, Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, "
                "Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_NL, IQ4_XS)");
  return layout;
}

void require_row_length(const Layout& layout, int64_t n, const char* caller) {
  if (n < 0 || n % layout.block_size != 0)
    throw Error(std::string(caller) + ": a " + layout.name + " row of " + std::to_string(n) +
                " elements is not a whole number of " + std::to_string(layout.block_size) +
                "-element blocks");
}

inline uint16_t load_u16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}

inline uint32_t load_u32(const uint8_t* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}

inline float load_f16(const uint8_t* p) { return f16_to_f32(load_u16(p)); }

// 32-element blocks. Element j < 16 is the low nibble of qs[j], element j + 16 the high one.

void dequant_q4_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    const int x0 = (qs[j] & 0x0F) - 8;
    const int x1 = (qs[j] >> 4) - 8;
    y[j] = float(x0) * d;
    y[j + 16] = float(x1) * d;
  }
}

void dequant_q4_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint8_t* qs = b + 4;
  for (int j = 0; j < 16; ++j) {
    const int x0 = qs[j] & 0x0F;
    const int x1 = qs[j] >> 4;
    y[j] = float(x0) * d + m;
    y[j + 16] = float(x1) * d + m;
  }
}

void dequant_q5_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint32_t qh = load_u32(b + 2);
  const uint8_t* qs = b + 6;
  for (int j = 0; j < 16; ++j) {
    const int xh0 = int(((qh >> j) << 4) & 0x10);
    const int xh1 = int((qh >> (j + 12)) & 0x10);
    const int x0 = ((qs[j] & 0x0F) | xh0) - 16;
    const int x1 = ((qs[j] >> 4) | xh1) - 16;
    y[j] = float(x0) * d;
    y[j + 16] = float(x1) * d;
  }
}

void dequant_q5_1(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float m = load_f16(b + 2);
  const uint32_t qh = load_u32(b + 4);
  const uint8_t* qs = b + 8;
  for (int j = 0; j < 16; ++j) {
    const int xh0 = int(((qh >> j) << 4) & 0x10);
    const int xh1 = int((qh >> (j + 12)) & 0x10);
    const int x0 = (qs[j] & 0x0F) | xh0;
    const int x1 = (qs[j] >> 4) | xh1;
    y[j] = float(x0) * d + m;
    y[j + 16] = float(x1) * d + m;
  }
}

void dequant_q8_0(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const auto* qs = reinterpret_cast<const int8_t*>(b + 2);
  for (int j = 0; j < 32; ++j) y[j] = float(qs[j]) * d;
}

// K-quants: 256-element super-blocks.

void dequant_q4_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* q = b + 16;
  for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2, q += 32) {
    uint8_t sc, m;
    ggml_k_scale_min(is, scales, &sc, &m);
    const float d1 = d * float(sc);
    const float m1 = dmin * float(m);
    ggml_k_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * float(sc);
    const float m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0x0F) - m1;
    for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
  }
}

void dequant_q5_k(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const float dmin = load_f16(b + 2);
  const uint8_t* scales = b + 4;
  const uint8_t* qh = b + 16;
  const uint8_t* ql = b + 48;
  uint8_t u1 = 1, u2 = 2;
  for (int j = 0, is = 0; j < kQK_K; j += 64, is += 2, ql += 32) {
    uint8_t sc, m;
    ggml_k_scale_min(is, scales, &sc, &m);
    const float d1 = d * float(sc);
    const float m1 = dmin * float(m);
    ggml_k_scale_min(is + 1, scales, &sc, &m);
    const float d2 = d * float(sc);
    const float m2 = dmin * float(m);
    for (int l = 0; l < 32; ++l)
      *y++ = d1 * float((ql[l] & 0x0F) + ((qh[l] & u1) ? 16 : 0)) - m1;
    for (int l = 0; l < 32; ++l)
      *y++ = d2 * float((ql[l] >> 4) + ((qh[l] & u2) ? 16 : 0)) - m2;
    u1 = uint8_t(u1 << 2);
    u2 = uint8_t(u2 << 2);
  }
}

void dequant_q6_k(const uint8_t* b, float* y) {
  const uint8_t* ql = b;
  const uint8_t* qh = b + 128;
  const auto* sc = reinterpret_cast<const int8_t*>(b + 192);
  const float d = load_f16(b + 208);
  for (int n = 0; n < kQK_K; n += 128, y += 128, ql += 64, qh += 32, sc += 8) {
    for (int l = 0; l < 32; ++l) {
      const int is = l / 16;
      const int q1 = int((ql[l] & 0x0F) | (((qh[l] >> 0) & 3) << 4)) - 32;
      const int q2 = int((ql[l + 32] & 0x0F) | (((qh[l] >> 2) & 3) << 4)) - 32;
      const int q3 = int((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
      const int q4 = int((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
      y[l + 0] = d * float(sc[is + 0]) * float(q1);
      y[l + 32] = d * float(sc[is + 2]) * float(q2);
      y[l + 64] = d * float(sc[is + 4]) * float(q3);
      y[l + 96] = d * float(sc[is + 6]) * float(q4);
    }
  }
}

void dequant_q2_k(const uint8_t* b, float* y) {
  const uint8_t* scales = b;
  const uint8_t* q = b + 16;
  const float d = load_f16(b + 80);
  const float dmin = load_f16(b + 82);
  int is = 0;
  for (int n = 0; n < kQK_K; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2) {
      for (int half = 0; half < 2; ++half) {
        const uint8_t sc = scales[is++];
        const float dl = d * float(sc & 0x0F);
        const float ml = dmin * float(sc >> 4);
        for (int l = 0; l < 16; ++l) *y++ = dl * float((q[16 * half + l] >> shift) & 3) - ml;
      }
    }
  }
}

void dequant_q3_k(const uint8_t* b, float* y) {
  const uint8_t* hmask = b;
  const uint8_t* q = b + 32;
  int8_t scales[16];
  ggml_q3_k_scales(b + 96, scales);
  const float d_all = load_f16(b + 108);
  int is = 0;
  uint8_t m = 1;
  for (int n = 0; n < kQK_K; n += 128, q += 32) {
    for (int shift = 0; shift < 8; shift += 2, m = uint8_t(m << 1)) {
      for (int half = 0; half < 2; ++half) {
        const float dl = d_all * float(scales[is++]);
        for (int l = 16 * half; l < 16 * half + 16; ++l)
          *y++ = dl * float(int((q[l] >> shift) & 3) - ((hmask[l] & m) ? 0 : 4));
      }
    }
  }
}

void dequant_iq4_nl(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 2;
  for (int j = 0; j < 16; ++j) {
    y[j] = d * float(kIq4nlValues[qs[j] & 0x0F]);
    y[j + 16] = d * float(kIq4nlValues[qs[j] >> 4]);
  }
}

void dequant_iq4_xs(const uint8_t* b, float* y) {
  const float d = load_f16(b);
  const uint8_t* qs = b + 8;
  for (int ib = 0; ib < 8; ++ib, qs += 16, y += 32) {
    const float dl = d * float(ggml_iq4_xs_scale(b, ib) - 32);
    for (int j = 0; j < 16; ++j) {
      y[j] = dl * float(kIq4nlValues[qs[j] & 0x0F]);
      y[j + 16] = dl * float(kIq4nlValues[qs[j] >> 4]);
    }
  }
}

template <typename BlockFn>
void for_each_block(const uint8_t* row, int64_t n, const Layout& layout, float* out,
                    BlockFn fn) {
  const int64_t blocks = n / layout.block_size;
  for (int64_t i = 0; i < blocks; ++i)
    fn(row + size_t(i) * layout.block_bytes, out + i * layout.block_size);
}

}  // namespace

void ggml_k_scale_min(int j, const uint8_t* q, uint8_t* scale, uint8_t* min) {
  if (j < 4) {
    *scale = q[j] & 63;
    *min = q[j + 4] & 63;
  } else {
    *scale = uint8_t((q[j + 4] & 0x0F) | ((q[j - 4] >> 6) << 4));
    *min = uint8_t((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
  }
}

void ggml_q3_k_scales(const uint8_t* packed, int8_t out[16]) {
  // 12 bytes hold 16 6-bit values: the low 4 bits of value j in byte j % 8 (low nibble for
  // j < 8, high for j >= 8), the high 2 bits in bytes 8..11, two bits per value.
  for (int j = 0; j < 16; ++j) {
    const int low = (packed[j % 8] >> (j < 8 ? 0 : 4)) & 0x0F;
    const int high = (packed[8 + j % 4] >> (2 * (j / 4))) & 3;
    out[j] = int8_t((low | (high << 4)) - 32);
  }
}

int ggml_iq4_xs_scale(const uint8_t* block, int j) {
  const int scales_h = block[2] | (block[3] << 8);
  const int low = (block[4 + j / 2] >> (4 * (j % 2))) & 0x0F;
  return low | (((scales_h >> (2 * j)) & 3) << 4);
}

GgmlScaleFields ggml_block_scale_fields(int ggml_type) {
  switch (ggml_type) {
    case ggml_type::Q4_0: case ggml_type::Q5_0: case ggml_type::Q8_0:
    case ggml_type::IQ4_NL: case ggml_type::IQ4_XS: return {{0, -1}};
    case ggml_type::Q4_1: case ggml_type::Q5_1: case ggml_type::Q4_K: case ggml_type::Q5_K: return {{0, 2}};
    case ggml_type::Q2_K: return {{80, 82}};
    case ggml_type::Q3_K: return {{108, -1}};
    case ggml_type::Q6_K: return {{208, -1}};
    default: return {{-1, -1}};
  }
}

bool ggml_can_dequantize(int ggml_type) { return layout_of(ggml_type).name != nullptr; }

const char* ggml_blocks_type_name(int ggml_type) {
  const char* name = layout_of(ggml_type).name;
  return name != nullptr ? name : "unsupported ggml type";
}

int64_t ggml_block_size(int ggml_type) {
  return require_layout(ggml_type, "ggml_block_size").block_size;
}

size_t ggml_block_bytes(int ggml_type) {
  return require_layout(ggml_type, "ggml_block_bytes").block_bytes;
}

size_t ggml_row_bytes(int ggml_type, int64_t n) {
  const Layout layout = require_layout(ggml_type, "ggml_row_bytes");
  require_row_length(layout, n, "ggml_row_bytes");
  return size_t(n / layout.block_size) * layout.block_bytes;
}

void dequantize_ggml_row(int ggml_type, const void* row, int64_t n, float* out) {
  const Layout layout = require_layout(ggml_type, "dequantize_ggml_row");
  require_row_length(layout, n, "dequantize_ggml_row");
  const auto* bytes = static_cast<const uint8_t*>(row);
  switch (ggml_type) {
    case ggml_type::F32:
      if (n > 0) std::memcpy(out, row, size_t(n) * 4);
      return;
    case ggml_type::F16:
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(load_u16(bytes + 2 * i));
      return;
    case ggml_type::BF16:
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(load_u16(bytes + 2 * i));
      return;
    case ggml_type::Q4_0: for_each_block(bytes, n, layout, out, dequant_q4_0); return;
    case ggml_type::Q4_1: for_each_block(bytes, n, layout, out, dequant_q4_1); return;
    case ggml_type::Q5_0: for_each_block(bytes, n, layout, out, dequant_q5_0); return;
    case ggml_type::Q5_1: for_each_block(bytes, n, layout, out, dequant_q5_1); return;
    case ggml_type::Q8_0: for_each_block(bytes, n, layout, out, dequant_q8_0); return;
    case ggml_type::Q2_K: for_each_block(bytes, n, layout, out, dequant_q2_k); return;
    case ggml_type::Q3_K: for_each_block(bytes, n, layout, out, dequant_q3_k); return;
    case ggml_type::IQ4_NL: for_each_block(bytes, n, layout, out, dequant_iq4_nl); return;
    case ggml_type::IQ4_XS: for_each_block(bytes, n, layout, out, dequant_iq4_xs); return;
    case ggml_type::Q4_K: for_each_block(bytes, n, layout, out, dequant_q4_k); return;
    case ggml_type::Q5_K: for_each_block(bytes, n, layout, out, dequant_q5_k); return;
    case ggml_type::Q6_K: for_each_block(bytes, n, layout, out, dequant_q6_k); return;
    default: return;  // unreachable: require_layout refused it
  }
}

}  // namespace lumen::quant

// The scalar reference of the block-format kernels (block_matmul.h), the activation
// quantizer, the format table and the threaded driver (decode and prefill tiling).
#include "kernels/block_matmul.h"

#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cmath>
#include <cstring>
#include <string>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/bf16_matmul.h"
#include "kernels/matmul.h"
#include "kernels/qmatmul.h"
#include "kernels/thread_pool.h"
#include "quant/ggml_blocks.h"

namespace lumen::kernels {

namespace {

using quant::WeightFormat;

inline float f16_at(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}

// 32 nibbles of a 16-byte qs array in element order (low nibbles are elements 0..15).
inline void nibbles32(const uint8_t* qs, int* out) {
  for (int j = 0; j < 16; ++j) {
    out[j] = qs[j] & 0x0F;
    out[j + 16] = qs[j] >> 4;
  }
}

// Decodes 32-element sub-block k of the ggml block at `b` into the canonical integers and
// per-half scale and min (block_matmul.h).
void decode_block32(WeightFormat f, const uint8_t* b, int k, int8_t* w, float* sw, float* mw) {
  int v[32];
  mw[0] = mw[1] = 0.0f;
  switch (f) {
    case WeightFormat::Q4_0:
      nibbles32(b + 2, v);
      for (int j = 0; j < 32; ++j) w[j] = int8_t(v[j] - 8);
      sw[0] = sw[1] = f16_at(b);
      return;
    case WeightFormat::Q4_1:
      nibbles32(b + 4, v);
      for (int j = 0; j < 32; ++j) w[j] = int8_t(v[j]);
      sw[0] = sw[1] = f16_at(b);
      mw[0] = mw[1] = f16_at(b + 2);
      return;
    case WeightFormat::Q5_0:
    case WeightFormat::Q5_1: {
      const bool one = f == WeightFormat::Q5_1;
      uint32_t qh;
      std::memcpy(&qh, b + (one ? 4 : 2), 4);
      nibbles32(b + (one ? 8 : 6), v);
      for (int j = 0; j < 32; ++j) w[j] = int8_t((v[j] | (((qh >> j) & 1) << 4)) - (one ? 0 : 16));
      sw[0] = sw[1] = f16_at(b);
      if (one) mw[0] = mw[1] = f16_at(b + 2);
      return;
    }
    case WeightFormat::Q8_0:
      std::memcpy(w, b + 2, 32);
      sw[0] = sw[1] = f16_at(b);
      return;
    case WeightFormat::IQ4_NL:
      nibbles32(b + 2, v);
      for (int j = 0; j < 32; ++j) w[j] = quant::kIq4nlValues[v[j]];
      sw[0] = sw[1] = f16_at(b);
      return;
    case WeightFormat::Q2_K: {
      // Half n = k / 4 of the block: 32 bytes of qs; shift 2 * (k % 4); scales 2k, 2k + 1.
      const uint8_t* q = b + 16 + 32 * (k / 4);
      const int shift = 2 * (k % 4);
      for (int j = 0; j < 32; ++j) w[j] = int8_t((q[j] >> shift) & 3);
      const float d = f16_at(b + 80), dmin = f16_at(b + 82);
      for (int h = 0; h < 2; ++h) {
        const uint8_t sc = b[2 * k + h];
        sw[h] = d * float(sc & 0x0F);
        mw[h] = -(dmin * float(sc >> 4));
      }
      return;
    }
    case WeightFormat::Q3_K: {
      const uint8_t* hmask = b;
      const uint8_t* q = b + 32 + 32 * (k / 4);
      const int shift = 2 * (k % 4);
      const int m = 1 << k;
      for (int j = 0; j < 32; ++j) w[j] = int8_t(((q[j] >> shift) & 3) - ((hmask[j] & m) ? 0 : 4));
      int8_t scales[16];
      quant::ggml_q3_k_scales(b + 96, scales);
      const float d = f16_at(b + 108);
      sw[0] = d * float(scales[2 * k]);
      sw[1] = d * float(scales[2 * k + 1]);
      return;
    }
    case WeightFormat::Q4_K:
    case WeightFormat::Q5_K: {
      const bool five = f == WeightFormat::Q5_K;
      const uint8_t* ql = b + (five ? 48 : 16) + 32 * (k / 2);
      const int shift = 4 * (k % 2);
      for (int j = 0; j < 32; ++j) {
        int x = (ql[j] >> shift) & 0x0F;
        if (five) x |= ((b[16 + j] >> k) & 1) << 4;
        w[j] = int8_t(x);
      }
      uint8_t sc, mn;
      quant::ggml_k_scale_min(k, b + 4, &sc, &mn);
      sw[0] = sw[1] = f16_at(b) * float(sc);
      mw[0] = mw[1] = -(f16_at(b + 2) * float(mn));
      return;
    }
    case WeightFormat::Q6_K: {
      // Half n = k / 4 (128 elements): ql 64 bytes, qh 32 bytes; sub-block k % 4 of it.
      const int n = k / 4, s = k % 4;
      const uint8_t* ql = b + 64 * n + (s % 2) * 32;
      const uint8_t* qh = b + 128 + 32 * n;
      for (int j = 0; j < 32; ++j) {
        const int low = (s < 2 ? ql[j] : ql[j] >> 4) & 0x0F;
        const int high = (qh[j] >> (2 * s)) & 3;
        w[j] = int8_t((low | (high << 4)) - 32);
      }
      const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
      const float d = f16_at(b + 208);
      sw[0] = d * float(scales[2 * k]);
      sw[1] = d * float(scales[2 * k + 1]);
      return;
    }
    case WeightFormat::IQ4_XS: {
      nibbles32(b + 8 + 16 * k, v);
      for (int j = 0; j < 32; ++j) w[j] = quant::kIq4nlValues[v[j]];
      sw[0] = sw[1] = f16_at(b) * float(quant::ggml_iq4_xs_scale(b, k) - 32);
      return;
    }
    default:
      throw Error(std::string("block kernels: format ") + quant::format_name(f) + " is not a ggml block format");
  }
}

// Column j's activation integer: q, or Q = 256 q + q_lo with split activations (ql set).
inline int32_t activation_integer(const int8_t* q, const int8_t* ql, int64_t j) {
  return ql != nullptr ? 256 * q[j] + ql[j] : q[j];
}

// The integer scales of 32-element sub-block k of a 256-element block (per half; equal for
// the formats with one scale per 32) and the block's d: sw = d * sc (block_matmul.h).
void integer_scales32(WeightFormat f, const uint8_t* b, int k, int* sc, float* d) {
  switch (f) {
    case WeightFormat::Q2_K:
      *d = f16_at(b + 80);
      sc[0] = b[2 * k] & 0x0F;
      sc[1] = b[2 * k + 1] & 0x0F;
      return;
    case WeightFormat::Q3_K: {
      int8_t scales[16];
      quant::ggml_q3_k_scales(b + 96, scales);
      *d = f16_at(b + 108);
      sc[0] = scales[2 * k];
      sc[1] = scales[2 * k + 1];
      return;
    }
    case WeightFormat::Q4_K:
    case WeightFormat::Q5_K: {
      uint8_t s, m;
      quant::ggml_k_scale_min(k, b + 4, &s, &m);
      *d = f16_at(b);
      sc[0] = sc[1] = s;
      return;
    }
    case WeightFormat::Q6_K: {
      const auto* scales = reinterpret_cast<const int8_t*>(b + 192);
      *d = f16_at(b + 208);
      sc[0] = scales[2 * k];
      sc[1] = scales[2 * k + 1];
      return;
    }
    case WeightFormat::IQ4_XS:
      *d = f16_at(b);
      sc[0] = sc[1] = quant::ggml_iq4_xs_scale(b, k) - 32;
      return;
    default:
      throw Error(std::string("block kernels: format ") + quant::format_name(f) + " has no integer sub-block scales");
  }
}

// Sub-blocks of 32 per conversion group of the 256-element formats (block_matmul.h).
constexpr int conversion_subs(WeightFormat f) {
  return f == WeightFormat::Q6_K || f == WeightFormat::IQ4_XS ? 4 : 8;
}

// Scalar tile of the 256-element formats: per conversion group the exact integer
// sum of sc * w * q, then one f32 product with d * dx; the min terms per half.
template <WeightFormat F>
void tile_scalar_k(const std::byte* rows, size_t row_bytes, int nr, const BlockActivations& a, int64_t t0, int nt,
                   float* y, int64_t ldy) {
  const auto& info = quant::format_info(F);
  constexpr int kGroupSubs = conversion_subs(F);
  for (int r = 0; r < nr; ++r) {
    const auto* row = reinterpret_cast<const uint8_t*>(rows + size_t(r) * row_bytes);
    for (int i = 0; i < nt; ++i) {
      const int8_t* q = a.q_of(t0 + i);
      const int8_t* ql = a.q_lo != nullptr ? a.q_lo_of(t0 + i) : nullptr;
      const float* dx = a.d_of(t0 + i);
      const float* hs = a.half_sums_of(t0 + i);
      float acc = 0.0f;
      for (int64_t sb = 0; sb < a.K / 256; ++sb) {
        const uint8_t* b = row + size_t(sb) * info.block_bytes;
        float mins = 0.0f;
        for (int g = 0; g < 8; g += kGroupSubs) {
          int64_t isum = 0;
          float d = 0.0f;
          for (int k = g; k < g + kGroupSubs; ++k) {
            const int64_t c = sb * 8 + k;
            int8_t w[32];
            float sw[2], mw[2];
            int sc[2];
            decode_block32(F, b, k, w, sw, mw);
            integer_scales32(F, b, k, sc, &d);
            for (int j = 0; j < 32; ++j) isum += int64_t(sc[j / 16]) * w[j] * activation_integer(q, ql, c * 32 + j);
            mins += mw[0] * hs[2 * c] + mw[1] * hs[2 * c + 1];
          }
          acc += (d * dx[sb * 8]) * float(isum);
        }
        acc += mins;
      }
      y[(t0 + i) * ldy + r] = acc;
    }
  }
}

// Scalar tile: the canonical sum, one row and token at a time, block order.
template <WeightFormat F>
void tile_scalar(const std::byte* rows, size_t row_bytes, int nr, const BlockActivations& a, int64_t t0, int nt,
                 float* y, int64_t ldy) {
  const auto& info = quant::format_info(F);
  const int64_t K = a.K;
  const int sub = int(info.block_elems / 32);
  for (int r = 0; r < nr; ++r) {
    const auto* row = reinterpret_cast<const uint8_t*>(rows + size_t(r) * row_bytes);
    for (int i = 0; i < nt; ++i) {
      const int8_t* q = a.q_of(t0 + i);
      const int8_t* ql = a.q_lo != nullptr ? a.q_lo_of(t0 + i) : nullptr;
      const float* dx = a.d_of(t0 + i);
      const float* hs = a.half_sums_of(t0 + i);
      float acc = 0.0f;
      for (int64_t c = 0; c < K / 32; ++c) {
        int8_t w[32];
        float sw[2], mw[2];
        decode_block32(F, row + size_t(c / sub) * info.block_bytes, int(c % sub), w, sw, mw);
        for (int h = 0; h < 2; ++h) {
          int32_t isum = 0;
          for (int j = 16 * h; j < 16 * h + 16; ++j) {
            isum += int32_t(w[j]) * activation_integer(q, ql, c * 32 + j);
          }
          acc += sw[h] * dx[c] * float(isum) + mw[h] * hs[2 * c + h];
        }
      }
      y[(t0 + i) * ldy + r] = acc;
    }
  }
}

template <WeightFormat F>
constexpr BlockTileFn scalar_tile_of() {
  if constexpr (quant::WeightFormat(F) == WeightFormat::Q2_K || F == WeightFormat::Q3_K || F == WeightFormat::Q4_K ||
                F == WeightFormat::Q5_K || F == WeightFormat::Q6_K || F == WeightFormat::IQ4_XS)
    return tile_scalar_k<F>;
  else
    return tile_scalar<F>;
}

}  // namespace

namespace detail {

void decode_block_row_scalar(WeightFormat format, const void* row, int64_t n, int8_t* w, float* sw, float* mw) {
  const auto& info = quant::format_info(format);
  const int sub = int(info.block_elems / 32);
  const auto* bytes = static_cast<const uint8_t*>(row);
  for (int64_t c = 0; c < n / 32; ++c)
    decode_block32(format, bytes + size_t(c / sub) * info.block_bytes, int(c % sub), w + 32 * c, sw + 2 * c,
                   mw + 2 * c);
}

BlockTileFn block_tile_scalar(WeightFormat format) {
  switch (format) {
    case WeightFormat::Q4_0: return scalar_tile_of<WeightFormat::Q4_0>();
    case WeightFormat::Q4_1: return scalar_tile_of<WeightFormat::Q4_1>();
    case WeightFormat::Q5_0: return scalar_tile_of<WeightFormat::Q5_0>();
    case WeightFormat::Q5_1: return scalar_tile_of<WeightFormat::Q5_1>();
    case WeightFormat::Q8_0: return scalar_tile_of<WeightFormat::Q8_0>();
    case WeightFormat::Q2_K: return scalar_tile_of<WeightFormat::Q2_K>();
    case WeightFormat::Q3_K: return scalar_tile_of<WeightFormat::Q3_K>();
    case WeightFormat::Q4_K: return scalar_tile_of<WeightFormat::Q4_K>();
    case WeightFormat::Q5_K: return scalar_tile_of<WeightFormat::Q5_K>();
    case WeightFormat::Q6_K: return scalar_tile_of<WeightFormat::Q6_K>();
    case WeightFormat::IQ4_NL: return scalar_tile_of<WeightFormat::IQ4_NL>();
    case WeightFormat::IQ4_XS: return scalar_tile_of<WeightFormat::IQ4_XS>();
    default: return nullptr;
  }
}

}  // namespace detail

int64_t activation_group(WeightFormat format) {
  switch (format) {
    case WeightFormat::Q2_K:
    case WeightFormat::Q3_K:
    case WeightFormat::Q4_K:
    case WeightFormat::Q5_K:
    case WeightFormat::Q6_K:
    case WeightFormat::IQ4_XS: return 256;
    default: return 32;
  }
}

void quantize_block_activations(const float* x, int64_t K, int8_t* q, float* d, float* half_sums,
                                int32_t* lane_sums, Isa isa, int64_t group) {
  if (group != 32 && group != 256) throw Error("block kernels: activation group " + std::to_string(group) + " is not 32 or 256");
  if (K % group != 0)
    throw Error("block kernels: " + std::to_string(K) + " columns are not whole groups of " + std::to_string(group));
  if (isa != Isa::Scalar) return detail::quantize_block_activations_avx2(x, K, q, d, half_sums, lane_sums, group);
  for (int64_t g = 0; g < K / group; ++g) {
    float amax = 0.0f;
    for (int64_t j = g * group; j < (g + 1) * group; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float dx = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int64_t c = g * (group / 32); c < (g + 1) * (group / 32); ++c) {
      const float* v = x + 32 * c;
      int8_t* qc = q + 32 * c;
      for (int j = 0; j < 32; ++j) qc[j] = int8_t(std::nearbyint(v[j] * id));  // to nearest even
      d[c] = dx;
      for (int h = 0; h < 2; ++h) {
        int32_t s = 0;
        for (int j = 16 * h; j < 16 * h + 16; ++j) s += qc[j];
        half_sums[2 * c + h] = dx * float(s);
      }
      for (int l = 0; l < 8; ++l) lane_sums[8 * c + l] = qc[4 * l] + qc[4 * l + 1] + qc[4 * l + 2] + qc[4 * l + 3];
    }
  }
}

namespace {
std::atomic<int> g_block_mode{-1};  // -1: not read from the environment yet

// The low plane of 32 split activations: lo = round-to-nearest-even((v - q dh) / dl), clamped
// to +-127 (0 where dl is 0). This file is compiled for the baseline ISA, so every ISA gets
// these bytes from the same instructions; SSE2 (the x86-64 baseline) does 4 at a time what
// the scalar loop does one by one (its conversion rounds to nearest even, as nearbyint).
void residual_lo32(const float* v, const int8_t* q, float dh, float dl, int8_t* lo) {
  if (dl == 0.0f) {
    std::memset(lo, 0, 32);
    return;
  }
#ifdef __SSE2__
  const __m128 dhv = _mm_set1_ps(dh), dlv = _mm_set1_ps(dl);
  for (int half = 0; half < 2; ++half) {
    const __m128i qb = _mm_loadu_si128(reinterpret_cast<const __m128i*>(q + 16 * half));
    const __m128i q16[2] = {_mm_srai_epi16(_mm_unpacklo_epi8(qb, qb), 8), _mm_srai_epi16(_mm_unpackhi_epi8(qb, qb), 8)};
    __m128i l16[2];
    for (int i = 0; i < 2; ++i) {
      __m128i l32[2];
      for (int j = 0; j < 2; ++j) {
        const __m128i qi = _mm_srai_epi32(j ? _mm_unpackhi_epi16(q16[i], q16[i]) : _mm_unpacklo_epi16(q16[i], q16[i]), 16);
        const __m128 r = _mm_sub_ps(_mm_loadu_ps(v + 16 * half + 8 * i + 4 * j), _mm_mul_ps(_mm_cvtepi32_ps(qi), dhv));
        l32[j] = _mm_cvtps_epi32(_mm_div_ps(r, dlv));
      }
      l16[i] = _mm_max_epi16(_mm_min_epi16(_mm_packs_epi32(l32[0], l32[1]), _mm_set1_epi16(127)), _mm_set1_epi16(-127));
    }
    _mm_storeu_si128(reinterpret_cast<__m128i*>(lo + 16 * half), _mm_packs_epi16(l16[0], l16[1]));
  }
#else
  for (int j = 0; j < 32; ++j) {
    const float l = std::nearbyint((v[j] - float(q[j]) * dh) / dl);
    lo[j] = int8_t(std::clamp(l, -127.0f, 127.0f));
  }
#endif
}
}  // namespace

BlockActivationMode block_activations() {
  int v = g_block_mode.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("LUMEN_BLOCK_ACT");
    const std::string name = env != nullptr ? env : "int8x2";
    if (name == "int8") v = int(BlockActivationMode::Int8);
    else if (name == "int8x2") v = int(BlockActivationMode::Int8x2);
    else throw Error("LUMEN_BLOCK_ACT=" + in_quotes(name) + " is not one of: int8, int8x2");
    g_block_mode.store(v, std::memory_order_relaxed);
  }
  return BlockActivationMode(v);
}

void set_block_activations(BlockActivationMode mode) { g_block_mode.store(int(mode), std::memory_order_relaxed); }

const BlockActivations& BlockActivationBuffer::quantize(const float* x, int64_t T, int64_t K, Isa isa,
                                                        BlockActivationMode mode, int64_t group) {
  if (K % 32 != 0) throw Error("block kernels: " + std::to_string(K) + " columns are not whole 32-element blocks");
  if (group != 32 && group != 256) throw Error("block kernels: activation group " + std::to_string(group) + " is not 32 or 256");
  if (K % group != 0)
    throw Error("block kernels: " + std::to_string(K) + " columns are not whole groups of " + std::to_string(group));
  const bool split = mode == BlockActivationMode::Int8x2;
  auto round64 = [](size_t n) { return (n + 63) / 64 * 64; };
  const size_t q_bytes = round64(size_t(T * K)), d_bytes = round64(size_t(T * (K / 32)) * 4),
               h_bytes = round64(size_t(T * (K / 16)) * 4), l_bytes = round64(size_t(T * (K / 4)) * 4);
  const size_t lo_bytes = split ? 3 * q_bytes : 0;  // q_lo, then q16
  const size_t need = q_bytes + lo_bytes + 2 * d_bytes + h_bytes + l_bytes + 64;
  if (storage_.size() < need) storage_.resize(need);
  auto* base = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(storage_.data()) + 63) & ~uintptr_t(63));
  acts_.K = K;
  acts_.T = T;
  acts_.group = group;
  acts_.q = reinterpret_cast<int8_t*>(base);
  acts_.d = reinterpret_cast<float*>(base + q_bytes);
  acts_.half_sums = reinterpret_cast<float*>(base + q_bytes + d_bytes);
  acts_.lane_sums = reinterpret_cast<int32_t*>(base + q_bytes + d_bytes + h_bytes);
  acts_.block_sums = reinterpret_cast<float*>(base + q_bytes + d_bytes + h_bytes + l_bytes);
  acts_.q_lo = split ? reinterpret_cast<int8_t*>(base + q_bytes + 2 * d_bytes + h_bytes + l_bytes) : nullptr;
  acts_.q16 = split ? reinterpret_cast<int16_t*>(base + 2 * q_bytes + 2 * d_bytes + h_bytes + l_bytes) : nullptr;
  auto one = [&](int64_t t) {
    const float* v = x + t * K;
    int8_t* q = acts_.q + t * K;
    float* d = acts_.d + t * (K / 32);
    float* half = acts_.half_sums + t * (K / 16);
    int32_t* lanes = acts_.lane_sums + t * (K / 4);
    float* block = acts_.block_sums + t * (K / 32);
    quantize_block_activations(v, K, q, d, half, lanes, isa, group);
    if (split) {
      // The residual at the fixed scale d / 256, in f32 by this (baseline-compiled) code
      // whatever the ISA, so both planes are bit-identical on every ISA. Then d, the lane
      // sums and the half sums become those of Q = 256 q + q_lo.
      int8_t* lo = acts_.q_lo + t * K;
      for (int64_t c = 0; c < K / 32; ++c) {
        const float dh = d[c], dl = dh / 256.0f;
        residual_lo32(v + 32 * c, q + 32 * c, dh, dl, lo + 32 * c);
        // Q as int16 in the prefill kernels' order: elements 4l, 4l + 1, then 4l + 2, 4l + 3.
        // (Constant indices: the earlier element-by-element index arithmetic was ~6% of the
        // 270M's prefill.)
        int16_t* q16 = acts_.q16 + t * K + 32 * c;
        const int8_t* qc = q + 32 * c;
        const int8_t* lc = lo + 32 * c;
        for (int l = 0; l < 8; ++l) {
          const int e = 4 * l;
          q16[2 * l] = int16_t(256 * qc[e] + lc[e]);
          q16[2 * l + 1] = int16_t(256 * qc[e + 1] + lc[e + 1]);
          q16[16 + 2 * l] = int16_t(256 * qc[e + 2] + lc[e + 2]);
          q16[16 + 2 * l + 1] = int16_t(256 * qc[e + 3] + lc[e + 3]);
          lanes[8 * c + l] = 256 * lanes[8 * c + l] + lc[e] + lc[e + 1] + lc[e + 2] + lc[e + 3];
        }
        d[c] = dl;
        for (int h = 0; h < 2; ++h) {
          const int32_t* lh = lanes + 8 * c + 4 * h;
          half[2 * c + h] = dl * float(lh[0] + lh[1] + lh[2] + lh[3]);
        }
      }
    }
    for (int64_t c = 0; c < K / 32; ++c) {
      int32_t s = 0;
      for (int l = 0; l < 8; ++l) s += lanes[8 * c + l];
      block[c] = d[c] * float(s);
    }
  };
  if (T > 1) {
    ThreadPool::global().parallel_for(T, [&](int64_t a, int64_t b) {
      for (int64_t t = a; t < b; ++t) one(t);
    });
  } else if (T == 1) {
    one(0);
  }
  return acts_;
}

namespace {

BlockTileFn tile_for(WeightFormat format, Isa isa) {
  BlockTileFn fn = nullptr;
  if (isa == Isa::Avx512) fn = detail::block_tile_avx512(format);
  if (!fn && isa != Isa::Scalar) fn = detail::block_tile_avx2(format);
  if (!fn) fn = detail::block_tile_scalar(format);
  return fn;
}

}  // namespace

void block_matmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa) {
  block_matmul_isa(x, T, w, y, isa, block_activations());
}

namespace {

BlockPrefillFns prefill_for(WeightFormat format, Isa isa) {
  if (isa == Isa::Avx512) return detail::block_prefill_avx512(format);
  if (isa == Isa::Avx2) return detail::block_prefill_avx2(format);
  return {};
}

// Prefill with split activations: each thread decodes a block of its rows (~1 MiB of int16
// rows, stays in L2) once, then runs every token through it in chunks of kTokenChunk (whose
// activations stay in cache while the block's row groups pass). The block is large because
// every token's activations are read once per block: at 64 KiB (4 rows of a 3840-column
// matrix) a 512-token prompt's activations (4 MB, past L2) came from L3 for every 4 rows, and
// the 12B shape's pp512 ran at 9.5 tokens/s; 768 KiB-1.5 MiB gave 16.5 (3 MiB: 13.9).
constexpr int64_t kDecodedBlockBytes = int64_t(1) << 20;
void block_prefill(const BlockPrefillFns& fns, const BlockActivations& acts, const quant::WeightMatrix& w, float* y) {
  constexpr int64_t kTokenChunk = 16;
  const int64_t K = w.cols, N = w.rows, T = acts.T;
  const size_t row_bytes = w.row_bytes();
  const size_t dec_row = size_t(K) / fns.block_elems * fns.block_bytes;
  const auto* base = static_cast<const std::byte*>(w.data);
  const int64_t groups = (N + kBlockTileRows - 1) / kBlockTileRows;
  const int64_t block_groups = std::max<int64_t>(1, kDecodedBlockBytes / int64_t(dec_row * kBlockTileRows));
  ThreadPool::global().parallel_for(groups, [&](int64_t g0, int64_t g1) {
    thread_local std::vector<std::byte> storage;
    const size_t need = size_t(block_groups * kBlockTileRows) * dec_row + 32;
    if (storage.size() < need) storage.resize(need);
    auto* dec = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(storage.data()) + 31) & ~uintptr_t(31));
    for (int64_t b0 = g0; b0 < g1; b0 += block_groups) {
      const int64_t b1 = std::min(g1, b0 + block_groups);
      const int64_t first_row = b0 * kBlockTileRows, rows = std::min(N, b1 * kBlockTileRows) - first_row;
      fns.decode(base + size_t(first_row) * row_bytes, row_bytes, int(rows), K, dec);
      for (int64_t t = 0; t < T; t += kTokenChunk) {
        const int nt = int(std::min<int64_t>(kTokenChunk, T - t));
        for (int64_t r0 = first_row; r0 < first_row + rows; r0 += kBlockTileRows) {
          const int nr = int(std::min<int64_t>(kBlockTileRows, N - r0));
          fns.gemm(dec + size_t(r0 - first_row) * dec_row, dec_row, nr, acts, t, nt, y + r0, N);
        }
      }
    }
  });
}

}  // namespace

namespace {

void check_block_format(const quant::WeightMatrix& w) {
  if (!quant::is_ggml_block_format(w.format))
    throw Error(std::string("block kernels: format ") + quant::format_name(w.format) + " is not a ggml block format");
}

// Several tokens with split activations: decode the rows once (bit-identical to the tiles).
constexpr int64_t kPrefillMinTokens = 4;

// y = acts W^T with the activations already quantized.
void block_matmul_quantized(const BlockActivations& acts, const quant::WeightMatrix& w, float* y, Isa isa) {
  const int64_t T = acts.T, N = w.rows;
  if (acts.group != activation_group(w.format))
    throw Error(std::string("block kernels: ") + quant::format_name(w.format) + " takes activations in groups of " +
                std::to_string(activation_group(w.format)) + ", not " + std::to_string(acts.group));
  if (acts.q16 != nullptr && T >= kPrefillMinTokens) {
    const BlockPrefillFns fns = prefill_for(w.format, isa);
    if (fns.gemm != nullptr) return block_prefill(fns, acts, w, y);
  }
  const BlockTileFn tile = tile_for(w.format, isa);
  const size_t row_bytes = w.row_bytes();
  const auto* base = static_cast<const std::byte*>(w.data);
  const int64_t groups = (N + kBlockTileRows - 1) / kBlockTileRows;
  // Weight-stationary blocking for several tokens: a block of rows (~128 KiB, stays in L2)
  // meets every token group in turn, so the weights are read from memory once per call.
  const int64_t block_groups =
      std::max<int64_t>(1, int64_t(128 << 10) / int64_t(row_bytes * kBlockTileRows));
  ThreadPool::global().parallel_for(groups, [&](int64_t g0, int64_t g1) {
    for (int64_t b0 = g0; b0 < g1; b0 += block_groups) {
      const int64_t b1 = std::min(g1, b0 + block_groups);
      for (int64_t t = 0; t < T; t += kBlockTileTokens) {
        const int nt = int(std::min<int64_t>(kBlockTileTokens, T - t));
        for (int64_t g = b0; g < b1; ++g) {
          const int64_t r0 = g * kBlockTileRows;
          const int nr = int(std::min<int64_t>(kBlockTileRows, N - r0));
          tile(base + size_t(r0) * row_bytes, row_bytes, nr, acts, t, nt, y + r0, N);
        }
      }
    }
  });
}

}  // namespace

void block_matmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa,
                      BlockActivationMode mode) {
  check_block_format(w);
  if (T <= 0 || w.rows <= 0) return;
  thread_local BlockActivationBuffer buffer;
  block_matmul_quantized(buffer.quantize(x, T, w.cols, isa, mode, activation_group(w.format)), w, y, isa);
}

void block_matmul_shared_isa(const float* x, int64_t T, std::span<const quant::WeightMatrix* const> ws,
                             std::span<float* const> ys, Isa isa, BlockActivationMode mode) {
  if (ws.size() != ys.size())
    throw Error("block kernels: " + std::to_string(ws.size()) + " matrices but " + std::to_string(ys.size()) +
                " outputs");
  if (ws.empty() || T <= 0) return;
  const int64_t K = ws[0]->cols;
  for (const auto* w : ws) {
    check_block_format(*w);
    if (w->cols != K)
      throw Error("block kernels: matrices sharing an input have " + std::to_string(K) + " and " +
                  std::to_string(w->cols) + " columns");
  }
  // The activations once per scale group the formats need (32 and/or 256 columns).
  thread_local BlockActivationBuffer buffer32, buffer256;
  const BlockActivations* by_group[2] = {nullptr, nullptr};
  auto acts_for = [&](const quant::WeightMatrix& w) -> const BlockActivations& {
    const int64_t group = activation_group(w.format);
    const int i = group == 256;
    if (by_group[i] == nullptr) by_group[i] = &(i ? buffer256 : buffer32).quantize(x, T, K, isa, mode, group);
    return *by_group[i];
  };
  // One token: the row groups of all the matrices in one pool call (up to kMaxShared of them).
  constexpr size_t kMaxShared = 8;
  if (T > 1 || ws.size() > kMaxShared) {
    for (size_t i = 0; i < ws.size(); ++i) block_matmul_quantized(acts_for(*ws[i]), *ws[i], ys[i], isa);
    return;
  }
  int64_t first_group[kMaxShared + 1] = {0};
  BlockTileFn tiles[kMaxShared];
  const BlockActivations* acts[kMaxShared];
  for (size_t i = 0; i < ws.size(); ++i) {
    first_group[i + 1] = first_group[i] + (ws[i]->rows + kBlockTileRows - 1) / kBlockTileRows;
    tiles[i] = tile_for(ws[i]->format, isa);
    acts[i] = &acts_for(*ws[i]);
  }
  ThreadPool::global().parallel_for(first_group[ws.size()], [&](int64_t g0, int64_t g1) {
    size_t i = 0;
    for (int64_t g = g0; g < g1; ++g) {
      while (g >= first_group[i + 1]) ++i;
      const quant::WeightMatrix& w = *ws[i];
      const int64_t r0 = (g - first_group[i]) * kBlockTileRows;
      const int nr = int(std::min<int64_t>(kBlockTileRows, w.rows - r0));
      tiles[i](static_cast<const std::byte*>(w.data) + size_t(r0) * w.row_bytes(), w.row_bytes(), nr, *acts[i], 0, 1,
               ys[i] + r0, w.rows);
    }
  });
}

namespace {

void block_matmul_entry(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa) {
  block_matmul_isa(x, T, w, y, isa);
}

void interleaved_matmul_entry(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa) {
  qmatmul_isa(x, T, w, y, isa);
}

void f32_matmul_entry(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa) {
  matmul_expanded(x, T, w, y, isa);
}

void bf16_matmul_entry(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa) {
  bf16_matmul_isa(x, T, w, y, isa);
}

template <WeightFormat F>
constexpr FormatKernels block_row() {
  return {F, ActivationKind::Q8x32, {nullptr, nullptr, nullptr}, block_matmul_entry};
}

const FormatKernels kTable[quant::kWeightFormatCount] = {
    {WeightFormat::F32, ActivationKind::F32, {}, f32_matmul_entry},
    {WeightFormat::F16, ActivationKind::F32, {}, f32_matmul_entry},
    {WeightFormat::BF16, ActivationKind::Bf16Pair, {}, bf16_matmul_entry},
    block_row<WeightFormat::Q8_0>(),
    block_row<WeightFormat::Q4_0>(),
    block_row<WeightFormat::Q4_1>(),
    block_row<WeightFormat::Q5_0>(),
    block_row<WeightFormat::Q5_1>(),
    block_row<WeightFormat::Q2_K>(),
    block_row<WeightFormat::Q3_K>(),
    block_row<WeightFormat::Q4_K>(),
    block_row<WeightFormat::Q5_K>(),
    block_row<WeightFormat::Q6_K>(),
    block_row<WeightFormat::IQ4_NL>(),
    block_row<WeightFormat::IQ4_XS>(),
    {WeightFormat::Q4_0X4, ActivationKind::Q8Chunk, {}, interleaved_matmul_entry},
    {WeightFormat::Q8_0X4, ActivationKind::Q8Chunk, {}, interleaved_matmul_entry},
};

// The tiles are filled in at first use (they live in other translation units).
struct TableWithTiles {
  FormatKernels rows[quant::kWeightFormatCount];
  TableWithTiles() {
    for (int f = 0; f < quant::kWeightFormatCount; ++f) {
      rows[f] = kTable[f];
      if (int(rows[f].format) != f) throw Error("kernels: format table out of order");
      if (rows[f].activations == ActivationKind::Q8x32)
        for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) rows[f].tile[int(isa)] = tile_for(WeightFormat(f), isa);
    }
  }
};

}  // namespace

const FormatKernels& format_kernels(WeightFormat format) {
  static const TableWithTiles table;
  return table.rows[int(format)];
}

}  // namespace lumen::kernels

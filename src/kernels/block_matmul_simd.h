// The SIMD tiles of the block-format kernels (block_matmul.h), written once for 256-bit
// registers and included by block_matmul_avx2.cpp (vpmaddubsw + vpmaddwd) and
// block_matmul_avx512.cpp (AVX-512 VNNI's vpdpbusd on 256-bit registers, 32 of them, so the
// tile is larger). LUMEN_BLOCK_VNNI selects the integer dot; everything else is shared.
//
// Per format a decoder turns 32-element sub-block k of a ggml block into 32 bytes in element
// order, either unsigned with an offset (value = byte - kOffset; the offset is removed
// exactly with the activations' lane sums) or, for the formats whose values span all of
// int8 (Q8_0, IQ4), signed; plus the 8-lane scale vector [sw0 x 4, sw1 x 4] and, for the
// formats with mins, the min term of a whole block.
#pragma once

#ifndef LUMEN_TEST_SIMDE_AVX512
#include <immintrin.h>
#endif

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/block_matmul.h"
#include "quant/ggml_blocks.h"

// Internal linkage: each including file compiles this code for its own ISA, so the same
// names must never be merged across translation units by the linker.
namespace lumen::kernels::simd {
namespace {

using quant::WeightFormat;

inline float f16(const uint8_t* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return _cvtsh_ss(h);
}

inline __m256i nibbles32(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m128i m = _mm_set1_epi8(0x0F);
  return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m), _mm_and_si128(q, m));
}

// 0xFF in byte j where bit j of the 32 bits at x is set.
inline __m256i bytes_from_bits32(const uint8_t* x) {
  uint32_t bits;
  std::memcpy(&bits, x, 4);
  const __m256i shuf = _mm256_set_epi64x(0x0303030303030303, 0x0202020202020202, 0x0101010101010101, 0);
  __m256i bytes = _mm256_shuffle_epi8(_mm256_set1_epi32(int(bits)), shuf);
  bytes = _mm256_or_si256(bytes, _mm256_set1_epi64x(0x7fbfdfeff7fbfdfe));
  return _mm256_cmpeq_epi8(bytes, _mm256_set1_epi64x(-1));
}

inline __m256i load256(const uint8_t* p) { return _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)); }
// acc + vpmaddwd(a, b): one vpdpwssd with VNNI (exact: the sums never reach 2^31, so its
// wrapping and the separate add agree bit for bit).
inline __m256i madd_add(__m256i acc, __m256i a, __m256i b) {
#ifdef LUMEN_BLOCK_VNNI
  return _mm256_dpwssd_epi32(acc, a, b);
#else
  return _mm256_add_epi32(acc, _mm256_madd_epi16(a, b));
#endif
}
inline __m256 halves(float a, float b) { return _mm256_set_m128(_mm_set1_ps(b), _mm_set1_ps(a)); }
inline __m256i iq4_lookup(__m256i nibbles) {
  const __m128i t = _mm_loadu_si128(reinterpret_cast<const __m128i*>(quant::kIq4nlValues));
  return _mm256_shuffle_epi8(_mm256_set_m128i(t, t), nibbles);
}

template <WeightFormat F>
struct Decoder;

// --- 32-element formats: one sub-block per block ---------------------------------------

template <>
struct Decoder<WeightFormat::Q4_0> {
  static constexpr int kOffset = 8;
  static constexpr bool kSigned = false, kHasMin = false;
  struct Ctx { float d; };
  static void prepare(const uint8_t* b, Ctx& c) { c.d = f16(b); }
  static __m256i weights(const uint8_t* b, const Ctx&, int) { return nibbles32(b + 2); }
  static __m256 scales(const Ctx& c, int) { return _mm256_set1_ps(c.d); }
  static float min_half(const Ctx&, int, int) { return 0.0f; }
  static void add_mins(const Ctx&, const float*, const float*, __m256&) {}
};

template <>
struct Decoder<WeightFormat::Q4_1> {
  static constexpr int kOffset = 0;
  static constexpr bool kSigned = false, kHasMin = true;
  struct Ctx { float d, m; };
  static void prepare(const uint8_t* b, Ctx& c) { c.d = f16(b), c.m = f16(b + 2); }
  static __m256i weights(const uint8_t* b, const Ctx&, int) { return nibbles32(b + 4); }
  static __m256 scales(const Ctx& c, int) { return _mm256_set1_ps(c.d); }
  static float min_half(const Ctx& c, int, int) { return c.m; }
  static void add_mins(const Ctx& c, const float*, const float* s32, __m256& acc) {
    acc = _mm256_add_ps(acc, _mm256_setr_ps(c.m * s32[0], 0, 0, 0, 0, 0, 0, 0));
  }
};

template <>
struct Decoder<WeightFormat::Q5_0> {
  static constexpr int kOffset = 16;
  static constexpr bool kSigned = false, kHasMin = false;
  struct Ctx { float d; };
  static void prepare(const uint8_t* b, Ctx& c) { c.d = f16(b); }
  static __m256i weights(const uint8_t* b, const Ctx&, int) {
    const __m256i high = _mm256_and_si256(bytes_from_bits32(b + 2), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(nibbles32(b + 6), high);
  }
  static __m256 scales(const Ctx& c, int) { return _mm256_set1_ps(c.d); }
  static float min_half(const Ctx&, int, int) { return 0.0f; }
  static void add_mins(const Ctx&, const float*, const float*, __m256&) {}
};

template <>
struct Decoder<WeightFormat::Q5_1> {
  static constexpr int kOffset = 0;
  static constexpr bool kSigned = false, kHasMin = true;
  struct Ctx { float d, m; };
  static void prepare(const uint8_t* b, Ctx& c) { c.d = f16(b), c.m = f16(b + 2); }
  static __m256i weights(const uint8_t* b, const Ctx&, int) {
    const __m256i high = _mm256_and_si256(bytes_from_bits32(b + 4), _mm256_set1_epi8(0x10));
    return _mm256_or_si256(nibbles32(b + 8), high);
  }
  static __m256 scales(const Ctx& c, int) { return _mm256_set1_ps(c.d); }
  static float min_half(const Ctx& c, int, int) { return c.m; }
  static void add_mins(const Ctx& c, const float*, const float* s32, __m256& acc) {
    acc = _mm256_add_ps(acc, _mm256_setr_ps(c.m * s32[0], 0, 0, 0, 0, 0, 0, 0));
  }
};

template <>
struct Decoder<WeightFormat::Q8_0> {
  static constexpr int kOffset = 0;
  static constexpr bool kSigned = true, kHasMin = false;
  struct Ctx { float d; };
  static void prepare(const uint8_t* b, Ctx& c) { c.d = f16(b); }
  static __m256i weights(const uint8_t* b, const Ctx&, int) { return load256(b + 2); }
  static __m256 scales(const Ctx& c, int) { return _mm256_set1_ps(c.d); }
  static float min_half(const Ctx&, int, int) { return 0.0f; }
  static void add_mins(const Ctx&, const float*, const float*, __m256&) {}
};

template <>
struct Decoder<WeightFormat::IQ4_NL> {
  static constexpr int kOffset = 0;
  static constexpr bool kSigned = true, kHasMin = false;
  struct Ctx { float d; };
  static void prepare(const uint8_t* b, Ctx& c) { c.d = f16(b); }
  static __m256i weights(const uint8_t* b, const Ctx&, int) { return iq4_lookup(nibbles32(b + 2)); }
  static __m256 scales(const Ctx& c, int) { return _mm256_set1_ps(c.d); }
  static float min_half(const Ctx&, int, int) { return 0.0f; }
  static void add_mins(const Ctx&, const float*, const float*, __m256&) {}
};

// --- 256-element super-blocks: 8 sub-blocks of 32 ---------------------------------------
//
// These decoders give the block's d, its integer sub-block scales as int16 (sc, one per 16
// elements: equal pairs for the formats with one scale per 32) and, for the formats with mins,
// mw = -dmin * m; the weights are unsigned (Q2_K, Q4_K, Q5_K) or signed with any offset
// removed (Q3_K, Q6_K, IQ4_XS). kGroupSubs: sub-blocks per conversion to f32 (block_matmul.h).
// scale16(k): the int16 multipliers of sub-block k's 16 element pairs (lanes 0-7: elements
// 0-15, lanes 8-15: elements 16-31). scales(k): d * sc as f32, for the decoding tests.

// The formats with 8 scales keep them twice (sc[8 + j] = sc[j]), so one in-lane byte shuffle
// spreads scale k over both halves.
template <class C, int kScales>
inline __m256i scale16_of(const C& c, int k) {
  if constexpr (kScales == 8) {
    const __m256i all = _mm256_load_si256(reinterpret_cast<const __m256i*>(c.sc));
    return _mm256_shuffle_epi8(all, _mm256_set1_epi16(int16_t(0x0100 + 0x0202 * k)));
  } else {
    int32_t pair;
    std::memcpy(&pair, c.sc + 2 * k, 4);
    const __m256i spread = _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1,
                                            2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3);
    return _mm256_shuffle_epi8(_mm256_set1_epi32(pair), spread);
  }
}

template <>
struct Decoder<WeightFormat::Q2_K> {
  static constexpr int kOffset = 0, kGroupSubs = 8;
  static constexpr bool kSigned = false, kHasMin = true;
  struct Ctx {
    alignas(32) int16_t sc[16];
    float mw[16];
    float d;
  };
  static void prepare(const uint8_t* b, Ctx& c) {
    c.d = f16(b + 80);
    const __m256 dmin = _mm256_set1_ps(f16(b + 82)), neg = _mm256_set1_ps(-0.0f);
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b));
    const __m128i lo = _mm_and_si128(s, _mm_set1_epi8(0x0F)), hi = _mm_and_si128(_mm_srli_epi16(s, 4), _mm_set1_epi8(0x0F));
    _mm256_store_si256(reinterpret_cast<__m256i*>(c.sc), _mm256_cvtepu8_epi16(lo));
    for (int h = 0; h < 2; ++h) {
      const __m128i m = h ? _mm_srli_si128(hi, 8) : hi;
      _mm256_storeu_ps(c.mw + 8 * h, _mm256_xor_ps(_mm256_mul_ps(dmin, _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(m))), neg));
    }
  }
  static __m256i weights(const uint8_t* b, const Ctx&, int k) {
    const __m256i q = load256(b + 16 + 32 * (k / 4));
    return _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (k % 4))), _mm256_set1_epi8(3));
  }
  static __m256i scale16(const Ctx& c, int k) { return scale16_of<Ctx, 16>(c, k); }
  static __m256 scales(const Ctx& c, int k) { return halves(c.d * float(c.sc[2 * k]), c.d * float(c.sc[2 * k + 1])); }
  static float min_half(const Ctx& c, int k, int h) { return c.mw[2 * k + h]; }
  static void add_mins(const Ctx& c, const float* hs, const float*, __m256& acc) {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(c.mw), _mm256_loadu_ps(hs), acc);
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(c.mw + 8), _mm256_loadu_ps(hs + 8), acc);
  }
};

template <>
struct Decoder<WeightFormat::Q3_K> {
  static constexpr int kOffset = 0, kGroupSubs = 8;
  static constexpr bool kSigned = true, kHasMin = false;
  struct Ctx {
    alignas(32) int16_t sc[16];
    float d;
  };
  static void prepare(const uint8_t* b, Ctx& c) {
    // ggml_q3_k_scales in SIMD: low 4 bits of value j from byte j % 8 (low nibble for j < 8),
    // high 2 bits from byte 8 + j % 4 shifted by 2 * (j / 4); then - 32.
    const uint8_t* p = b + 96;
    const __m128i packed = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(p));
    const __m128i nib = _mm_set1_epi8(0x0F);
    const __m128i low = _mm_unpacklo_epi64(_mm_and_si128(packed, nib), _mm_and_si128(_mm_srli_epi16(packed, 4), nib));
    uint32_t h4;
    std::memcpy(&h4, p + 8, 4);
    const __m128i high = _mm_and_si128(_mm_srlv_epi32(_mm_set1_epi32(int(h4)), _mm_setr_epi32(0, 2, 4, 6)), _mm_set1_epi8(3));
    const __m128i sv = _mm_sub_epi8(_mm_or_si128(low, _mm_slli_epi16(high, 4)), _mm_set1_epi8(32));
    _mm256_store_si256(reinterpret_cast<__m256i*>(c.sc), _mm256_cvtepi8_epi16(sv));
    c.d = f16(b + 108);
  }
  static __m256i weights(const uint8_t* b, const Ctx&, int k) {
    const __m256i q = load256(b + 32 + 32 * (k / 4));
    const __m256i low = _mm256_and_si256(_mm256_srl_epi16(q, _mm_cvtsi32_si128(2 * (k % 4))), _mm256_set1_epi8(3));
    const __m256i m = _mm256_set1_epi8(char(1 << k));
    const __m256i hbit = _mm256_cmpeq_epi8(_mm256_and_si256(load256(b), m), m);
    return _mm256_sub_epi8(_mm256_or_si256(low, _mm256_and_si256(hbit, _mm256_set1_epi8(4))), _mm256_set1_epi8(4));
  }
  static __m256i scale16(const Ctx& c, int k) { return scale16_of<Ctx, 16>(c, k); }
  static __m256 scales(const Ctx& c, int k) { return halves(c.d * float(c.sc[2 * k]), c.d * float(c.sc[2 * k + 1])); }
  static float min_half(const Ctx&, int, int) { return 0.0f; }
  static void add_mins(const Ctx&, const float*, const float*, __m256&) {}
};

// Q4_K / Q5_K: 8 6-bit scales and mins packed in 12 bytes (ggml's get_scale_min_k4).
struct KScalesMins {
  alignas(32) int16_t sc[16];  // 8 scales, twice
  float mw[8];
  float d;
  void load(const uint8_t* b) {
    // The 12 bytes hold scales j < 4 in the low 6 bits of bytes j, mins in bytes j + 4; for
    // j >= 4 the low and high nibbles of bytes j + 4 plus the top 2 bits of bytes j - 4 and j:
    // unpacked four at a time in 32-bit words.
    uint32_t u[3];
    std::memcpy(u, b + 4, 12);
    const uint32_t sc_lo = u[0] & 0x3f3f3f3fu, m_lo = u[1] & 0x3f3f3f3fu;
    const uint32_t sc_hi = (u[2] & 0x0f0f0f0fu) | (((u[0] >> 6) & 0x03030303u) << 4);
    const uint32_t m_hi = ((u[2] >> 4) & 0x0f0f0f0fu) | (((u[1] >> 6) & 0x03030303u) << 4);
    _mm256_store_si256(reinterpret_cast<__m256i*>(sc),
                       _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_set_epi32(0, 0, int(sc_hi), int(sc_lo)))));
    const __m256 m = _mm256_cvtepi32_ps(_mm256_cvtepu8_epi32(_mm_set_epi32(0, 0, int(m_hi), int(m_lo))));
    _mm256_storeu_ps(mw, _mm256_xor_ps(_mm256_mul_ps(_mm256_set1_ps(f16(b + 2)), m), _mm256_set1_ps(-0.0f)));
    d = f16(b);
  }
  void add_mins(const float* s32, __m256& acc) const {
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(mw), _mm256_loadu_ps(s32), acc);
  }
};

template <>
struct Decoder<WeightFormat::Q4_K> {
  static constexpr int kOffset = 0, kGroupSubs = 8;
  static constexpr bool kSigned = false, kHasMin = true;
  using Ctx = KScalesMins;
  static void prepare(const uint8_t* b, Ctx& c) { c.load(b); }
  static __m256i weights(const uint8_t* b, const Ctx&, int k) {
    const __m256i q = load256(b + 16 + 32 * (k / 2));
    return _mm256_and_si256(k % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
  }
  static __m256i scale16(const Ctx& c, int k) { return scale16_of<Ctx, 8>(c, k); }
  static __m256 scales(const Ctx& c, int k) { return _mm256_set1_ps(c.d * float(c.sc[k])); }
  static float min_half(const Ctx& c, int k, int) { return c.mw[k]; }
  static void add_mins(const Ctx& c, const float*, const float* s32, __m256& acc) { c.add_mins(s32, acc); }
};

template <>
struct Decoder<WeightFormat::Q5_K> {
  static constexpr int kOffset = 0, kGroupSubs = 8;
  static constexpr bool kSigned = false, kHasMin = true;
  using Ctx = KScalesMins;
  static void prepare(const uint8_t* b, Ctx& c) { c.load(b); }
  static __m256i weights(const uint8_t* b, const Ctx&, int k) {
    const __m256i q = load256(b + 48 + 32 * (k / 2));
    const __m256i low = _mm256_and_si256(k % 2 ? _mm256_srli_epi16(q, 4) : q, _mm256_set1_epi8(0x0F));
    const __m256i m = _mm256_set1_epi8(char(1 << k));
    const __m256i hbit = _mm256_cmpeq_epi8(_mm256_and_si256(load256(b + 16), m), m);
    return _mm256_or_si256(low, _mm256_and_si256(hbit, _mm256_set1_epi8(0x10)));
  }
  static __m256i scale16(const Ctx& c, int k) { return scale16_of<Ctx, 8>(c, k); }
  static __m256 scales(const Ctx& c, int k) { return _mm256_set1_ps(c.d * float(c.sc[k])); }
  static float min_half(const Ctx& c, int k, int) { return c.mw[k]; }
  static void add_mins(const Ctx& c, const float*, const float* s32, __m256& acc) { c.add_mins(s32, acc); }
};

template <>
struct Decoder<WeightFormat::Q6_K> {
  static constexpr int kOffset = 0, kGroupSubs = 4;
  static constexpr bool kSigned = true, kHasMin = false;
  struct Ctx {
    alignas(32) int16_t sc[16];
    float d;
  };
  static void prepare(const uint8_t* b, Ctx& c) {
    const __m128i s = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b + 192));
    _mm256_store_si256(reinterpret_cast<__m256i*>(c.sc), _mm256_cvtepi8_epi16(s));
    c.d = f16(b + 208);
  }
  static __m256i weights(const uint8_t* b, const Ctx&, int k) {
    const int n = k / 4, s = k % 4;
    const __m256i ql = load256(b + 64 * n + 32 * (s % 2));
    const __m256i low = _mm256_and_si256(s < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
    const __m256i qh = load256(b + 128 + 32 * n);
    const __m256i high = _mm256_and_si256(_mm256_srl_epi16(qh, _mm_cvtsi32_si128(2 * s)), _mm256_set1_epi8(3));
    return _mm256_sub_epi8(_mm256_or_si256(low, _mm256_slli_epi16(high, 4)), _mm256_set1_epi8(32));
  }
  static __m256i scale16(const Ctx& c, int k) { return scale16_of<Ctx, 16>(c, k); }
  static __m256 scales(const Ctx& c, int k) { return halves(c.d * float(c.sc[2 * k]), c.d * float(c.sc[2 * k + 1])); }
  static float min_half(const Ctx&, int, int) { return 0.0f; }
  static void add_mins(const Ctx&, const float*, const float*, __m256&) {}
};

template <>
struct Decoder<WeightFormat::IQ4_XS> {
  static constexpr int kOffset = 0, kGroupSubs = 4;
  static constexpr bool kSigned = true, kHasMin = false;
  struct Ctx {
    alignas(32) int16_t sc[16];  // 8 scales, twice
    float d;
  };
  static void prepare(const uint8_t* b, Ctx& c) {
    // ggml_iq4_xs_scale for j = 0..7 at once: nibble j of bytes 4..7 (low nibble first) and
    // bits 2j, 2j + 1 of the 16-bit word at byte 2, less 32.
    uint32_t l4;
    std::memcpy(&l4, b + 4, 4);
    const int h = b[2] | (b[3] << 8);
    const __m256i shifts = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    const __m256i low = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(int(l4)), shifts), _mm256_set1_epi32(0x0F));
    const __m256i high = _mm256_and_si256(_mm256_srlv_epi32(_mm256_set1_epi32(h), _mm256_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14)),
                                          _mm256_set1_epi32(3));
    const __m256i ls = _mm256_sub_epi32(_mm256_or_si256(low, _mm256_slli_epi32(high, 4)), _mm256_set1_epi32(32));
    _mm256_store_si256(reinterpret_cast<__m256i*>(c.sc), _mm256_broadcastsi128_si256(_mm_packs_epi32(
                                                             _mm256_castsi256_si128(ls), _mm256_extracti128_si256(ls, 1))));
    c.d = f16(b);
  }
  static __m256i weights(const uint8_t* b, const Ctx&, int k) { return iq4_lookup(nibbles32(b + 8 + 16 * k)); }
  static __m256i scale16(const Ctx& c, int k) { return scale16_of<Ctx, 8>(c, k); }
  static __m256 scales(const Ctx& c, int k) { return _mm256_set1_ps(c.d * float(c.sc[k])); }
  static float min_half(const Ctx&, int, int) { return 0.0f; }
  static void add_mins(const Ctx&, const float*, const float*, __m256&) {}
};

// --- the tile ------------------------------------------------------------------------------

inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// A tile's R x NT accumulators (8 lanes each): zeroed, then summed into y[(t0 + t) * ldy + r].
template <int R, int NT>
inline void zero_accumulators(__m256 (&acc)[R][NT]) {
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[r][t] = _mm256_setzero_ps();
}

template <int R, int NT>
inline void write_outputs(const __m256 (&acc)[R][NT], int64_t t0, float* y, int64_t ldy) {
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r)
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) y[(t0 + t) * ldy + r] = hsum(acc[r][t]);
}

// One row's 32 weight bytes, prepared once for every token of the tile.
template <class D>
struct RowWeights {
  __m256i u;   // unsigned bytes (VNNI: signed formats shifted by 128)
  __m256i w;   // AVX2 signed formats: the signed values (for the sign trick)
};

template <class D>
inline RowWeights<D> prepare_row(__m256i raw) {
  RowWeights<D> r;
#ifdef LUMEN_BLOCK_VNNI
  r.u = D::kSigned ? _mm256_xor_si256(raw, _mm256_set1_epi8(char(0x80))) : raw;
  r.w = raw;
#else
  r.w = raw;
  r.u = D::kSigned ? _mm256_sign_epi8(raw, raw) : raw;
#endif
  return r;
}

// Integer dot of a row's 32 weight bytes with a token's 32 activation bytes: 8 int32 lanes of
// 4 products each. `corr` is the token's lane sums times -offset (correction_offset).
template <class D>
inline __m256i int_dot(const RowWeights<D>& rw, __m256i x, __m256i corr) {
#ifdef LUMEN_BLOCK_VNNI
  return _mm256_dpbusd_epi32(corr, rw.u, x);
#else
  const __m256i ones = _mm256_set1_epi16(1);
  if constexpr (D::kSigned) {
    (void)corr;
    return _mm256_madd_epi16(_mm256_maddubs_epi16(rw.u, _mm256_sign_epi8(x, rw.w)), ones);
  } else if constexpr (D::kOffset != 0) {
    return _mm256_add_epi32(_mm256_madd_epi16(_mm256_maddubs_epi16(rw.u, x), ones), corr);
  } else {
    (void)corr;
    return _mm256_madd_epi16(_mm256_maddubs_epi16(rw.u, x), ones);
  }
#endif
}

// The same for split activations Q = 256 * hi + lo (block_matmul.h): 256 * dot(hi) + dot(lo)
// in int32, `corr` from the pair's combined lane sums. The pairs of 16-bit products are
// widened by vpmaddwd with 256 and 1, so the two halves meet in one vector before the
// conversion to f32 (one convert and one multiply-add per row, token and block, not two).
template <class D>
inline __m256i int_dot_pair(const RowWeights<D>& rw, __m256i hi, __m256i lo, __m256i corr) {
#ifdef LUMEN_BLOCK_VNNI
  const __m256i h = _mm256_slli_epi32(_mm256_dpbusd_epi32(_mm256_setzero_si256(), rw.u, hi), 8);
  return _mm256_dpbusd_epi32(_mm256_add_epi32(h, corr), rw.u, lo);
#else
  const __m256i ones = _mm256_set1_epi16(1), k256 = _mm256_set1_epi16(256);
  __m256i ph, pl;
  if constexpr (D::kSigned) {
    ph = _mm256_maddubs_epi16(rw.u, _mm256_sign_epi8(hi, rw.w));
    pl = _mm256_maddubs_epi16(rw.u, _mm256_sign_epi8(lo, rw.w));
  } else {
    ph = _mm256_maddubs_epi16(rw.u, hi);
    pl = _mm256_maddubs_epi16(rw.u, lo);
  }
  const __m256i sum = _mm256_add_epi32(_mm256_madd_epi16(ph, k256), _mm256_madd_epi16(pl, ones));
  if constexpr (!D::kSigned && D::kOffset != 0) return _mm256_add_epi32(sum, corr);
  (void)corr;
  return sum;
#endif
}

// The correction a token's lane sums give a format: -offset * lane sum (offset 128 for the
// signed formats on VNNI, which multiplies them as unsigned).
template <class D>
constexpr int correction_offset() {
#ifdef LUMEN_BLOCK_VNNI
  return D::kSigned ? 128 : D::kOffset;
#else
  return D::kSigned ? 0 : D::kOffset;
#endif
}

constexpr int log2_of(int v) { return v <= 1 ? 0 : 1 + log2_of(v / 2); }

// Block geometry known at compile time (the loops over sub-blocks and the block stride fold
// away); tile_of checks it against quant::format_info.
struct BlockGeometry {
  int sub;       // 32-element sub-blocks per block
  size_t bytes;  // bytes per block
};
constexpr BlockGeometry geometry(WeightFormat f) {
  switch (f) {
    case WeightFormat::Q4_0: return {1, 18};
    case WeightFormat::Q4_1: return {1, 20};
    case WeightFormat::Q5_0: return {1, 22};
    case WeightFormat::Q5_1: return {1, 24};
    case WeightFormat::Q8_0: return {1, 34};
    case WeightFormat::IQ4_NL: return {1, 18};
    case WeightFormat::Q2_K: return {8, 84};
    case WeightFormat::Q3_K: return {8, 110};
    case WeightFormat::Q4_K: return {8, 144};
    case WeightFormat::Q5_K: return {8, 176};
    case WeightFormat::Q6_K: return {8, 210};
    case WeightFormat::IQ4_XS: return {8, 136};
    default: return {0, 0};
  }
}

// Decode (one token) streams the weights once and is bound by memory: the driver walks the
// rows in order and the tile takes them one at a time (one sequential stream per thread, which
// the hardware prefetchers follow best), prefetching the same block kDecodePrefetchRows rows
// ahead (Gemma 3 270M's output projection, 262144 x 640 Q8_0: 12 GB/s with 4 interleaved rows
// and no prefetch, 29 GB/s like this). A prefetch past the matrix's end is harmless.
constexpr size_t kDecodePrefetchRows = 8;

// Block sb of each of R rows: its address and decoder context; for decode (one token) every
// cache line of the block kDecodePrefetchRows rows ahead is prefetched too (a 256-element block
// spans 2 to 4 lines).
template <WeightFormat F, int R, bool kPrefetch>
inline void prepare_blocks(const uint8_t* const (&row)[R], int64_t sb, size_t row_bytes, const uint8_t* (&blk)[R],
                           typename Decoder<F>::Ctx (&ctx)[R]) {
  constexpr BlockGeometry kGeom = geometry(F);
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) {
    blk[r] = row[r] + size_t(sb) * kGeom.bytes;
    if constexpr (kPrefetch) {
      const char* ahead = reinterpret_cast<const char*>(blk[r] + kDecodePrefetchRows * row_bytes);
      #pragma GCC unroll 4
      for (size_t off = 0; off < kGeom.bytes; off += 64) _mm_prefetch(ahead + off, _MM_HINT_T0);
    }
    Decoder<F>::prepare(blk[r], ctx[r]);
  }
}

// Sign trick for the signed formats: |w| as vpmaddubsw's unsigned operand, the activations
// take w's sign (AVX2's only signed x signed int8 product).
template <class D>
inline __m256i activation_for(__m256i x, __m256i w) {
  if constexpr (D::kSigned) return _mm256_sign_epi8(x, w);
  else return x;
}

// The 256-element formats (integer sub-block scales, block_matmul.h). Per (row, token) two
// int32 accumulators, hi and lo planes, each sub-block adding vpmaddwd(vpmaddubsw(w, q), sc);
// at the end of a conversion group I = 256 * hi + lo (exact: the bounds in block_matmul.h),
// one conversion and one multiply-add by d * dx, then the min terms after the block. The f32
// operations and the integers per lane are the prefill kernels' own (kgemm16_fixed).
template <WeightFormat F, int R, int NT, bool kPair>
void ktile_fixed(const std::byte* rows, size_t row_bytes, const BlockActivations& a, int64_t t0, float* y,
                 int64_t ldy) {
  using D = Decoder<F>;
  constexpr BlockGeometry kGeom = geometry(F);
  static_assert(kGeom.sub == 8);
  const int64_t blocks = a.K / 256;
  const uint8_t* row[R];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) row[r] = reinterpret_cast<const uint8_t*>(rows + size_t(r) * row_bytes);
  const int8_t* q[NT];
  const int8_t* ql[NT];
  const float* dx[NT];
  const float* hs[NT];
  const float* s32[NT];
  #pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    q[t] = a.q_of(t0 + t);
    ql[t] = kPair ? a.q_lo_of(t0 + t) : nullptr;
    dx[t] = a.d_of(t0 + t);
    hs[t] = a.half_sums_of(t0 + t);
    s32[t] = a.block_sums_of(t0 + t);
  }
  __m256 acc[R][NT];
  zero_accumulators(acc);
  for (int64_t sb = 0; sb < blocks; ++sb) {
    typename D::Ctx ctx[R];
    const uint8_t* blk[R];
    prepare_blocks<F, R, NT == 1>(row, sb, row_bytes, blk, ctx);
    __m256i ih[R][NT], il[R][NT];
    #pragma GCC unroll 8
    for (int k = 0; k < 8; ++k) {
      if (k % D::kGroupSubs == 0) {
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          #pragma GCC unroll 8
          for (int t = 0; t < NT; ++t) ih[r][t] = il[r][t] = _mm256_setzero_si256();
      }
      const int64_t c = sb * 8 + k;
      __m256i xh[NT], xl[NT];
      #pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        xh[t] = _mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c));
        if constexpr (kPair) xl[t] = _mm256_load_si256(reinterpret_cast<const __m256i*>(ql[t] + 32 * c));
      }
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const __m256i w = D::weights(blk[r], ctx[r], k);
        const __m256i u = D::kSigned ? _mm256_sign_epi8(w, w) : w;
        const __m256i sc = D::scale16(ctx[r], k);
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          ih[r][t] = madd_add(ih[r][t], _mm256_maddubs_epi16(u, activation_for<D>(xh[t], w)), sc);
          if constexpr (kPair) il[r][t] = madd_add(il[r][t], _mm256_maddubs_epi16(u, activation_for<D>(xl[t], w)), sc);
        }
      }
      if (k % D::kGroupSubs == D::kGroupSubs - 1) {
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r)
          #pragma GCC unroll 8
          for (int t = 0; t < NT; ++t) {
            const __m256i isum = kPair ? _mm256_add_epi32(_mm256_slli_epi32(ih[r][t], 8), il[r][t]) : ih[r][t];
            acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_set1_ps(ctx[r].d * dx[t][sb * 8]), acc[r][t]);
          }
      }
    }
    if constexpr (D::kHasMin) {
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) D::add_mins(ctx[r], hs[t] + 16 * sb, s32[t] + 8 * sb, acc[r][t]);
    }
  }
  write_outputs(acc, t0, y, ldy);
}

// R rows x NT tokens. kPair: split activations (a.q_lo set), each token's integer dot is
// 256 * hi + lo. Per 32-element sub-block the tokens' activations are loaded once, then each
// row is decoded and meets every token: R * NT accumulators, NT (or 2 NT) activation
// registers and one row's temporaries live at a time, so the AVX2 shapes fit 16 registers.
// Each (row, token) accumulator sees the same operations in the same order whatever R and NT
// are, so a token's outputs do not depend on the tile shape (or the batch).
template <WeightFormat F, int R, int NT, bool kPair>
void tile32_fixed(const std::byte* rows, size_t row_bytes, const BlockActivations& a, int64_t t0, float* y,
                  int64_t ldy) {
  using D = Decoder<F>;
  constexpr BlockGeometry kGeom = geometry(F);
  constexpr int kSub = kGeom.sub;
  const int64_t blocks = a.K / (32 * kSub);
  constexpr int kCorr = correction_offset<D>();
  const uint8_t* row[R];
  #pragma GCC unroll 8
  for (int r = 0; r < R; ++r) row[r] = reinterpret_cast<const uint8_t*>(rows + size_t(r) * row_bytes);
  const int8_t* q[NT];
  const int8_t* ql[NT];
  const float* dx[NT];
  const float* hs[NT];
  const float* s32[NT];
  const int32_t* lanes[NT];
  #pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    q[t] = a.q_of(t0 + t);
    ql[t] = kPair ? a.q_lo_of(t0 + t) : nullptr;
    dx[t] = a.d_of(t0 + t);
    hs[t] = a.half_sums_of(t0 + t);
    s32[t] = a.block_sums_of(t0 + t);
    lanes[t] = a.lane_sums_of(t0 + t);
  }
  __m256 acc[R][NT];
  zero_accumulators(acc);

  for (int64_t sb = 0; sb < blocks; ++sb) {
    typename D::Ctx ctx[R];
    const uint8_t* blk[R];
    prepare_blocks<F, R, NT == 1>(row, sb, row_bytes, blk, ctx);
    #pragma GCC unroll 8
    for (int k = 0; k < kSub; ++k) {
      const int64_t c = sb * kSub + k;
      __m256i xh[NT], xl[NT], corr[NT];
      __m256 d[NT];
      #pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        xh[t] = _mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c));
        if constexpr (kPair) xl[t] = _mm256_load_si256(reinterpret_cast<const __m256i*>(ql[t] + 32 * c));
        corr[t] = _mm256_setzero_si256();
        if constexpr (kCorr != 0) {
          const __m256i l = _mm256_load_si256(reinterpret_cast<const __m256i*>(lanes[t] + 8 * c));
          corr[t] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(l, log2_of(kCorr)));
        }
        d[t] = _mm256_set1_ps(dx[t][c]);
      }
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const RowWeights<D> rw = prepare_row<D>(D::weights(blk[r], ctx[r], k));
        const __m256 sw = D::scales(ctx[r], k);
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          __m256i isum;
          if constexpr (kPair) isum = int_dot_pair<D>(rw, xh[t], xl[t], corr[t]);
          else isum = int_dot<D>(rw, xh[t], corr[t]);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sw, d[t]), acc[r][t]);
        }
      }
    }
    if constexpr (D::kHasMin) {  // the min terms join the lanes of the same accumulator
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) D::add_mins(ctx[r], hs[t] + 2 * sb * kSub, s32[t] + sb * kSub, acc[r][t]);
    }
  }
  write_outputs(acc, t0, y, ldy);
}

template <WeightFormat F, int R, int NT, bool kPair>
void tile_fixed(const std::byte* rows, size_t row_bytes, const BlockActivations& a, int64_t t0, float* y,
                int64_t ldy) {
  if constexpr (geometry(F).sub == 8) ktile_fixed<F, R, NT, kPair>(rows, row_bytes, a, t0, y, ldy);
  else tile32_fixed<F, R, NT, kPair>(rows, row_bytes, a, t0, y, ldy);
}

// Tokens [t0, t0 + nt) in sub-tiles of kTokens, then 2, then 1.
template <WeightFormat F, int R, int kTokens, bool kPair>
void tile_rows(const std::byte* p, size_t row_bytes, const BlockActivations& a, int64_t t0, int nt, float* y,
               int64_t ldy) {
  int t = 0;
  for (; t + kTokens <= nt; t += kTokens) tile_fixed<F, R, kTokens, kPair>(p, row_bytes, a, t0 + t, y, ldy);
  if constexpr (kTokens > 2)
    for (; t + 2 <= nt; t += 2) tile_fixed<F, R, 2, kPair>(p, row_bytes, a, t0 + t, y, ldy);
  for (; t < nt; ++t) tile_fixed<F, R, 1, kPair>(p, row_bytes, a, t0 + t, y, ldy);
}

// The driver's tile: up to kBlockTileRows x kBlockTileTokens. One token (decode) runs the rows
// one by one; more tokens run sub-tiles of kRows x kTokens (the ISA's register budget; split
// activations take two registers per token, so half the tokens), single rows at the edges.
template <WeightFormat F, int kRows, int kTokens, bool kPair>
void tile_mode(const std::byte* rows, size_t row_bytes, int nr, const BlockActivations& a, int64_t t0, int nt,
               float* y, int64_t ldy) {
  constexpr int kT = kPair ? (kTokens / 2 > 0 ? kTokens / 2 : 1) : kTokens;
  if (nt == 1) {  // decode: one row at a time, each a single sequential stream
    for (int r = 0; r < nr; ++r) tile_fixed<F, 1, 1, kPair>(rows + size_t(r) * row_bytes, row_bytes, a, t0, y + r, ldy);
    return;
  }
  int r = 0;
  for (; r + kRows <= nr; r += kRows)
    tile_rows<F, kRows, kT, kPair>(rows + size_t(r) * row_bytes, row_bytes, a, t0, nt, y + r, ldy);
  for (; r < nr; ++r) tile_rows<F, 1, kT, kPair>(rows + size_t(r) * row_bytes, row_bytes, a, t0, nt, y + r, ldy);
}

template <WeightFormat F, int kRows, int kTokens>
void tile(const std::byte* rows, size_t row_bytes, int nr, const BlockActivations& a, int64_t t0, int nt, float* y,
          int64_t ldy) {
  if (a.q_lo != nullptr) return tile_mode<F, kRows, kTokens, true>(rows, row_bytes, nr, a, t0, nt, y, ldy);
  tile_mode<F, kRows, kTokens, false>(rows, row_bytes, nr, a, t0, nt, y, ldy);
}

// --- prefill with split activations: rows decoded once, then int16 products -------------
//
// A prompt's tokens all meet the same weights, so the rows are decoded once per call into a
// small buffer (per row and block: the decoder's context, then each 32-element sub-block's
// integers widened to int16, elements 4l and 4l + 1 of each 4 in the first vector, 4l + 2 and
// 4l + 3 in the second) and every token then costs two vpmaddwd against Q (block_matmul.h,
// stored in the same order) and one add, which leaves lane l holding the products of elements
// 4l .. 4l + 3: exactly the integers of the tiles above. The f32 operations per (row, token)
// are the tiles' own too, so prefill and decode give a token bit-identical outputs.

template <WeightFormat F>
struct Decoded16 {
  using D = Decoder<F>;
  static constexpr int kSub = geometry(F).sub;
  static constexpr size_t kCtxBytes = (sizeof(typename D::Ctx) + 31) / 32 * 32;
  static constexpr size_t kBlockBytes = kCtxBytes + size_t(kSub) * 64;  // per row and block
};

template <WeightFormat F>
void decode_rows16(const std::byte* rows, size_t row_bytes, int nr, int64_t K, std::byte* out) {
  using D = Decoder<F>;
  using L = Decoded16<F>;
  const int64_t blocks = K / (32 * L::kSub);
  for (int r = 0; r < nr; ++r) {
    const auto* row = reinterpret_cast<const uint8_t*>(rows + size_t(r) * row_bytes);
    std::byte* o = out + size_t(r) * size_t(blocks) * L::kBlockBytes;
    for (int64_t sb = 0; sb < blocks; ++sb, o += L::kBlockBytes) {
      const uint8_t* b = row + size_t(sb) * geometry(F).bytes;
      auto* ctx = reinterpret_cast<typename D::Ctx*>(o);
      D::prepare(b, *ctx);
      for (int k = 0; k < L::kSub; ++k) {
        __m256i v = D::weights(b, *ctx, k);
        if constexpr (!D::kSigned && D::kOffset != 0) v = _mm256_sub_epi8(v, _mm256_set1_epi8(char(D::kOffset)));
        // Per 128-bit half: elements {4l, 4l + 1} to bytes 0-7, {4l + 2, 4l + 3} to bytes 8-15;
        // the unpacks then widen bytes 0-7 and 8-15 of both halves.
        const __m256i order = _mm256_setr_epi8(0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15,
                                               0, 1, 4, 5, 8, 9, 12, 13, 2, 3, 6, 7, 10, 11, 14, 15);
        v = _mm256_shuffle_epi8(v, order);
        auto* w = reinterpret_cast<__m256i*>(o + L::kCtxBytes + size_t(k) * 64);
        __m256i w0 = _mm256_srai_epi16(_mm256_unpacklo_epi8(v, v), 8), w1 = _mm256_srai_epi16(_mm256_unpackhi_epi8(v, v), 8);
        if constexpr (L::kSub == 8) {  // the integer sub-block scales folded in: sc * w, |sc * w| <= 4096
          // Lanes 0-7 of each vector hold elements of the sub-block's first 16, lanes 8-15 its last 16.
          const __m256i sc = D::scale16(*ctx, k);
          w0 = _mm256_mullo_epi16(w0, sc);
          w1 = _mm256_mullo_epi16(w1, sc);
        }
        _mm256_store_si256(w, w0);
        _mm256_store_si256(w + 1, w1);
      }
    }
  }
}

// The 256-element formats: the rows hold sc * w, so a conversion group's products meet in one
// int32 accumulator per (row, token): two vpmaddwd and two adds per 32 elements, then
// ktile_fixed's f32 operations (bit-identical: the same integers per lane).
template <WeightFormat F, int R, int NT>
void kgemm16_fixed(const std::byte* dec, size_t dec_row_bytes, const BlockActivations& a, int64_t t0, float* y,
                   int64_t ldy) {
  using D = Decoder<F>;
  using L = Decoded16<F>;
  const int64_t blocks = a.K / 256;
  const int16_t* q[NT];
  const float* dx[NT];
  const float* hs[NT];
  const float* s32[NT];
  #pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    q[t] = a.q16_of(t0 + t);
    dx[t] = a.d_of(t0 + t);
    hs[t] = a.half_sums_of(t0 + t);
    s32[t] = a.block_sums_of(t0 + t);
  }
  __m256 acc[R][NT];
  zero_accumulators(acc);
  for (int64_t sb = 0; sb < blocks; ++sb) {
    const std::byte* blk[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) blk[r] = dec + size_t(r) * dec_row_bytes + size_t(sb) * L::kBlockBytes;
    #pragma GCC unroll 2
    for (int g = 0; g < 8; g += D::kGroupSubs) {
      __m256i isum[R][NT];
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) isum[r][t] = _mm256_setzero_si256();
      // Not unrolled: unrolled, GCC reassociates the integer sums and spills the products.
      #pragma GCC unroll 1
      for (int k = g; k < g + D::kGroupSubs; ++k) {
        const int64_t c = sb * 8 + k;
        // The rows' weights in registers, each token's activations loaded once: R * 2 + 2 NT
        // loads per 2 R NT multiply-adds (the loads, not the multiplies, bound this loop else).
        __m256i wa[R], wb[R];
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const auto* w = reinterpret_cast<const __m256i*>(blk[r] + L::kCtxBytes + size_t(k) * 64);
          wa[r] = _mm256_load_si256(w);
          wb[r] = _mm256_load_si256(w + 1);
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m256i xa = _mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c));
          const __m256i xb = _mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c + 16));
          #pragma GCC unroll 8
          for (int r = 0; r < R; ++r)
            isum[r][t] = madd_add(madd_add(isum[r][t], wa[r], xa), wb[r], xb);
        }
      }
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) {
        const float d = reinterpret_cast<const typename D::Ctx*>(blk[r])->d;
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t)
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[r][t]), _mm256_set1_ps(d * dx[t][sb * 8]), acc[r][t]);
      }
    }
    if constexpr (D::kHasMin) {
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t)
          D::add_mins(*reinterpret_cast<const typename D::Ctx*>(blk[r]), hs[t] + 16 * sb, s32[t] + 8 * sb, acc[r][t]);
    }
  }
  write_outputs(acc, t0, y, ldy);
}

#ifdef LUMEN_BLOCK_VNNI
// AVX-512: the 32-element formats without mins, two rows per 512-bit register. Per (row,
// token, block) the 256-bit kernel below spends two integer multiply-adds and three f32
// operations (scale product, conversion, multiply-add), all on the two 256-bit ports; here
// one zmm operation serves rows r and r + 1 of the same token and block, lanes 0-7 row r's,
// lanes 8-15 row r + 1's, each in the 256-bit kernel's lane order. Every lane sees the same
// integers and the same f32 operations in the same order, and each half is summed by the
// same hsum, so the outputs are the 256-bit kernel's bit for bit (and so decode's).
template <WeightFormat F, int R, int NT>
void gemm16_row_pairs(const std::byte* dec, size_t dec_row_bytes, const BlockActivations& a, int64_t t0, float* y,
                      int64_t ldy) {
  using D = Decoder<F>;
  using L = Decoded16<F>;
  static_assert(L::kSub == 1 && !D::kHasMin && R % 2 == 0);
  constexpr int P = R / 2;
  const int64_t blocks = a.K / 32;
  const int16_t* q[NT];
  const float* dx[NT];
  #pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    q[t] = a.q16_of(t0 + t);
    dx[t] = a.d_of(t0 + t);
  }
  __m512 acc[P][NT];
  #pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[p][t] = _mm512_setzero_ps();
  for (int64_t c = 0; c < blocks; ++c) {
    __m512i w0[P], w1[P];
    __m512 sw[P];
    #pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const std::byte* b0 = dec + size_t(2 * p) * dec_row_bytes + size_t(c) * L::kBlockBytes;
      const std::byte* b1 = b0 + dec_row_bytes;
      const auto* u0 = reinterpret_cast<const __m256i*>(b0 + L::kCtxBytes);
      const auto* u1 = reinterpret_cast<const __m256i*>(b1 + L::kCtxBytes);
      w0[p] = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_load_si256(u0)), _mm256_load_si256(u1), 1);
      w1[p] = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_load_si256(u0 + 1)), _mm256_load_si256(u1 + 1), 1);
      // (64-bit-lane inserts and extracts: AVX-512 F, where the 32-bit-lane ones need DQ.)
      const __m256 s0 = D::scales(*reinterpret_cast<const typename D::Ctx*>(b0), 0);
      const __m256 s1 = D::scales(*reinterpret_cast<const typename D::Ctx*>(b1), 0);
      sw[p] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_zextpd256_pd512(_mm256_castps_pd(s0)), _mm256_castps_pd(s1), 1));
    }
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      const __m512i xa = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c)));
      const __m512i xb =
          _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c + 16)));
      const __m512 d = _mm512_set1_ps(dx[t][c]);
      #pragma GCC unroll 8
      for (int p = 0; p < P; ++p) {
        const __m512i isum = _mm512_dpwssd_epi32(_mm512_madd_epi16(w0[p], xa), w1[p], xb);
        acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum), _mm512_mul_ps(sw[p], d), acc[p][t]);
      }
    }
  }
  #pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      y[(t0 + t) * ldy + 2 * p] = hsum(_mm512_castps512_ps256(acc[p][t]));
      y[(t0 + t) * ldy + 2 * p + 1] = hsum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p][t]), 1)));
    }
}
#endif

#ifdef LUMEN_BLOCK_VNNI
// AVX-512: the 256-element formats (kgemm16_fixed) two rows per 512-bit register, lanes 0-7
// row r's, lanes 8-15 row r + 1's, each half in the 256-bit kernel's lane order: one zmm
// vpdpwssd does what two ymm ones did, which is most of this kernel's work (its f32
// operations come once per conversion group). Each half sees the same integers, the same
// d * dx products, the same conversions and multiply-adds and the same min terms (the
// format's own add_mins on that half) in the same order, and the same hsum at the end, so
// the outputs are kgemm16_fixed's bit for bit (and so decode's).
template <WeightFormat F, int R, int NT>
void kgemm16_row_pairs(const std::byte* dec, size_t dec_row_bytes, const BlockActivations& a, int64_t t0, float* y,
                       int64_t ldy) {
  using D = Decoder<F>;
  using L = Decoded16<F>;
  using Ctx = typename D::Ctx;
  static_assert(L::kSub == 8 && R % 2 == 0);
  constexpr int P = R / 2;
  const int64_t blocks = a.K / 256;
  const int16_t* q[NT];
  const float* dx[NT];
  const float* hs[NT];
  const float* s32[NT];
  #pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    q[t] = a.q16_of(t0 + t);
    dx[t] = a.d_of(t0 + t);
    hs[t] = a.half_sums_of(t0 + t);
    s32[t] = a.block_sums_of(t0 + t);
  }
  __m512 acc[P][NT];
  #pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) acc[p][t] = _mm512_setzero_ps();
  for (int64_t sb = 0; sb < blocks; ++sb) {
    const std::byte* blk[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) blk[r] = dec + size_t(r) * dec_row_bytes + size_t(sb) * L::kBlockBytes;
    __m512 dpair[P];  // lanes 0-7 row 2p's d, lanes 8-15 row 2p + 1's
    #pragma GCC unroll 8
    for (int p = 0; p < P; ++p) {
      const __m256 d0 = _mm256_set1_ps(reinterpret_cast<const Ctx*>(blk[2 * p])->d);
      const __m256 d1 = _mm256_set1_ps(reinterpret_cast<const Ctx*>(blk[2 * p + 1])->d);
      dpair[p] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_zextpd256_pd512(_mm256_castps_pd(d0)), _mm256_castps_pd(d1), 1));
    }
    #pragma GCC unroll 2
    for (int g = 0; g < 8; g += D::kGroupSubs) {
      __m512i isum[P][NT];
      #pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) isum[p][t] = _mm512_setzero_si512();
      #pragma GCC unroll 8
      for (int k = g; k < g + D::kGroupSubs; ++k) {
        const int64_t c = sb * 8 + k;
        __m512i wa[P], wb[P];
        #pragma GCC unroll 8
        for (int p = 0; p < P; ++p) {
          const auto* u0 = reinterpret_cast<const __m256i*>(blk[2 * p] + L::kCtxBytes + size_t(k) * 64);
          const auto* u1 = reinterpret_cast<const __m256i*>(blk[2 * p + 1] + L::kCtxBytes + size_t(k) * 64);
          wa[p] = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_load_si256(u0)), _mm256_load_si256(u1), 1);
          wb[p] = _mm512_inserti64x4(_mm512_zextsi256_si512(_mm256_load_si256(u0 + 1)), _mm256_load_si256(u1 + 1), 1);
        }
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          const __m512i xa = _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c)));
          const __m512i xb =
              _mm512_broadcast_i64x4(_mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c + 16)));
          #pragma GCC unroll 8
          for (int p = 0; p < P; ++p) isum[p][t] = _mm512_dpwssd_epi32(_mm512_dpwssd_epi32(isum[p][t], wa[p], xa), wb[p], xb);
        }
      }
      #pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m512 d = _mm512_set1_ps(dx[t][sb * 8]);
        #pragma GCC unroll 8
        for (int p = 0; p < P; ++p)
          acc[p][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[p][t]), _mm512_mul_ps(dpair[p], d), acc[p][t]);
      }
    }
    if constexpr (D::kHasMin) {
      #pragma GCC unroll 8
      for (int p = 0; p < P; ++p)
        #pragma GCC unroll 8
        for (int t = 0; t < NT; ++t) {
          __m256 lo = _mm512_castps512_ps256(acc[p][t]);
          __m256 hi = _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p][t]), 1));
          D::add_mins(*reinterpret_cast<const Ctx*>(blk[2 * p]), hs[t] + 16 * sb, s32[t] + 8 * sb, lo);
          D::add_mins(*reinterpret_cast<const Ctx*>(blk[2 * p + 1]), hs[t] + 16 * sb, s32[t] + 8 * sb, hi);
          acc[p][t] = _mm512_castpd_ps(_mm512_insertf64x4(_mm512_zextpd256_pd512(_mm256_castps_pd(lo)), _mm256_castps_pd(hi), 1));
        }
    }
  }
  #pragma GCC unroll 8
  for (int p = 0; p < P; ++p)
    #pragma GCC unroll 8
    for (int t = 0; t < NT; ++t) {
      y[(t0 + t) * ldy + 2 * p] = hsum(_mm512_castps512_ps256(acc[p][t]));
      y[(t0 + t) * ldy + 2 * p + 1] = hsum(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(acc[p][t]), 1)));
    }
}
#endif

template <WeightFormat F, int R, int NT>
void gemm16_fixed(const std::byte* dec, size_t dec_row_bytes, const BlockActivations& a, int64_t t0, float* y,
                  int64_t ldy) {
#ifdef LUMEN_BLOCK_VNNI
  if constexpr (geometry(F).sub == 1 && !Decoder<F>::kHasMin && R % 2 == 0) {
    gemm16_row_pairs<F, R, NT>(dec, dec_row_bytes, a, t0, y, ldy);
  } else if constexpr (geometry(F).sub == 8 && R % 2 == 0) {
    kgemm16_row_pairs<F, R, NT>(dec, dec_row_bytes, a, t0, y, ldy);
  } else
#endif
  if constexpr (geometry(F).sub == 8) {
    kgemm16_fixed<F, R, NT>(dec, dec_row_bytes, a, t0, y, ldy);
  } else {
  using D = Decoder<F>;
  using L = Decoded16<F>;
  const int64_t blocks = a.K / (32 * L::kSub);
  const int16_t* q[NT];
  const float* dx[NT];
  const float* hs[NT];
  const float* s32[NT];
  #pragma GCC unroll 8
  for (int t = 0; t < NT; ++t) {
    q[t] = a.q16_of(t0 + t);
    dx[t] = a.d_of(t0 + t);
    hs[t] = a.half_sums_of(t0 + t);
    s32[t] = a.block_sums_of(t0 + t);
  }
  __m256 acc[R][NT];
  zero_accumulators(acc);
  for (int64_t sb = 0; sb < blocks; ++sb) {
    const std::byte* blk[R];
    #pragma GCC unroll 8
    for (int r = 0; r < R; ++r) blk[r] = dec + size_t(r) * dec_row_bytes + size_t(sb) * L::kBlockBytes;
    #pragma GCC unroll 8
    for (int k = 0; k < L::kSub; ++k) {
      const int64_t c = sb * L::kSub + k;
      __m256 sw[R];
      #pragma GCC unroll 8
      for (int r = 0; r < R; ++r) sw[r] = D::scales(*reinterpret_cast<const typename D::Ctx*>(blk[r]), k);
      #pragma GCC unroll 8
      for (int t = 0; t < NT; ++t) {
        const __m256i xa = _mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c));
        const __m256i xb = _mm256_load_si256(reinterpret_cast<const __m256i*>(q[t] + 32 * c + 16));
        const __m256 d = _mm256_set1_ps(dx[t][c]);
        #pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
          const auto* w = reinterpret_cast<const __m256i*>(blk[r] + L::kCtxBytes + size_t(k) * 64);
          const __m256i isum = madd_add(_mm256_madd_epi16(_mm256_load_si256(w), xa), _mm256_load_si256(w + 1), xb);
          acc[r][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum), _mm256_mul_ps(sw[r], d), acc[r][t]);
        }
      }
    }
    if constexpr (D::kHasMin) {
#pragma GCC unroll 8
      for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int t = 0; t < NT; ++t)
          D::add_mins(*reinterpret_cast<const typename D::Ctx*>(blk[r]), hs[t] + 2 * sb * L::kSub,
                      s32[t] + sb * L::kSub, acc[r][t]);
    }
  }
  write_outputs(acc, t0, y, ldy);
  }
}

// Rows [0, nr) of the decoded buffer against tokens [t0, t0 + nt): kRows x kTokens sub-tiles,
// then smaller ones at the edges.
template <WeightFormat F, int kRows, int kTokens>
void gemm16(const std::byte* dec, size_t dec_row_bytes, int nr, const BlockActivations& a, int64_t t0, int nt,
            float* y, int64_t ldy) {
  auto rows_of = [&]<int RR>(const std::byte* d, float* yy) {
    int t = 0;
    for (; t + kTokens <= nt; t += kTokens) gemm16_fixed<F, RR, kTokens>(d, dec_row_bytes, a, t0 + t, yy, ldy);
    for (; t < nt; ++t) gemm16_fixed<F, RR, 1>(d, dec_row_bytes, a, t0 + t, yy, ldy);
  };
  int r = 0;
  for (; r + kRows <= nr; r += kRows) rows_of.template operator()<kRows>(dec + size_t(r) * dec_row_bytes, y + r);
  for (; r < nr; ++r) rows_of.template operator()<1>(dec + size_t(r) * dec_row_bytes, y + r);
}

template <WeightFormat F, int kRows, int kTokens>
constexpr BlockPrefillFns prefill_fns() {
  return {decode_rows16<F>, gemm16<F, kRows, kTokens>, Decoded16<F>::kBlockBytes, size_t(32 * geometry(F).sub)};
}

template <int kRows, int kTokens>
BlockPrefillFns prefill_of(WeightFormat format) {
  switch (format) {
    case WeightFormat::Q4_0: return prefill_fns<WeightFormat::Q4_0, kRows, kTokens>();
    case WeightFormat::Q4_1: return prefill_fns<WeightFormat::Q4_1, kRows, kTokens>();
    case WeightFormat::Q5_0: return prefill_fns<WeightFormat::Q5_0, kRows, kTokens>();
    case WeightFormat::Q5_1: return prefill_fns<WeightFormat::Q5_1, kRows, kTokens>();
    case WeightFormat::Q8_0: return prefill_fns<WeightFormat::Q8_0, kRows, kTokens>();
    case WeightFormat::Q2_K: return prefill_fns<WeightFormat::Q2_K, kRows, kTokens>();
    case WeightFormat::Q3_K: return prefill_fns<WeightFormat::Q3_K, kRows, kTokens>();
    case WeightFormat::Q4_K: return prefill_fns<WeightFormat::Q4_K, kRows, kTokens>();
    case WeightFormat::Q5_K: return prefill_fns<WeightFormat::Q5_K, kRows, kTokens>();
    case WeightFormat::Q6_K: return prefill_fns<WeightFormat::Q6_K, kRows, kTokens>();
    case WeightFormat::IQ4_NL: return prefill_fns<WeightFormat::IQ4_NL, kRows, kTokens>();
    case WeightFormat::IQ4_XS: return prefill_fns<WeightFormat::IQ4_XS, kRows, kTokens>();
    default: return {};
  }
}

template <int kRows, int kTokens>
BlockTileFn tile_of(WeightFormat format) {
  // A geometry that disagrees with the format table leaves the format without a tile (the
  // table's test fails) rather than reading blocks at the wrong stride.
  const auto& info = quant::format_info(format);
  if (size_t(geometry(format).sub) * 32 != size_t(info.block_elems) || geometry(format).bytes != info.block_bytes)
    return nullptr;
  switch (format) {
    case WeightFormat::Q4_0: return tile<WeightFormat::Q4_0, kRows, kTokens>;
    case WeightFormat::Q4_1: return tile<WeightFormat::Q4_1, kRows, kTokens>;
    case WeightFormat::Q5_0: return tile<WeightFormat::Q5_0, kRows, kTokens>;
    case WeightFormat::Q5_1: return tile<WeightFormat::Q5_1, kRows, kTokens>;
    case WeightFormat::Q8_0: return tile<WeightFormat::Q8_0, kRows, kTokens>;
    case WeightFormat::Q2_K: return tile<WeightFormat::Q2_K, kRows, kTokens>;
    case WeightFormat::Q3_K: return tile<WeightFormat::Q3_K, kRows, kTokens>;
    case WeightFormat::Q4_K: return tile<WeightFormat::Q4_K, kRows, kTokens>;
    case WeightFormat::Q5_K: return tile<WeightFormat::Q5_K, kRows, kTokens>;
    case WeightFormat::Q6_K: return tile<WeightFormat::Q6_K, kRows, kTokens>;
    case WeightFormat::IQ4_NL: return tile<WeightFormat::IQ4_NL, kRows, kTokens>;
    case WeightFormat::IQ4_XS: return tile<WeightFormat::IQ4_XS, kRows, kTokens>;
    default: return nullptr;
  }
}

// Row decode for the tests: the canonical integers and scales, from the SIMD decoders.
template <WeightFormat F>
void decode_row(const void* row, int64_t n, int8_t* w, float* sw, float* mw) {
  using D = Decoder<F>;
  const auto& info = quant::format_info(F);
  const int sub = int(info.block_elems / 32);
  const auto* bytes = static_cast<const uint8_t*>(row);
  for (int64_t sb = 0; sb < n / info.block_elems; ++sb) {
    const uint8_t* b = bytes + size_t(sb) * info.block_bytes;
    typename D::Ctx ctx;
    D::prepare(b, ctx);
    for (int k = 0; k < sub; ++k) {
      const int64_t c = sb * sub + k;
      __m256i v = D::weights(b, ctx, k);
      if constexpr (!D::kSigned && D::kOffset != 0) v = _mm256_sub_epi8(v, _mm256_set1_epi8(char(D::kOffset)));
      _mm256_storeu_si256(reinterpret_cast<__m256i*>(w + 32 * c), v);
      alignas(32) float s[8];
      _mm256_store_ps(s, D::scales(ctx, k));
      sw[2 * c] = s[0];
      sw[2 * c + 1] = s[4];
      mw[2 * c] = D::min_half(ctx, k, 0);
      mw[2 * c + 1] = D::min_half(ctx, k, 1);
    }
  }
}

}  // namespace
}  // namespace lumen::kernels::simd

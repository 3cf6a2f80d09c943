#include "kernels/qmatmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/prefill.h"
#include "kernels/qmatmul_decode.h"
#include "quant/repack.h"

namespace lumen::kernels {

namespace detail {

void quantize_chunk_scalar(const float* x, int64_t valid, ActChunk* out) {
  for (int b = 0; b < 4; ++b) {
    float v[32];
    for (int i = 0; i < 32; ++i) v[i] = b * 32 + i < valid ? x[b * 32 + i] : 0.0f;
    float amax = 0.0f;
    for (float e : v) amax = std::max(amax, std::fabs(e));
    const float d = amax / 127.0f;
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < 32; ++i) {
      const auto q = int8_t(std::nearbyint(v[i] * id));  // default rounding: to nearest even
      out->q[(i < 16 ? 0 : 64) + b * 16 + (i % 16)] = q;
    }
    for (int l = 0; l < 4; ++l) out->dx[b * 4 + l] = d;
  }
  for (int l = 0; l < 16; ++l) {
    int32_t s = 0;
    for (int j = 0; j < 4; ++j) s += out->q[4 * l + j] + out->q[64 + 4 * l + j];
    out->neg8[l] = -8 * s;
    out->neg128[l] = -128 * s;
  }
}

namespace {
float load_f16(const std::byte* p) {
  uint16_t h;
  std::memcpy(&h, p, 2);
  return f16_to_f32(h);
}
}  // namespace

void q4_tile_scalar(const std::byte* group, int64_t chunks, const ActChunk* const* acts, int nt, float (*out)[4]) {
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < 4; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) {
        const std::byte* ch = group + size_t(c) * quant::kQ4x4ChunkBytes;
        const ActChunk& a = acts[t][c];
        const auto* qs = reinterpret_cast<const uint8_t*>(ch + 32 + r * 64);
        for (int b = 0; b < 4; ++b) {
          int32_t isum = 0;
          for (int i = 0; i < 16; ++i) {
            isum += (int(qs[b * 16 + i] & 0x0f) - 8) * a.q[b * 16 + i];
            isum += (int(qs[b * 16 + i] >> 4) - 8) * a.q[64 + b * 16 + i];
          }
          acc += float(isum) * a.dx[b * 4] * load_f16(ch + (r * 4 + b) * 2);
        }
      }
      out[t][r] = acc;
    }
  }
}

void q8_tile_scalar(const std::byte* group, int64_t chunks, const ActChunk* const* acts, int nt, float (*out)[4]) {
  for (int t = 0; t < nt; ++t) {
    for (int r = 0; r < 4; ++r) {
      float acc = 0.0f;
      for (int64_t c = 0; c < chunks; ++c) {
        const std::byte* ch = group + size_t(c) * quant::kQ8x4ChunkBytes;
        const ActChunk& a = acts[t][c];
        const auto* q = reinterpret_cast<const int8_t*>(ch + 32 + r * 128);
        for (int b = 0; b < 4; ++b) {
          int32_t isum = 0;
          for (int i = 0; i < 16; ++i) {
            isum += q[b * 16 + i] * a.q[b * 16 + i];
            isum += q[64 + b * 16 + i] * a.q[64 + b * 16 + i];
          }
          acc += float(isum) * a.dx[b * 4] * load_f16(ch + (r * 4 + b) * 2);
        }
      }
      out[t][r] = acc;
    }
  }
}

}  // namespace detail

void quantize_activations(const float* x, int64_t K, ActChunk* out, Isa isa) {
  const int64_t chunks = quant::padded_cols(K) / quant::kChunk;
  auto full = isa == Isa::Avx512 ? detail::quantize_chunk_avx512
              : isa == Isa::Avx2 ? detail::quantize_chunk_avx2
                                 : detail::quantize_chunk_scalar;
  for (int64_t c = 0; c < chunks; ++c) {
    const int64_t valid = std::min<int64_t>(quant::kChunk, K - c * quant::kChunk);
    if (valid == quant::kChunk || isa == Isa::Scalar) {
      (valid == quant::kChunk ? full : detail::quantize_chunk_scalar)(x + c * quant::kChunk, valid, out + c);
    } else {
      float padded[quant::kChunk] = {};
      std::memcpy(padded, x + c * quant::kChunk, size_t(valid) * 4);
      full(padded, quant::kChunk, out + c);
    }
  }
}

void qmatmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa) {
  qmatmul_isa(x, T, w, y, isa, q8_activations());
}

void qmatmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa,
                 Q8Activations q8_mode) {
  const bool q4 = w.format == quant::WeightFormat::Q4_0X4;
  if (!q4 && w.format != quant::WeightFormat::Q8_0X4)
    throw Error(std::string("qmatmul: format ") + quant::format_name(w.format) + " is not an X4 layout");
  if (T == 1 && q4) {  // decode: the matrix-vector kernels of qmatmul_decode.h
    const quant::WeightMatrix* one[] = {&w};
    float* out[] = {y};
    return qmatvec_q4(x, one, out, isa);
  }
  // Everything else (prefill, Q8 decode): the tiling machinery of prefill.h.
  const quant::WeightMatrix* one[] = {&w};
  float* out[] = {y};
  prefill_matmul(x, T, one, out, isa, q8_mode);
}

void qmatmul(const float* x, int64_t T, const quant::WeightMatrix& w, float* y) {
  qmatmul_isa(x, T, w, y, active_isa());
}

}  // namespace lumen::kernels

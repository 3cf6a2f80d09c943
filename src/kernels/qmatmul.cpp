#include "kernels/qmatmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "kernels/qmatmul_decode.h"
#include "kernels/thread_pool.h"
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
  const int64_t K = w.cols, N = w.rows;
  const int64_t chunks = quant::padded_cols(K) / quant::kChunk;
  const int64_t groups = quant::padded_rows(N) / quant::kRowGroup;
  const size_t group_bytes = size_t(chunks) * (q4 ? quant::kQ4x4ChunkBytes : quant::kQ8x4ChunkBytes);
  detail::QTileFn tile = isa == Isa::Avx512 ? (q4 ? detail::q4_tile_avx512 : detail::q8_tile_avx512)
                         : isa == Isa::Avx2 ? (q4 ? detail::q4_tile_avx2 : detail::q8_tile_avx2)
                                            : (q4 ? detail::q4_tile_scalar : detail::q8_tile_scalar);

  // Split Q8 activations (qact_split.cpp): token t's hi and lo halves sit side by side
  // (token_chunks = 2 * chunks per token) and go through the 2-token tile as a pair, whose
  // two outputs are added.
  const bool split = !q4 && q8_mode == Q8Activations::Int8x2;
  const int64_t token_chunks = split ? 2 * chunks : chunks;
  thread_local std::vector<ActChunk> acts;
  acts.resize(size_t(T * token_chunks));
  ActChunk* act = acts.data();
  auto quantize_token = [&](int64_t t) {
    ActChunk* a = act + t * token_chunks;
    if (split) quantize_activations_split(x + t * K, K, a, a + chunks, isa);
    else quantize_activations(x + t * K, K, a, isa);
  };
  ThreadPool& pool = ThreadPool::global();
  if (T > 1) {
    pool.parallel_for(T, [&](int64_t t0, int64_t t1) {
      for (int64_t t = t0; t < t1; ++t) quantize_token(t);
    });
  } else {
    quantize_token(0);
  }

  // Weight-stationary blocking: a block of row groups (about 128 KiB, so it stays in L2) meets
  // every token pair in turn; a pair's activations stay in L1 across the block. The weights
  // are read from memory once per call, the activations (small) from cache once per block.
  const int64_t block_groups = std::max<int64_t>(1, int64_t(128 << 10) / int64_t(group_bytes));
  const auto* base = static_cast<const std::byte*>(w.data);
  pool.parallel_for(groups, [&](int64_t g0, int64_t g1) {
    for (int64_t b0 = g0; b0 < g1; b0 += block_groups) {
      const int64_t b1 = std::min(g1, b0 + block_groups);
      if (split) {
        for (int64_t t = 0; t < T; ++t) {
          const ActChunk* halves[2] = {act + t * token_chunks, act + t * token_chunks + chunks};
          for (int64_t g = b0; g < b1; ++g) {
            float out[2][4];
            tile(base + size_t(g) * group_bytes, chunks, halves, 2, out);
            for (int r = 0; r < 4; ++r)
              if (g * 4 + r < N) y[t * N + g * 4 + r] = out[0][r] + out[1][r];
          }
        }
        continue;
      }
      for (int64_t t = 0; t < T; t += 2) {
        const int nt = int(std::min<int64_t>(2, T - t));
        const ActChunk* tile_acts[2] = {act + t * chunks, act + (t + nt - 1) * chunks};
        for (int64_t g = b0; g < b1; ++g) {
          float out[2][4];
          tile(base + size_t(g) * group_bytes, chunks, tile_acts, nt, out);
          for (int i = 0; i < nt; ++i)
            for (int r = 0; r < 4; ++r)
              if (g * 4 + r < N) y[(t + i) * N + g * 4 + r] = out[i][r];
        }
      }
    }
  });
}

void qmatmul(const float* x, int64_t T, const quant::WeightMatrix& w, float* y) {
  qmatmul_isa(x, T, w, y, active_isa());
}

}  // namespace lumen::kernels

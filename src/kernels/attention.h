// Attention over keys/values that arrive in tiles: an online ("flash") softmax that keeps,
// per query, only a running max, a running sum and an output accumulator, so no score
// matrix larger than one query x one tile ever exists. The caller feeds tiles of
// consecutive key positions (from whatever cache layout and precision, converted to f32
// tile by tile); the mask is computed from positions, so chunked prefill, decode and
// sliding windows are the same code. A plain full-score-vector version is kept as the
// reference the tests compare against.
#pragma once

#include <cstdint>

namespace lumen::kernels {

struct AttentionParams {
  int head_dim = 0;
  float scale = 1.0f;    // multiplies q.k
  float softcap = 0.0f;  // > 0: scores become softcap * tanh(score / softcap)
  int window = 0;        // > 0: a query at p sees keys p - window + 1 .. p; 0: all keys <= p
};

// First key position a query at `pos` may see.
inline int32_t attention_first_visible(const AttentionParams& p, int32_t pos) {
  return p.window > 0 && pos - p.window + 1 > 0 ? pos - p.window + 1 : 0;
}

// Running state of `n` queries. acc rows are head_dim floats.
struct OnlineSoftmaxState {
  float* max = nullptr;  // n entries, start at -inf
  float* sum = nullptr;  // n entries, start at 0
  float* acc = nullptr;  // n * head_dim, start at 0
  int n = 0;
};

void online_softmax_reset(const AttentionParams& p, OnlineSoftmaxState& s);

// Folds one tile of `count` keys/values (positions first_pos .. first_pos + count - 1, row i
// at k + i * kv_stride) into the state of n queries (query i at q[i] with position qpos[i]).
// Keys outside a query's visible range are skipped, not computed.
void online_softmax_tile(const AttentionParams& p, const float* const* q, const int32_t* qpos,
                         const float* k, const float* v, int64_t kv_stride, int32_t first_pos, int32_t count,
                         OnlineSoftmaxState& s);

// out[i] = acc[i] / sum[i] (zeros where a query saw no key).
void online_softmax_finish(const AttentionParams& p, const OnlineSoftmaxState& s, float* const* out);

// Merges `parts` partial states of the same n queries (each over a disjoint key range) into
// out[i]: the split-KV ("flash decoding") reduction.
void online_softmax_merge(const AttentionParams& p, const OnlineSoftmaxState* parts, int n_parts, float* const* out);

// Reference: one query against `count` keys (positions first_pos..), full score vector,
// softmax, weighted sum. Masked keys get no weight.
void attention_naive(const AttentionParams& p, const float* q, int32_t qpos, const float* k, const float* v,
                     int64_t kv_stride, int32_t first_pos, int32_t count, float* out);

// Half-precision rows to f32 (the tile conversion of f16 caches), active ISA.
void f16_to_f32_row(const uint16_t* src, int64_t n, float* dst);
void f32_to_f16_row(const float* src, int64_t n, uint16_t* dst);

// Symmetric block codes to f32: dst[i] = q[i] * scale. int4 codes are offset binary (code =
// q + 8), two per byte, low nibble first; n even.
void int8_to_f32_row(const int8_t* src, float scale, int64_t n, float* dst);
void int4_to_f32_row(const uint8_t* src, float scale, int64_t n, float* dst);

namespace detail {
void int8_to_f32_avx2(const int8_t* src, float scale, int64_t n, float* dst);
void int4_to_f32_avx2(const uint8_t* src, float scale, int64_t n, float* dst);
// y = y * c + a * x over n floats; and a dot product (AVX2 builds).
void scale_axpy_avx2(float c, float a, const float* x, int64_t n, float* y);
void f16_to_f32_avx2(const uint16_t* src, int64_t n, float* dst);
void f32_to_f16_avx2(const float* src, int64_t n, uint16_t* dst);
// online_softmax_tile for head_dim a multiple of 8.
void online_softmax_tile_avx2(const AttentionParams& p, const float* const* q, const int32_t* qpos, const float* k,
                              const float* v, int64_t kv_stride, int32_t first_pos, int32_t count,
                              OnlineSoftmaxState& s);
}  // namespace detail

}  // namespace lumen::kernels

#include "kernels/qmatmul_decode.h"

#include <algorithm>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/block_matmul.h"
#include "kernels/matmul.h"
#include "kernels/prefill.h"
#include "kernels/thread_pool.h"
#include "quant/repack.h"

namespace lumen::kernels {

bool decode_kernel_applies(const quant::WeightMatrix& w) { return w.format == quant::WeightFormat::Q4_0X4; }

void qmatvec_q4(const float* x, std::span<const quant::WeightMatrix* const> ws, std::span<float* const> ys, Isa isa) {
  const float* xs[8];
  const size_t n = std::min<size_t>(ws.size(), 8);
  for (size_t i = 0; i < n; ++i) xs[i] = x;
  if (ws.size() > 8) throw Error("qmatvec_q4: at most 8 matrices in one call");
  qmatvec_q4_each(std::span(xs, n), ws, ys, isa);
}

void qmatvec_q4_each(std::span<const float* const> xs, std::span<const quant::WeightMatrix* const> ws,
                     std::span<float* const> ys, Isa isa) {
  if (ws.empty()) return;
  if (ws.size() != ys.size() || ws.size() != xs.size())
    throw Error("qmatvec_q4: " + std::to_string(ws.size()) + " matrices, " + std::to_string(xs.size()) +
                " inputs and " + std::to_string(ys.size()) + " outputs");
  const int64_t K = ws[0]->cols;
  constexpr size_t kMaxMatrices = 8;
  if (ws.size() > kMaxMatrices) throw Error("qmatvec_q4: at most 8 matrices in one call");
  // Row groups of all matrices as one index space: matrix i owns [first[i], first[i + 1]).
  int64_t first[kMaxMatrices + 1] = {0};
  for (size_t i = 0; i < ws.size(); ++i) {
    if (!decode_kernel_applies(*ws[i]))
      throw Error(std::string("qmatvec_q4: format ") + quant::format_name(ws[i]->format) + " is not Q4_0X4");
    if (ws[i]->cols != K) throw Error("qmatvec_q4: matrices of one call must have the same columns");
    first[i + 1] = first[i] + quant::padded_rows(ws[i]->rows) / quant::kRowGroup;
  }
  const int64_t chunks = quant::padded_cols(K) / quant::kChunk;
  const size_t group_bytes = size_t(chunks) * quant::kQ4x4ChunkBytes;

  // Each distinct input quantized once (matrices sharing an input share its activations).
  thread_local std::vector<ActChunk> acts;
  acts.resize(size_t(chunks) * ws.size());
  const ActChunk* act_of[kMaxMatrices];
  for (size_t i = 0; i < ws.size(); ++i) {
    size_t same = i;
    for (size_t j = 0; j < i; ++j)
      if (xs[j] == xs[i]) {
        same = j;
        break;
      }
    if (same == i) quantize_activations(xs[i], K, acts.data() + i * size_t(chunks), isa);
    act_of[i] = acts.data() + same * size_t(chunks);
  }
  const detail::QTileFn tile = isa == Isa::Avx2 ? detail::q4_tile_avx2 : detail::q4_tile_scalar;

  auto run = [&](int64_t g0, int64_t g1) {
    for (size_t i = 0; i < ws.size() && g0 < g1; ++i) {
      const int64_t b = std::max(g0, first[i]), e = std::min(g1, first[i + 1]);
      if (b >= e) continue;
      const auto* base = static_cast<const std::byte*>(ws[i]->data);
      const int64_t N = ws[i]->rows;
      float* y = ys[i];
      const ActChunk* act = act_of[i];
      if (isa == Isa::Avx512) {
        detail::q4_decode_groups_avx512(base, chunks, act, b - first[i], e - first[i], N, y);
        continue;
      }
      const ActChunk* const tile_acts[2] = {act, act};
      for (int64_t g = b - first[i]; g < e - first[i]; ++g) {
        float out[2][4];
        tile(base + size_t(g) * group_bytes, chunks, tile_acts, 1, out);
        for (int r = 0; r < 4 && g * 4 + r < N; ++r) y[g * 4 + r] = out[0][r];
      }
    }
  };
  ThreadPool::global().parallel_for(first[ws.size()], run);
}

void matvec_each(std::span<const float* const> xs, std::span<const quant::WeightMatrix* const> ws,
                 std::span<float* const> ys) {
  bool fused = !ws.empty() && ws.size() <= 8 && xs.size() == ws.size() && ys.size() == ws.size();
  for (const auto* w : ws) fused = fused && decode_kernel_applies(*w) && w->cols == ws[0]->cols;
  if (fused) return qmatvec_q4_each(xs, ws, ys, active_isa());
  if (xs.size() != ws.size() || ys.size() != ws.size())
    throw Error("matvec_each: " + std::to_string(ws.size()) + " matrices, " + std::to_string(xs.size()) +
                " inputs and " + std::to_string(ys.size()) + " outputs");
  for (size_t i = 0; i < ws.size(); ++i) matmul(xs[i], 1, *ws[i], ys[i]);
}

void matmul_shared_input(const float* x, int64_t T, std::span<const quant::WeightMatrix* const> ws,
                         std::span<float* const> ys) {
  if (ws.size() != ys.size()) throw Error("matmul_shared_input: " + std::to_string(ws.size()) + " matrices but " +
                                          std::to_string(ys.size()) + " outputs");
  bool fused = T == 1 && ws.size() <= 8 && !exact_matmul();
  for (const auto* w : ws) fused = fused && decode_kernel_applies(*w) && w->cols == ws[0]->cols;
  if (fused) return qmatvec_q4(x, ws, ys, active_isa());
  // Many tokens: one prefill call (activations quantized once for all the matrices). One token
  // in a set the decode kernel does not take whole (Q4 with Q8, say) goes matrix by matrix, so
  // each matrix gets exactly what matmul() gives it alone (on AVX-512 the Q4 decode kernel and
  // the prefill tile sum in different orders).
  const Isa isa = active_isa();
  const Q8Activations q8_mode = q8_activations();
  bool prefill = T > 1 && ws.size() <= 8 && !exact_matmul();
  for (const auto* w : ws)
    prefill = prefill && prefill_kernel(w->format, isa, T, q8_mode) && w->cols == ws[0]->cols;
  if (prefill) return prefill_matmul(x, T, ws, ys, isa, q8_mode);
  // ggml block formats: one activation quantization, and one pool call for a token.
  bool blocks = !exact_matmul() && !ws.empty();
  for (const auto* w : ws) blocks = blocks && quant::is_ggml_block_format(w->format) && w->cols == ws[0]->cols;
  if (blocks) return block_matmul_shared_isa(x, T, ws, ys, isa, block_activations());
  for (size_t i = 0; i < ws.size(); ++i) matmul(x, T, *ws[i], ys[i]);
}

}  // namespace lumen::kernels

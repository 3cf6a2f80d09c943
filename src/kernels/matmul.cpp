#include "kernels/matmul.h"

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "kernels/block_matmul.h"
#include "kernels/cpu_features.h"
#include "kernels/ggml_dequant.h"
#include "kernels/qmatmul.h"
#include "kernels/thread_pool.h"

namespace lumen::kernels {

namespace detail {
float dot_f32_scalar(const float* a, const float* b, int64_t n) {
  // Four partial sums: the same association as the SIMD path, and no serial dependency.
  float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
  int64_t i = 0;
  for (; i + 4 <= n; i += 4) {
    s0 += a[i] * b[i];
    s1 += a[i + 1] * b[i + 1];
    s2 += a[i + 2] * b[i + 2];
    s3 += a[i + 3] * b[i + 3];
  }
  for (; i < n; ++i) s0 += a[i] * b[i];
  return (s0 + s1) + (s2 + s3);
}
}  // namespace detail

float dot_f32(const float* a, const float* b, int64_t n) {
  return active_isa() != Isa::Scalar ? detail::dot_f32_avx2(a, b, n) : detail::dot_f32_scalar(a, b, n);
}

namespace {

// Expands one weight row into f32 (a no-op view for f32 weights).
const float* row_as_f32(const quant::WeightMatrix& w, int64_t r, float* scratch, bool avx2) {
  if (quant::is_interleaved(w.format)) {
    quant::dequantize_row(w, r, scratch);
    return scratch;
  }
  const auto* base = static_cast<const std::byte*>(w.data) + size_t(r) * w.row_bytes();
  switch (w.format) {
    case quant::WeightFormat::F32:
      return reinterpret_cast<const float*>(base);
    case quant::WeightFormat::BF16:
      if (avx2) {
        detail::bf16_to_f32_avx2(reinterpret_cast<const uint16_t*>(base), w.cols, scratch);
        return scratch;
      }
      break;
    default:
      if (dequantize_row_fast(w.format, base, w.cols, scratch)) return scratch;
      break;  // f16 and the other block formats: the reference expansion below
  }
  quant::dequantize_row(w, r, scratch);
  return scratch;
}

}  // namespace

namespace {
std::atomic<int> g_exact{-1};  // -1: not read from the environment yet
}  // namespace

bool exact_matmul() {
  int v = g_exact.load(std::memory_order_relaxed);
  if (v < 0) {
    const char* env = std::getenv("LUMEN_EXACT");
    v = env != nullptr && *env != '\0' && std::string(env) != "0";
    g_exact.store(v, std::memory_order_relaxed);
  }
  return v != 0;
}

void set_exact_matmul(bool exact) { g_exact.store(exact ? 1 : 0, std::memory_order_relaxed); }

void matmul(const float* x, int64_t T, const quant::WeightMatrix& w, float* y) {
  if (exact_matmul()) return matmul_expanded(x, T, w, y, active_isa());
  format_kernels(w.format).matmul(x, T, w, y, active_isa());
}

void matmul_expanded(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa) {
  const int64_t K = w.cols, N = w.rows;
  const bool avx2 = isa != Isa::Scalar;
  auto dot = avx2 ? detail::dot_f32_avx2 : detail::dot_f32_scalar;
  ThreadPool::global().parallel_for(N, [&](int64_t r0, int64_t r1) {
    std::vector<float> scratch(static_cast<size_t>(K));
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = row_as_f32(w, r, scratch.data(), avx2);
      for (int64_t t = 0; t < T; ++t) y[t * N + r] = dot(x + t * K, row, K);
    }
  });
}

}  // namespace lumen::kernels

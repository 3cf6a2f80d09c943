#include "kernels/bf16_matmul.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "base/dtype.h"
#include "kernels/matmul.h"
#include "kernels/thread_pool.h"

namespace lumen::kernels {
namespace detail {

bool cpu_has_avx512_bf16() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_cpu_init();
  return __builtin_cpu_supports("avx512bf16");
#else
  return false;
#endif
}

void split_bf16(const float* x, int64_t K, int64_t K32, uint16_t* hi, uint16_t* lo) {
  for (int64_t c = 0; c < K; ++c) {
    const uint16_t h = f32_to_bf16(x[c]);
    hi[c] = h;
    lo[c] = f32_to_bf16(x[c] - bf16_to_f32(h));  // exact: x and its rounding share the top bits
  }
  for (int64_t c = K; c < K32; ++c) hi[c] = lo[c] = 0;
}

namespace {

// One vdpbf16ps lane in scalar: the odd element's product, then the even one's, each added to
// the accumulator with one rounding (the products of two bf16 are exact in f32).
inline float lane_pair(float acc, const uint16_t* w, const uint16_t* x, int lane) {
  acc = std::fmaf(bf16_to_f32(w[2 * lane + 1]), bf16_to_f32(x[2 * lane + 1]), acc);
  return std::fmaf(bf16_to_f32(w[2 * lane]), bf16_to_f32(x[2 * lane]), acc);
}

}  // namespace

// The 16 lanes summed in the AVX-512 tile's order (bf16_matmul_avx512bf16.cpp: halves, then
// quarters, then pairs).
float reduce_bf16_lanes(const float* a) {
  float t8[8], t4[4];
  for (int i = 0; i < 8; ++i) t8[i] = a[8 + i] + a[i];
  for (int i = 0; i < 4; ++i) t4[i] = t8[4 + i] + t8[i];
  return (t4[0] + t4[2]) + (t4[1] + t4[3]);
}

void bf16_tile_scalar(const uint16_t* w, int64_t K, int nr, const Bf16Activations& a, int64_t t0, int nt, float* y,
                      int64_t ldy) {
  uint16_t chunk[32];
  for (int r = 0; r < nr; ++r) {
    const uint16_t* row = w + size_t(r) * size_t(K);
    for (int t = 0; t < nt; ++t) {
      const uint16_t* xh = a.hi + size_t(t0 + t) * size_t(a.K32);
      const uint16_t* xl = a.lo + size_t(t0 + t) * size_t(a.K32);
      float acc[16] = {};
      for (int64_t c = 0; c < a.K32; c += 32) {
        const int64_t n = std::min<int64_t>(32, K - c);
        std::memset(chunk, 0, sizeof chunk);
        std::memcpy(chunk, row + c, size_t(n) * 2);
        for (int l = 0; l < 16; ++l) acc[l] = lane_pair(acc[l], chunk, xh + c, l);
        for (int l = 0; l < 16; ++l) acc[l] = lane_pair(acc[l], chunk, xl + c, l);
      }
      y[(t0 + t) * ldy + r] = reduce_bf16_lanes(acc);
    }
  }
}

void bf16_matmul_with(Bf16TileFn tile, const float* x, int64_t T, const quant::WeightMatrix& w, float* y) {
  const int64_t K = w.cols, N = w.rows;
  const int64_t K32 = (K + 31) / 32 * 32;
  thread_local std::vector<uint16_t> planes;
  // 32 spare elements so the planes can start on a 64-byte boundary.
  planes.resize(size_t(2 * T * K32 + 32));
  auto* base = planes.data();
  base += (64 - reinterpret_cast<uintptr_t>(base) % 64) % 64 / 2;
  Bf16Activations a{T, K, K32, base, base + T * K32};
  uint16_t* hi = base;
  uint16_t* lo = base + T * K32;
  auto split = [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) split_bf16(x + t * K, K, K32, hi + t * K32, lo + t * K32);
  };
  if (T > 1) ThreadPool::global().parallel_for(T, split);
  else split(0, T);
  const auto* rows = static_cast<const uint16_t*>(w.data);
  // Tokens in blocks whose two planes fit in ~1 MB (L2): each row group then meets a block of
  // tokens from cache, and the weights are read once per block.
  const int64_t fit = std::max<int64_t>(kBf16TileTokens, (int64_t(1) << 20) / (4 * K32));
  const int64_t block = std::min<int64_t>(T, fit / kBf16TileTokens * kBf16TileTokens);
  const int64_t groups = (N + kBf16TileRows - 1) / kBf16TileRows;
  for (int64_t tb = 0; tb < T; tb += block) {
    const int64_t tend = std::min(T, tb + block);
    ThreadPool::global().parallel_for(groups, [&](int64_t g0, int64_t g1) {
      for (int64_t g = g0; g < g1; ++g) {
        const int64_t r0 = g * kBf16TileRows;
        const int nr = int(std::min<int64_t>(kBf16TileRows, N - r0));
        for (int64_t t = tb; t < tend; t += kBf16TileTokens)
          tile(rows + size_t(r0) * size_t(K), K, nr, a, t, int(std::min<int64_t>(kBf16TileTokens, tend - t)), y + r0,
               N);
      }
    });
  }
}

}  // namespace detail

bool bf16_kernel_available(Isa isa) {
  static const bool has = detail::cpu_has_avx512_bf16();
  return isa == Isa::Avx512 && cpu_supports(Isa::Avx512) && has;
}

void bf16_matmul_isa(const float* x, int64_t T, const quant::WeightMatrix& w, float* y, Isa isa) {
  if (!bf16_kernel_available(isa)) return matmul_expanded(x, T, w, y, isa);
  detail::bf16_matmul_with(detail::bf16_tile_avx512bf16, x, T, w, y);
}

}  // namespace lumen::kernels

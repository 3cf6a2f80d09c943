// The bf16 weight kernel (kernels/bf16_matmul.h): the activations' two-plane split, the scalar
// tile against the exact product, the AVX-512 BF16 tile against the scalar one bit for bit
// (where the CPU has it; through SIMDe elsewhere, within rounding), odd sizes, batch invariance,
// and the format table's BF16 row.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "kernels/bf16_matmul.h"
#include "kernels/block_matmul.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"

using namespace lumen;

namespace {

std::vector<float> gaussian(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> dist(0.0f, scale);
  std::vector<float> v(n);
  for (auto& e : v) e = dist(rng);
  // A few outliers, as Gemma's hidden states have.
  for (size_t i = 0; i < n; i += 97) v[i] *= 40.0f;
  return v;
}

struct Bf16Matrix {
  std::vector<uint16_t> bits;
  quant::WeightMatrix w;
};

Bf16Matrix random_bf16(int64_t rows, int64_t cols, uint32_t seed) {
  Bf16Matrix m;
  const auto f = gaussian(size_t(rows * cols), seed, 0.05f);
  m.bits.resize(f.size());
  for (size_t i = 0; i < f.size(); ++i) m.bits[i] = f32_to_bf16(f[i]);
  m.w = {quant::WeightFormat::BF16, rows, cols, m.bits.data()};
  return m;
}

struct Planes {
  std::vector<uint16_t> hi, lo;
  kernels::Bf16Activations a;
};

Planes split(const std::vector<float>& x, int64_t T, int64_t K) {
  Planes p;
  const int64_t K32 = (K + 31) / 32 * 32;
  p.hi.resize(size_t(T * K32));
  p.lo.resize(size_t(T * K32));
  for (int64_t t = 0; t < T; ++t)
    kernels::detail::split_bf16(x.data() + t * K, K, K32, p.hi.data() + t * K32, p.lo.data() + t * K32);
  p.a = {T, K, K32, p.hi.data(), p.lo.data()};
  return p;
}

// Every tile call of a [rows, K] matrix against T tokens, in tiles of up to 4 x 4.
std::vector<float> run_tiles(kernels::detail::Bf16TileFn tile, const Bf16Matrix& m, const Planes& p) {
  const int64_t N = m.w.rows, K = m.w.cols, T = p.a.T;
  std::vector<float> y(size_t(T * N), std::nanf(""));
  for (int64_t r = 0; r < N; r += 4)
    for (int64_t t = 0; t < T; t += 4)
      tile(m.bits.data() + r * K, K, int(std::min<int64_t>(4, N - r)), p.a, t, int(std::min<int64_t>(4, T - t)),
           y.data() + r, N);
  return y;
}

uint32_t bits_of(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return b;
}

const int64_t kOddK[] = {1, 7, 31, 32, 33, 100, 647};

}  // namespace

TEST(Bf16Kernel, SplitKeepsSixteenSignificantBits) {
  const auto x = gaussian(4096, 1);
  std::vector<uint16_t> hi(4096), lo(4096);
  kernels::detail::split_bf16(x.data(), 4096, 4096, hi.data(), lo.data());
  for (size_t i = 0; i < x.size(); ++i) {
    const double back = double(bf16_to_f32(hi[i])) + double(bf16_to_f32(lo[i]));
    EXPECT_LE(std::fabs(back - double(x[i])), std::ldexp(std::fabs(double(x[i])), -16)) << i;
  }
  // Zero padding past K.
  std::vector<uint16_t> h2(64, 0xFFFF), l2(64, 0xFFFF);
  kernels::detail::split_bf16(x.data(), 33, 64, h2.data(), l2.data());
  for (int c = 33; c < 64; ++c) EXPECT_EQ(h2[size_t(c)] | l2[size_t(c)], 0) << c;
}

TEST(Bf16Kernel, ScalarTileIsTheExactProductWithinTheSplit) {
  for (int64_t K : kOddK) {
    const int64_t N = 5, T = 3;
    const auto m = random_bf16(N, K, uint32_t(K));
    const auto x = gaussian(size_t(T * K), uint32_t(K + 1));
    const auto p = split(x, T, K);
    const auto y = run_tiles(kernels::detail::bf16_tile_scalar, m, p);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < N; ++r) {
        double exact = 0, mag = 0;
        for (int64_t c = 0; c < K; ++c) {
          const double w = bf16_to_f32(m.bits[size_t(r * K + c)]), v = x[size_t(t * K + c)];
          exact += w * v;
          mag += std::fabs(w * v);
        }
        // The split's 2^-16 per element plus the f32 sums' rounding.
        EXPECT_NEAR(y[size_t(t * N + r)], exact, mag * (std::ldexp(1.0, -16) + 1e-6 * double(K))) << K << " " << r;
      }
  }
}

TEST(Bf16Kernel, Avx512Bf16TileIsTheScalarReferenceBitForBit) {
  if (!kernels::bf16_kernel_available(kernels::Isa::Avx512)) GTEST_SKIP() << "no AVX-512 BF16 on this CPU";
  for (int64_t K : kOddK)
    for (int64_t N : {1, 3, 4, 9})
      for (int64_t T : {1, 2, 3, 4, 7}) {
        const auto m = random_bf16(N, K, uint32_t(K * 100 + N));
        const auto p = split(gaussian(size_t(T * K), uint32_t(K + T)), T, K);
        const auto want = run_tiles(kernels::detail::bf16_tile_scalar, m, p);
        const auto got = run_tiles(kernels::detail::bf16_tile_avx512bf16, m, p);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_EQ(bits_of(got[i]), bits_of(want[i])) << "K " << K << " N " << N << " T " << T << " at " << i;
      }
}

#ifdef LUMEN_TEST_SIMDE_AVX512
// The AVX-512 BF16 tile's own source on SIMDe (any machine with AVX2): SIMDe adds a lane's two
// products before the accumulator, so within rounding of the scalar tile.
TEST(Bf16Kernel, EmulatedAvx512Bf16TileMatchesTheScalarReference) {
  if (!kernels::cpu_supports(kernels::Isa::Avx2)) GTEST_SKIP() << "SIMDe is built on AVX2 here";
  for (int64_t K : kOddK)
    for (int64_t N : {1, 4, 9})
      for (int64_t T : {1, 3, 4, 7}) {
        const auto m = random_bf16(N, K, uint32_t(K * 100 + N));
        const auto x = gaussian(size_t(T * K), uint32_t(K + T));
        const auto p = split(x, T, K);
        const auto want = run_tiles(kernels::detail::bf16_tile_scalar, m, p);
        const auto got = run_tiles(kernels::detail::bf16_tile_avx512bf16_emulated, m, p);
        for (int64_t t = 0; t < T; ++t)
          for (int64_t r = 0; r < N; ++r) {
            double mag = 0;
            for (int64_t c = 0; c < K; ++c)
              mag += std::fabs(double(bf16_to_f32(m.bits[size_t(r * K + c)])) * x[size_t(t * K + c)]);
            EXPECT_NEAR(got[size_t(t * N + r)], want[size_t(t * N + r)], mag * 1e-6 * double(K) + 1e-30)
                << "K " << K << " N " << N << " T " << T;
          }
      }
}
#endif

TEST(Bf16Kernel, ATokensOutputsDoNotDependOnTheBatch) {
  // Token t of a batch equals token t alone (decode = prefill), on the kernel the CPU runs.
  const int64_t N = 37, K = 200, T = 9;
  const auto m = random_bf16(N, K, 5);
  const auto x = gaussian(size_t(T * K), 6);
  for (kernels::Isa isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (!kernels::cpu_supports(isa)) continue;
    std::vector<float> batch(static_cast<size_t>(T * N)), one(static_cast<size_t>(N));
    kernels::bf16_matmul_isa(x.data(), T, m.w, batch.data(), isa);
    for (int64_t t = 0; t < T; ++t) {
      kernels::bf16_matmul_isa(x.data() + t * K, 1, m.w, one.data(), isa);
      for (int64_t r = 0; r < N; ++r)
        ASSERT_EQ(bits_of(one[size_t(r)]), bits_of(batch[size_t(t * N + r)])) << kernels::isa_name(isa) << " " << t;
    }
  }
}

TEST(Bf16Kernel, FormatTableRowAgreesWithTheF32Path) {
  EXPECT_EQ(kernels::format_kernels(quant::WeightFormat::BF16).activations, kernels::ActivationKind::Bf16Pair);
  // Large enough for several token blocks and row groups, odd in every dimension.
  const int64_t N = 45, K = 2051, T = 131;
  const auto m = random_bf16(N, K, 9);
  const auto x = gaussian(size_t(T * K), 10);
  for (kernels::Isa isa : {kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (!kernels::cpu_supports(isa)) continue;
    std::vector<float> fast(size_t(T * N)), ref(size_t(T * N));
    kernels::format_kernels(quant::WeightFormat::BF16).matmul(x.data(), T, m.w, fast.data(), isa);
    kernels::matmul_expanded(x.data(), T, m.w, ref.data(), isa);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < N; ++r) {
        double mag = 0;
        for (int64_t c = 0; c < K; ++c)
          mag += std::fabs(double(bf16_to_f32(m.bits[size_t(r * K + c)])) * x[size_t(t * K + c)]);
        ASSERT_NEAR(fast[size_t(t * N + r)], ref[size_t(t * N + r)], mag * (std::ldexp(1.0, -16) + 2e-7 * double(K)))
            << kernels::isa_name(isa) << " t " << t << " r " << r;
      }
  }
}

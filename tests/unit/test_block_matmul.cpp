// The block-format kernels (kernels/block_matmul.h): every ISA against the scalar reference on
// odd sizes (the integer parts bit for bit: activation quantization and weight decoding), the
// scalar reference against the exact dequantized product, and the format table.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/error.h"
#include "ggml_random_blocks.h"
#include "kernels/block_matmul.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "quant/ggml_blocks.h"
#include "quant/weight_matrix.h"
#include "test_helpers.h"

using lumen::test_support::simd_isas;

using namespace lumen;
using quant::WeightFormat;

namespace {

const WeightFormat kBlockFormats[] = {WeightFormat::Q4_0, WeightFormat::Q4_1, WeightFormat::Q5_0,
                                      WeightFormat::Q5_1, WeightFormat::Q8_0, WeightFormat::Q2_K,
                                      WeightFormat::Q3_K, WeightFormat::Q4_K, WeightFormat::Q5_K,
                                      WeightFormat::Q6_K, WeightFormat::IQ4_NL, WeightFormat::IQ4_XS};

// Activations with a spread of magnitudes and a few outliers (as in real hidden states).
std::vector<float> activations(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = normal(rng);
  for (int64_t i = 0; i < n; i += 37) x[size_t(i)] *= 20.0f;
  if (n > 5) x[5] = 0.0f;
  return x;
}

struct Matrix {
  std::vector<uint8_t> bytes;
  quant::WeightMatrix w;
};

Matrix random_matrix(WeightFormat f, int64_t rows, int64_t cols, uint64_t seed) {
  Matrix m;
  const auto& info = quant::format_info(f);
  // Scales of magnitude <= ~1/16 keep the sums of hundreds of products moderate.
  m.bytes = test_blocks::random_blocks(f, rows * cols / info.block_elems, seed, 12);
  m.w = {f, rows, cols, m.bytes.data()};
  return m;
}

std::string name_of(WeightFormat f) { return quant::format_name(f); }

}  // namespace

TEST(BlockKernels, ActivationQuantizationIsBitIdenticalOnEveryIsa) {
  for (int64_t group : {32, 256})
  for (int64_t K : {32, 96, 256, 288, 1024}) {
    if (K % group != 0) continue;
    const auto x = activations(K, uint32_t(K));
    std::vector<int8_t> q0(static_cast<size_t>(K)), q1(static_cast<size_t>(K));
    std::vector<float> d0(static_cast<size_t>(K / 32)), d1(d0.size()), h0(static_cast<size_t>(K / 16)), h1(h0.size());
    std::vector<int32_t> l0(static_cast<size_t>(K / 4)), l1(l0.size());
    kernels::quantize_block_activations(x.data(), K, q0.data(), d0.data(), h0.data(), l0.data(), kernels::Isa::Scalar,
                                        group);
    // The scalar reference itself: one scale per group, the group's largest |x| at 127,
    // |x - d q| <= d / 2, and the sums are the sums of q.
    for (int64_t c = 0; c < K / 32; ++c) {
      const int64_t g0 = c / (group / 32) * group;
      EXPECT_EQ(d0[size_t(c)], d0[size_t(g0 / 32)]) << "group " << group << " block " << c;
      float amax = 0.0f;
      for (int64_t j = g0; j < g0 + group; ++j) amax = std::max(amax, std::fabs(x[size_t(j)]));
      EXPECT_EQ(d0[size_t(c)], amax / 127.0f);
      int32_t s = 0;
      for (int j = 0; j < 32; ++j) {
        const float v = x[size_t(32 * c + j)];
        EXPECT_LE(std::fabs(v - d0[size_t(c)] * q0[size_t(32 * c + j)]), d0[size_t(c)] * 0.5001f);
        s += q0[size_t(32 * c + j)];
      }
      EXPECT_NEAR(h0[size_t(2 * c)] + h0[size_t(2 * c + 1)], d0[size_t(c)] * float(s), 1e-6f * d0[size_t(c)] * 512);
    }
    for (auto isa : simd_isas()) {
      kernels::quantize_block_activations(x.data(), K, q1.data(), d1.data(), h1.data(), l1.data(), isa, group);
      EXPECT_EQ(q0, q1) << kernels::isa_name(isa) << " K " << K << " group " << group;
      EXPECT_EQ(std::memcmp(d0.data(), d1.data(), d0.size() * 4), 0) << kernels::isa_name(isa);
      EXPECT_EQ(std::memcmp(h0.data(), h1.data(), h0.size() * 4), 0) << kernels::isa_name(isa);
      EXPECT_EQ(l0, l1) << kernels::isa_name(isa);
    }
  }
  std::vector<float> x(64);
  kernels::BlockActivationBuffer buf;
  EXPECT_THROW(buf.quantize(x.data(), 1, 64, kernels::Isa::Scalar, kernels::BlockActivationMode::Int8x2, 256), Error);
  EXPECT_THROW(buf.quantize(x.data(), 1, 64, kernels::Isa::Scalar, kernels::BlockActivationMode::Int8x2, 64), Error);
}

// The canonical integers (w, sw, mw) reproduce ggml's dequantization: sw * w + mw == the
// reference value (up to f32 rounding of one multiply-add), for every format.
TEST(BlockKernels, CanonicalDecodingReproducesDequantization) {
  for (WeightFormat f : kBlockFormats) {
    const auto& info = quant::format_info(f);
    const int64_t n = 2 * std::max<int64_t>(info.block_elems, 64);
    const auto bytes = test_blocks::random_blocks(f, n / info.block_elems, 11);
    std::vector<int8_t> w(static_cast<size_t>(n));
    std::vector<float> sw(static_cast<size_t>(n / 16)), mw(static_cast<size_t>(n / 16)), ref(static_cast<size_t>(n));
    kernels::detail::decode_block_row_scalar(f, bytes.data(), n, w.data(), sw.data(), mw.data());
    quant::dequantize_ggml_row(info.ggml_type, bytes.data(), n, ref.data());
    for (int64_t i = 0; i < n; ++i) {
      const float got = sw[size_t(i / 16)] * float(w[size_t(i)]) + mw[size_t(i / 16)];
      EXPECT_NEAR(got, ref[size_t(i)], 1e-6f * (std::fabs(ref[size_t(i)]) + std::fabs(mw[size_t(i / 16)])))
          << name_of(f) << " element " << i;
    }
  }
}

TEST(BlockKernels, SimdDecodingIsBitIdenticalToScalar) {
  if (!kernels::cpu_supports(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  for (WeightFormat f : kBlockFormats) {
    const auto& info = quant::format_info(f);
    const int64_t n = 3 * info.block_elems;
    for (uint64_t seed = 1; seed <= 5; ++seed) {
      const auto bytes = test_blocks::random_blocks(f, 3, seed);
      std::vector<int8_t> w0(static_cast<size_t>(n)), w1(static_cast<size_t>(n));
      std::vector<float> s0(static_cast<size_t>(n / 16)), s1(s0.size()), m0(s0.size()), m1(s0.size());
      kernels::detail::decode_block_row_scalar(f, bytes.data(), n, w0.data(), s0.data(), m0.data());
      ASSERT_TRUE(kernels::detail::decode_block_row_avx2(f, bytes.data(), n, w1.data(), s1.data(), m1.data()));
      EXPECT_EQ(w0, w1) << name_of(f) << " seed " << seed;
      EXPECT_EQ(std::memcmp(s0.data(), s1.data(), s0.size() * 4), 0) << name_of(f);
      for (size_t i = 0; i < m0.size(); ++i) EXPECT_EQ(m0[i], m1[i]) << name_of(f) << " half " << i;  // -0 == +0
    }
  }
}

// The scalar reference equals a double-precision sum over the dequantized weights and the
// dequantized activations (dx * q): the decomposition loses nothing but f32 rounding.
TEST(BlockKernels, ScalarReferenceIsTheDequantizedProduct) {
  for (WeightFormat f : kBlockFormats) {
    const auto& info = quant::format_info(f);
    const int64_t rows = 5, cols = 3 * std::max<int64_t>(info.block_elems, 64), T = 3;
    const Matrix m = random_matrix(f, rows, cols, 21);
    const auto x = activations(T * cols, 7);
    for (auto mode : {kernels::BlockActivationMode::Int8, kernels::BlockActivationMode::Int8x2}) {
      const bool split = mode == kernels::BlockActivationMode::Int8x2;
      std::vector<float> y(static_cast<size_t>(T * rows));
      kernels::block_matmul_isa(x.data(), T, m.w, y.data(), kernels::Isa::Scalar, mode);
      kernels::BlockActivationBuffer buf;
      const auto& a = buf.quantize(x.data(), T, cols, kernels::Isa::Scalar, mode, kernels::activation_group(f));
      std::vector<float> row(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        quant::dequantize_row(m.w, r, row.data());
        for (int64_t t = 0; t < T; ++t) {
          double sum = 0.0, mag = 0.0;
          for (int64_t c = 0; c < cols; ++c) {
            const int32_t Q = split ? 256 * a.q_of(t)[c] + a.q_lo_of(t)[c] : a.q_of(t)[c];
            const double xv = double(a.d_of(t)[c / 32]) * Q;
            sum += double(row[size_t(c)]) * xv;
            mag += std::fabs(double(row[size_t(c)]) * xv);
          }
          EXPECT_NEAR(y[size_t(t * rows + r)], sum, 2e-6 * mag + 1e-30)
              << name_of(f) << " row " << r << " token " << t << (split ? ", split" : "");
        }
      }
    }
  }
}

// Every ISA's tiles against the scalar reference on odd sizes: rows not a multiple of the
// tile, token counts not a multiple of the tile, 1 to 3 blocks per row.
TEST(BlockKernels, EveryIsaMatchesTheScalarReferenceOnOddSizes) {
  const auto isas = simd_isas();
  if (isas.empty()) GTEST_SKIP() << "no SIMD ISA on this CPU";
  struct Shape { int64_t rows, blocks, T; };
  const Shape shapes[] = {{1, 1, 1}, {5, 1, 3}, {7, 3, 2}, {13, 2, 5}, {4, 3, 17}, {9, 1, 1}, {3, 2, 9}};
  for (WeightFormat f : kBlockFormats) {
    const auto& info = quant::format_info(f);
    for (const Shape& s : shapes) {
      const int64_t cols = s.blocks * std::max<int64_t>(info.block_elems, 32) * (info.block_elems == 32 ? 3 : 1);
      const Matrix m = random_matrix(f, s.rows, cols, uint64_t(s.rows * 100 + s.T));
      const auto x = activations(s.T * cols, uint32_t(cols + s.T));
      for (auto mode : {kernels::BlockActivationMode::Int8, kernels::BlockActivationMode::Int8x2}) {
      std::vector<float> want(static_cast<size_t>(s.T * s.rows)), got(want.size());
      kernels::block_matmul_isa(x.data(), s.T, m.w, want.data(), kernels::Isa::Scalar, mode);
      // The scale of the f32 rounding: the largest output of the same activations against |W|.
      float scale = 0.0f;
      for (float v : want) scale = std::max(scale, std::fabs(v));
      for (auto isa : isas) {
        std::fill(got.begin(), got.end(), std::nanf(""));
        kernels::block_matmul_isa(x.data(), s.T, m.w, got.data(), isa, mode);
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-5f * scale + 1e-30f)
              << name_of(f) << " on " << kernels::isa_name(isa) << ", rows " << s.rows << " cols " << cols << " T "
              << s.T << ", output " << i << (mode == kernels::BlockActivationMode::Int8x2 ? ", split" : "");
      }
      }
    }
  }
}

// Several tokens with split activations take the prefill kernels (rows decoded once to int16);
// a token's outputs must be bit-identical to what the decode tile gives it alone, on every ISA,
// so a prompt's logits do not depend on how it was batched.
TEST(BlockKernels, PrefillIsBitIdenticalToDecodeTokenByToken) {
  const auto isas = simd_isas();
  if (isas.empty()) GTEST_SKIP() << "no SIMD ISA on this CPU";
  for (WeightFormat f : kBlockFormats) {
    const auto& info = quant::format_info(f);
    const int64_t rows = 11, cols = 2 * std::max<int64_t>(info.block_elems, 64), T = 19;
    const Matrix m = random_matrix(f, rows, cols, 31);
    const auto x = activations(T * cols, 17);
    for (auto isa : isas) {
      std::vector<float> batched(static_cast<size_t>(T * rows)), single(static_cast<size_t>(rows));
      kernels::block_matmul_isa(x.data(), T, m.w, batched.data(), isa, kernels::BlockActivationMode::Int8x2);
      for (int64_t t = 0; t < T; ++t) {
        kernels::block_matmul_isa(x.data() + t * cols, 1, m.w, single.data(), isa, kernels::BlockActivationMode::Int8x2);
        ASSERT_EQ(std::memcmp(single.data(), batched.data() + t * rows, size_t(rows) * 4), 0)
            << name_of(f) << " on " << kernels::isa_name(isa) << ", token " << t;
      }
    }
  }
}

// Matrices sharing an input (q/k/v with mixed formats, as Gemma 3 270M's Q4_K_M has) in one
// call: bit-identical to one call per matrix, for a token and for a prompt.
TEST(BlockKernels, SharedInputCallEqualsOneCallPerMatrix) {
  const int64_t cols = 512;
  const Matrix a = random_matrix(WeightFormat::Q5_0, 13, cols, 1), b = random_matrix(WeightFormat::Q8_0, 6, cols, 2),
               c = random_matrix(WeightFormat::Q4_K, 9, cols, 3);
  const quant::WeightMatrix* ws[] = {&a.w, &b.w, &c.w};
  for (auto isa : lumen::test_support::all_isas()) {
    for (int64_t T : {1, 5}) {
      const auto x = activations(T * cols, uint32_t(T));
      std::vector<std::vector<float>> separate(3), shared(3);
      float* ys[3];
      for (size_t i = 0; i < 3; ++i) {
        separate[i].resize(size_t(T * ws[i]->rows));
        shared[i].assign(separate[i].size(), std::nanf(""));
        kernels::block_matmul_isa(x.data(), T, *ws[i], separate[i].data(), isa, kernels::BlockActivationMode::Int8x2);
        ys[i] = shared[i].data();
      }
      kernels::block_matmul_shared_isa(x.data(), T, ws, ys, isa, kernels::BlockActivationMode::Int8x2);
      for (size_t i = 0; i < 3; ++i)
        EXPECT_EQ(std::memcmp(shared[i].data(), separate[i].data(), separate[i].size() * 4), 0)
            << "matrix " << i << " on " << kernels::isa_name(isa) << ", T " << T;
    }
  }
  const Matrix narrow = random_matrix(WeightFormat::Q8_0, 2, 256, 4);
  const quant::WeightMatrix* mixed[] = {&a.w, &narrow.w};
  std::vector<float> y0(13), y1(2);
  float* ys[] = {y0.data(), y1.data()};
  const auto x = activations(cols, 9);
  EXPECT_THROW(kernels::block_matmul_shared_isa(x.data(), 1, mixed, ys, kernels::Isa::Scalar,
                                                kernels::BlockActivationMode::Int8x2),
               Error);
}

// The 256-element formats' integer sums at their bounds (block_matmul.h): the largest scale x
// weight products every element, against the largest activations (Q = 256 * 127 for every
// column), in each 256- or 128-element group. Every ISA, decode and prefill, must give the
// exact product: an int32 that wrapped would be off by 2^32 in some lane.
TEST(BlockKernels, IntegerSumsOfTheKQuantsHoldAtTheirBounds) {
  struct Extreme { WeightFormat f; std::vector<std::pair<size_t, uint8_t>> bytes; uint8_t fill; };
  // d (f16 1/1024 = 0x1400) at its offset; everything else from `fill`.
  const Extreme cases[] = {
      {WeightFormat::Q4_K, {{0, 0x00}, {1, 0x14}, {2, 0x00}, {3, 0x00}}, 0xFF},   // sc 63, m 63 (dmin 0), q 15
      {WeightFormat::Q5_K, {{0, 0x00}, {1, 0x14}, {2, 0x00}, {3, 0x00}}, 0xFF},   // q 31
      {WeightFormat::Q2_K, {{80, 0x00}, {81, 0x14}, {82, 0x00}, {83, 0x00}}, 0xFF},
      {WeightFormat::Q6_K, {{208, 0x00}, {209, 0x14}}, 0x00},                    // w -32, then scales -128
      {WeightFormat::IQ4_XS, {{0, 0x00}, {1, 0x14}}, 0x00},                      // ls - 32 = -32, value -127
      {WeightFormat::Q3_K, {{108, 0x00}, {109, 0x14}}, 0x00},                    // s - 32 = -32, w -4
  };
  for (const Extreme& e : cases) {
    const auto& info = quant::format_info(e.f);
    const int64_t rows = 5, cols = 512, T = 6;
    std::vector<uint8_t> bytes(size_t(rows * cols / info.block_elems) * info.block_bytes, e.fill);
    for (size_t b = 0; b < bytes.size() / info.block_bytes; ++b) {
      for (auto [off, v] : e.bytes) bytes[b * info.block_bytes + off] = v;
      if (e.f == WeightFormat::Q6_K) std::memset(&bytes[b * info.block_bytes + 192], 0x80, 16);
    }
    const quant::WeightMatrix w{e.f, rows, cols, bytes.data()};
    std::vector<float> x(size_t(T * cols), 1.0f);
    std::vector<float> row(static_cast<size_t>(cols));
    quant::dequantize_row(w, 0, row.data());
    double want = 0.0;  // x = 1 is exactly 127 * (1 / 127) ... up to f32: compare relatively
    for (float v : row) want += double(v);
    for (auto isa : lumen::test_support::all_isas()) {
      std::vector<float> y(size_t(T * rows));
      kernels::block_matmul_isa(x.data(), T, w, y.data(), isa, kernels::BlockActivationMode::Int8x2);
      for (float v : y) ASSERT_NEAR(v, want, 1e-5 * std::fabs(want)) << name_of(e.f) << " on " << kernels::isa_name(isa);
      kernels::block_matmul_isa(x.data(), 1, w, y.data(), isa, kernels::BlockActivationMode::Int8x2);
      for (int64_t r = 0; r < rows; ++r)
        ASSERT_NEAR(y[size_t(r)], want, 1e-5 * std::fabs(want)) << name_of(e.f) << " decode on " << kernels::isa_name(isa);
    }
  }
}

#ifdef LUMEN_TEST_SIMDE_AVX512
// The AVX-512 tiles' own source (VNNI through SIMDe) against the scalar tiles, on machines
// without AVX-512 (with it, EveryIsaMatchesTheScalarReferenceOnOddSizes runs them natively).
TEST(BlockKernels, EmulatedAvx512TilesMatchTheScalarReference) {
  if (!kernels::cpu_supports(kernels::Isa::Avx2)) GTEST_SKIP() << "SIMDe is built on AVX2 here";
  for (WeightFormat f : kBlockFormats) {
    const auto& info = quant::format_info(f);
    for (int64_t rows : {1, 3, 4, 7})
      for (int64_t T : {1, 2, 4, 5}) {
        const int64_t cols = 2 * std::max<int64_t>(info.block_elems, 64);
        const Matrix m = random_matrix(f, rows, cols, uint64_t(rows * 10 + T));
        const auto x = activations(T * cols, uint32_t(T));
        for (auto mode : {kernels::BlockActivationMode::Int8, kernels::BlockActivationMode::Int8x2}) {
        kernels::BlockActivationBuffer buf;
        const auto& a = buf.quantize(x.data(), T, cols, kernels::Isa::Scalar, mode, kernels::activation_group(f));
        std::vector<float> want(static_cast<size_t>(T * rows)), got(want.size(), std::nanf(""));
        const size_t rb = m.w.row_bytes();
        const auto* base = reinterpret_cast<const std::byte*>(m.bytes.data());
        auto scalar = kernels::detail::block_tile_scalar(f), emulated = kernels::detail::block_tile_avx512_emulated(f);
        for (int64_t r = 0; r < rows; r += kernels::kBlockTileRows)
          for (int64_t t = 0; t < T; t += kernels::kBlockTileTokens) {
            const int nr = int(std::min<int64_t>(kernels::kBlockTileRows, rows - r));
            const int nt = int(std::min<int64_t>(kernels::kBlockTileTokens, T - t));
            scalar(base + r * rb, rb, nr, a, t, nt, want.data() + r, rows);
            emulated(base + r * rb, rb, nr, a, t, nt, got.data() + r, rows);
          }
        float scale = 0.0f;
        for (float v : want) scale = std::max(scale, std::fabs(v));
        if (mode == kernels::BlockActivationMode::Int8x2) {  // the prefill kernels' AVX-512 build too
          const auto pre = kernels::detail::block_prefill_avx512_emulated(f);
          ASSERT_NE(pre.gemm, nullptr) << name_of(f);
          const size_t dec_row = size_t(cols) / pre.block_elems * pre.block_bytes;
          std::vector<std::byte> dec(size_t(rows) * dec_row + 32);
          auto* d = reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(dec.data()) + 31) & ~uintptr_t(31));
          pre.decode(base, rb, int(rows), cols, d);
          std::vector<float> pf(want.size(), std::nanf(""));
          for (int64_t r = 0; r < rows; r += kernels::kBlockTileRows)
            pre.gemm(d + r * dec_row, dec_row, int(std::min<int64_t>(kernels::kBlockTileRows, rows - r)), a, 0, int(T),
                     pf.data() + r, rows);
          for (size_t i = 0; i < want.size(); ++i)
            ASSERT_NEAR(pf[i], want[i], 2e-5f * scale) << name_of(f) << " prefill, rows " << rows << " T " << T;
        }
        for (size_t i = 0; i < want.size(); ++i)
          ASSERT_NEAR(got[i], want[i], 2e-5f * scale)
              << name_of(f) << " rows " << rows << " T " << T << " output " << i
              << (mode == kernels::BlockActivationMode::Int8x2 ? ", split" : "");
        }
      }
  }
}
#endif

// The fast path against the exact f32 path through kernels::matmul: the only difference is
// the activations' rounding (int8: a few percent here; split int8x2: 50x less).
TEST(BlockKernels, FastPathIsCloseToTheExactPath) {
  for (WeightFormat f : kBlockFormats) {
    const auto& info = quant::format_info(f);
    const int64_t rows = 6, cols = 2 * std::max<int64_t>(info.block_elems, 128), T = 2;
    const Matrix m = random_matrix(f, rows, cols, 5);
    const auto x = activations(T * cols, 3);
    std::vector<float> int8(static_cast<size_t>(T * rows)), split(int8.size()), exact(int8.size());
    kernels::set_block_activations(kernels::BlockActivationMode::Int8);
    kernels::matmul(x.data(), T, m.w, int8.data());
    kernels::set_block_activations(kernels::BlockActivationMode::Int8x2);
    kernels::matmul(x.data(), T, m.w, split.data());
    kernels::set_exact_matmul(true);
    kernels::matmul(x.data(), T, m.w, exact.data());
    kernels::set_exact_matmul(false);
    auto rel_error = [&](const std::vector<float>& got) {
      double err = 0.0, norm = 0.0;
      for (size_t i = 0; i < got.size(); ++i) {
        err += double(got[i] - exact[i]) * (got[i] - exact[i]);
        norm += double(exact[i]) * exact[i];
      }
      EXPECT_GT(norm, 0.0) << name_of(f);
      return std::sqrt(err / norm);
    };
    EXPECT_LT(rel_error(int8), 0.05) << name_of(f);
    // The residual half is ~254x finer: what is left is f32 rounding and lo's own rounding.
    EXPECT_LT(rel_error(split), rel_error(int8) / 50) << name_of(f);
  }
}

TEST(BlockKernels, SplitActivationsAreHiThenResidual) {
  const int64_t K = 96;
  auto x = activations(K, 5);
  x[40] = 50.0f;  // a per-block outlier, what the split is for
  for (auto isa : {kernels::Isa::Scalar, kernels::Isa::Avx2}) {
    if (!kernels::cpu_supports(isa)) continue;
    kernels::BlockActivationBuffer single, pair;
    const auto& a = single.quantize(x.data(), 1, K, isa, kernels::BlockActivationMode::Int8);
    const auto& b = pair.quantize(x.data(), 1, K, isa, kernels::BlockActivationMode::Int8x2);
    ASSERT_EQ(b.T, 1);
    ASSERT_NE(b.q_lo, nullptr);
    EXPECT_EQ(a.q_lo, nullptr);
    EXPECT_EQ(std::memcmp(a.q_of(0), b.q_of(0), size_t(K)), 0);  // hi = single int8 exactly
    for (int64_t c = 0; c < K / 32; ++c) EXPECT_EQ(b.d_of(0)[c], a.d_of(0)[c] / 256) << c;
    for (int64_t c = 0; c < K; ++c) {
      const int32_t Q = 256 * b.q_of(0)[c] + b.q_lo_of(0)[c];
      EXPECT_GE(b.q_lo_of(0)[c], -127);
      // Within one low step of x (half a step but where the residual needed +-128).
      EXPECT_LE(std::fabs(x[size_t(c)] - b.d_of(0)[c / 32] * float(Q)), b.d_of(0)[c / 32] * 1.001f) << c;
    }
    // The sums are of Q: lane sums exactly, half and block sums as d * (sum of Q).
    for (int64_t l = 0; l < K / 4; ++l) {
      int32_t s = 0;
      for (int j = 0; j < 4; ++j) s += 256 * b.q_of(0)[4 * l + j] + b.q_lo_of(0)[4 * l + j];
      EXPECT_EQ(b.lane_sums_of(0)[l], s) << l;
    }
    for (int64_t h = 0; h < K / 16; ++h) {
      int32_t s = 0;
      for (int j = 0; j < 16; ++j) s += 256 * b.q_of(0)[16 * h + j] + b.q_lo_of(0)[16 * h + j];
      EXPECT_EQ(b.half_sums_of(0)[h], b.d_of(0)[h / 2] * float(s)) << h;
    }
  }
  setenv("LUMEN_BLOCK_ACT", "int16", 1);
  kernels::set_block_activations(kernels::BlockActivationMode(-1));
  EXPECT_THROW(kernels::block_activations(), Error);
  unsetenv("LUMEN_BLOCK_ACT");
  kernels::set_block_activations(kernels::BlockActivationMode::Int8x2);
}

TEST(BlockKernels, FormatTableHasARowForEveryFormat) {
  for (int f = 0; f < quant::kWeightFormatCount; ++f) {
    const auto& row = kernels::format_kernels(WeightFormat(f));
    EXPECT_EQ(int(row.format), f);
    EXPECT_NE(row.matmul, nullptr) << name_of(WeightFormat(f));
    if (quant::is_ggml_block_format(WeightFormat(f))) {
      EXPECT_EQ(row.activations, kernels::ActivationKind::Q8x32) << name_of(WeightFormat(f));
      for (auto* tile : row.tile) EXPECT_NE(tile, nullptr) << name_of(WeightFormat(f));
    }
  }
  EXPECT_EQ(kernels::format_kernels(WeightFormat::Q4_0X4).activations, kernels::ActivationKind::Q8Chunk);
  EXPECT_EQ(kernels::format_kernels(WeightFormat::F32).activations, kernels::ActivationKind::F32);
  const float x[32] = {};
  float y[1];
  const uint8_t bytes[4 * 32] = {};
  EXPECT_THROW(kernels::block_matmul_isa(x, 1, {WeightFormat::F32, 1, 32, bytes}, y, kernels::Isa::Scalar), Error);
}

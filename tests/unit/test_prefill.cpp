// The prefill machinery (kernels/prefill.h): activation blocks bit-identical on every ISA and
// equal to the chunk form's integers; the R16 tiles equal the scalar reference bit for bit
// (integers and floats: one summation order) on odd sizes on every ISA the machine has, and
// the AVX-512 source through SIMDe where the machine has no AVX-512; the scalar reference
// equals a double-precision sum of the same integers; fused calls equal separate ones.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "kernels/cpu_features.h"
#include "kernels/prefill.h"
#include "kernels/qmatmul.h"
#include "quant/repack.h"
#include "quant/weight_matrix.h"
#include "test_helpers.h"

using lumen::test_support::X4Matrix;

using namespace lumen;
using kernels::Isa;
using kernels::PrefillKernel;

namespace {

std::vector<float> randn_with_edge_cases(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = nd(rng);
  // Some exact zeros, whole zero blocks and a large outlier: the quantizer's edge cases.
  for (size_t i = 0; i < n; i += 37) v[i] = 0.0f;
  if (n > 70) std::fill(v.begin() + 32, v.begin() + 64, 0.0f);
  if (n > 5) v[5] = 40.0f * scale;
  return v;
}

X4Matrix make_x4(bool q4, int64_t rows, int64_t cols, uint32_t seed) {
  const auto f = randn_with_edge_cases(size_t(rows * cols), seed, 1.0f / std::sqrt(float(cols)));
  X4Matrix m;
  const auto fmt = q4 ? quant::WeightFormat::Q4_0X4 : quant::WeightFormat::Q8_0X4;
  m.bytes.resize(quant::format_storage_bytes(fmt, rows, cols));
  if (q4) quant::quantize_q4_0x4(f.data(), rows, cols, m.bytes.data());
  else quant::quantize_q8_0x4(f.data(), rows, cols, m.bytes.data());
  m.w = {fmt, rows, cols, m.bytes.data()};
  return m;
}

// The tiles under test, as kernels the driver can run_variant (tile functions with the prepare step
// and activation form of their family).
void scalar_q4(const kernels::PrefillTileArgs& a) { kernels::detail::r16_tile_scalar(a, false); }
void scalar_q8(const kernels::PrefillTileArgs& a) { kernels::detail::r16_tile_scalar(a, true); }
void avx512_q4(const kernels::PrefillTileArgs& a) { kernels::detail::r16_tile_avx512(a, false); }
void avx512_q8(const kernels::PrefillTileArgs& a) { kernels::detail::r16_tile_avx512(a, true); }
#ifdef LUMEN_TEST_SIMDE_AVX512
void emulated_q4(const kernels::PrefillTileArgs& a) { kernels::detail::r16_tile_avx512_emulated(a, false); }
void emulated_q8(const kernels::PrefillTileArgs& a) { kernels::detail::r16_tile_avx512_emulated(a, true); }
#endif

PrefillKernel r16(const char* name, bool q4, bool split, void (*tile)(const kernels::PrefillTileArgs&)) {
  return {name, split ? &kernels::kActBlocksSplit : &kernels::kActBlocks, kernels::kR16Rows, 16,
          kernels::detail::r16_slab_bytes,
          q4 ? kernels::detail::prepare_r16_q4 : kernels::detail::prepare_r16_q8, tile};
}

struct Variant {
  PrefillKernel kernel;
  Isa act_isa;  // the ISA whose activation quantizer runs
};

// Every R16 variant this machine can run for a format: scalar first.
std::vector<Variant> r16_variants(bool q4, bool split) {
  std::vector<Variant> v;
  v.push_back({r16("scalar", q4, split, q4 ? scalar_q4 : scalar_q8), Isa::Scalar});
  if (q4 && kernels::cpu_supports(Isa::Avx2))
    v.push_back({r16("avx2", q4, split, kernels::detail::r16_tile_avx2), Isa::Avx2});
  if (kernels::cpu_supports(Isa::Avx512))
    v.push_back({r16("avx512", q4, split, q4 ? avx512_q4 : avx512_q8), Isa::Avx512});
#ifdef LUMEN_TEST_SIMDE_AVX512
  if (kernels::cpu_supports(Isa::Avx2))
    v.push_back({r16("avx512 via SIMDe", q4, split, q4 ? emulated_q4 : emulated_q8), Isa::Avx2});
#endif
  return v;
}

std::vector<float> run_variant(const Variant& v, const std::vector<float>& x, int64_t T, const quant::WeightMatrix& w) {
  std::vector<float> y(size_t(T * w.rows), -1.0f);
  const quant::WeightMatrix* ws[] = {&w};
  float* ys[] = {y.data()};
  const PrefillKernel* ks[] = {&v.kernel};
  kernels::prefill_matmul_with(x.data(), T, ws, ys, ks, v.act_isa);
  return y;
}

// y[t, r] from the same integers in double: sum over blocks of d_w * d_x * sum(w_int * x_int).
std::vector<double> integer_reference(const std::vector<float>& x, int64_t T, const X4Matrix& m, bool split) {
  const int64_t K = m.w.cols, N = m.w.rows, nb = (K + 31) / 32;
  const bool q4 = m.w.format == quant::WeightFormat::Q4_0X4;
  std::vector<double> y(size_t(T * N), 0.0);
  std::vector<kernels::ActBlock> a(size_t(2 * nb));
  std::vector<float> wrow(size_t(quant::padded_cols(K)));
  for (int64_t t = 0; t < T; ++t) {
    kernels::kActBlocksSplit.quantize(x.data() + t * K, K, reinterpret_cast<std::byte*>(a.data()), Isa::Scalar);
    for (int64_t r = 0; r < N; ++r) {
      if (q4) quant::dequantize_row_q4_0x4(static_cast<const std::byte*>(m.w.data), N, K, r, wrow.data());
      else quant::dequantize_row_q8_0x4(static_cast<const std::byte*>(m.w.data), N, K, r, wrow.data());
      double acc = 0;
      for (int64_t c = 0; c < K; ++c) {
        const auto& hi = a[size_t(c / 32)];
        const auto& lo = a[size_t(nb + c / 32)];
        double xv = double(hi.q[c % 32]) * hi.d;
        if (split) xv += double(lo.q[c % 32]) * lo.d;
        acc += double(wrow[size_t(c)]) * xv;
      }
      y[size_t(t * N + r)] = acc;
    }
  }
  return y;
}

struct PrefillShape {
  int64_t rows, cols, tokens;
};
// Rows not multiples of 16 (or 4), columns not multiples of 32 / 128 / the 4096-column range
// (4100 has two ranges), token counts not multiples of the 8-token pass.
const PrefillShape kShapes[] = {{1, 32, 8}, {5, 48, 9}, {17, 130, 8}, {33, 385, 17}, {20, 4100, 11}, {70, 256, 40}};

}  // namespace

TEST(PrefillActivations, BlocksAreBitIdenticalOnEveryIsaAndHoldTheChunkIntegers) {
  for (int64_t K : {1, 31, 32, 33, 200, 385, 3840}) {
    const auto x = randn_with_edge_cases(size_t(K), uint32_t(K));
    const int64_t nb = (K + 31) / 32;
    std::vector<kernels::ActBlock> ref(static_cast<size_t>(nb));
    kernels::quantize_act_blocks(x.data(), K, ref.data(), Isa::Scalar);
    std::vector<std::vector<kernels::ActBlock>> others;
    for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
      if (!kernels::cpu_supports(isa)) continue;
      others.emplace_back(size_t(nb));
      kernels::quantize_act_blocks(x.data(), K, others.back().data(), isa);
    }
#ifdef LUMEN_TEST_SIMDE_AVX512
    if (kernels::cpu_supports(Isa::Avx2)) {
      others.emplace_back(size_t(nb));
      kernels::detail::quantize_act_blocks_avx512_emulated(x.data(), K / 32 * 32, others.back().data());
      if (K % 32) kernels::detail::quantize_act_blocks_scalar(x.data() + K / 32 * 32, K % 32, others.back().data() + K / 32);
    }
#endif
    for (const auto& o : others) ASSERT_EQ(std::memcmp(o.data(), ref.data(), ref.size() * sizeof(ref[0])), 0) << K;
    // The same integers and scales as the 128-column chunks of qmatmul.h.
    std::vector<kernels::ActChunk> chunks(size_t(quant::padded_cols(K) / 128));
    kernels::quantize_activations(x.data(), K, chunks.data(), Isa::Scalar);
    for (int64_t c = 0; c < nb * 32; ++c) {
      const auto& ch = chunks[size_t(c / 128)];
      const int b = int(c % 128) / 32, i = int(c % 32);
      ASSERT_EQ(ref[size_t(c / 32)].q[i], ch.q[(i < 16 ? 0 : 64) + b * 16 + i % 16]) << K << " " << c;
      ASSERT_EQ(ref[size_t(c / 32)].d, ch.dx[b * 4]);
    }
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) sum += ref[0].q[i];
    EXPECT_EQ(ref[0].neg8, -8 * sum);
    EXPECT_EQ(ref[0].neg128, -128 * sum);
  }
}

TEST(PrefillR16, EveryIsaEqualsTheScalarTileBitForBitOnOddSizes) {
  for (bool q4 : {true, false}) {
    for (bool split : {false, true}) {
      if (q4 && split) continue;  // Q4 weights take single int8 activations
      const auto variants = r16_variants(q4, split);
      for (const PrefillShape& s : kShapes) {
        const X4Matrix m = make_x4(q4, s.rows, s.cols, uint32_t(s.rows * 7 + s.cols));
        const auto x = randn_with_edge_cases(size_t(s.tokens * s.cols), uint32_t(s.cols + s.tokens));
        const auto ref = run_variant(variants[0], x, s.tokens, m.w);
        for (size_t i = 1; i < variants.size(); ++i) {
          const auto y = run_variant(variants[i], x, s.tokens, m.w);
          ASSERT_EQ(std::memcmp(y.data(), ref.data(), y.size() * 4), 0)
              << variants[i].kernel.name << (q4 ? " q4" : " q8") << (split ? " split" : "") << " rows " << s.rows
              << " cols " << s.cols << " tokens " << s.tokens;
        }
      }
    }
  }
}

TEST(PrefillR16, ScalarTileEqualsADoubleSumOfTheSameIntegers) {
  for (bool q4 : {true, false}) {
    for (bool split : {false, true}) {
      if (q4 && split) continue;
      const Variant scalar = r16_variants(q4, split)[0];
      for (const PrefillShape& s : kShapes) {
        const X4Matrix m = make_x4(q4, s.rows, s.cols, uint32_t(s.rows + s.cols));
        const auto x = randn_with_edge_cases(size_t(s.tokens * s.cols), uint32_t(s.tokens));
        const auto y = run_variant(scalar, x, s.tokens, m.w);
        const auto ref = integer_reference(x, s.tokens, m, split);
        double scale = 0;
        for (double v : ref) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < y.size(); ++i)
          ASSERT_NEAR(y[i], ref[i], 2e-6 * scale) << (q4 ? "q4" : "q8") << " rows " << s.rows << " cols " << s.cols;
      }
    }
  }
}

TEST(PrefillDriver, TheTableServesEveryTokenCountOnEveryIsaWithinF32RoundingOfScalar) {
  // Small T goes to the 4 x 2 X4 tiles, large T to R16: both agree with the scalar path.
  for (bool q4 : {true, false}) {
    for (auto mode : {kernels::Q8Activations::Int8, kernels::Q8Activations::Int8x2}) {
      if (q4 && mode == kernels::Q8Activations::Int8x2) continue;
      const X4Matrix m = make_x4(q4, 37, 300, 3);
      for (int64_t T : {2, 3, 7, 8, 9, 33}) {
        const auto x = randn_with_edge_cases(size_t(T * 300), uint32_t(T));
        std::vector<float> ref(size_t(T * 37));
        kernels::qmatmul_isa(x.data(), T, m.w, ref.data(), Isa::Scalar, mode);
        const auto exact = integer_reference(x, T, m, mode == kernels::Q8Activations::Int8x2 && !q4);
        double scale = 0;
        for (double v : exact) scale = std::max(scale, std::fabs(v));
        for (size_t i = 0; i < ref.size(); ++i) ASSERT_NEAR(ref[i], exact[i], 2e-6 * scale) << T;
        for (Isa isa : {Isa::Avx2, Isa::Avx512}) {
          if (!kernels::cpu_supports(isa)) continue;
          std::vector<float> y(ref.size());
          kernels::qmatmul_isa(x.data(), T, m.w, y.data(), isa, mode);
          for (size_t i = 0; i < y.size(); ++i)
            ASSERT_NEAR(y[i], ref[i], 1e-5 * scale) << kernels::isa_name(isa) << " T " << T;
        }
      }
    }
  }
}

TEST(PrefillDriver, OneFusedCallEqualsSeparateCallsBitForBit) {
  const X4Matrix a = make_x4(true, 37, 515, 1), b = make_x4(true, 9, 515, 2), c = make_x4(false, 130, 515, 3);
  for (int64_t T : {3, 13}) {
    const auto x = randn_with_edge_cases(size_t(T * 515), 9);
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512}) {
      if (!kernels::cpu_supports(isa)) continue;
      std::vector<float> ya(size_t(T * 37)), yb(size_t(T * 9)), yc(size_t(T * 130));
      const quant::WeightMatrix* ws[] = {&a.w, &b.w, &c.w};
      float* ys[] = {ya.data(), yb.data(), yc.data()};
      kernels::prefill_matmul(x.data(), T, ws, ys, isa, kernels::Q8Activations::Int8x2);
      for (int i = 0; i < 3; ++i) {
        std::vector<float> alone(size_t(T * ws[i]->rows));
        kernels::qmatmul_isa(x.data(), T, *ws[i], alone.data(), isa, kernels::Q8Activations::Int8x2);
        ASSERT_EQ(std::memcmp(alone.data(), ys[i], alone.size() * 4), 0) << kernels::isa_name(isa) << " " << i;
      }
    }
  }
  // Mismatched columns or a format without a kernel are errors, not wrong answers.
  const X4Matrix d = make_x4(true, 8, 256, 4);
  std::vector<float> x(2 * 515), y1(2 * 37), y2(2 * 8);
  const quant::WeightMatrix* ws[] = {&a.w, &d.w};
  float* ys[] = {y1.data(), y2.data()};
  EXPECT_THROW(kernels::prefill_matmul(x.data(), 2, ws, ys, Isa::Scalar, kernels::Q8Activations::Int8), Error);
  const float f32[4] = {};
  const quant::WeightMatrix plain{quant::WeightFormat::F32, 1, 4, f32};
  const quant::WeightMatrix* wp[] = {&plain};
  float* yp[] = {y1.data()};
  EXPECT_THROW(kernels::prefill_matmul(x.data(), 1, wp, yp, Isa::Scalar, kernels::Q8Activations::Int8), Error);
}

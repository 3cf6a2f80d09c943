// Weight formats (X4 layouts, ggml block quantizers, per-channel and LiteRT int4) and the
// int8 kernels: every SIMD variant against the scalar reference on odd sizes, on every ISA
// this CPU has.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "kernels/qmatmul.h"
#include "model/weights.h"
#include "quant/ggml_blocks.h"
#include "quant/int4.h"
#include "quant/repack.h"
#include "quant/weight_matrix.h"
#include "test_helpers.h"

using lumen::test_support::randn;
using lumen::test_support::simd_isas;
using lumen::test_support::X4Matrix;

using namespace lumen;

namespace {

X4Matrix make_x4(bool q4, const std::vector<float>& f, int64_t rows, int64_t cols) {
  X4Matrix m;
  const auto fmt = q4 ? quant::WeightFormat::Q4_0X4 : quant::WeightFormat::Q8_0X4;
  m.bytes.resize(quant::format_storage_bytes(fmt, rows, cols));
  if (q4) quant::quantize_q4_0x4(f.data(), rows, cols, m.bytes.data());
  else quant::quantize_q8_0x4(f.data(), rows, cols, m.bytes.data());
  m.w = {fmt, rows, cols, m.bytes.data()};
  return m;
}

}  // namespace

TEST(QuantFormats, F16EncodeRoundsToNearestEven) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    if ((h & 0x7c00) == 0x7c00 && (h & 0x3ff)) continue;  // NaN
    const float f = f16_to_f32(uint16_t(h));
    ASSERT_EQ(f16_to_f32(quant::f32_to_f16(f)), f) << h;
  }
  EXPECT_EQ(quant::f32_to_f16(1.0f + 1.0f / 2048), 0x3c00);              // tie -> even
  EXPECT_EQ(quant::f32_to_f16(1.0f + 3.0f / 2048), 0x3c02);              // tie -> even (up)
  EXPECT_EQ(quant::f32_to_f16(1e6f), 0x7c00);                            // overflow -> inf
  EXPECT_EQ(quant::f32_to_f16(std::ldexp(1.0f, -25) * 1.5f), 0x0001);    // subnormal rounding
}

TEST(QuantFormats, GgmlBlockQuantizersStayWithinTheirStep) {
  const auto x = randn(32 * 9, 1);
  for (int b = 0; b < 9; ++b) {
    quant::BlockQ4_0 q4;
    quant::BlockQ8_0 q8;
    quant::quantize_block_q4_0(&x[b * 32], &q4.d, q4.qs);
    quant::quantize_block_q8_0(&x[b * 32], &q8.d, q8.qs);
    float y4[32], y8[32];
    quant::dequantize_ggml_row(quant::ggml_type::Q4_0, &q4, 32, y4);
    quant::dequantize_ggml_row(quant::ggml_type::Q8_0, &q8, 32, y8);
    const float d4 = std::fabs(f16_to_f32(q4.d)), d8 = f16_to_f32(q8.d);
    // Q4_0 maps the extreme to -8, so the other side reaches only +7 (clamped: one step);
    // both carry the f16 rounding of d times the largest code.
    for (int i = 0; i < 32; ++i) {
      EXPECT_LE(std::fabs(y4[i] - x[b * 32 + i]), d4 * 1.01f);
      EXPECT_LE(std::fabs(y8[i] - x[b * 32 + i]), d8 * 0.57f);
    }
  }
}

TEST(QuantFormats, X4LayoutHoldsTheGgmlBlocksExactly) {
  for (bool q4 : {true, false}) {
    for (auto [rows, cols] : {std::pair<int64_t, int64_t>{5, 96}, {8, 256}, {3, 32}, {1, 160}}) {
      const auto f = randn(size_t(rows * cols), uint32_t(rows * 1000 + cols));
      const int type = q4 ? quant::ggml_type::Q4_0 : quant::ggml_type::Q8_0;
      const size_t rb = quant::ggml_row_bytes(type, cols);
      std::vector<uint8_t> ggml(size_t(rows) * rb);
      std::vector<const void*> ptrs;
      for (int64_t r = 0; r < rows; ++r) {
        for (int64_t b = 0; b < cols / 32; ++b) {
          uint8_t* blk = ggml.data() + r * rb + b * (q4 ? 18 : 34);
          uint16_t d;
          if (q4) quant::quantize_block_q4_0(&f[r * cols + b * 32], &d, blk + 2);
          else quant::quantize_block_q8_0(&f[r * cols + b * 32], &d, reinterpret_cast<int8_t*>(blk + 2));
          std::memcpy(blk, &d, 2);
        }
        ptrs.push_back(ggml.data() + r * rb);
      }
      const auto fmt = q4 ? quant::WeightFormat::Q4_0X4 : quant::WeightFormat::Q8_0X4;
      std::vector<std::byte> x4(quant::format_storage_bytes(fmt, rows, cols));
      if (q4) quant::q4_0_rows_to_x4(ptrs.data(), rows, cols, x4.data());
      else quant::q8_0_rows_to_x4(ptrs.data(), rows, cols, x4.data());
      // The direct quantizer gives the same bytes as ggml blocks moved into place.
      std::vector<std::byte> direct(x4.size());
      if (q4) quant::quantize_q4_0x4(f.data(), rows, cols, direct.data());
      else quant::quantize_q8_0x4(f.data(), rows, cols, direct.data());
      EXPECT_EQ(direct, x4);
      quant::WeightMatrix w{fmt, rows, cols, x4.data()};
      std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
      for (int64_t r = 0; r < rows; ++r) {
        quant::dequantize_row(w, r, a.data());
        quant::dequantize_ggml_row(type, ptrs[size_t(r)], cols, b.data());
        EXPECT_EQ(a, b) << "row " << r;
      }
    }
  }
}

TEST(QuantFormats, Int4PerChannelBothZeroPointsAndLiteRtMapToQ4_0) {
  const int64_t n = 64;
  const auto f = randn(n, 3);
  std::vector<uint8_t> p0(n / 2), p8(n / 2), blocks(n / 32 * 18);
  const float s0 = quant::quantize_row_int4_per_channel(f.data(), n, 0, p0.data());
  const float s8 = quant::quantize_row_int4_per_channel(f.data(), n, 8, p8.data());
  EXPECT_EQ(s0, s8);
  for (size_t i = 0; i < p0.size(); ++i) EXPECT_EQ(p0[i] ^ 0x88, p8[i]);
  std::vector<float> d0(n), d8(n), dq(n);
  quant::dequantize_row_int4_per_channel(p0.data(), n, s0, 0, d0.data());
  quant::dequantize_row_int4_per_channel(p8.data(), n, s8, 8, d8.data());
  EXPECT_EQ(d0, d8);
  for (int64_t i = 0; i < n; ++i) EXPECT_LE(std::fabs(d0[i] - f[i]), s0 * 0.5f + 1e-6f);
  // Exactly representable scale: the Q4_0 blocks decode to the same numbers.
  const float scale = 0.03125f;
  quant::int4_per_channel_row_to_q4_0(p0.data(), n, scale, 0, blocks.data());
  quant::dequantize_row_int4_per_channel(p0.data(), n, scale, 0, d0.data());
  quant::dequantize_ggml_row(quant::ggml_type::Q4_0, blocks.data(), n, dq.data());
  EXPECT_EQ(d0, dq);
  // LiteRT: (nibble - 8) / 16, clamped to the grid.
  std::vector<float> g = {0.0f, 0.0625f, -0.5f, 0.4375f, 3.0f, -3.0f, 0.03f, -0.1f};
  std::vector<uint8_t> lp(4);
  std::vector<float> back(8);
  quant::quantize_row_litert_int4(g.data(), 8, lp.data());
  quant::dequantize_row_litert_int4(lp.data(), 8, back.data());
  EXPECT_EQ(back, (std::vector<float>{0.0f, 0.0625f, -0.5f, 0.4375f, 0.4375f, -0.5f, 0.0f, -0.125f}));
  EXPECT_EQ(lp[0], 0x98);  // 0 -> 8, 0.0625 -> 9
}

TEST(QuantKernels, ActivationQuantizationIsBitIdenticalOnEveryIsa) {
  for (int64_t K : {1, 31, 128, 200, 385}) {
    auto x = randn(size_t(K), uint32_t(K), 3.0f);
    if (K > 5) x[5] = 0.0f, x[3] = -x[4];
    const int64_t chunks = quant::padded_cols(K) / quant::kChunk;
    std::vector<kernels::ActChunk> ref(static_cast<size_t>(chunks)), got(static_cast<size_t>(chunks));
    kernels::quantize_activations(x.data(), K, ref.data(), kernels::Isa::Scalar);
    for (auto isa : simd_isas()) {
      kernels::quantize_activations(x.data(), K, got.data(), isa);
      EXPECT_EQ(std::memcmp(ref.data(), got.data(), ref.size() * sizeof(kernels::ActChunk)), 0)
          << kernels::isa_name(isa) << " K=" << K;
    }
  }
}

// The scalar kernel against a double-precision sum of the same integers and scales; each
// SIMD kernel against the scalar one.
TEST(QuantKernels, EverySimdKernelMatchesTheScalarReferenceOnOddSizes) {
  struct Shape { int64_t rows, cols, tokens; };
  for (bool q4 : {true, false}) {
    for (Shape s : {Shape{1, 32, 1}, Shape{5, 48, 3}, Shape{7, 130, 2}, Shape{13, 256, 5}, Shape{4, 385, 17}}) {
      const auto wf = randn(size_t(s.rows * s.cols), 11);
      const auto x = randn(size_t(s.tokens * s.cols), 12, 2.0f);
      X4Matrix m = make_x4(q4, wf, s.rows, s.cols);
      // Exact reference from dequantized weights and activations.
      const int64_t chunks = quant::padded_cols(s.cols) / quant::kChunk;
      std::vector<float> wrow(static_cast<size_t>(s.cols)), ref(size_t(s.tokens * s.rows));
      std::vector<kernels::ActChunk> act(static_cast<size_t>(chunks));
      for (int64_t t = 0; t < s.tokens; ++t) {
        kernels::quantize_activations(&x[t * s.cols], s.cols, act.data(), kernels::Isa::Scalar);
        for (int64_t r = 0; r < s.rows; ++r) {
          quant::dequantize_row(m.w, r, wrow.data());
          double sum = 0;
          for (int64_t c = 0; c < s.cols; ++c) {
            const auto& a = act[size_t(c / 128)];
            const int64_t i = c % 128, b = i / 32, e = i % 32;
            const int8_t q = a.q[(e < 16 ? 0 : 64) + b * 16 + e % 16];
            sum += double(wrow[size_t(c)]) * double(q) * double(a.dx[b * 4]);
          }
          ref[size_t(t * s.rows + r)] = float(sum);
        }
      }
      std::vector<float> scalar(ref.size());
      const auto int8 = kernels::Q8Activations::Int8;
      kernels::qmatmul_isa(x.data(), s.tokens, m.w, scalar.data(), kernels::Isa::Scalar, int8);
      double scale = 0;
      for (float v : ref) scale = std::max(scale, double(std::fabs(v)));
      for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(scalar[i], ref[i], 1e-5 * scale) << i;
      for (auto isa : simd_isas()) {
        std::vector<float> y(ref.size());
        kernels::qmatmul_isa(x.data(), s.tokens, m.w, y.data(), isa, int8);
        for (size_t i = 0; i < y.size(); ++i)
          EXPECT_NEAR(y[i], scalar[i], 1e-5 * scale)
              << kernels::isa_name(isa) << (q4 ? " q4" : " q8") << " rows=" << s.rows << " cols=" << s.cols << " i=" << i;
      }
    }
  }
}

// Split Q8 activations (x ~ d1 q1 + d2 q2): hi is exactly the single int8 quantization, both
// halves are bit-identical on every ISA, and hi + lo reconstructs x to half of lo's step.
TEST(QuantKernels, SplitActivationQuantizationIsBitIdenticalAndReconstructsX) {
  for (int64_t K : {1, 31, 128, 200, 385}) {
    auto x = randn(size_t(K), uint32_t(100 + K), 3.0f);
    if (K > 5) x[5] = 0.0f, x[3] = -x[4];
    if (K > 40) std::fill(x.begin() + 32, x.begin() + 40, 0.0f);  // a block partly zero
    const size_t chunks = size_t(quant::padded_cols(K) / quant::kChunk);
    std::vector<kernels::ActChunk> single(chunks), hi(chunks), lo(chunks), hi2(chunks), lo2(chunks);
    kernels::quantize_activations(x.data(), K, single.data(), kernels::Isa::Scalar);
    kernels::quantize_activations_split(x.data(), K, hi.data(), lo.data(), kernels::Isa::Scalar);
    EXPECT_EQ(std::memcmp(single.data(), hi.data(), chunks * sizeof(kernels::ActChunk)), 0) << K;
    for (int64_t c = 0; c < K; ++c) {
      const auto &h = hi[size_t(c / 128)], &l = lo[size_t(c / 128)];
      const int64_t i = c % 128, b = i / 32, e = i % 32, at = (e < 16 ? 0 : 64) + b * 16 + e % 16;
      const double back = double(h.q[at]) * h.dx[b * 4] + double(l.q[at]) * l.dx[b * 4];
      // lo's step is at most hi's / 254; allow float rounding of the residual on top.
      EXPECT_LE(std::fabs(back - x[size_t(c)]), 0.5 * l.dx[b * 4] + 1e-6 * std::fabs(x[size_t(c)]) + 1e-30)
          << "K=" << K << " c=" << c;
      EXPECT_LE(l.dx[b * 4], h.dx[b * 4] / 254.0f * 1.0001f) << "K=" << K << " c=" << c;
    }
    for (auto isa : simd_isas()) {
      kernels::quantize_activations_split(x.data(), K, hi2.data(), lo2.data(), isa);
      EXPECT_EQ(std::memcmp(hi.data(), hi2.data(), chunks * sizeof(kernels::ActChunk)), 0)
          << kernels::isa_name(isa) << " K=" << K;
      EXPECT_EQ(std::memcmp(lo.data(), lo2.data(), chunks * sizeof(kernels::ActChunk)), 0)
          << kernels::isa_name(isa) << " K=" << K;
    }
  }
}

// The split Q8 product: scalar against a double sum of both halves' integers and scales,
// each SIMD kernel against the scalar one (relative 1e-5 of the largest output: f32 sums in
// another order), on odd sizes and every ISA this CPU has.
TEST(QuantKernels, SplitQ8KernelMatchesTheScalarReferenceOnOddSizes) {
  struct Shape { int64_t rows, cols, tokens; };
  const auto split = kernels::Q8Activations::Int8x2;
  for (Shape s : {Shape{1, 32, 1}, Shape{5, 48, 3}, Shape{7, 130, 2}, Shape{13, 256, 5}, Shape{4, 385, 17}}) {
    const auto wf = randn(size_t(s.rows * s.cols), 31);
    const auto x = randn(size_t(s.tokens * s.cols), 32, 2.0f);
    X4Matrix m = make_x4(false, wf, s.rows, s.cols);
    const size_t chunks = size_t(quant::padded_cols(s.cols) / quant::kChunk);
    std::vector<float> wrow(static_cast<size_t>(s.cols)), ref(size_t(s.tokens * s.rows));
    std::vector<kernels::ActChunk> hi(chunks), lo(chunks);
    for (int64_t t = 0; t < s.tokens; ++t) {
      kernels::quantize_activations_split(&x[size_t(t * s.cols)], s.cols, hi.data(), lo.data(), kernels::Isa::Scalar);
      for (int64_t r = 0; r < s.rows; ++r) {
        quant::dequantize_row(m.w, r, wrow.data());
        double sum = 0;
        for (int64_t c = 0; c < s.cols; ++c) {
          const auto &h = hi[size_t(c / 128)], &l = lo[size_t(c / 128)];
          const int64_t i = c % 128, b = i / 32, e = i % 32, at = (e < 16 ? 0 : 64) + b * 16 + e % 16;
          sum += double(wrow[size_t(c)]) * (double(h.q[at]) * h.dx[b * 4] + double(l.q[at]) * l.dx[b * 4]);
        }
        ref[size_t(t * s.rows + r)] = float(sum);
      }
    }
    double scale = 0;
    for (float v : ref) scale = std::max(scale, double(std::fabs(v)));
    std::vector<float> scalar(ref.size());
    kernels::qmatmul_isa(x.data(), s.tokens, m.w, scalar.data(), kernels::Isa::Scalar, split);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(scalar[i], ref[i], 1e-5 * scale) << i;
    for (auto isa : simd_isas()) {
      std::vector<float> y(ref.size());
      kernels::qmatmul_isa(x.data(), s.tokens, m.w, y.data(), isa, split);
      for (size_t i = 0; i < y.size(); ++i)
        EXPECT_NEAR(y[i], scalar[i], 1e-5 * scale)
            << kernels::isa_name(isa) << " rows=" << s.rows << " cols=" << s.cols << " i=" << i;
    }
  }
}

// What the split is for: against the exact product of the same Q8_0 weights with f32
// activations, single int8 activations add an error of the weights' own size; the split
// removes nearly all of it. Q4 weights ignore the mode (bit-identical results).
TEST(QuantKernels, SplitActivationsLeaveOnlyTheWeightError) {
  const int64_t N = 64, K = 640, T = 4;
  const auto wf = randn(size_t(N * K), 41), x = randn(size_t(T * K), 42);
  X4Matrix m = make_x4(false, wf, N, K);
  std::vector<float> wq(size_t(N * K));
  for (int64_t r = 0; r < N; ++r) quant::dequantize_row(m.w, r, &wq[size_t(r * K)]);
  std::vector<double> exact(size_t(T * N));
  for (int64_t t = 0; t < T; ++t)
    for (int64_t r = 0; r < N; ++r) {
      double s = 0;
      for (int64_t c = 0; c < K; ++c) s += double(wq[size_t(r * K + c)]) * x[size_t(t * K + c)];
      exact[size_t(t * N + r)] = s;
    }
  for (auto isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
    if (!kernels::cpu_supports(isa)) continue;
    std::vector<float> single(exact.size()), split(exact.size());
    kernels::qmatmul_isa(x.data(), T, m.w, single.data(), isa, kernels::Q8Activations::Int8);
    kernels::qmatmul_isa(x.data(), T, m.w, split.data(), isa, kernels::Q8Activations::Int8x2);
    double err_single = 0, err_split = 0;
    for (size_t i = 0; i < exact.size(); ++i) {
      err_single += (single[i] - exact[i]) * (single[i] - exact[i]);
      err_split += (split[i] - exact[i]) * (split[i] - exact[i]);
    }
    EXPECT_GT(err_single, 0.0) << kernels::isa_name(isa);
    EXPECT_LT(err_split, err_single / 1000.0) << kernels::isa_name(isa);  // rms error / 30 or better

    X4Matrix m4 = make_x4(true, wf, N, K);
    std::vector<float> q4a(exact.size()), q4b(exact.size());
    kernels::qmatmul_isa(x.data(), T, m4.w, q4a.data(), isa, kernels::Q8Activations::Int8);
    kernels::qmatmul_isa(x.data(), T, m4.w, q4b.data(), isa, kernels::Q8Activations::Int8x2);
    EXPECT_EQ(q4a, q4b) << kernels::isa_name(isa);
  }
}

TEST(QuantKernels, Q8ActivationModeNamesAndSwitch) {
  kernels::Q8Activations m;
  ASSERT_TRUE(kernels::parse_q8_activations("int8", m));
  EXPECT_EQ(m, kernels::Q8Activations::Int8);
  ASSERT_TRUE(kernels::parse_q8_activations("int8x2", m));
  EXPECT_EQ(m, kernels::Q8Activations::Int8x2);
  EXPECT_FALSE(kernels::parse_q8_activations("int16", m));
  EXPECT_FALSE(kernels::parse_q8_activations("", m));
  EXPECT_STREQ(kernels::q8_activations_name(kernels::Q8Activations::Int8x2), "int8x2");
  // qmatmul follows the switch.
  const int64_t N = 5, K = 200;
  const auto wf = randn(size_t(N * K), 51), x = randn(size_t(K), 52);
  X4Matrix m8 = make_x4(false, wf, N, K);
  const auto saved = kernels::q8_activations();
  std::vector<float> want(N), got(N);
  for (auto mode : {kernels::Q8Activations::Int8, kernels::Q8Activations::Int8x2}) {
    kernels::set_q8_activations(mode);
    EXPECT_EQ(kernels::q8_activations(), mode);
    kernels::qmatmul_isa(x.data(), 1, m8.w, want.data(), kernels::Isa::Scalar, mode);
    kernels::qmatmul_isa(x.data(), 1, m8.w, got.data(), kernels::Isa::Scalar);
    EXPECT_EQ(want, got) << kernels::q8_activations_name(mode);
  }
  kernels::set_q8_activations(saved);
}

TEST(QuantKernels, MatmulDispatchUsesTheActiveIsaAndMatchesF32WithinQuantError) {
  const int64_t N = 9, K = 200, T = 3;
  const auto wf = randn(size_t(N * K), 21), x = randn(size_t(T * K), 22);
  const kernels::Isa saved = kernels::active_isa();
  for (bool q4 : {true, false}) {
    X4Matrix m = make_x4(q4, wf, N, K);
    quant::WeightMatrix f32{quant::WeightFormat::F32, N, K, wf.data()};
    std::vector<float> exact(size_t(T * N)), y(size_t(T * N));
    kernels::matmul(x.data(), T, f32, exact.data());
    for (auto isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
      if (!kernels::cpu_supports(isa)) continue;
      kernels::set_isa(isa);
      kernels::matmul(x.data(), T, m.w, y.data());
      // sqrt(K) ~ 14 terms of size 1: q8 error ~1%, q4 ~15% of the typical output.
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], exact[i], q4 ? 3.0 : 0.3) << i;
    }
  }
  kernels::set_isa(saved);
}

TEST(QuantKernels, ExactModeExpandsTheInterleavedLayoutsToTheSameF32Product) {
  // --exact: whatever the layout (the interleaved X4 ones included), the product is the f32
  // product of the weights' exact expansion, bit for bit, never the int8-activation kernel's.
  const int64_t N = 9, K = 200, T = 3;
  const auto wf = randn(size_t(N * K), 31), x = randn(size_t(T * K), 32);
  const bool saved = kernels::exact_matmul();
  for (bool q4 : {true, false}) {
    X4Matrix m = make_x4(q4, wf, N, K);
    std::vector<float> expanded(size_t(N * K));
    for (int64_t r = 0; r < N; ++r) quant::dequantize_row(m.w, r, expanded.data() + r * K);
    const quant::WeightMatrix f32{quant::WeightFormat::F32, N, K, expanded.data()};
    std::vector<float> want(size_t(T * N)), exact(size_t(T * N)), fast(size_t(T * N));
    kernels::matmul_expanded(x.data(), T, f32, want.data(), kernels::active_isa());
    kernels::set_exact_matmul(true);
    kernels::matmul(x.data(), T, m.w, exact.data());
    kernels::set_exact_matmul(false);
    kernels::matmul(x.data(), T, m.w, fast.data());
    EXPECT_EQ(exact, want) << (q4 ? "Q4_0X4" : "Q8_0X4");
    EXPECT_NE(fast, want) << "the fast path quantizes the activations: it cannot be the exact product";
  }
  kernels::set_exact_matmul(saved);
}

TEST(QuantFormats, RepackForInt8KernelsMovesGgmlBlocksAndKeepsTheTie) {
  const int64_t rows = 6, cols = 64;
  const auto f = randn(size_t(rows * cols), 31);
  std::vector<uint8_t> q4(size_t(rows) * quant::ggml_row_bytes(quant::ggml_type::Q4_0, cols));
  for (int64_t b = 0; b < rows * cols / 32; ++b) {
    uint16_t d;
    quant::quantize_block_q4_0(&f[size_t(b * 32)], &d, &q4[size_t(b * 18 + 2)]);
    std::memcpy(&q4[size_t(b * 18)], &d, 2);
  }
  model::ModelWeights w;
  w.embed_tokens = {quant::WeightFormat::Q4_0, rows, cols, q4.data()};
  w.lm_head = w.embed_tokens;
  model::repack_for_int8_kernels(w);
  EXPECT_EQ(w.embed_tokens.format, quant::WeightFormat::Q4_0X4);
  EXPECT_EQ(w.lm_head.data, w.embed_tokens.data);
  std::vector<float> a(static_cast<size_t>(cols)), b(static_cast<size_t>(cols));
  for (int64_t r = 0; r < rows; ++r) {
    quant::dequantize_row(w.embed_tokens, r, a.data());
    quant::dequantize_ggml_row(quant::ggml_type::Q4_0, q4.data() + r * 18 * (cols / 32), cols, b.data());
    EXPECT_EQ(a, b);
  }
}

TEST(Ops, GatedGeluSimdMatchesScalar) {
  if (!kernels::cpu_supports(kernels::Isa::Avx2)) GTEST_SKIP();
  std::vector<float> g, u;
  for (int i = -4000; i <= 4000; ++i) g.push_back(float(i) * 0.005f);  // -20 .. 20
  for (float v : {-100.0f, -60.0f, 60.0f, 100.0f, 0.0f, 1e-6f}) g.push_back(v);
  g.push_back(3.0f);  // odd tail
  for (size_t i = 0; i < g.size(); ++i) u.push_back(1.0f + 0.001f * float(i % 7));
  std::vector<float> a(g.size()), b(g.size());
  kernels::detail::gated_gelu_scalar(g.data(), u.data(), int64_t(g.size()), a.data());
  kernels::detail::gated_gelu_avx2(g.data(), u.data(), int64_t(g.size()), b.data());
  for (size_t i = 0; i < g.size(); ++i) EXPECT_NEAR(b[i], a[i], 2e-6f * std::fabs(a[i]) + 1e-7f) << "g=" << g[i];
}

// Kernel unit tests: RMSNorm (both forms), RoPE (full and proportional partial, the exact
// rotated pairs), softcap, GELU, softmax, and the scalar and AVX2 matmul agreeing.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "base/dtype.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "model/gemma_model.h"

using namespace lumen;

TEST(RmsNorm, Gemma4FormMultipliesByWeight) {
  std::vector<float> x = {1, -2, 3, -4}, w = {0.5f, 1.5f, 2.0f, 0.25f}, out(4);
  const double ms = (1 + 4 + 9 + 16) / 4.0;
  const float eps = 1e-6f;
  kernels::rms_norm(x.data(), 4, w.data(), /*offset=*/false, eps, out.data());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] / std::sqrt(ms + eps) * w[i], 1e-6);
}

TEST(RmsNorm, Gemma3FormMultipliesByOnePlusWeight) {
  std::vector<float> x = {1, -2, 3, -4}, w = {0.5f, -0.5f, 0.0f, 1.0f}, out(4);
  const double ms = (1 + 4 + 9 + 16) / 4.0;
  kernels::rms_norm(x.data(), 4, w.data(), /*offset=*/true, 1e-6f, out.data());
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(out[i], x[i] / std::sqrt(ms + 1e-6) * (1 + w[i]), 1e-6);
}

TEST(RmsNorm, WeightlessFormIsUnitGainAndWorksInPlace) {
  std::vector<float> x = {3, 4};
  kernels::rms_norm(x.data(), 2, nullptr, false, 0.0f, x.data());
  const double r = std::sqrt((9 + 16) / 2.0);
  EXPECT_NEAR(x[0], 3 / r, 1e-6);
  EXPECT_NEAR(x[1], 4 / r, 1e-6);
}

TEST(Rope, FullRotationPairsIWithIPlusHalf) {
  spec::RopeSpec rope;
  rope.theta = 10000;
  rope.partial_factor = 1.0;
  rope.freq_base_dim = 8;
  const int hd = 8;
  auto inv = model::rope_inv_freq(rope, hd);
  ASSERT_EQ(inv.size(), 4u);
  for (int i = 0; i < 4; ++i) EXPECT_NEAR(inv[i], std::pow(10000.0, -2.0 * i / 8), 1e-7);
  std::vector<float> x(hd), c(4), s(4);
  for (int i = 0; i < hd; ++i) x[i] = float(i + 1);
  const int pos = 3;
  kernels::rope_angles(pos, inv.data(), 4, c.data(), s.data());
  std::vector<float> y = x;
  kernels::rope_rotate(y.data(), hd, 4, c.data(), s.data());
  for (int i = 0; i < 4; ++i) {
    const double a = pos * inv[i];
    EXPECT_NEAR(y[i], x[i] * std::cos(a) - x[i + 4] * std::sin(a), 1e-5);
    EXPECT_NEAR(y[i + 4], x[i + 4] * std::cos(a) + x[i] * std::sin(a), 1e-5);
  }
}

TEST(Rope, ProportionalPartialRotatesOnlyTheFirstPairsWithFullDimExponent) {
  // Gemma 4 full layers: head_dim 512, partial 0.25 -> 64 rotated pairs (i, i+256),
  // inv_freq[i] = theta^(-2i/512); dimensions 64..255 and 320..511 pass through.
  spec::RopeSpec rope;
  rope.type = "proportional";
  rope.theta = 1e6;
  rope.partial_factor = 0.25;
  rope.freq_base_dim = 512;
  const int hd = 512;
  EXPECT_EQ(rope.rotated_pairs(hd), 64);
  auto inv = model::rope_inv_freq(rope, hd);
  ASSERT_EQ(inv.size(), 64u);
  EXPECT_FLOAT_EQ(inv[0], 1.0f);
  EXPECT_NEAR(inv[63], std::pow(1e6, -126.0 / 512), 1e-9);
  EXPECT_NEAR(inv[1], std::pow(1e6, -2.0 / 512), 1e-7);  // not -2/128

  std::vector<float> x(hd), c(64), s(64);
  for (int i = 0; i < hd; ++i) x[i] = std::sin(float(i) * 0.37f) + 0.1f * float(i % 7);
  const int pos = 17;
  kernels::rope_angles(pos, inv.data(), 64, c.data(), s.data());
  std::vector<float> y = x;
  kernels::rope_rotate(y.data(), hd, 64, c.data(), s.data());
  for (int i = 0; i < 256; ++i) {
    if (i < 64) {
      const double a = double(float(pos) * inv[i]);
      EXPECT_NEAR(y[i], x[i] * std::cos(a) - x[i + 256] * std::sin(a), 1e-5) << i;
      EXPECT_NEAR(y[i + 256], x[i + 256] * std::cos(a) + x[i] * std::sin(a), 1e-5) << i;
    } else {
      EXPECT_EQ(y[i], x[i]) << i;
      EXPECT_EQ(y[i + 256], x[i + 256]) << i;
    }
  }
}

TEST(Rope, ScalingFactorDividesFrequencies) {
  spec::RopeSpec rope;
  rope.theta = 10000;
  rope.freq_base_dim = 16;
  auto plain = model::rope_inv_freq(rope, 16);
  rope.scaling_factor = 8;
  auto scaled = model::rope_inv_freq(rope, 16);
  for (size_t i = 0; i < plain.size(); ++i) EXPECT_FLOAT_EQ(scaled[i], plain[i] / 8);
}

TEST(Rope, FrequencyFactorsDivideTheirOwnPair) {
  // llama.cpp's rope_freqs: pair i's frequency divided by factor i; pairs past the list keep 1.
  spec::RopeSpec rope;
  rope.theta = 1e6;
  rope.freq_base_dim = 32;
  rope.partial_factor = 0.5;  // 8 of 16 pairs
  auto plain = model::rope_inv_freq(rope, 32);
  ASSERT_EQ(plain.size(), 8u);
  rope.freq_factors = {1.0f, 2.0f, 0.5f, 4.0f};
  auto scaled = model::rope_inv_freq(rope, 32);
  ASSERT_EQ(scaled.size(), 8u);
  for (size_t i = 0; i < scaled.size(); ++i)
    EXPECT_FLOAT_EQ(scaled[i], plain[i] / (i < 4 ? rope.freq_factors[i] : 1.0f)) << i;
}

TEST(Softcap, BoundsAndNearIdentityForSmallValues) {
  std::vector<float> x = {0.0f, 0.3f, 30.0f, -1000.0f, 1000.0f};
  kernels::softcap(x.data(), int64_t(x.size()), 30.0f);
  EXPECT_EQ(x[0], 0.0f);
  EXPECT_NEAR(x[1], 30 * std::tanh(0.01), 1e-6);
  EXPECT_NEAR(x[2], 30 * std::tanh(1.0), 1e-5);
  EXPECT_NEAR(x[3], -30.0f, 1e-4);
  EXPECT_NEAR(x[4], 30.0f, 1e-4);
}

TEST(Gelu, TanhApproximation) {
  for (float v : {-3.0f, -0.5f, 0.0f, 0.7f, 2.5f}) {
    const double ref = 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
    EXPECT_NEAR(kernels::gelu_tanh(v), ref, 1e-6);
  }
}

TEST(Softmax, SumsToOneAndIsShiftInvariant) {
  std::vector<float> a = {1, 2, 3, 1000}, b = {-999, -998, -997, 0};
  kernels::softmax(a.data(), 4);
  kernels::softmax(b.data(), 4);
  double sum = 0;
  for (int i = 0; i < 4; ++i) {
    sum += a[i];
    EXPECT_NEAR(a[i], b[i], 1e-7);
  }
  EXPECT_NEAR(sum, 1.0, 1e-6);
}

TEST(Matmul, ScalarAndAvx2AgreeForEveryFormat) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd;
  const int64_t N = 37, K = 71, T = 3;
  std::vector<float> w32(N * K), x(T * K);
  for (auto& v : w32) v = nd(rng);
  for (auto& v : x) v = nd(rng);
  const kernels::Isa saved = kernels::active_isa();
  std::vector<uint16_t> wbf(N * K);
  for (size_t i = 0; i < wbf.size(); ++i) wbf[i] = f32_to_bf16(w32[i]);

  for (auto format : {quant::WeightFormat::F32, quant::WeightFormat::BF16}) {
    quant::WeightMatrix w{format, N, K, format == quant::WeightFormat::F32 ? (const void*)w32.data() : wbf.data()};
    std::vector<float> ref(T * N), tol(T * N);
    for (int64_t t = 0; t < T; ++t)
      for (int64_t r = 0; r < N; ++r) {
        double s = 0, mag = 0;
        for (int64_t c = 0; c < K; ++c) {
          const float wv = format == quant::WeightFormat::F32 ? w32[r * K + c] : bf16_to_f32(wbf[r * K + c]);
          s += double(x[t * K + c]) * wv;
          mag += std::fabs(double(x[t * K + c]) * wv);
        }
        ref[t * N + r] = float(s);
        // bf16 on AVX-512 BF16 multiplies by the activations' two bf16 planes (2^-16 per element).
        tol[t * N + r] = float(1e-4 + (format == quant::WeightFormat::BF16 ? std::ldexp(mag, -16) : 0.0));
      }
    for (auto isa : {kernels::Isa::Scalar, kernels::Isa::Avx2, kernels::Isa::Avx512}) {
      if (!kernels::cpu_supports(isa)) continue;
      kernels::set_isa(isa);
      std::vector<float> y(T * N);
      kernels::matmul(x.data(), T, w, y.data());
      for (size_t i = 0; i < y.size(); ++i) EXPECT_NEAR(y[i], ref[i], tol[i]) << kernels::isa_name(isa);
    }
  }
  kernels::set_isa(saved);
}

TEST(Dtype, Bf16RoundTripAndF16Decode) {
  EXPECT_EQ(bf16_to_f32(f32_to_bf16(1.5f)), 1.5f);
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3f80);  // ties to even
  EXPECT_EQ(f16_to_f32(0x3c00), 1.0f);
  EXPECT_EQ(f16_to_f32(0xc000), -2.0f);
  EXPECT_EQ(f16_to_f32(0x0001), std::ldexp(1.0f, -24));  // smallest subnormal
}

// The quantizers (quant/quantize.h, quant/quantize_search.h): the scale search finds the
// optimum a brute-force scan finds, every format round-trips within its precision, searched
// blocks beat round-to-nearest, a block already on a format's grid is recovered exactly
// (quantizing a dequantized file is lossless), importance weights move the error to the
// unimportant columns, and bad input is an error.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "base/error.h"
#include "quant/ggml_blocks.h"
#include "quant/quantize.h"
#include "quant/quantize_search.h"
#include "quant/repack.h"

using namespace lumen;

namespace {

std::vector<float> laplace_row(int64_t n, uint32_t seed, float scale = 0.02f) {
  std::mt19937 rng(seed);
  std::exponential_distribution<float> e(1.0f);
  std::vector<float> x(static_cast<size_t>(n));
  for (auto& v : x) v = (rng() & 1 ? 1.0f : -1.0f) * e(rng) * scale;
  return x;
}

std::vector<float> roundtrip(int type, const std::vector<float>& x, const float* importance = nullptr) {
  const int64_t n = int64_t(x.size());
  std::vector<uint8_t> q(quant::ggml_row_bytes(type, n));
  quant::quantize_row_ggml(type, x.data(), n, importance, q.data());
  std::vector<float> y(static_cast<size_t>(n));
  quant::dequantize_ggml_row(type, q.data(), n, y.data());
  return y;
}

double weighted_sq_error(const std::vector<float>& x, const std::vector<float>& y, const float* w = nullptr) {
  double e = 0;
  for (size_t i = 0; i < x.size(); ++i) e += (w ? w[i] : 1.0) * double(x[i] - y[i]) * (x[i] - y[i]);
  return e;
}

double energy(const std::vector<float>& x) { return weighted_sq_error(x, std::vector<float>(x.size(), 0.0f)); }

// Formats the quantizer writes and this build can read back.
std::vector<int> readable_types() {
  std::vector<int> types;
  for (int t : {quant::ggml_type::Q8_0, quant::ggml_type::Q4_0, quant::ggml_type::Q4_1, quant::ggml_type::Q5_0,
                quant::ggml_type::Q5_1, quant::ggml_type::Q4_K, quant::ggml_type::Q5_K, quant::ggml_type::Q6_K, 20, 23})
    if (quant::ggml_can_dequantize(t)) types.push_back(t);
  return types;
}

}  // namespace

TEST(QuantizeSearch, SweepFindsTheBruteForceOptimum) {
  // Levels -8..7 and IQ4_NL's table; the sweep's error is never above the best of a dense
  // scan of scales over the same window (each scanned scale: nearest codes, LS scale).
  const std::vector<float> uniform = {-8, -7, -6, -5, -4, -3, -2, -1, 0, 1, 2, 3, 4, 5, 6, 7};
  const std::vector<float> iq4 = {-127, -104, -83, -65, -49, -35, -22, -10, 1, 13, 25, 38, 53, 69, 89, 113};
  for (const auto* levels : {&uniform, &iq4}) {
    const quant::search::LevelIndex index(levels->data(), int(levels->size()));
    const float win = levels == &uniform ? 2.0f : 24.0f;
    for (uint32_t seed = 1; seed <= 50; ++seed) {
      const auto x = laplace_row(32, seed);
      std::vector<float> w(32);
      for (int i = 0; i < 32; ++i) w[size_t(i)] = 0.5f + float((seed * 7 + i * 13) % 10) / 10.0f;
      uint8_t idx[32];
      const float d = quant::search::fit_scale(x.data(), w.data(), 32, index, idx, win, win);
      const double got = quant::search::weighted_error(x.data(), w.data(), 32, levels->data(), idx, d);
      float amax = 0, xmax = 0;
      for (float v : x)
        if (std::fabs(v) > amax) amax = std::fabs(v), xmax = v;
      double best = 1e30;
      for (float s : {1.0f, -1.0f}) {
        const float end = s * xmax > 0 ? levels->back() : -levels->front();
        for (int k = 0; k <= 4000; ++k) {
          const float u = (end - win + 2 * win * float(k) / 4000) / amax;
          uint8_t c[32];
          double sxq = 0, sqq = 0;
          for (int i = 0; i < 32; ++i) {
            c[i] = uint8_t(index(s * u * x[size_t(i)]));
            const double q = (*levels)[c[i]];
            sxq += w[size_t(i)] * x[size_t(i)] * q;
            sqq += w[size_t(i)] * q * q;
          }
          if (sqq > 0)
            best = std::min(best, quant::search::weighted_error(x.data(), w.data(), 32, levels->data(), c,
                                                                 float(sxq / sqq)));
        }
      }
      EXPECT_LE(got, best * (1 + 1e-5)) << "seed " << seed;
    }
  }
}

TEST(QuantizeSearch, ScaleOffsetFitIsExactOnGridData) {
  // x = d * L + m with L spanning 2..12 of 0..15: the fit reproduces it exactly.
  std::mt19937 rng(3);
  std::vector<float> x(32), w(32, 1.0f);
  for (int i = 0; i < 32; ++i) x[size_t(i)] = 0.01f * float(2 + rng() % 11) - 0.07f;
  uint8_t L[32];
  const auto fit = quant::search::fit_scale_offset(x.data(), w.data(), 32, 15, L, true);
  for (int i = 0; i < 32; ++i) EXPECT_NEAR(fit.d * L[i] + fit.m, x[size_t(i)], 1e-6) << i;
}

TEST(Quantize, EveryFormatRoundTripsWithinItsPrecision) {
  // Relative squared error bounds (Laplace-distributed weights): roughly 2^-2b per format.
  const std::vector<std::pair<int, double>> bounds = {
      {quant::ggml_type::Q8_0, 1e-4}, {quant::ggml_type::Q6_K, 1.5e-3}, {quant::ggml_type::Q5_K, 5e-3},
      {quant::ggml_type::Q5_1, 5e-3}, {quant::ggml_type::Q5_0, 8e-3},   {quant::ggml_type::Q4_K, 2e-2},
      {quant::ggml_type::Q4_1, 2e-2}, {quant::ggml_type::Q4_0, 3e-2},   {20, 3e-2},
      {23, 3e-2}};
  for (const auto& [type, bound] : bounds) {
    if (!quant::ggml_can_dequantize(type)) continue;
    const auto x = laplace_row(1024, 11);
    const double rel = weighted_sq_error(x, roundtrip(type, x)) / energy(x);
    EXPECT_LT(rel, bound) << quant::ggml_blocks_type_name(type);
    EXPECT_GT(rel, bound / 100) << quant::ggml_blocks_type_name(type) << ": suspiciously exact";
  }
}

TEST(Quantize, SearchBeatsRoundToNearest) {
  // ggml's reference Q4_0 / Q8_0 (scale from the block maximum) against the search, in
  // plain squared error over many rows.
  double ref4 = 0, got4 = 0, ref8 = 0, got8 = 0;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const auto x = laplace_row(512, seed);
    std::vector<float> y4(512), y8(512);
    for (int b = 0; b < 16; ++b) {
      uint8_t blk4[18], blk8[34];
      uint16_t d;
      quant::quantize_block_q4_0(x.data() + 32 * b, &d, blk4 + 2);
      std::memcpy(blk4, &d, 2);
      quant::quantize_block_q8_0(x.data() + 32 * b, &d, reinterpret_cast<int8_t*>(blk8 + 2));
      std::memcpy(blk8, &d, 2);
      quant::dequantize_ggml_row(quant::ggml_type::Q4_0, blk4, 32, y4.data() + 32 * b);
      quant::dequantize_ggml_row(quant::ggml_type::Q8_0, blk8, 32, y8.data() + 32 * b);
    }
    ref4 += weighted_sq_error(x, y4);
    ref8 += weighted_sq_error(x, y8);
    got4 += weighted_sq_error(x, roundtrip(quant::ggml_type::Q4_0, x));
    got8 += weighted_sq_error(x, roundtrip(quant::ggml_type::Q8_0, x));
  }
  EXPECT_LT(got4, 0.97 * ref4);
  EXPECT_LT(got8, 0.97 * ref8);
}

TEST(Quantize, DataOnTheGridIsRecoveredExactly) {
  // Requantizing a dequantized row to the same format gives the same values: a GGUF
  // expanded to f32 and quantized back loses nothing. Single-scale formats: any row the
  // quantizer wrote. Q4_K / Q5_K: blocks as llama.cpp writes them (each sub-block's codes
  // span 0..nmax, the largest scale and offset codes are 63); a block whose sub-block codes
  // start above 0 can also be read with smaller codes and a larger offset, so only the
  // grid llama.cpp's files use is canonical.
  for (int type : readable_types()) {
    if (type == quant::ggml_type::Q4_K || type == quant::ggml_type::Q5_K) continue;
    for (uint32_t seed = 1; seed <= 4; ++seed) {
      const auto once = roundtrip(type, laplace_row(2048, seed * 31 + uint32_t(type)));
      const auto twice = roundtrip(type, once);
      EXPECT_LE(weighted_sq_error(once, twice), 1e-12 * energy(once))
          << quant::ggml_blocks_type_name(type) << " seed " << seed;
    }
  }
  for (int type : {quant::ggml_type::Q4_K, quant::ggml_type::Q5_K}) {
    const int nmax = type == quant::ggml_type::Q4_K ? 15 : 31;
    const size_t bytes = quant::ggml_block_bytes(type);
    std::mt19937 rng{uint32_t(type)};
    for (int b = 0; b < 100; ++b) {
      std::vector<uint8_t> block(bytes, 0);
      const uint16_t d = quant::f32_to_f16(1e-4f * float(1 + rng() % 50)), dmin = quant::f32_to_f16(1e-3f * float(1 + rng() % 20));
      std::memcpy(block.data(), &d, 2);
      std::memcpy(block.data() + 2, &dmin, 2);
      int ls[8], lm[8];
      for (int j = 0; j < 8; ++j) {
        ls[j] = 20 + int(rng() % 44);
        lm[j] = int(rng() % 64);
      }
      ls[rng() % 8] = 63;
      lm[rng() % 8] = 63;
      for (int j = 0; j < 8; ++j) {  // ggml's 6-bit packing
        if (j < 4) {
          block[4 + j] = uint8_t(ls[j]);
          block[4 + j + 4] = uint8_t(lm[j]);
        } else {
          block[4 + j + 4] = uint8_t((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
          block[4 + j - 4] |= uint8_t((ls[j] >> 4) << 6);
          block[4 + j] |= uint8_t((lm[j] >> 4) << 6);
        }
      }
      uint8_t L[256];
      for (int j = 0; j < 8; ++j)
        for (int i = 0; i < 32; ++i) L[32 * j + i] = uint8_t(i == 0 ? 0 : i == 1 ? nmax : int(rng() % uint32_t(nmax + 1)));
      uint8_t* qs = block.data() + (nmax == 15 ? 16 : 48);
      for (int g = 0; g < 4; ++g)
        for (int l = 0; l < 32; ++l) {
          qs[32 * g + l] = uint8_t((L[64 * g + l] & 0xF) | ((L[64 * g + 32 + l] & 0xF) << 4));
          if (nmax == 31)
            block[16 + l] |= uint8_t(((L[64 * g + l] >> 4) << (2 * g)) | ((L[64 * g + 32 + l] >> 4) << (2 * g + 1)));
        }
      std::vector<float> once(256);
      quant::dequantize_ggml_row(type, block.data(), 256, once.data());
      const auto twice = roundtrip(type, once);
      EXPECT_LE(weighted_sq_error(once, twice), 1e-12 * energy(once)) << quant::ggml_blocks_type_name(type) << " block " << b;
    }
  }
}

TEST(Quantize, ImportanceMovesTheErrorToUnimportantColumns) {
  for (int type : readable_types()) {
    const int64_t n = 1024;
    std::vector<float> imp(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) imp[size_t(i)] = (i % 7 == 0) ? 50.0f : 0.2f;
    double plain = 0, weighted = 0;
    for (uint32_t seed = 1; seed <= 8; ++seed) {
      const auto x = laplace_row(n, seed * 5 + 1);
      plain += weighted_sq_error(x, roundtrip(type, x), imp.data());
      weighted += weighted_sq_error(x, roundtrip(type, x, imp.data()), imp.data());
    }
    EXPECT_LT(weighted, 0.95 * plain) << quant::ggml_blocks_type_name(type);
  }
}

TEST(Quantize, ZeroRowsAndZeroImportanceStayFinite) {
  for (int type : readable_types()) {
    const std::vector<float> zeros(512, 0.0f);
    for (float v : roundtrip(type, zeros)) EXPECT_EQ(v, 0.0f) << quant::ggml_blocks_type_name(type);
    const auto x = laplace_row(512, 9);
    const std::vector<float> no_importance(512, 0.0f);
    const auto y = roundtrip(type, x, no_importance.data());
    EXPECT_LT(weighted_sq_error(x, y) / energy(x), 0.05) << quant::ggml_blocks_type_name(type);
  }
}

TEST(Quantize, FloatTypesConvert) {
  const auto x = laplace_row(64, 2);
  EXPECT_EQ(roundtrip(quant::ggml_type::F32, x), x);
  const auto h = roundtrip(quant::ggml_type::F16, x);
  const auto b = roundtrip(quant::ggml_type::BF16, x);
  for (size_t i = 0; i < x.size(); ++i) {
    EXPECT_NEAR(h[i], x[i], std::fabs(x[i]) * 1e-3 + 1e-7);
    EXPECT_NEAR(b[i], x[i], std::fabs(x[i]) * 1e-2);
  }
}

TEST(Quantize, BadInputIsAnError) {
  std::vector<float> x(256, 0.5f);
  std::vector<uint8_t> out(1024);
  EXPECT_THROW(quant::quantize_row_ggml(quant::ggml_type::Q4_K, x.data(), 96, nullptr, out.data()), Error);
  EXPECT_THROW(quant::quantize_row_ggml(99, x.data(), 256, nullptr, out.data()), Error);
  x[17] = std::nanf("");
  try {
    quant::quantize_row_ggml(quant::ggml_type::Q8_0, x.data(), 256, nullptr, out.data());
    FAIL() << "no error for a NaN";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("value 17"), std::string::npos) << e.what();
  }
  x[17] = 0.5f;
  std::vector<float> imp(256, 1.0f);
  imp[3] = -1.0f;
  EXPECT_THROW(quant::quantize_row_ggml(quant::ggml_type::Q8_0, x.data(), 256, imp.data(), out.data()), Error);
}

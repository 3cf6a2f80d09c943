// The matmul's fast expansion of ggml blocks must give exactly the reference values
// (quant::dequantize_ggml_row, itself checked against gguf-py): random blocks with random
// finite scales, compared bit for bit, for every format that has a fast path.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <vector>

#include "kernels/cpu_features.h"
#include "kernels/ggml_dequant.h"
#include "kernels/matmul.h"
#include "quant/ggml_blocks.h"
#include "quant/weight_matrix.h"

using namespace lumen;

namespace {

// A row of `blocks` blocks of random bytes whose f16 scale fields are finite normals.
std::vector<uint8_t> random_row(quant::WeightFormat format, int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  const size_t bytes = quant::format_row_bytes(format, n);
  std::vector<uint8_t> row(bytes);
  for (auto& b : row) b = uint8_t(rng());
  const int type = quant::ggml_type_of(format);
  const size_t block = quant::ggml_block_bytes(type);
  // f16 with exponent 8..22 (finite, normal), random sign and mantissa.
  auto half = [&] { return uint16_t((rng() & 0x83FF) | ((8 + rng() % 15) << 10)); };
  for (size_t off = 0; off < bytes; off += block) {
    std::vector<size_t> fields;
    switch (format) {
      case quant::WeightFormat::Q6_K: fields = {208}; break;
      case quant::WeightFormat::Q4_K: fields = {0, 2}; break;
      default: fields = {0}; break;
    }
    for (size_t f : fields) {
      const uint16_t h = half();
      std::memcpy(&row[off + f], &h, 2);
    }
  }
  return row;
}

class FastDequant : public ::testing::TestWithParam<quant::WeightFormat> {};

TEST_P(FastDequant, BitIdenticalToReference) {
  if (!kernels::cpu_supports(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  const quant::WeightFormat format = GetParam();
  const int64_t n = 1024;
  for (uint32_t seed = 1; seed <= 20; ++seed) {
    const auto row = random_row(format, n, seed);
    std::vector<float> want(n), got(n, -1.0f);
    quant::dequantize_ggml_row(quant::ggml_type_of(format), row.data(), n, want.data());
    ASSERT_TRUE(kernels::detail::dequantize_row_avx2(format, row.data(), n, got.data()));
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(std::memcmp(&want[i], &got[i], 4), 0)
          << quant::format_name(format) << " seed " << seed << " element " << i << ": " << want[i]
          << " vs " << got[i];
  }
}

INSTANTIATE_TEST_SUITE_P(Formats, FastDequant,
                         ::testing::Values(quant::WeightFormat::Q8_0, quant::WeightFormat::Q4_0,
                                           quant::WeightFormat::Q5_0, quant::WeightFormat::Q4_K,
                                           quant::WeightFormat::Q6_K),
                         [](const auto& info) { return std::string(quant::format_name(info.param)); });

TEST(FastDequant, OtherFormatsFallBack) {
  float out[32];
  uint8_t row[24] = {};
  EXPECT_FALSE(kernels::detail::dequantize_row_avx2(quant::WeightFormat::Q5_1, row, 32, out));
  EXPECT_FALSE(kernels::detail::dequantize_row_avx2(quant::WeightFormat::F16, row, 12, out));
}

// The block matmul agrees between the scalar and AVX2 variants (same weights, f32 sums in a
// different order), for a batch of activation rows.
TEST(FastDequant, BlockMatmulScalarAndAvx2Agree) {
  if (!kernels::cpu_supports(kernels::Isa::Avx2)) GTEST_SKIP() << "no AVX2 on this CPU";
  const int64_t rows = 16, cols = 512, T = 3;
  for (auto format : {quant::WeightFormat::Q8_0, quant::WeightFormat::Q5_0, quant::WeightFormat::Q4_K,
                      quant::WeightFormat::Q6_K}) {
    std::vector<uint8_t> data;
    for (int64_t r = 0; r < rows; ++r) {
      auto row = random_row(format, cols, uint32_t(100 + r));
      data.insert(data.end(), row.begin(), row.end());
    }
    quant::WeightMatrix w{format, rows, cols, data.data()};
    std::mt19937 rng(7);
    std::normal_distribution<float> dist;
    std::vector<float> x(size_t(T * cols));
    for (auto& v : x) v = dist(rng);
    std::vector<float> y_scalar(size_t(T * rows)), y_avx2(size_t(T * rows)), ref(cols);
    kernels::set_isa(kernels::Isa::Scalar);
    kernels::matmul(x.data(), T, w, y_scalar.data());
    kernels::set_isa(kernels::Isa::Avx2);
    kernels::matmul(x.data(), T, w, y_avx2.data());
    for (int64_t i = 0; i < T * rows; ++i) {
      // Exact reference in double from the reference expansion.
      const int64_t t = i / rows, r = i % rows;
      quant::dequantize_row(w, r, ref.data());
      double s = 0, mag = 0;
      for (int64_t c = 0; c < cols; ++c) {
        s += double(ref[c]) * x[size_t(t * cols + c)];
        mag += std::abs(double(ref[c]) * x[size_t(t * cols + c)]);
      }
      EXPECT_NEAR(y_scalar[i], s, 1e-5 * mag + 1e-30) << quant::format_name(format);
      EXPECT_NEAR(y_avx2[i], s, 1e-5 * mag + 1e-30) << quant::format_name(format);
    }
  }
}

}  // namespace

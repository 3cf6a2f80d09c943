// Reference dequantization of every ggml block format against gguf-py (bit for bit), and the
// WeightFormat table's rows. The fingerprints below come from tools/ggml_dequant_vectors.py:
// gguf-py's `dequantize` of the same pseudo-random blocks, hashed.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "base/error.h"
#include "ggml_random_blocks.h"
#include "quant/ggml_blocks.h"
#include "quant/weight_matrix.h"

using namespace lumen;

namespace {

constexpr int kBlocks = 8;

// The generator of tools/ggml_dequant_vectors.py, byte for byte.
std::vector<uint8_t> pseudo_random_blocks(quant::WeightFormat f) {
  return test_blocks::random_blocks(f, kBlocks, uint64_t(quant::format_info(f).ggml_type) * 1000 + 1);
}

uint64_t fnv1a64(const void* data, size_t n) {
  uint64_t h = 0xCBF29CE484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ static_cast<const uint8_t*>(data)[i]) * 0x100000001B3ull;
  return h;
}

struct Vector {
  const char* name;
  uint64_t hash;
  float first;
};

// .venv/bin/python tools/ggml_dequant_vectors.py (gguf-py 0.17's gguf.quants.dequantize)
const Vector kGgufPyVectors[] = {
    {"Q4_0", 0x9918636293ae4326ull, 25.59375f},
    {"Q4_1", 0x2cac30eb61bd4838ull, -0.26629638671875f},
    {"Q5_0", 0x93ddff09b437cd39ull, -1933.25f},
    {"Q5_1", 0x4ec7952ec94441ebull, -47.8984375f},
    {"Q8_0", 0x4b903fd81476dc2cull, -1665.46875f},
    {"Q2_K", 0xca4f8cd548f83160ull, 1.6666259765625f},
    {"Q3_K", 0x3a4807a2f3ab6687ull, 94.171875f},
    {"Q4_K", 0x04313e0ba3b0c6adull, -4740.33349609375f},
    {"Q5_K", 0xe0a147e4b0500d64ull, 3500.265625f},
    {"Q6_K", 0xe9a3d8600fc2c41cull, 250.0751953125f},
    {"IQ4_NL", 0xcc4b75c504509f7cull, 12663.0625f},
    {"IQ4_XS", 0x683926f8d4df4d07ull, -403.38623046875f},
};

}  // namespace

TEST(GgmlBlocks, ReferenceDequantizationEqualsGgufPy) {
  for (const Vector& v : kGgufPyVectors) {
    const int f = quant::weight_format_from_name(v.name);
    ASSERT_GE(f, 0) << v.name;
    const auto format = quant::WeightFormat(f);
    const auto& info = quant::format_info(format);
    const auto bytes = pseudo_random_blocks(format);
    const int64_t n = kBlocks * info.block_elems;
    std::vector<float> out(size_t(n), -1.0f);
    quant::dequantize_ggml_row(info.ggml_type, bytes.data(), n, out.data());
    EXPECT_EQ(out[0], v.first) << v.name;
    EXPECT_EQ(fnv1a64(out.data(), out.size() * 4), v.hash) << v.name << ": differs from gguf-py";
    // The same through the matrix interface.
    const quant::WeightMatrix m{format, 1, n, bytes.data()};
    std::vector<float> row(static_cast<size_t>(n));
    quant::dequantize_row(m, 0, row.data());
    EXPECT_EQ(std::memcmp(row.data(), out.data(), row.size() * 4), 0) << v.name;
  }
}

// Hand-worked blocks: each field's meaning, independently of any other implementation.
TEST(GgmlBlocks, KnownValues) {
  const uint16_t one = 0x3C00, half = 0x3800;  // f16 1.0, 0.5
  {  // Q2_K: sub-block 0 has scale 3, min 2; element 0 = bits 0-1 of qs[0] = 2.
    quant::BlockQ2_K b{};
    b.scales[0] = 0x23;
    b.qs[0] = 0b00001110;  // element 0: 2; element 32 (bits 2-3 of qs[0]): 3
    b.scales[2] = 0x01;    // sub-block 2 (elements 32..47): scale 1, min 0
    b.d = one;
    b.dmin = half;
    float y[256];
    quant::dequantize_ggml_row(quant::ggml_type::Q2_K, &b, 256, y);
    EXPECT_EQ(y[0], 1.0f * 3 * 2 - 0.5f * 2);
    EXPECT_EQ(y[1], -1.0f);
    EXPECT_EQ(y[32], 3.0f);
  }
  {  // Q3_K: scale of sub-block 0 = 32 + 5 (low nibble 5, high bits 2); hmask bit set = no -4.
    quant::BlockQ3_K b{};
    b.scales[0] = 5;
    b.scales[8] = 2;  // high 2 bits of scale 0: 2 -> 0b100101 = 37
    b.qs[0] = 3;
    b.hmask[0] = 1;
    b.hmask[1] = 0;
    b.d = one;
    float y[256];
    quant::dequantize_ggml_row(quant::ggml_type::Q3_K, &b, 256, y);
    EXPECT_EQ(y[0], float(37 - 32) * 3);
    EXPECT_EQ(y[1], float(37 - 32) * -4);
    int8_t scales[16];
    quant::ggml_q3_k_scales(b.scales, scales);
    EXPECT_EQ(scales[0], 5);
    EXPECT_EQ(scales[1], -32);
  }
  {  // IQ4_NL: nibble 0 -> -127, 15 -> 113.
    quant::BlockIQ4_NL b{};
    b.d = half;
    b.qs[0] = 0xF0;
    float y[32];
    quant::dequantize_ggml_row(quant::ggml_type::IQ4_NL, &b, 32, y);
    EXPECT_EQ(y[0], -63.5f);
    EXPECT_EQ(y[16], 56.5f);
  }
  {  // IQ4_XS: sub-block 1's scale = low nibble 0xA (high half of scales_l[0]) | 1 << 4 = 26.
    quant::BlockIQ4_XS b{};
    b.d = one;
    b.scales_l[0] = 0xA0;
    b.scales_h = 0b0100;
    b.qs[16] = 0x08;  // element 32 -> value 1
    float y[256];
    quant::dequantize_ggml_row(quant::ggml_type::IQ4_XS, &b, 256, y);
    EXPECT_EQ(y[32], float(26 - 32) * 1);
    EXPECT_EQ(quant::ggml_iq4_xs_scale(reinterpret_cast<const uint8_t*>(&b), 1), 26);
  }
}

TEST(WeightFormats, TableRowsAreConsistent) {
  const char* ggml_names[] = {"Q4_0", "Q4_1", "Q5_0", "Q5_1", "Q8_0", "Q2_K", "Q3_K",
                              "Q4_K", "Q5_K", "Q6_K", "IQ4_NL", "IQ4_XS"};
  for (const char* name : ggml_names) {
    const int f = quant::weight_format_from_name(name);
    ASSERT_GE(f, 0) << name;
    const auto& info = quant::format_info(quant::WeightFormat(f));
    EXPECT_TRUE(quant::is_ggml_block_format(info.format)) << name;
    EXPECT_EQ(quant::weight_format_from_ggml(info.ggml_type), f) << name;
    EXPECT_EQ(std::string(quant::ggml_blocks_type_name(info.ggml_type)), name);
    EXPECT_EQ(quant::ggml_block_size(info.ggml_type), info.block_elems) << name;
    EXPECT_EQ(quant::ggml_block_bytes(info.ggml_type), info.block_bytes) << name;
    EXPECT_EQ(quant::format_storage_bytes(info.format, 3, 4 * info.block_elems), 12 * info.block_bytes);
    EXPECT_NE(std::string(quant::ggml_matrix_type_list()).find(name), std::string::npos) << name;
  }
  EXPECT_EQ(quant::weight_format_from_ggml(quant::ggml_type::IQ4_XS), int(quant::WeightFormat::IQ4_XS));
  EXPECT_EQ(quant::weight_format_from_ggml(15), -1);  // Q8_K: activations only, never weights
  EXPECT_FALSE(quant::is_ggml_block_format(quant::WeightFormat::F32));
  EXPECT_FALSE(quant::is_ggml_block_format(quant::WeightFormat::Q4_0X4));
  EXPECT_THROW(quant::ggml_row_bytes(quant::ggml_type::Q3_K, 128), Error);  // not whole blocks
}

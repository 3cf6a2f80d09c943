#include "quant/weight_matrix.h"

#include <cstring>
#include <string>

#include "quant/ggml_blocks.h"
#include "quant/repack.h"

namespace lumen::quant {

namespace {

constexpr WeightFormatInfo kFormats[kWeightFormatCount] = {
    {WeightFormat::F32, "f32", ggml_type::F32, 1, 4},
    {WeightFormat::F16, "f16", ggml_type::F16, 1, 2},
    {WeightFormat::BF16, "bf16", ggml_type::BF16, 1, 2},
    {WeightFormat::Q8_0, "Q8_0", ggml_type::Q8_0, 32, sizeof(BlockQ8_0)},
    {WeightFormat::Q4_0, "Q4_0", ggml_type::Q4_0, 32, sizeof(BlockQ4_0)},
    {WeightFormat::Q4_1, "Q4_1", ggml_type::Q4_1, 32, sizeof(BlockQ4_1)},
    {WeightFormat::Q5_0, "Q5_0", ggml_type::Q5_0, 32, sizeof(BlockQ5_0)},
    {WeightFormat::Q5_1, "Q5_1", ggml_type::Q5_1, 32, sizeof(BlockQ5_1)},
    {WeightFormat::Q2_K, "Q2_K", ggml_type::Q2_K, kQK_K, sizeof(BlockQ2_K)},
    {WeightFormat::Q3_K, "Q3_K", ggml_type::Q3_K, kQK_K, sizeof(BlockQ3_K)},
    {WeightFormat::Q4_K, "Q4_K", ggml_type::Q4_K, kQK_K, sizeof(BlockQ4_K)},
    {WeightFormat::Q5_K, "Q5_K", ggml_type::Q5_K, kQK_K, sizeof(BlockQ5_K)},
    {WeightFormat::Q6_K, "Q6_K", ggml_type::Q6_K, kQK_K, sizeof(BlockQ6_K)},
    {WeightFormat::IQ4_NL, "IQ4_NL", ggml_type::IQ4_NL, 32, sizeof(BlockIQ4_NL)},
    {WeightFormat::IQ4_XS, "IQ4_XS", ggml_type::IQ4_XS, kQK_K, sizeof(BlockIQ4_XS)},
    {WeightFormat::Q4_0X4, "q4_0x4", -1, 32, sizeof(BlockQ4_0)},
    {WeightFormat::Q8_0X4, "q8_0x4", -1, 32, sizeof(BlockQ8_0)},
};

constexpr bool table_in_enum_order() {
  for (int f = 0; f < kWeightFormatCount; ++f)
    if (int(kFormats[f].format) != f) return false;
  return true;
}
static_assert(table_in_enum_order());

}  // namespace

const WeightFormatInfo& format_info(WeightFormat format) { return kFormats[int(format)]; }

int ggml_type_of(WeightFormat format) { return format_info(format).ggml_type; }

int weight_format_from_ggml(int type) {
  if (type < 0) return -1;
  for (const auto& info : kFormats)
    if (info.ggml_type == type) return int(info.format);
  return -1;
}

bool is_ggml_block_format(WeightFormat format) {
  const auto& info = format_info(format);
  return info.ggml_type >= 0 && info.block_elems > 1;
}

const char* ggml_matrix_type_list() {
  static const std::string list = [] {
    std::string s;
    for (const auto& info : kFormats) {
      if (info.ggml_type < 0) continue;
      if (!s.empty()) s += ", ";
      s += ggml_blocks_type_name(info.ggml_type);
    }
    return s;
  }();
  return list.c_str();
}

size_t format_row_bytes(WeightFormat format, int64_t cols) {
  switch (format) {
    case WeightFormat::F32: return size_t(cols) * 4;
    case WeightFormat::F16:
    case WeightFormat::BF16: return size_t(cols) * 2;
    case WeightFormat::Q4_0X4: return q4_0x4_bytes(kRowGroup, cols) / kRowGroup;
    case WeightFormat::Q8_0X4: return q8_0x4_bytes(kRowGroup, cols) / kRowGroup;
    default: return ggml_row_bytes(ggml_type_of(format), cols);
  }
}

size_t WeightMatrix::row_bytes() const { return format_row_bytes(format, cols); }

bool is_interleaved(WeightFormat format) {
  return format == WeightFormat::Q4_0X4 || format == WeightFormat::Q8_0X4;
}

size_t format_storage_bytes(WeightFormat format, int64_t rows, int64_t cols) {
  switch (format) {
    case WeightFormat::Q4_0X4: return q4_0x4_bytes(rows, cols);
    case WeightFormat::Q8_0X4: return q8_0x4_bytes(rows, cols);
    default: return size_t(rows) * format_row_bytes(format, cols);
  }
}

int weight_format_from_name(const char* name) {
  for (const auto& info : kFormats)
    if (std::strcmp(info.name, name) == 0) return int(info.format);
  return -1;
}

const char* format_name(WeightFormat format) { return format_info(format).name; }

void to_f32(WeightFormat format, const void* data, int64_t n, float* out) {
  switch (format) {
    case WeightFormat::F32:
      std::memcpy(out, data, size_t(n) * 4);
      return;
    case WeightFormat::F16: {
      const auto* h = static_cast<const uint16_t*>(data);
      for (int64_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
      return;
    }
    case WeightFormat::BF16: {
      const auto* h = static_cast<const uint16_t*>(data);
      for (int64_t i = 0; i < n; ++i) out[i] = bf16_to_f32(h[i]);
      return;
    }
    default:
      dequantize_ggml_row(ggml_type_of(format), data, n, out);
      return;
  }
}

void dequantize_row(const WeightMatrix& w, int64_t r, float* out) {
  if (w.format == WeightFormat::Q4_0X4)
    return dequantize_row_q4_0x4(static_cast<const std::byte*>(w.data), w.rows, w.cols, r, out);
  if (w.format == WeightFormat::Q8_0X4)
    return dequantize_row_q8_0x4(static_cast<const std::byte*>(w.data), w.rows, w.cols, r, out);
  const auto* base = static_cast<const std::byte*>(w.data) + size_t(r) * w.row_bytes();
  to_f32(w.format, base, w.cols, out);
}

}  // namespace lumen::quant

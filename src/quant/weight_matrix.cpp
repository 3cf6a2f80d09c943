#include "quant/weight_matrix.h"

#include <cstring>

#include "quant/ggml_blocks.h"
#include "quant/repack.h"

namespace lumen::quant {

int ggml_type_of(WeightFormat format) {
  switch (format) {
    case WeightFormat::F32: return ggml_type::F32;
    case WeightFormat::F16: return ggml_type::F16;
    case WeightFormat::BF16: return ggml_type::BF16;
    case WeightFormat::Q8_0: return ggml_type::Q8_0;
    case WeightFormat::Q4_0: return ggml_type::Q4_0;
    case WeightFormat::Q4_1: return ggml_type::Q4_1;
    case WeightFormat::Q5_0: return ggml_type::Q5_0;
    case WeightFormat::Q5_1: return ggml_type::Q5_1;
    case WeightFormat::Q4_K: return ggml_type::Q4_K;
    case WeightFormat::Q5_K: return ggml_type::Q5_K;
    case WeightFormat::Q6_K: return ggml_type::Q6_K;
    case WeightFormat::Q4_0X4:
    case WeightFormat::Q8_0X4: return -1;
  }
  return -1;
}

int weight_format_from_ggml(int type) {
  for (int f = 0; f <= int(WeightFormat::Q6_K); ++f)
    if (ggml_type_of(WeightFormat(f)) == type) return f;
  return -1;
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
  for (int f = 0; f <= int(WeightFormat::Q8_0X4); ++f)
    if (std::strcmp(format_name(WeightFormat(f)), name) == 0) return f;
  return -1;
}

const char* format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::F16: return "f16";
    case WeightFormat::BF16: return "bf16";
    case WeightFormat::Q4_0X4: return "q4_0x4";
    case WeightFormat::Q8_0X4: return "q8_0x4";
    default: return ggml_blocks_type_name(ggml_type_of(format));
  }
}

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

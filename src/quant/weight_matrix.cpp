#include "quant/weight_matrix.h"

#include <cstring>

#include "quant/ggml_blocks.h"

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
    default: return ggml_row_bytes(ggml_type_of(format), cols);
  }
}

size_t WeightMatrix::row_bytes() const { return format_row_bytes(format, cols); }

const char* format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::F16: return "f16";
    case WeightFormat::BF16: return "bf16";
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
  const auto* base = static_cast<const std::byte*>(w.data) + size_t(r) * w.row_bytes();
  to_f32(w.format, base, w.cols, out);
}

}  // namespace lumen::quant

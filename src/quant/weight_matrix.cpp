#include "quant/weight_matrix.h"

#include <cstring>

namespace lumen::quant {

size_t format_row_bytes(WeightFormat format, int64_t cols) {
  switch (format) {
    case WeightFormat::F32: return size_t(cols) * 4;
    case WeightFormat::F16:
    case WeightFormat::BF16: return size_t(cols) * 2;
  }
  return 0;
}

size_t WeightMatrix::row_bytes() const { return format_row_bytes(format, cols); }

const char* format_name(WeightFormat format) {
  switch (format) {
    case WeightFormat::F32: return "f32";
    case WeightFormat::F16: return "f16";
    case WeightFormat::BF16: return "bf16";
  }
  return "?";
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
  }
}

void dequantize_row(const WeightMatrix& w, int64_t r, float* out) {
  const auto* base = static_cast<const std::byte*>(w.data) + size_t(r) * w.row_bytes();
  to_f32(w.format, base, w.cols, out);
}

}  // namespace lumen::quant

#include "kernels/ggml_dequant.h"

#include "kernels/cpu_features.h"

namespace lumen::kernels {

bool dequantize_row_fast(quant::WeightFormat format, const void* row, int64_t n, float* out) {
  if (active_isa() != Isa::Scalar) return detail::dequantize_row_avx2(format, row, n, out);
  return false;
}

}  // namespace lumen::kernels

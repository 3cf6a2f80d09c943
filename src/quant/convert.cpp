#include "quant/convert.h"

#include <cstring>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/error.h"
#include "quant/repack.h"

namespace lumen::quant {

size_t converted_bytes(WeightFormat target, int64_t cols, int64_t r0, int64_t r1) {
  if (is_interleaved(target)) {
    const int64_t groups = (r1 - r0 + kRowGroup - 1) / kRowGroup;
    return format_storage_bytes(target, groups * kRowGroup, cols);
  }
  return format_storage_bytes(target, r1 - r0, cols);
}

void convert_rows(const WeightMatrix& src, WeightFormat target, int64_t r0, int64_t r1, std::byte* dst) {
  const int64_t cols = src.cols;
  std::vector<float> row(size_t(padded_cols(cols)), 0.0f);
  if (!is_interleaved(target)) {
    const size_t rb = format_row_bytes(target, cols);
    for (int64_t r = r0; r < r1; ++r) {
      dequantize_row(src, r, row.data());
      std::byte* out = dst + size_t(r - r0) * rb;
      if (target == WeightFormat::F32) {
        std::memcpy(out, row.data(), size_t(cols) * 4);
      } else if (target == WeightFormat::BF16 || target == WeightFormat::F16) {
        for (int64_t c = 0; c < cols; ++c) {
          const uint16_t h = target == WeightFormat::BF16 ? f32_to_bf16(row[size_t(c)]) : f32_to_f16(row[size_t(c)]);
          std::memcpy(out + c * 2, &h, 2);
        }
      } else if ((target == WeightFormat::Q4_0 || target == WeightFormat::Q8_0) && cols % 32 == 0) {
        // Row-major ggml blocks (rows read one at a time, e.g. a per-layer input table).
        const bool q4 = target == WeightFormat::Q4_0;
        const size_t bb = q4 ? 18 : 34;
        for (int64_t b = 0; b < cols / 32; ++b) {
          auto* blk = reinterpret_cast<uint8_t*>(out) + size_t(b) * bb;
          uint16_t d;
          if (q4) quantize_block_q4_0(row.data() + b * 32, &d, blk + 2);
          else quantize_block_q8_0(row.data() + b * 32, &d, reinterpret_cast<int8_t*>(blk + 2));
          std::memcpy(blk, &d, 2);
        }
      } else {
        throw Error(std::string("cannot convert weights to ") + format_name(target));
      }
    }
    return;
  }
  if (r0 % kRowGroup) throw Error("convert_rows: first row not at a row-group boundary");
  const bool q4 = target == WeightFormat::Q4_0X4;
  const WeightFormat same_blocks = q4 ? WeightFormat::Q4_0 : WeightFormat::Q8_0;
  const bool move_blocks = src.format == same_blocks && !is_interleaved(src.format);
  const int64_t pc32 = (cols + 31) / 32 * 32, nb = pc32 / 32;
  const size_t block_bytes = q4 ? 18 : 34;
  const size_t group_bytes = format_storage_bytes(target, kRowGroup, cols);
  std::vector<uint8_t> blocks(size_t(kRowGroup * nb) * block_bytes);
  for (int64_t g0 = r0; g0 < r1; g0 += kRowGroup) {
    const uint8_t* ptrs[4] = {nullptr, nullptr, nullptr, nullptr};
    for (int i = 0; i < kRowGroup; ++i) {
      const int64_t r = g0 + i;
      if (r >= r1 || r >= src.rows) continue;
      if (move_blocks) {
        ptrs[i] = static_cast<const uint8_t*>(src.data) + size_t(r) * src.row_bytes();
        continue;
      }
      dequantize_row(src, r, row.data());
      uint8_t* out = blocks.data() + size_t(i * nb) * block_bytes;
      for (int64_t b = 0; b < nb; ++b) {
        uint8_t* blk = out + size_t(b) * block_bytes;
        uint16_t d;
        if (q4) quantize_block_q4_0(row.data() + b * 32, &d, blk + 2);
        else quantize_block_q8_0(row.data() + b * 32, &d, reinterpret_cast<int8_t*>(blk + 2));
        std::memcpy(blk, &d, 2);
      }
      ptrs[i] = out;
    }
    std::byte* out = dst + size_t((g0 - r0) / kRowGroup) * group_bytes;
    if (q4) pack_group_q4_0x4(ptrs, pc32, out);
    else pack_group_q8_0x4(ptrs, pc32, out);
  }
}

}  // namespace lumen::quant

// A weight matrix as the kernels consume it: row-major [rows, cols] in one storage format.
// Rows are output features (PyTorch's [out, in] convention). Block formats store each row as
// whole blocks (ggml's layouts, quant/ggml_blocks.h); the kernels dispatch on the format.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/dtype.h"

namespace lumen::quant {

enum class WeightFormat : uint8_t {
  F32,
  F16,
  BF16,
  // ggml block formats, byte-compatible with GGUF tensors of the same name.
  Q8_0,
  Q4_0,
  Q4_1,
  Q5_0,
  Q5_1,
  Q2_K,
  Q3_K,
  Q4_K,
  Q5_K,
  Q6_K,
  IQ4_NL,
  IQ4_XS,
  // Lumen's interleaved layouts of Q4_0 / Q8_0 for the int8 kernels (quant/repack.h). Rows
  // are not stored back to back: use storage_bytes(), dequantize_row().
  Q4_0X4,
  Q8_0X4,
};

// One row per format: its name, ggml type id (-1 for Lumen's own layouts) and block
// geometry. Every list of formats in the project derives from this table.
struct WeightFormatInfo {
  WeightFormat format;
  const char* name;     // "Q4_K", "q4_0x4", "f32"
  int ggml_type;        // quant/ggml_blocks.h numbering; -1 for the interleaved layouts
  int64_t block_elems;  // elements per block (1 for f32/f16/bf16)
  size_t block_bytes;   // bytes per block (for the X4 layouts: per 32-element block and row)
};
inline constexpr int kWeightFormatCount = int(WeightFormat::Q8_0X4) + 1;
const WeightFormatInfo& format_info(WeightFormat format);

// The ggml type id of a format (quant/ggml_blocks.h numbering), and back; -1 when a format
// has no ggml type or a ggml type has no WeightFormat.
int ggml_type_of(WeightFormat format);
int weight_format_from_ggml(int ggml_type);
// True for the ggml block formats (Q4_0 ... IQ4_XS): rows of whole blocks, no interleaving.
bool is_ggml_block_format(WeightFormat format);
// "Q4_0, Q4_1, ..." : the ggml types Lumen reads as weight matrices (for error messages).
const char* ggml_matrix_type_list();

// Bytes of a whole [rows, cols] matrix in `format`.
size_t format_storage_bytes(WeightFormat format, int64_t rows, int64_t cols);
// True for the interleaved X4 layouts.
bool is_interleaved(WeightFormat format);
// Parses a format_name() back; -1 when unknown.
int weight_format_from_name(const char* name);

struct WeightMatrix {
  WeightFormat format = WeightFormat::F32;
  int64_t rows = 0;
  int64_t cols = 0;
  const void* data = nullptr;

  size_t row_bytes() const;  // not meaningful for the X4 layouts (rows are interleaved)
  size_t storage_bytes() const { return format_storage_bytes(format, rows, cols); }
  // Rows [r0, r0 + n) as a matrix of their own (rows stored back to back; not the X4 layouts).
  WeightMatrix row_range(int64_t r0, int64_t n) const {
    return {format, n, cols, static_cast<const std::byte*>(data) + size_t(r0) * row_bytes()};
  }
};

size_t format_row_bytes(WeightFormat format, int64_t cols);
const char* format_name(WeightFormat format);

// Expands row r to f32 (reference path; also used for embedding lookups).
void dequantize_row(const WeightMatrix& w, int64_t r, float* out);

// Reads a small f32/f16/bf16 vector (norm gains, scalars) into f32.
void to_f32(WeightFormat format, const void* data, int64_t n, float* out);

}  // namespace lumen::quant

// Importance matrices ("imatrix"): per weight matrix, the sum over calibration tokens of
// each input column's squared activation, and the number of tokens. The quantizers weight
// a column's error by the mean (quant/quantize.h): an error in column j of W costs the
// layer's output about E[x_j^2] * dw_j^2.
//
// Files use llama.cpp's layouts, so either tool's imatrix works with either quantizer:
//   - GGUF (llama-imatrix's default): general.type = "imatrix", imatrix.datasets (string
//     array), imatrix.chunk_count, imatrix.chunk_size (u32); per matrix NAME two F32
//     tensors, NAME.in_sum2 [ne0, n_mat] (the raw sums) and NAME.counts [1, n_mat];
//   - the legacy .dat: i32 entry count; per entry i32 name length, name, i32 ncall,
//     i32 nval, nval f32 (sums already divided by tokens and multiplied by ncall); then
//     optionally i32 chunk count, i32 length, dataset name.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace lumen::quant {

struct ImatrixEntry {
  std::vector<float> sums;    // n_mat x ne0 sums of squared activations
  std::vector<float> counts;  // tokens per matrix (n_mat values)
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by weight name, e.g. "blk.0.attn_q.weight"
  std::vector<std::string> datasets;
  uint32_t chunk_count = 0;
  uint32_t chunk_size = 0;
};

// Reads either layout. Throws lumen::Error naming the file (and the entry) when it is
// neither, is truncated, or holds sums and counts that do not match or are not finite.
Imatrix read_imatrix(const std::string& path);

// Writes the GGUF layout (temp file + rename).
void write_imatrix(const std::string& path, const Imatrix& imatrix);

// Per-column importance of an entry: sums / count per matrix (1 where a matrix saw no
// tokens, as llama.cpp does).
std::vector<float> imatrix_importance(const ImatrixEntry& entry);

// A tensor an imatrix may hold an entry for: its row length and how many matrices it stacks.
struct ImatrixTensorShape {
  int64_t row_length = 0;
  int64_t matrices = 1;
};
// The importance of every entry of `imatrix` (read from `path`) for a model's tensors (by
// name): imatrix_importance of each entry, matrices x row length values. Every entry must name
// one of `tensors` and hold exactly its shape's values; otherwise lumen::Error naming `path`,
// the entry and `model` (an imatrix of another model).
std::map<std::string, std::vector<float>> imatrix_importance_for(const Imatrix& imatrix, const std::string& path,
                                                                 const std::map<std::string, ImatrixTensorShape>& tensors,
                                                                 const std::string& model);

}  // namespace lumen::quant

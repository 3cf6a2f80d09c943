// Quantizing a model's matrices with `lumen quantize`'s quantizers and llama.cpp's per-tensor
// mixes, wherever the weights come from: `--quant TYPE` at load (runtime/engine.h) and
// `lumen convert --quant TYPE` (a checkpoint to a packed .lmp) both go through here, and
// `lumen quantize` (runtime/quantize_model.h) shares the row quantizer and the imatrix checks.
//
// Each matrix is named as llama.cpp's converter names it in a GGUF ("blk.3.attn_v.weight",
// "token_embd.weight", ...), so the mix (quant/quant_mix.h) chooses the same ggml type for it
// as for the same tensor of a GGUF, and quantize_row_ggml (quant/quantize.h) writes the same
// bytes from the same f32 row: a model loaded with `--quant T [--imatrix F]` holds exactly the
// weights of the GGUF `lumen quantize --type T [--imatrix F]` writes from the same source.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "model/weights.h"
#include "quant/quant_mix.h"
#include "quant/weight_matrix.h"
#include "spec/model_spec.h"

namespace lumen::model {

// A parsed --quant value.
//   - a llama.cpp file type (Q8_0, Q6_K, Q5_K_M, Q5_K_S, Q4_K_M, Q4_K_S, Q4_0, IQ4_XS, ...;
//     case-insensitive), or the short names q4 (= Q4_K_M) and q8 (= Q8_0): the mix's ggml
//     block type per matrix;
//   - f32, bf16, f16 (any case): every matrix converted to that float format (no mix).
struct QuantTarget {
  std::string name;     // the file type's name (Q4_K_M for q4), or F32 / BF16 / F16
  bool mix = false;     // a block file type
  quant::FileType file_type = quant::FileType::Q4_K_M;
  quant::WeightFormat format = quant::WeightFormat::F32;  // when !mix
};
// Throws lumen::Error naming `flag` and listing the valid names for anything else.
QuantTarget parse_quant_target(const std::string& name, const std::string& flag);
// The names parse_quant_target accepts, for help texts.
std::string quant_target_names();

// One weight matrix (or stack of experts) of a model, under two names.
struct NamedWeight {
  std::string gguf_name;        // llama.cpp's: "blk.3.attn_q.weight", "token_embd.weight"
  std::string checkpoint_name;  // the checkpoint's, without its prefix: "layers.3.self_attn.q_proj.weight",
                                // "lm_head.weight"; "" for a GGUF's fused attn_qkv
  quant::WeightMatrix* matrix = nullptr;  // exactly one of matrix, stacked is set
  StackedMatrices* stacked = nullptr;
  LayerWeights* fused_qkv_of = nullptr;   // for a GGUF's fused attn_qkv: the layer whose q/k/v slice it

  quant::WeightFormat format() const { return matrix ? matrix->format : stacked->format; }
  int64_t rows() const { return matrix ? matrix->rows : stacked->rows; }
  int64_t cols() const { return matrix ? matrix->cols : stacked->cols; }
  int64_t count() const { return matrix ? 1 : stacked->count; }  // matrices (experts)
  const void* data() const { return matrix ? matrix->data : stacked->data; }
};

// Every weight matrix of `w` that is present: per layer q, k, v (or the fused qkv), o, gate,
// up, down, the MoE router and experts, the per-layer input gate and projection; then the
// embedding, the output projection when not tied, the per-layer input table and its model
// projection. Pointers into `w`.
std::vector<NamedWeight> named_weights(ModelWeights& w);

// The mix's format for each weight under `target` (a block file type), in the order given:
// what `lumen quantize --type` gives the same tensors. Tensors llama.cpp never quantizes (the
// MoE router, the per-layer model projection) keep their format. `has_imatrix`: an imatrix
// is used (it changes some of llama.cpp's choices).
std::vector<quant::WeightFormat> plan_formats(const spec::ModelSpec& spec, const std::vector<NamedWeight>& weights,
                                              const QuantTarget& target, bool has_imatrix);

// Quantizes n rows of `cols` f32 values into `ggml_type` (quant::quantize_row_ggml, the
// importance weights `importance`: cols values or nullptr), rows spread over the thread pool;
// row i at out + i * ggml_row_bytes. Rethrows the first error.
void quantize_f32_rows(int ggml_type, const float* x, int64_t n, int64_t cols, const float* importance, std::byte* out);
// Rows [r0, r1) of `src` (any readable format) expanded to f32, then quantized into `target` (a
// ggml format, f32/f16/bf16 included) at dst, as quantize_f32_rows does.
void quantize_matrix_rows(const quant::WeightMatrix& src, quant::WeightFormat target, int64_t r0, int64_t r1,
                          const float* importance, std::byte* dst);

// Quantizes every weight of `w` to its planned format under `target` (a block file type),
// with the importance weights of `imatrix_path` ("" for none; `model` names the model in its
// errors). A matrix already in its format is kept as it is (as lumen quantize copies it);
// the new bytes live in w.owned; a tied output projection keeps sharing the embedding. The
// per-layer input table is left as stored (it stays mapped; `lumen convert` quantizes it).
void quantize_weights(ModelWeights& w, const spec::ModelSpec& spec, const QuantTarget& target,
                      const std::string& imatrix_path = "", const std::string& model = "");

}  // namespace lumen::model

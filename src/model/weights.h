// The decoder's weights bound from a tensor source and checked against the spec: every
// tensor present, of a readable dtype and of the exact shape the spec implies.
#pragma once

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "formats/tensor.h"
#include "quant/weight_matrix.h"
#include "spec/model_spec.h"

namespace lumen::formats {
class GgufFile;
}

namespace lumen::model {

// Equally shaped matrices stored back to back (a checkpoint's [experts, out, in] tensor):
// expert e is `rows` x `cols` in `format` at data + e * stride.
struct StackedMatrices {
  quant::WeightFormat format = quant::WeightFormat::F32;
  int64_t count = 0, rows = 0, cols = 0;
  const void* data = nullptr;
  size_t stride = 0;  // bytes per matrix

  quant::WeightMatrix at(int64_t e) const {
    return {format, rows, cols, static_cast<const std::byte*>(data) + size_t(e) * stride};
  }
  size_t storage_bytes() const { return stride * size_t(count); }
};

struct LayerWeights {
  quant::WeightMatrix q_proj, k_proj, v_proj /* empty when k_eq_v or KV-shared */, o_proj;
  // A GGUF's fused attn_qkv (llama.cpp's --fuse-qkv) when the file has one: q_proj, k_proj and
  // v_proj are its row slices (a quantizer treats it as one tensor, as llama.cpp does).
  quant::WeightMatrix qkv;
  quant::WeightMatrix gate_proj, up_proj, down_proj;
  std::vector<float> input_norm, post_attention_norm, pre_ffn_norm, post_ffn_norm;
  std::vector<float> q_norm, k_norm;  // empty: unit gain
  float layer_scalar = 1.0f;
  // Mixture of experts (empty without): the router [experts, hidden] (kept as stored: the
  // top-k choice is discrete), its input gain and per-expert output scales, the experts'
  // fused gate/up [2 * width, hidden] and down [hidden, width] matrices, and the block's norms.
  quant::WeightMatrix router;
  std::vector<float> router_scale, per_expert_scale;
  StackedMatrices expert_gate_up, expert_down;
  std::vector<float> post_ffn_norm_1, pre_ffn_norm_2, post_ffn_norm_2;
  // Per-layer input (empty without): gate [width, hidden], projection [hidden, width], norm.
  quant::WeightMatrix per_layer_gate, per_layer_projection;
  std::vector<float> post_per_layer_norm;
};

struct ModelWeights {
  std::vector<LayerWeights> layers;
  quant::WeightMatrix embed_tokens;  // [vocab, hidden]
  quant::WeightMatrix lm_head;       // the same matrix when embeddings are tied
  std::vector<float> final_norm;
  // Per-layer inputs (empty without): the table [per-layer vocab, layers * width], kept as
  // stored and mapped (rows are gathered per token); the projection of the token embedding
  // [layers * width, hidden] and the norm of each layer's slice.
  quant::WeightMatrix per_layer_table;
  quant::WeightMatrix per_layer_model_projection;
  std::vector<float> per_layer_projection_norm;
  std::string name_prefix;  // "model.language_model." or "model."
  // Copies of tensors whose mapped bytes were not aligned for their element type.
  std::vector<std::vector<std::byte>> owned;
};

// Looks a tensor up by its full name; nullptr when absent.
using TensorLookup = std::function<const formats::TensorView*(const std::string&)>;

// `all_names`: every tensor name of the source (to detect tensors the spec does not
// expect). `source` names the checkpoint in errors. Throws lumen::Error with one line
// naming the file and tensor on any mismatch.
// `requantize`: convert every projection matrix, the experts and the embedding to this format
// at load (quant/convert.h: the float formats; model/quantize_weights.h quantizes); norms and scalars stay f32 whatever it is, and the router and
// the per-layer input table keep their stored format (the table is billions of values that
// stay mapped: `lumen convert` stores it quantized).
ModelWeights bind_weights(const spec::ModelSpec& spec, const TensorLookup& lookup,
                          const std::vector<std::string>& all_names, const std::string& source,
                          std::optional<quant::WeightFormat> requantize = std::nullopt);

// Moves every ggml Q4_0 / Q8_0 matrix (e.g. from a GGUF file: Google's Q4_0 checkpoints) into
// the int8 kernels' interleaved layout (Q4_0X4 / Q8_0X4), 1:1 without requantizing; the copies
// live in `owned`. A tied output projection keeps sharing the embedding's copy.
void repack_for_int8_kernels(ModelWeights& weights);

// Converts every projection matrix and the embedding (and the output projection) to `target`
// (quant/convert.h: f32, f16, bf16, or the X4 layouts) from whatever format they were bound
// in, e.g. a GGUF model's ggml blocks. Matrices already in `target` are left as they are.
void requantize_weights(ModelWeights& weights, quant::WeightFormat target);

// The same from a GGUF file (llama.cpp's tensor names: token_embd, blk.N.attn_q, ...).
// Matrices stay in the file's ggml block format; norm gains are read into f32. Throws
// lumen::Error with one line naming the file and tensor on a missing tensor, a wrong shape,
// an unsupported type, or a tensor the spec does not account for.
ModelWeights bind_gguf_weights(const spec::ModelSpec& spec, const formats::GgufFile& file);

}  // namespace lumen::model

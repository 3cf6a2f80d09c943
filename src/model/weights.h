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

struct LayerWeights {
  quant::WeightMatrix q_proj, k_proj, v_proj /* empty when k_eq_v */, o_proj;
  quant::WeightMatrix gate_proj, up_proj, down_proj;
  std::vector<float> input_norm, post_attention_norm, pre_ffn_norm, post_ffn_norm;
  std::vector<float> q_norm, k_norm;  // empty: unit gain
  float layer_scalar = 1.0f;
};

struct ModelWeights {
  std::vector<LayerWeights> layers;
  quant::WeightMatrix embed_tokens;  // [vocab, hidden]
  quant::WeightMatrix lm_head;       // the same matrix when embeddings are tied
  std::vector<float> final_norm;
  std::string name_prefix;  // "model.language_model." or "model."
  // Copies of tensors whose mapped bytes were not aligned for their element type.
  std::vector<std::vector<std::byte>> owned;
};

// Looks a tensor up by its full name; nullptr when absent.
using TensorLookup = std::function<const formats::TensorView*(const std::string&)>;

// `all_names`: every tensor name of the source (to detect tensors the spec does not
// expect). `source` names the checkpoint in errors. Throws lumen::Error with one line
// naming the file and tensor on any mismatch.
// `requantize`: convert every projection matrix and the embedding to this format at load
// (quant/convert.h); norms and scalars stay f32 whatever it is.
ModelWeights bind_weights(const spec::ModelSpec& spec, const TensorLookup& lookup,
                          const std::vector<std::string>& all_names, const std::string& source,
                          std::optional<quant::WeightFormat> requantize = std::nullopt);

// Moves every ggml Q4_0 / Q8_0 matrix (e.g. from a GGUF file: Google's Q4_0 checkpoints) into
// the int8 kernels' interleaved layout (Q4_0X4 / Q8_0X4), 1:1 without requantizing; the copies
// live in `owned`. A tied output projection keeps sharing the embedding's copy.
void repack_for_int8_kernels(ModelWeights& weights);

// Converts every projection matrix and the embedding (and the output projection) to `target`
// (quant/convert.h: q4 = Q4_0X4, q8 = Q8_0X4, bf16, f32) from whatever format they were bound
// in, e.g. a GGUF model's ggml blocks. Matrices already in `target` are left as they are.
void requantize_weights(ModelWeights& weights, quant::WeightFormat target);

// The same from a GGUF file (llama.cpp's tensor names: token_embd, blk.N.attn_q, ...).
// Matrices stay in the file's ggml block format; norm gains are read into f32. Throws
// lumen::Error with one line naming the file and tensor on a missing tensor, a wrong shape,
// an unsupported type, or a tensor the spec does not account for.
ModelWeights bind_gguf_weights(const spec::ModelSpec& spec, const formats::GgufFile& file);

}  // namespace lumen::model

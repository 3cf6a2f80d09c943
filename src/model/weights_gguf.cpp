// Binding of a GGUF file's tensors (llama.cpp's names) to the decoder's weights.
#include <set>
#include <string>
#include <string_view>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/tensor.h"
#include "model/weights.h"
#include "quant/ggml_blocks.h"

namespace lumen::model {
namespace {

class GgufBinder {
 public:
  explicit GgufBinder(const formats::GgufFile& file) : file_(file) {}

  const formats::GgufTensor& get(const std::string& name, const std::vector<int64_t>& shape) {
    const formats::GgufTensor* t = file_.find(name);
    if (!t)
      throw Error(file_.path() + ": missing tensor '" + name + "' (the model spec needs shape " +
                  formats::shape_to_string(shape) + ")");
    if (t->shape != shape)
      throw Error(file_.path() + ": tensor '" + name + "' has shape " + formats::shape_to_string(t->shape) +
                  " but the model spec needs " + formats::shape_to_string(shape));
    used_.insert(name);
    return *t;
  }

  quant::WeightMatrix matrix(const std::string& name, int64_t rows, int64_t cols) {
    const formats::GgufTensor& t = get(name, {rows, cols});
    const int format = quant::weight_format_from_ggml(int(t.type));
    if (format < 0)
      throw Error(file_.path() + ": tensor '" + name + "' has type " + formats::ggml_type_name(t.type) +
                  "; Lumen reads weight matrices of type " + quant::ggml_matrix_type_list());
    quant::WeightMatrix m;
    m.format = quant::WeightFormat(format);
    m.rows = rows;
    m.cols = cols;
    m.data = t.data;
    if (m.row_bytes() * size_t(rows) != t.nbytes)
      throw Error(file_.path() + ": tensor '" + name + "' holds " + std::to_string(t.nbytes) +
                  " bytes, not the " + std::to_string(m.row_bytes() * size_t(rows)) + " its shape needs");
    return m;
  }

  // Norm gains: F32 (as llama.cpp writes them), F16 or BF16.
  std::vector<float> vector(const std::string& name, int64_t n) {
    const formats::GgufTensor& t = get(name, {n});
    quant::WeightFormat format;
    switch (t.type) {
      case formats::GgmlType::F32: format = quant::WeightFormat::F32; break;
      case formats::GgmlType::F16: format = quant::WeightFormat::F16; break;
      case formats::GgmlType::BF16: format = quant::WeightFormat::BF16; break;
      default:
        throw Error(file_.path() + ": tensor '" + name + "' has type " + formats::ggml_type_name(t.type) +
                    "; Lumen reads norm weights of type F32, F16 or BF16");
    }
    std::vector<float> v(static_cast<size_t>(n));
    quant::to_f32(format, t.data, n, v.data());
    return v;
  }

  const std::set<std::string>& used() const { return used_; }

 private:
  const formats::GgufFile& file_;
  std::set<std::string> used_;
};

// Rows [r0, r0 + n) of a matrix whose rows are stored back to back.
quant::WeightMatrix row_slice(const quant::WeightMatrix& m, int64_t r0, int64_t n) {
  quant::WeightMatrix out = m;
  out.rows = n;
  out.data = static_cast<const std::byte*>(m.data) + size_t(r0) * m.row_bytes();
  return out;
}

// Tensors of Gemma 4 features the graph does not run yet (llama.cpp's names), so that a file
// whose metadata does not announce them is still refused by what they are.
const char* unimplemented_feature(std::string_view name) {
  auto ends_with = [&](std::string_view suffix) {
    return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
  };
  if (name.rfind("per_layer_", 0) == 0 || ends_with(".inp_gate.weight") || ends_with(".proj.weight") ||
      ends_with(".post_norm.weight"))
    return "per-layer input embeddings (Gemma 4 E2B/E4B)";
  if (name.find("_exps.") != std::string_view::npos || name.find(".ffn_gate_inp.") != std::string_view::npos ||
      ends_with(".pre_ffw_norm_2.weight") || ends_with(".post_ffw_norm_1.weight") || ends_with(".post_ffw_norm_2.weight"))
    return "mixture-of-experts blocks (Gemma 4 26B-A4B)";
  return nullptr;
}

}  // namespace

ModelWeights bind_gguf_weights(const spec::ModelSpec& spec, const formats::GgufFile& file) {
  ModelWeights w;
  GgufBinder bind(file);
  const int64_t H = spec.hidden_size;
  for (int l = 0; l < spec.num_layers(); ++l) {
    const spec::LayerSpec& ls = spec.layers[size_t(l)];
    const std::string p = "blk." + std::to_string(l) + ".";
    const int64_t q_dim = int64_t(ls.num_q_heads) * ls.head_dim;
    const int64_t kv_dim = int64_t(ls.num_kv_heads) * ls.head_dim;
    LayerWeights lw;
    lw.input_norm = bind.vector(p + "attn_norm.weight", H);
    if (!ls.k_eq_v && file.find(p + "attn_qkv.weight")) {
      // llama.cpp's fused projection (convert_hf_to_gguf.py --fuse-qkv): rows q, then k, then v.
      lw.qkv = bind.matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, H);
      lw.q_proj = row_slice(lw.qkv, 0, q_dim);
      lw.k_proj = row_slice(lw.qkv, q_dim, kv_dim);
      lw.v_proj = row_slice(lw.qkv, q_dim + kv_dim, kv_dim);
    } else {
      lw.q_proj = bind.matrix(p + "attn_q.weight", q_dim, H);
      lw.k_proj = bind.matrix(p + "attn_k.weight", kv_dim, H);
      if (!ls.k_eq_v) lw.v_proj = bind.matrix(p + "attn_v.weight", kv_dim, H);
    }
    lw.o_proj = bind.matrix(p + "attn_output.weight", H, q_dim);
    if (ls.q_norm && ls.q_norm_weight) lw.q_norm = bind.vector(p + "attn_q_norm.weight", ls.head_dim);
    if (ls.k_norm && ls.k_norm_weight) lw.k_norm = bind.vector(p + "attn_k_norm.weight", ls.head_dim);
    if (spec.post_attention_norm) lw.post_attention_norm = bind.vector(p + "post_attention_norm.weight", H);
    if (spec.pre_ffn_norm) lw.pre_ffn_norm = bind.vector(p + "ffn_norm.weight", H);
    if (spec.post_ffn_norm) lw.post_ffn_norm = bind.vector(p + "post_ffw_norm.weight", H);
    lw.gate_proj = bind.matrix(p + "ffn_gate.weight", ls.ffn_dim, H);
    lw.up_proj = bind.matrix(p + "ffn_up.weight", ls.ffn_dim, H);
    lw.down_proj = bind.matrix(p + "ffn_down.weight", H, ls.ffn_dim);
    lw.layer_scalar =
        ls.has_layer_scalar ? bind.vector(p + "layer_output_scale.weight", 1)[0] : ls.missing_layer_scalar;
    w.layers.push_back(std::move(lw));
  }
  w.embed_tokens = bind.matrix("token_embd.weight", spec.vocab_size, H);
  w.final_norm = bind.vector("output_norm.weight", H);
  w.lm_head = spec.tie_embeddings ? w.embed_tokens : bind.matrix("output.weight", spec.vocab_size, H);
  // Gemma 4's full layers take their RoPE factors from rope_freqs (the spec has read them).
  for (const spec::LayerSpec& ls : spec.layers) {
    if (spec.family == "gemma4" && ls.kind == spec::AttentionKind::Full) {
      bind.get("rope_freqs.weight", {ls.head_dim / 2});
      break;
    }
  }

  // A tensor the spec does not account for means the metadata and the tensors disagree
  // (e.g. more blocks than block_count): refuse rather than ignore.
  for (const formats::GgufTensor& t : file.tensors()) {
    if (bind.used().count(t.name)) continue;
    if (const char* feature = unimplemented_feature(t.name))
      throw Error(file.path() + ": tensor '" + printable(t.name) + "' belongs to " + feature +
                  ", which Lumen does not run yet");
    throw Error(file.path() + ": tensor '" + printable(t.name) + "' is not part of the model the metadata describes");
  }
  return w;
}

}  // namespace lumen::model

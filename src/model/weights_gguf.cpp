// Binding of a GGUF file's tensors (llama.cpp's names) to the decoder's weights.
#include <cstring>
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

  // A [count, rows, cols] tensor of equally shaped matrices stored back to back (llama.cpp's
  // expert stacks: ggml ne [cols, rows, count]).
  StackedMatrices stacked(const std::string& name, int64_t count, int64_t rows, int64_t cols) {
    const formats::GgufTensor& t = get(name, {count, rows, cols});
    const int format = quant::weight_format_from_ggml(int(t.type));
    if (format < 0)
      throw Error(file_.path() + ": tensor '" + name + "' has type " + formats::ggml_type_name(t.type) +
                  "; Lumen reads expert matrices of type " + quant::ggml_matrix_type_list());
    StackedMatrices s;
    s.format = quant::WeightFormat(format);
    s.count = count;
    s.rows = rows;
    s.cols = cols;
    s.data = t.data;
    s.stride = quant::format_storage_bytes(s.format, rows, cols);
    if (s.storage_bytes() != t.nbytes)
      throw Error(file_.path() + ": tensor '" + name + "' holds " + std::to_string(t.nbytes) + " bytes, not the " +
                  std::to_string(s.storage_bytes()) + " its shape needs");
    return s;
  }

  const std::set<std::string>& used() const { return used_; }

 private:
  const formats::GgufFile& file_;
  std::set<std::string> used_;
};

// The experts' gate and up projections as one [experts, 2 * width, hidden] stack (gate rows,
// then up rows, per expert), as the graph runs them: the converter's fused
// `ffn_gate_up_exps`, or llama.cpp's separate `ffn_gate_exps` / `ffn_up_exps` copied together
// (rows of a ggml type are independent, so the bytes concatenate whatever the type).
StackedMatrices expert_gate_up(GgufBinder& bind, const formats::GgufFile& file, ModelWeights& w, const std::string& p,
                               int64_t experts, int64_t width, int64_t hidden) {
  if (file.find(p + "ffn_gate_up_exps.weight") || !file.find(p + "ffn_gate_exps.weight"))
    return bind.stacked(p + "ffn_gate_up_exps.weight", experts, 2 * width, hidden);
  const StackedMatrices gate = bind.stacked(p + "ffn_gate_exps.weight", experts, width, hidden);
  const StackedMatrices up = bind.stacked(p + "ffn_up_exps.weight", experts, width, hidden);
  if (gate.format != up.format)
    throw Error(file.path() + ": tensors '" + p + "ffn_gate_exps.weight' and '" + p + "ffn_up_exps.weight' are " +
                quant::format_name(gate.format) + " and " + quant::format_name(up.format) +
                "; Lumen runs an expert's gate and up projections in one type");
  StackedMatrices fused = gate;
  fused.rows = 2 * width;
  fused.stride = 2 * gate.stride;
  auto& buf = w.owned.emplace_back(fused.storage_bytes());
  for (int64_t e = 0; e < experts; ++e) {
    std::memcpy(buf.data() + size_t(e) * fused.stride, gate.at(e).data, gate.stride);
    std::memcpy(buf.data() + size_t(e) * fused.stride + gate.stride, up.at(e).data, up.stride);
  }
  fused.data = buf.data();
  return fused;
}

bool ends_with(std::string_view name, std::string_view suffix) {
  return name.size() >= suffix.size() && name.substr(name.size() - suffix.size()) == suffix;
}

// The block index of a "blk.N.*" name, -1 otherwise.
int block_of(std::string_view name) {
  if (name.rfind("blk.", 0) != 0) return -1;
  int n = 0;
  size_t i = 4;
  if (i >= name.size() || name[i] < '0' || name[i] > '9') return -1;
  for (; i < name.size() && name[i] >= '0' && name[i] <= '9' && n < (1 << 20); ++i) n = n * 10 + (name[i] - '0');
  return i < name.size() && name[i] == '.' ? n : -1;
}

// Why a tensor the spec does not use cannot be part of the model, for the tensors of Gemma 4
// features (llama.cpp's names) the metadata or the block does not announce; empty otherwise.
std::string unused_reason(const spec::ModelSpec& spec, std::string_view name) {
  if (name.rfind("per_layer_", 0) == 0 || ends_with(name, ".inp_gate.weight") || ends_with(name, ".proj.weight") ||
      ends_with(name, ".post_norm.weight")) {
    if (!spec.has_per_layer_inputs())
      return "belongs to per-layer input embeddings (Gemma 4 E2B/E4B), which the metadata does not announce "
             "(gemma4.embedding_length_per_layer_input is 0)";
  }
  const int b = block_of(name);
  if (b < 0 || b >= spec.num_layers()) return {};
  const spec::LayerSpec& l = spec.layers[size_t(b)];
  if (name.find("_exps.") != std::string_view::npos || ends_with(name, ".ffn_gate_inp.scale") ||
      ends_with(name, ".pre_ffw_norm_2.weight") || ends_with(name, ".post_ffw_norm_1.weight") ||
      ends_with(name, ".post_ffw_norm_2.weight")) {
    if (!l.moe())
      return "belongs to a mixture-of-experts block (Gemma 4 26B-A4B), but block " + std::to_string(b) +
             " has no router ('blk." + std::to_string(b) + ".ffn_gate_inp.weight')";
  }
  if (!l.stores_kv() && (ends_with(name, ".attn_k.weight") || ends_with(name, ".attn_v.weight") ||
                         ends_with(name, ".attn_k_norm.weight") || ends_with(name, ".attn_qkv.weight")))
    return "is a key/value tensor of a KV-shared block (gemma4.attention.shared_kv_layers): block " +
           std::to_string(b) + " reads the keys and values of block " + std::to_string(l.kv_source);
  return {};
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
    if (!ls.stores_kv()) {
      // KV-shared: the query only; keys and values are another block's.
      lw.q_proj = bind.matrix(p + "attn_q.weight", q_dim, H);
    } else if (!ls.k_eq_v && file.find(p + "attn_qkv.weight")) {
      // llama.cpp's fused projection (convert_hf_to_gguf.py --fuse-qkv): rows q, then k, then v.
      lw.qkv = bind.matrix(p + "attn_qkv.weight", q_dim + 2 * kv_dim, H);
      lw.q_proj = lw.qkv.row_range(0, q_dim);
      lw.k_proj = lw.qkv.row_range(q_dim, kv_dim);
      lw.v_proj = lw.qkv.row_range(q_dim + kv_dim, kv_dim);
    } else {
      lw.q_proj = bind.matrix(p + "attn_q.weight", q_dim, H);
      lw.k_proj = bind.matrix(p + "attn_k.weight", kv_dim, H);
      if (!ls.k_eq_v) lw.v_proj = bind.matrix(p + "attn_v.weight", kv_dim, H);
    }
    lw.o_proj = bind.matrix(p + "attn_output.weight", H, q_dim);
    if (ls.q_norm && ls.q_norm_weight) lw.q_norm = bind.vector(p + "attn_q_norm.weight", ls.head_dim);
    if (ls.stores_kv() && ls.k_norm && ls.k_norm_weight) lw.k_norm = bind.vector(p + "attn_k_norm.weight", ls.head_dim);
    if (spec.post_attention_norm) lw.post_attention_norm = bind.vector(p + "post_attention_norm.weight", H);
    if (spec.pre_ffn_norm) lw.pre_ffn_norm = bind.vector(p + "ffn_norm.weight", H);
    if (spec.post_ffn_norm) lw.post_ffn_norm = bind.vector(p + "post_ffw_norm.weight", H);
    lw.gate_proj = bind.matrix(p + "ffn_gate.weight", ls.ffn_dim, H);
    lw.up_proj = bind.matrix(p + "ffn_up.weight", ls.ffn_dim, H);
    lw.down_proj = bind.matrix(p + "ffn_down.weight", H, ls.ffn_dim);
    if (ls.moe()) {
      // llama.cpp's names (converter: router.proj -> ffn_gate_inp, router.scale ->
      // ffn_gate_inp.scale, router.per_expert_scale -> ffn_down_exps.scale).
      const int64_t E = ls.num_experts, W = ls.expert_ffn_dim;
      lw.router = bind.matrix(p + "ffn_gate_inp.weight", E, H);
      lw.router_scale = bind.vector(p + "ffn_gate_inp.scale", H);
      lw.per_expert_scale = bind.vector(p + "ffn_down_exps.scale", E);
      lw.expert_gate_up = expert_gate_up(bind, file, w, p, E, W, H);
      lw.expert_down = bind.stacked(p + "ffn_down_exps.weight", E, H, W);
      lw.post_ffn_norm_1 = bind.vector(p + "post_ffw_norm_1.weight", H);
      lw.pre_ffn_norm_2 = bind.vector(p + "pre_ffw_norm_2.weight", H);
      lw.post_ffn_norm_2 = bind.vector(p + "post_ffw_norm_2.weight", H);
    }
    if (spec.has_per_layer_inputs()) {
      const int64_t P = spec.per_layer_input_dim;
      lw.per_layer_gate = bind.matrix(p + "inp_gate.weight", P, H);
      lw.per_layer_projection = bind.matrix(p + "proj.weight", H, P);
      lw.post_per_layer_norm = bind.vector(p + "post_norm.weight", H);
    }
    lw.layer_scalar =
        ls.has_layer_scalar ? bind.vector(p + "layer_output_scale.weight", 1)[0] : ls.missing_layer_scalar;
    w.layers.push_back(std::move(lw));
  }
  w.embed_tokens = bind.matrix("token_embd.weight", spec.vocab_size, H);
  w.final_norm = bind.vector("output_norm.weight", H);
  if (spec.has_per_layer_inputs()) {
    // The table stays as stored and mapped (rows are gathered per token).
    const int64_t width = int64_t(spec.num_layers()) * spec.per_layer_input_dim;
    w.per_layer_table = bind.matrix("per_layer_token_embd.weight", spec.per_layer_vocab, width);
    w.per_layer_model_projection = bind.matrix("per_layer_model_proj.weight", width, H);
    w.per_layer_projection_norm = bind.vector("per_layer_proj_norm.weight", spec.per_layer_input_dim);
  }
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
    if (const std::string why = unused_reason(spec, t.name); !why.empty())
      throw Error(file.path() + ": tensor '" + printable(t.name) + "' " + why);
    throw Error(file.path() + ": tensor '" + printable(t.name) + "' is not part of the model the metadata describes");
  }
  return w;
}

}  // namespace lumen::model

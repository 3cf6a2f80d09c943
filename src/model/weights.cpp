#include "model/weights.h"

#include <cstring>
#include <map>
#include <set>

#include "base/error.h"
#include "quant/convert.h"

namespace lumen::model {
namespace {

quant::WeightFormat weight_format(const formats::TensorView& t) {
  if (!t.storage_format.empty()) {
    const int f = quant::weight_format_from_name(t.storage_format.c_str());
    if (f < 0)
      throw Error(t.file + ": tensor '" + t.name + "' has storage format " + in_quotes(t.storage_format) +
                  ", which this lumen does not know");
    return quant::WeightFormat(f);
  }
  switch (t.dtype) {
    case DType::F32: return quant::WeightFormat::F32;
    case DType::F16: return quant::WeightFormat::F16;
    case DType::BF16: return quant::WeightFormat::BF16;
    default:
      throw Error(t.file + ": tensor '" + t.name + "' has dtype " + std::string(dtype_name(t.dtype)) +
                  "; Lumen reads BF16, F16 or F32 weights");
  }
}

class Binder {
 public:
  Binder(const TensorLookup& lookup, std::string prefix, std::string source, ModelWeights& out,
         std::optional<quant::WeightFormat> target)
      : lookup_(lookup), prefix_(std::move(prefix)), source_(std::move(source)), out_(out), target_(target) {}

  const formats::TensorView& get(const std::string& short_name, const std::vector<int64_t>& shape,
                                 bool prefixed = true) {
    const std::string name = prefixed ? prefix_ + short_name : short_name;
    const formats::TensorView* t = lookup_(name);
    if (!t)
      throw Error(source_ + ": missing tensor '" + name + "' (the model spec needs shape " +
                  formats::shape_to_string(shape) + ")");
    weight_format(*t);
    if (t->shape != shape)
      throw Error(t->file + ": tensor '" + name + "' has shape " + formats::shape_to_string(t->shape) +
                  " but the model spec needs " + formats::shape_to_string(shape));
    used_.insert(name);
    return *t;
  }

  // `requantizable`: false keeps the stored format whatever the load target (router, table).
  quant::WeightMatrix matrix(const std::string& short_name, int64_t rows, int64_t cols, bool prefixed = true,
                             bool requantizable = true) {
    const auto& t = get(short_name, {rows, cols}, prefixed);
    quant::WeightMatrix m;
    m.format = weight_format(t);
    m.rows = rows;
    m.cols = cols;
    m.data = aligned_data(t);
    check_bytes(t, m.storage_bytes());
    if (requantizable) requantize(m);
    return m;
  }

  // A [count, rows, cols] tensor of equally shaped matrices stored back to back.
  StackedMatrices stacked(const std::string& short_name, int64_t count, int64_t rows, int64_t cols) {
    const auto& t = get(short_name, {count, rows, cols});
    StackedMatrices s;
    s.format = weight_format(t);
    s.count = count;
    s.rows = rows;
    s.cols = cols;
    s.data = aligned_data(t);
    s.stride = quant::format_storage_bytes(s.format, rows, cols);
    check_bytes(t, s.storage_bytes());
    if (target_ && *target_ != s.format) {
      const size_t stride = quant::format_storage_bytes(*target_, rows, cols);
      auto& buf = out_.owned.emplace_back(stride * size_t(count));
      for (int64_t e = 0; e < count; ++e) quant::convert_rows(s.at(e), *target_, 0, rows, buf.data() + size_t(e) * stride);
      s.format = *target_;
      s.data = buf.data();
      s.stride = stride;
    }
    return s;
  }

  std::vector<float> vector(const std::string& short_name, int64_t n) {
    const auto& t = get(short_name, {n});
    std::vector<float> v(static_cast<size_t>(n));
    quant::to_f32(weight_format(t), aligned_data(t), n, v.data());
    return v;
  }

  const std::set<std::string>& used() const { return used_; }

 private:
  static void check_bytes(const formats::TensorView& t, size_t need) {
    if (need != t.nbytes)
      throw Error(t.file + ": tensor '" + t.name + "' holds " + std::to_string(t.nbytes) + " bytes but its " +
                  (t.storage_format.empty() ? std::string(dtype_name(t.dtype)) : t.storage_format) + " " +
                  formats::shape_to_string(t.shape) + " needs " + std::to_string(need));
  }

  void requantize(quant::WeightMatrix& m) {
    if (!target_ || *target_ == m.format) return;
    // Quantize at load: the result lives in `owned` (vectors keep their buffers when moved).
    auto& buf = out_.owned.emplace_back(quant::format_storage_bytes(*target_, m.rows, m.cols));
    quant::convert_rows(m, *target_, 0, m.rows, buf.data());
    m.format = *target_;
    m.data = buf.data();
  }

  // Mapped tensors are normally aligned; copy the rare one that is not, so kernels may
  // load elements directly.
  const void* aligned_data(const formats::TensorView& t) {
    const size_t align = dtype_size(t.dtype);
    if (reinterpret_cast<uintptr_t>(t.data) % align == 0) return t.data;
    auto& copy = out_.owned.emplace_back(t.nbytes + 8);
    std::byte* p = copy.data();
    while (reinterpret_cast<uintptr_t>(p) % 8) ++p;
    std::memcpy(p, t.data, t.nbytes);
    return p;
  }

  const TensorLookup& lookup_;
  std::string prefix_;
  std::string source_;
  ModelWeights& out_;
  std::optional<quant::WeightFormat> target_;
  std::set<std::string> used_;
};

std::string detect_prefix(const TensorLookup& lookup, const std::string& source) {
  for (const char* prefix : {"model.language_model.", "model."})
    if (lookup(std::string(prefix) + "embed_tokens.weight")) return prefix;
  throw Error(source + ": missing tensor 'model.embed_tokens.weight' (nor 'model.language_model.embed_tokens.weight')");
}

}  // namespace

ModelWeights bind_weights(const spec::ModelSpec& spec, const TensorLookup& lookup,
                          const std::vector<std::string>& all_names, const std::string& source,
                          std::optional<quant::WeightFormat> requantize) {
  ModelWeights w;
  w.name_prefix = detect_prefix(lookup, source);
  Binder bind(lookup, w.name_prefix, source, w, requantize);
  const int64_t H = spec.hidden_size;

  for (int l = 0; l < spec.num_layers(); ++l) {
    const spec::LayerSpec& ls = spec.layers[size_t(l)];
    const std::string p = "layers." + std::to_string(l) + ".";
    const int64_t q_dim = int64_t(ls.num_q_heads) * ls.head_dim;
    const int64_t kv_dim = int64_t(ls.num_kv_heads) * ls.head_dim;
    LayerWeights lw;
    lw.input_norm = bind.vector(p + "input_layernorm.weight", H);
    lw.q_proj = bind.matrix(p + "self_attn.q_proj.weight", q_dim, H);
    if (ls.stores_kv()) {
      lw.k_proj = bind.matrix(p + "self_attn.k_proj.weight", kv_dim, H);
      if (!ls.k_eq_v) lw.v_proj = bind.matrix(p + "self_attn.v_proj.weight", kv_dim, H);
    }
    lw.o_proj = bind.matrix(p + "self_attn.o_proj.weight", H, q_dim);
    if (ls.q_norm && ls.q_norm_weight) lw.q_norm = bind.vector(p + "self_attn.q_norm.weight", ls.head_dim);
    if (ls.k_norm && ls.k_norm_weight) lw.k_norm = bind.vector(p + "self_attn.k_norm.weight", ls.head_dim);
    if (spec.post_attention_norm) lw.post_attention_norm = bind.vector(p + "post_attention_layernorm.weight", H);
    if (spec.pre_ffn_norm) lw.pre_ffn_norm = bind.vector(p + "pre_feedforward_layernorm.weight", H);
    if (spec.post_ffn_norm) lw.post_ffn_norm = bind.vector(p + "post_feedforward_layernorm.weight", H);
    lw.gate_proj = bind.matrix(p + "mlp.gate_proj.weight", ls.ffn_dim, H);
    lw.up_proj = bind.matrix(p + "mlp.up_proj.weight", ls.ffn_dim, H);
    lw.down_proj = bind.matrix(p + "mlp.down_proj.weight", H, ls.ffn_dim);
    if (ls.moe()) {
      const int64_t E = ls.num_experts, W = ls.expert_ffn_dim;
      lw.router = bind.matrix(p + "router.proj.weight", E, H, true, false);
      lw.router_scale = bind.vector(p + "router.scale", H);
      lw.per_expert_scale = bind.vector(p + "router.per_expert_scale", E);
      lw.expert_gate_up = bind.stacked(p + "experts.gate_up_proj", E, 2 * W, H);
      lw.expert_down = bind.stacked(p + "experts.down_proj", E, H, W);
      lw.post_ffn_norm_1 = bind.vector(p + "post_feedforward_layernorm_1.weight", H);
      lw.pre_ffn_norm_2 = bind.vector(p + "pre_feedforward_layernorm_2.weight", H);
      lw.post_ffn_norm_2 = bind.vector(p + "post_feedforward_layernorm_2.weight", H);
    }
    if (spec.has_per_layer_inputs()) {
      const int64_t P = spec.per_layer_input_dim;
      lw.per_layer_gate = bind.matrix(p + "per_layer_input_gate.weight", P, H);
      lw.per_layer_projection = bind.matrix(p + "per_layer_projection.weight", H, P);
      lw.post_per_layer_norm = bind.vector(p + "post_per_layer_input_norm.weight", H);
    }
    lw.layer_scalar = ls.has_layer_scalar ? bind.vector(p + "layer_scalar", 1)[0] : ls.missing_layer_scalar;
    w.layers.push_back(std::move(lw));
  }
  w.embed_tokens = bind.matrix("embed_tokens.weight", spec.vocab_size, H);
  w.final_norm = bind.vector("norm.weight", H);
  if (spec.has_per_layer_inputs()) {
    const int64_t width = int64_t(spec.num_layers()) * spec.per_layer_input_dim;
    w.per_layer_table = bind.matrix("embed_tokens_per_layer.weight", spec.per_layer_vocab, width, true, false);
    w.per_layer_model_projection = bind.matrix("per_layer_model_projection.weight", width, H);
    w.per_layer_projection_norm = bind.vector("per_layer_projection_norm.weight", spec.per_layer_input_dim);
  }
  w.lm_head = spec.tie_embeddings ? w.embed_tokens : bind.matrix("lm_head.weight", spec.vocab_size, H, false);

  // A decoder tensor the spec does not account for means the spec and the checkpoint
  // disagree (e.g. a v_proj on a layer the config declares K=V, a k_proj on a KV-shared
  // layer, a per-layer input table the config does not declare): refuse rather than ignore.
  const std::string layers_prefix = w.name_prefix + "layers.";
  for (const std::string& name : all_names) {
    const bool decoder = name.rfind(layers_prefix, 0) == 0 ||
                         name.rfind(w.name_prefix + "embed_tokens_per_layer", 0) == 0 ||
                         name.rfind(w.name_prefix + "per_layer_", 0) == 0;
    if (decoder && !bind.used().count(name))
      throw Error(source + ": tensor '" + name + "' is not part of the model the config describes");
  }
  return w;
}

namespace {

// The X4 layout of a ggml Q4_0 / Q8_0 format (the same blocks, interleaved); the format itself otherwise.
quant::WeightFormat repack_target(quant::WeightFormat f) {
  if (f == quant::WeightFormat::Q4_0) return quant::WeightFormat::Q4_0X4;
  if (f == quant::WeightFormat::Q8_0) return quant::WeightFormat::Q8_0X4;
  return f;
}

void convert_stacked(ModelWeights& w, StackedMatrices& s, quant::WeightFormat target) {
  if (!s.data || s.format == target) return;
  const size_t stride = quant::format_storage_bytes(target, s.rows, s.cols);
  auto& buf = w.owned.emplace_back(stride * size_t(s.count));
  for (int64_t e = 0; e < s.count; ++e) quant::convert_rows(s.at(e), target, 0, s.rows, buf.data() + size_t(e) * stride);
  s.format = target;
  s.data = buf.data();
  s.stride = stride;
}

}  // namespace

void repack_for_int8_kernels(ModelWeights& w) {
  auto repack = [&](quant::WeightMatrix& m) {
    quant::WeightFormat target;
    if (m.format == quant::WeightFormat::Q4_0) target = quant::WeightFormat::Q4_0X4;
    else if (m.format == quant::WeightFormat::Q8_0) target = quant::WeightFormat::Q8_0X4;
    else return;
    auto& buf = w.owned.emplace_back(quant::format_storage_bytes(target, m.rows, m.cols));
    quant::convert_rows(m, target, 0, m.rows, buf.data());
    m.format = target;
    m.data = buf.data();
  };
  const bool tied = w.lm_head.data == w.embed_tokens.data;
  for (auto& l : w.layers) {
    for (auto* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
                    &l.per_layer_gate, &l.per_layer_projection})
      if (m->data) repack(*m);
    for (auto* s : {&l.expert_gate_up, &l.expert_down}) convert_stacked(w, *s, repack_target(s->format));
  }
  if (w.per_layer_model_projection.data) repack(w.per_layer_model_projection);
  repack(w.embed_tokens);
  if (tied) w.lm_head = w.embed_tokens;
  else repack(w.lm_head);
}

void requantize_weights(ModelWeights& w, quant::WeightFormat target) {
  auto convert = [&](quant::WeightMatrix& m) {
    if (!m.data || m.format == target) return;
    auto& buf = w.owned.emplace_back(quant::format_storage_bytes(target, m.rows, m.cols));
    quant::convert_rows(m, target, 0, m.rows, buf.data());
    m.format = target;
    m.data = buf.data();
  };
  const bool tied = w.lm_head.data == w.embed_tokens.data;
  for (auto& l : w.layers) {
    for (auto* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj,
                    &l.per_layer_gate, &l.per_layer_projection})
      convert(*m);
    for (auto* s : {&l.expert_gate_up, &l.expert_down}) convert_stacked(w, *s, target);
    if (l.qkv.data && l.q_proj.data != l.qkv.data) l.qkv = {};  // q, k, v are no longer its slices
  }
  convert(w.per_layer_model_projection);
  convert(w.embed_tokens);
  if (tied) w.lm_head = w.embed_tokens;
  else convert(w.lm_head);
}

}  // namespace lumen::model

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

  quant::WeightMatrix matrix(const std::string& short_name, int64_t rows, int64_t cols, bool prefixed = true) {
    const auto& t = get(short_name, {rows, cols}, prefixed);
    quant::WeightMatrix m;
    m.format = weight_format(t);
    m.rows = rows;
    m.cols = cols;
    m.data = aligned_data(t);
    if (m.storage_bytes() != t.nbytes)
      throw Error(t.file + ": tensor '" + t.name + "' holds " + std::to_string(t.nbytes) + " bytes but " +
                  quant::format_name(m.format) + " " + formats::shape_to_string(t.shape) + " needs " +
                  std::to_string(m.storage_bytes()));
    if (target_ && *target_ != m.format) {
      // Quantize at load: the result lives in `owned` (vectors keep their buffers when moved).
      auto& buf = out_.owned.emplace_back(quant::format_storage_bytes(*target_, rows, cols));
      quant::convert_rows(m, *target_, 0, rows, buf.data());
      m.format = *target_;
      m.data = buf.data();
    }
    return m;
  }

  std::vector<float> vector(const std::string& short_name, int64_t n) {
    const auto& t = get(short_name, {n});
    std::vector<float> v(static_cast<size_t>(n));
    quant::to_f32(weight_format(t), aligned_data(t), n, v.data());
    return v;
  }

  const std::set<std::string>& used() const { return used_; }

 private:
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
    lw.k_proj = bind.matrix(p + "self_attn.k_proj.weight", kv_dim, H);
    if (!ls.k_eq_v) lw.v_proj = bind.matrix(p + "self_attn.v_proj.weight", kv_dim, H);
    lw.o_proj = bind.matrix(p + "self_attn.o_proj.weight", H, q_dim);
    if (ls.q_norm && ls.q_norm_weight) lw.q_norm = bind.vector(p + "self_attn.q_norm.weight", ls.head_dim);
    if (ls.k_norm && ls.k_norm_weight) lw.k_norm = bind.vector(p + "self_attn.k_norm.weight", ls.head_dim);
    if (spec.post_attention_norm) lw.post_attention_norm = bind.vector(p + "post_attention_layernorm.weight", H);
    if (spec.pre_ffn_norm) lw.pre_ffn_norm = bind.vector(p + "pre_feedforward_layernorm.weight", H);
    if (spec.post_ffn_norm) lw.post_ffn_norm = bind.vector(p + "post_feedforward_layernorm.weight", H);
    lw.gate_proj = bind.matrix(p + "mlp.gate_proj.weight", ls.ffn_dim, H);
    lw.up_proj = bind.matrix(p + "mlp.up_proj.weight", ls.ffn_dim, H);
    lw.down_proj = bind.matrix(p + "mlp.down_proj.weight", H, ls.ffn_dim);
    lw.layer_scalar = ls.has_layer_scalar ? bind.vector(p + "layer_scalar", 1)[0] : ls.missing_layer_scalar;
    w.layers.push_back(std::move(lw));
  }
  w.embed_tokens = bind.matrix("embed_tokens.weight", spec.vocab_size, H);
  w.final_norm = bind.vector("norm.weight", H);
  w.lm_head = spec.tie_embeddings ? w.embed_tokens : bind.matrix("lm_head.weight", spec.vocab_size, H, false);

  // A decoder tensor the spec does not account for means the spec and the checkpoint
  // disagree (e.g. a v_proj on a layer the config declares K=V): refuse rather than ignore.
  const std::string layers_prefix = w.name_prefix + "layers.";
  for (const std::string& name : all_names) {
    if (name.rfind(layers_prefix, 0) == 0 && !bind.used().count(name))
      throw Error(source + ": tensor '" + name + "' is not part of the model the config describes");
  }
  return w;
}

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
  for (auto& l : w.layers)
    for (auto* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj})
      if (m->data) repack(*m);
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
  for (auto& l : w.layers)
    for (auto* m : {&l.q_proj, &l.k_proj, &l.v_proj, &l.o_proj, &l.gate_proj, &l.up_proj, &l.down_proj}) convert(*m);
  convert(w.embed_tokens);
  if (tied) w.lm_head = w.embed_tokens;
  else convert(w.lm_head);
}

}  // namespace lumen::model

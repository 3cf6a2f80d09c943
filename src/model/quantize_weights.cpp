#include "model/quantize_weights.h"

#include <algorithm>
#include <cctype>
#include <exception>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/error.h"
#include "kernels/thread_pool.h"
#include "quant/ggml_blocks.h"
#include "quant/imatrix.h"
#include "quant/quantize.h"
#include "quant/repack.h"

namespace lumen::model {

namespace {

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

// Runs body(i) for i in [0, n) over the thread pool; the first exception is rethrown here.
template <typename Body>
void parallel_rows(int64_t n, const Body& body) {
  std::exception_ptr failure;
  std::mutex failure_mutex;
  kernels::ThreadPool::global().parallel_for(n, [&](int64_t a, int64_t b) {
    try {
      body(a, b);
    } catch (...) {
      std::lock_guard<std::mutex> lock(failure_mutex);
      if (!failure) failure = std::current_exception();
    }
  });
  if (failure) std::rethrow_exception(failure);
}

int ggml_type_for(quant::WeightFormat f) {
  const int t = quant::ggml_type_of(f);
  if (t < 0 || !quant::ggml_can_quantize(t))
    throw Error(std::string("cannot quantize weights to ") + quant::format_name(f));
  return t;
}

// The mix's view of a weight: its GGUF name, stored type and dims (fastest-varying first).
quant::MixTensor mix_tensor(const NamedWeight& w) {
  const int type = quant::ggml_type_of(w.format());  // -1 for Lumen's interleaved layouts: never kept by type
  std::vector<int64_t> ne = {w.cols(), w.rows()};
  if (w.stacked) ne.push_back(w.count());
  return {w.gguf_name, std::max(type, 0), std::move(ne)};
}

}  // namespace

QuantTarget parse_quant_target(const std::string& name, const std::string& flag) {
  QuantTarget t;
  const std::string l = lower(name);
  if (l == "f32" || l == "bf16" || l == "f16") {
    t.format = l == "f32" ? quant::WeightFormat::F32 : l == "bf16" ? quant::WeightFormat::BF16 : quant::WeightFormat::F16;
    t.name = l == "f32" ? "F32" : l == "bf16" ? "BF16" : "F16";
    return t;
  }
  t.mix = true;
  if (l == "q4") {
    t.file_type = quant::FileType::Q4_K_M;
  } else if (l == "q8") {
    t.file_type = quant::FileType::Q8_0;
  } else {
    try {
      t.file_type = quant::file_type_from_name(name, flag);
    } catch (const Error&) {
      throw Error(flag + ": unknown quantization type " + in_quotes(name) + " (" + quant_target_names() + ")");
    }
  }
  t.name = quant::file_type_name(t.file_type);
  return t;
}

std::string quant_target_names() { return quant::file_type_names() + ", q4 (= Q4_K_M), q8 (= Q8_0)"; }

std::vector<NamedWeight> named_weights(ModelWeights& w) {
  std::vector<NamedWeight> out;
  auto add = [&](quant::WeightMatrix& m, std::string gguf, std::string checkpoint) {
    if (m.data) out.push_back({std::move(gguf), std::move(checkpoint), &m, nullptr, nullptr});
  };
  auto add_stacked = [&](StackedMatrices& s, std::string gguf, std::string checkpoint) {
    if (s.data) out.push_back({std::move(gguf), std::move(checkpoint), nullptr, &s, nullptr});
  };
  for (size_t l = 0; l < w.layers.size(); ++l) {
    LayerWeights& lw = w.layers[l];
    const std::string g = "blk." + std::to_string(l) + ".", c = "layers." + std::to_string(l) + ".";
    if (lw.qkv.data) {
      out.push_back({g + "attn_qkv.weight", "", &lw.qkv, nullptr, &lw});
    } else {
      add(lw.q_proj, g + "attn_q.weight", c + "self_attn.q_proj.weight");
      add(lw.k_proj, g + "attn_k.weight", c + "self_attn.k_proj.weight");
      add(lw.v_proj, g + "attn_v.weight", c + "self_attn.v_proj.weight");
    }
    add(lw.o_proj, g + "attn_output.weight", c + "self_attn.o_proj.weight");
    add(lw.gate_proj, g + "ffn_gate.weight", c + "mlp.gate_proj.weight");
    add(lw.up_proj, g + "ffn_up.weight", c + "mlp.up_proj.weight");
    add(lw.down_proj, g + "ffn_down.weight", c + "mlp.down_proj.weight");
    add(lw.router, g + "ffn_gate_inp.weight", c + "router.proj.weight");
    add_stacked(lw.expert_gate_up, g + "ffn_gate_up_exps.weight", c + "experts.gate_up_proj");
    add_stacked(lw.expert_down, g + "ffn_down_exps.weight", c + "experts.down_proj");
    add(lw.per_layer_gate, g + "inp_gate.weight", c + "per_layer_input_gate.weight");
    add(lw.per_layer_projection, g + "proj.weight", c + "per_layer_projection.weight");
  }
  add(w.embed_tokens, "token_embd.weight", "embed_tokens.weight");
  if (w.lm_head.data != w.embed_tokens.data) add(w.lm_head, "output.weight", "lm_head.weight");
  add(w.per_layer_table, "per_layer_token_embd.weight", "embed_tokens_per_layer.weight");
  add(w.per_layer_model_projection, "per_layer_model_proj.weight", "per_layer_model_projection.weight");
  return out;
}

std::vector<quant::WeightFormat> plan_formats(const spec::ModelSpec& spec, const std::vector<NamedWeight>& weights,
                                              const QuantTarget& target, bool has_imatrix) {
  if (!target.mix) throw Error("plan_formats: " + target.name + " is not a quantized file type");
  std::vector<quant::MixTensor> tensors;
  for (const auto& w : weights) tensors.push_back(mix_tensor(w));
  quant::MixOptions o;
  o.file_type = target.file_type;
  o.has_imatrix = has_imatrix;
  o.n_layers = spec.num_layers();
  if (!spec.layers.empty() && spec.layers[0].num_kv_heads > 0)
    o.n_gqa = spec.layers[0].num_q_heads / spec.layers[0].num_kv_heads;
  for (const auto& l : spec.layers) o.n_expert = std::max(o.n_expert, l.num_experts);
  const std::vector<int> types = quant::choose_tensor_types(tensors, o);
  std::vector<quant::WeightFormat> out;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!quant::tensor_is_quantizable(tensors[i])) {
      out.push_back(weights[i].format());
      continue;
    }
    const int f = quant::weight_format_from_ggml(types[i]);
    if (f < 0)
      throw Error("tensor '" + weights[i].gguf_name + "': the " + target.name + " mix gives it ggml type " +
                  std::to_string(types[i]) + ", which Lumen does not run");
    out.push_back(quant::WeightFormat(f));
  }
  return out;
}

void quantize_f32_rows(int ggml_type, const float* x, int64_t n, int64_t cols, const float* importance, std::byte* out) {
  const size_t row_bytes = quant::ggml_row_bytes(ggml_type, cols);
  parallel_rows(n, [&](int64_t a, int64_t b) {
    for (int64_t r = a; r < b; ++r)
      quant::quantize_row_ggml(ggml_type, x + r * cols, cols, importance, out + size_t(r) * row_bytes);
  });
}

void quantize_matrix_rows(const quant::WeightMatrix& src, quant::WeightFormat target, int64_t r0, int64_t r1,
                          const float* importance, std::byte* dst) {
  const int type = ggml_type_for(target);
  const int64_t cols = src.cols;
  const size_t row_bytes = quant::format_row_bytes(target, cols);
  parallel_rows(r1 - r0, [&](int64_t a, int64_t b) {
    std::vector<float> row(size_t(quant::padded_cols(cols)));  // the X4 layouts expand whole chunks
    for (int64_t i = a; i < b; ++i) {
      quant::dequantize_row(src, r0 + i, row.data());
      quant::quantize_row_ggml(type, row.data(), cols, importance, dst + size_t(i) * row_bytes);
    }
  });
}

void quantize_weights(ModelWeights& w, const spec::ModelSpec& spec, const QuantTarget& target,
                      const std::string& imatrix_path, const std::string& model) {
  const bool tied = w.lm_head.data == w.embed_tokens.data;
  std::vector<NamedWeight> named = named_weights(w);
  std::map<std::string, std::vector<float>> importance;
  if (!imatrix_path.empty()) {
    std::map<std::string, quant::ImatrixTensorShape> shapes;
    for (const auto& n : named) shapes[n.gguf_name] = {n.cols(), n.count()};
    importance = quant::imatrix_importance_for(quant::read_imatrix(imatrix_path), imatrix_path, shapes, model);
  }
  // The per-layer input table stays as stored and mapped: it is gathered a row per token, never
  // multiplied, and quantizing its billions of values at every load would cost minutes.
  std::erase_if(named, [&](const NamedWeight& n) { return n.matrix == &w.per_layer_table; });
  const std::vector<quant::WeightFormat> formats = plan_formats(spec, named, target, !importance.empty());
  for (size_t i = 0; i < named.size(); ++i) {
    const NamedWeight& n = named[i];
    const quant::WeightFormat to = formats[i];
    if (n.format() == to) continue;
    const auto imp_it = importance.find(n.gguf_name);
    const float* imp = imp_it == importance.end() ? nullptr : imp_it->second.data();
    const int64_t rows = n.rows(), cols = n.cols();
    const size_t stride = quant::format_storage_bytes(to, rows, cols);
    auto& buf = w.owned.emplace_back(stride * size_t(n.count()));
    try {
      for (int64_t e = 0; e < n.count(); ++e)
        quantize_matrix_rows(n.matrix ? *n.matrix : n.stacked->at(e), to, 0, rows, imp ? imp + e * cols : nullptr,
                             buf.data() + size_t(e) * stride);
    } catch (const Error& e) {
      throw Error((model.empty() ? "" : model + ": ") + "tensor '" + n.gguf_name + "': " + e.what());
    }
    if (n.matrix) {
      *n.matrix = {to, rows, cols, buf.data()};
    } else {
      n.stacked->format = to;
      n.stacked->data = buf.data();
      n.stacked->stride = stride;
    }
    if (LayerWeights* lw = n.fused_qkv_of) {
      const int64_t q = lw->q_proj.rows, kv = lw->k_proj.rows;
      lw->q_proj = lw->qkv.row_range(0, q);
      lw->k_proj = lw->qkv.row_range(q, kv);
      lw->v_proj = lw->qkv.row_range(q + kv, kv);
    }
  }
  if (tied) w.lm_head = w.embed_tokens;
}

}  // namespace lumen::model

#include "spec/gguf_export.h"

#include <algorithm>
#include <map>

#include "base/error.h"

namespace lumen::spec {

namespace {

const LayerSpec* first_of_kind(const ModelSpec& spec, AttentionKind kind) {
  for (const auto& l : spec.layers)
    if (l.kind == kind) return &l;
  return nullptr;
}

bool has_non_null(const nlohmann::json& c, const char* key) { return c.is_object() && c.contains(key) && !c[key].is_null(); }

// The converter's test for the full layers' KV head count being given apart from the sliding
// layers': num_global_key_value_heads, or a per_layer_config entry of a full layer naming it.
bool full_kv_heads_given(const nlohmann::json& text) {
  if (has_non_null(text, "num_global_key_value_heads")) return true;
  if (!has_non_null(text, "per_layer_config") || !text["per_layer_config"].is_object()) return false;
  const nlohmann::json types = text.contains("layer_types") && text["layer_types"].is_array() ? text["layer_types"] : nlohmann::json::array();
  for (const auto& [index, entry] : text["per_layer_config"].items()) {
    size_t i = 0;
    try {
      i = std::stoul(index);
    } catch (const std::exception&) {
      continue;
    }
    if (i < types.size() && types[i] == "full_attention" && entry.is_object() && entry.contains("num_key_value_heads")) return true;
  }
  return false;
}

}  // namespace

void add_gemma4_gguf_metadata(const ModelSpec& spec, const nlohmann::json& config, const std::string& source,
                              formats::GgufMetadata& md) {
  if (spec.family != "gemma4")
    throw Error(source + ": a " + spec.family + " checkpoint; Lumen writes GGUFs of Gemma 4 checkpoints only (give a " +
                spec.family + " GGUF, e.g. from llama.cpp's convert_hf_to_gguf.py)");
  for (size_t i = 0; i < spec.layers.size(); ++i)
    if (spec.layers[i].moe())
      throw Error(source + ": layer " + std::to_string(i) +
                  " is a mixture-of-experts block; Lumen does not write GGUFs with experts yet (llama.cpp's mix treats them apart)");
  const LayerSpec* full = first_of_kind(spec, AttentionKind::Full);
  const LayerSpec* swa = first_of_kind(spec, AttentionKind::Sliding);
  if (!full) throw Error(source + ": no full-attention layer; llama.cpp's gemma4 layout needs one (its rope_freqs)");
  if (!swa) swa = full;
  const nlohmann::json& text = config.is_object() && config.contains("text_config") && config["text_config"].is_object()
                                   ? config["text_config"]
                                   : config;
  const std::string a = "gemma4.";
  const uint32_t n_layers = uint32_t(spec.num_layers());
  md.set_string("general.architecture", "gemma4");
  md.set_u32(a + "block_count", n_layers);
  md.set_u32(a + "context_length", uint32_t(spec.max_positions));
  md.set_u32(a + "embedding_length", uint32_t(spec.hidden_size));
  // The dense MLP's width: one value, or one per layer where double-wide layers differ.
  std::vector<int32_t> ffn;
  for (const auto& l : spec.layers) ffn.push_back(l.ffn_dim);
  if (std::all_of(ffn.begin(), ffn.end(), [&](int32_t f) { return f == ffn.front(); }))
    md.set_u32(a + "feed_forward_length", uint32_t(ffn.front()));
  else
    md.set_i32_array(a + "feed_forward_length", ffn);
  md.set_u32(a + "attention.head_count", uint32_t(spec.layers.front().num_q_heads));
  // Per layer when the config names the full layers' KV head count apart (as the converter).
  if (full_kv_heads_given(text)) {
    std::vector<int32_t> kv;
    for (const auto& l : spec.layers) kv.push_back(l.kind == AttentionKind::Sliding ? swa->num_kv_heads : full->num_kv_heads);
    md.set_i32_array(a + "attention.head_count_kv", kv);
  } else {
    md.set_u32(a + "attention.head_count_kv", uint32_t(swa->num_kv_heads));
  }
  md.set_f32(a + "rope.freq_base", float(full->rope.theta));
  md.set_f32(a + "rope.freq_base_swa", float(swa->rope.theta));
  md.set_f32(a + "attention.layer_norm_rms_epsilon", spec.rms_eps);
  md.set_u32(a + "attention.key_length", uint32_t(full->head_dim));
  md.set_u32(a + "attention.value_length", uint32_t(full->head_dim));
  if (spec.final_logit_softcap) md.set_f32(a + "final_logit_softcapping", *spec.final_logit_softcap);
  md.set_u32(a + "attention.sliding_window", uint32_t(swa->window));
  md.set_u32(a + "attention.shared_kv_layers", n_layers - uint32_t(spec.first_kv_shared_layer()));
  md.set_u32(a + "embedding_length_per_layer_input", uint32_t(spec.per_layer_input_dim));
  std::vector<bool> pattern;
  for (const auto& l : spec.layers) pattern.push_back(l.kind == AttentionKind::Sliding);
  md.set_bool_array(a + "attention.sliding_window_pattern", pattern);
  md.set_u32(a + "attention.key_length_swa", uint32_t(swa->head_dim));
  md.set_u32(a + "attention.value_length_swa", uint32_t(swa->head_dim));
  // Full layers rotate by rope_freqs' factors over the whole head; sliding layers rotate all.
  md.set_u32(a + "rope.dimension_count", uint32_t(full->head_dim));
  md.set_u32(a + "rope.dimension_count_swa", uint32_t(swa->head_dim));
}

std::vector<float> gemma4_rope_freqs(const ModelSpec& spec) {
  const LayerSpec* full = first_of_kind(spec, AttentionKind::Full);
  if (!full) return {};
  const int pairs = full->head_dim / 2;
  const int rotated = std::min(pairs, full->rope.rotated_pairs(full->head_dim));
  std::vector<float> f(size_t(pairs), 1e30f);
  std::fill(f.begin(), f.begin() + rotated, 1.0f);
  return f;
}

std::optional<std::string> gemma4_gguf_tensor_name(const std::string& name) {
  static const std::map<std::string, std::string> top = {
      {"embed_tokens.weight", "token_embd.weight"},
      {"norm.weight", "output_norm.weight"},
      {"lm_head.weight", "output.weight"},
      {"embed_tokens_per_layer.weight", "per_layer_token_embd.weight"},
      {"per_layer_model_projection.weight", "per_layer_model_proj.weight"},
      {"per_layer_projection_norm.weight", "per_layer_proj_norm.weight"},
  };
  static const std::map<std::string, std::string> block = {
      {"input_layernorm.weight", "attn_norm.weight"},
      {"self_attn.q_proj.weight", "attn_q.weight"},
      {"self_attn.k_proj.weight", "attn_k.weight"},
      {"self_attn.v_proj.weight", "attn_v.weight"},
      {"self_attn.o_proj.weight", "attn_output.weight"},
      {"self_attn.q_norm.weight", "attn_q_norm.weight"},
      {"self_attn.k_norm.weight", "attn_k_norm.weight"},
      {"post_attention_layernorm.weight", "post_attention_norm.weight"},
      {"pre_feedforward_layernorm.weight", "ffn_norm.weight"},
      {"post_feedforward_layernorm.weight", "post_ffw_norm.weight"},
      {"mlp.gate_proj.weight", "ffn_gate.weight"},
      {"mlp.up_proj.weight", "ffn_up.weight"},
      {"mlp.down_proj.weight", "ffn_down.weight"},
      {"layer_scalar", "layer_output_scale.weight"},
      {"per_layer_input_gate.weight", "inp_gate.weight"},
      {"per_layer_projection.weight", "proj.weight"},
      {"post_per_layer_input_norm.weight", "post_norm.weight"},
  };
  if (auto it = top.find(name); it != top.end()) return it->second;
  if (!name.starts_with("layers.")) return std::nullopt;
  const size_t dot = name.find('.', 7);
  if (dot == std::string::npos || dot == 7) return std::nullopt;
  const std::string index = name.substr(7, dot - 7);
  if (!std::all_of(index.begin(), index.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  if (auto it = block.find(name.substr(dot + 1)); it != block.end()) return "blk." + index + "." + it->second;
  return std::nullopt;
}

}  // namespace lumen::spec

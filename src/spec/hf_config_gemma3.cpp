// ModelSpec from a Hugging Face Gemma 3 text config (model_type gemma3_text, or gemma3 with a
// text_config): the default model's family, for LiteRT packages converted from it. Same
// geometry as the GGUF path (gguf_spec.cpp); the differences are the HF conventions: norm
// gains stored as w and applied as (1 + w), layer kinds from layer_types or the
// sliding_window_pattern, RoPE thetas from rope_theta/rope_local_base_freq or rope_parameters.
#include <cmath>
#include <limits>

#include "base/error.h"
#include "spec/model_spec.h"
#include "spec/spec_internal.h"

namespace lumen::spec {

namespace {

using json = nlohmann::json;

struct Reader {
  const json& j;
  std::string source;
  [[noreturn]] void fail(const std::string& key, const std::string& what) const {
    detail::fail(source, "`" + key + "` " + what);
  }
  int64_t integer(const std::string& key, int64_t lo = 1) const {
    if (!j.contains(key) || !j[key].is_number_integer()) fail(key, "is missing or not an integer");
    const int64_t v = j[key].get<int64_t>();
    if (v < lo || v > (int64_t(1) << 30)) fail(key, "is " + std::to_string(v) + ", out of range");
    return v;
  }
  // A token id: absent or null gives the fallback; otherwise an integer in [0, 2^31).
  int token_id(const json& v, const std::string& key) const {
    if (!v.is_number_integer() || (!v.is_number_unsigned() && v.get<int64_t>() < 0) ||
        v.get<uint64_t>() > uint64_t(std::numeric_limits<int32_t>::max()))
      fail(key, "must be a token id (an integer from 0), got " + v.dump().substr(0, 40));
    return int(v.get<int64_t>());
  }
  int token_id(const std::string& key, int fallback) const {
    if (!j.contains(key) || j[key].is_null()) return fallback;
    return token_id(j[key], key);
  }
  std::optional<double> number(const std::string& key) const {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_number()) fail(key, "is not a number");
    return j[key].get<double>();
  }
  std::optional<std::string> string(const std::string& key) const {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_string()) fail(key, "is not a string");
    return j[key].get<std::string>();
  }
  std::optional<bool> boolean(const std::string& key) const {
    if (!j.contains(key) || j[key].is_null()) return std::nullopt;
    if (!j[key].is_boolean()) fail(key, "is not true or false");
    return j[key].get<bool>();
  }
  // The same readers on a nested object (`key` names it in errors as parent.key).
  Reader nested(const std::string& key) const { return Reader{j[key], source + "." + key}; }
};

}  // namespace

ModelSpec spec_from_gemma3_hf_config(const json& config, const std::string& source) {
  const json& t = config.contains("text_config") && config["text_config"].is_object() ? config["text_config"] : config;
  const Reader r{t, source};
  if (t.contains("quantization_config")) r.fail("quantization_config", "is set: pre-quantized HF checkpoints are not supported");
  ModelSpec spec;
  spec.source = source;
  spec.source_kind = "hf-config";
  spec.model_type = "gemma3_text";
  spec.family = "gemma3";
  spec.vocab_size = int(r.integer("vocab_size"));
  spec.hidden_size = int(r.integer("hidden_size"));
  spec.max_positions = int(r.integer("max_position_embeddings"));
  spec.rms_eps = float(r.number("rms_norm_eps").value_or(1e-6));
  spec.norm_weight_offset = true;  // HF Gemma 3 RMSNorm: x * (1 + w)
  const int n_layers = int(r.integer("num_hidden_layers"));
  detail::check_layer_count(source, "`num_hidden_layers`", n_layers);
  const int heads = int(r.integer("num_attention_heads"));
  const int kv_heads = int(r.integer("num_key_value_heads"));
  const int head_dim = t.contains("head_dim") ? int(r.integer("head_dim")) : spec.hidden_size / heads;
  const int ffn = int(r.integer("intermediate_size"));
  const int window = int(r.integer("sliding_window"));
  spec.attention_scale = float(1.0 / std::sqrt(r.number("query_pre_attn_scalar").value_or(head_dim)));
  if (auto cap = r.number("attn_logit_softcapping"); cap && *cap > 0) spec.attn_logit_softcap = float(*cap);
  if (auto cap = r.number("final_logit_softcapping"); cap && *cap > 0) spec.final_logit_softcap = float(*cap);
  const Reader outer{config, source};
  spec.tie_embeddings = r.boolean("tie_word_embeddings").value_or(outer.boolean("tie_word_embeddings").value_or(true));
  spec.embedding_scale = std::sqrt(float(spec.hidden_size));
  const std::string act = r.string("hidden_activation").value_or("gelu_pytorch_tanh");
  if (act != "gelu_pytorch_tanh") r.fail("hidden_activation", "is \"" + printable(act) + "\"; Gemma 3 uses gelu_pytorch_tanh");
  spec.activation = "gelu_tanh";

  double global_theta = r.number("rope_theta").value_or(1000000.0);
  double local_theta = r.number("rope_local_base_freq").value_or(10000.0);
  double scaling = 1.0;
  if (t.contains("rope_parameters") && t["rope_parameters"].is_object()) {
    const json& rp = t["rope_parameters"];
    const Reader parameters{rp, source + ": rope_parameters"};
    for (const char* kind : {"full_attention", "sliding_attention"}) {
      if (!rp.contains(kind)) continue;
      if (!rp[kind].is_object()) parameters.fail(kind, "is not an object");
      if (auto theta = parameters.nested(kind).number("rope_theta"))
        (std::string(kind) == "full_attention" ? global_theta : local_theta) = *theta;
    }
  }
  if (t.contains("rope_scaling") && t["rope_scaling"].is_object()) {
    const json& rs = t["rope_scaling"];
    const Reader rope_scaling{rs, source + ": rope_scaling"};
    const std::string type = rope_scaling.string("rope_type").value_or(rope_scaling.string("type").value_or("default"));
    if (type == "linear") scaling = rope_scaling.number("factor").value_or(1.0);
    else if (type != "default") r.fail("rope_scaling", "has rope_type \"" + printable(type) + "\" (linear or default)");
  }
  std::vector<AttentionKind> kinds(size_t(n_layers), AttentionKind::Sliding);
  if (t.contains("layer_types") && t["layer_types"].is_array()) {
    if (t["layer_types"].size() != size_t(n_layers))
      r.fail("layer_types", "has " + std::to_string(t["layer_types"].size()) + " entries for " + std::to_string(n_layers) + " layers");
    for (int i = 0; i < n_layers; ++i) {
      const std::string k = t["layer_types"][size_t(i)].is_string() ? t["layer_types"][size_t(i)].get<std::string>() : "";
      if (k == "full_attention") kinds[size_t(i)] = AttentionKind::Full;
      else if (k != "sliding_attention") r.fail("layer_types", "entry " + std::to_string(i) + " is not sliding_attention or full_attention");
    }
  } else {
    const int pattern = t.contains("sliding_window_pattern") ? int(r.integer("sliding_window_pattern")) : 6;
    for (int i = 0; i < n_layers; ++i)
      if ((i + 1) % pattern == 0) kinds[size_t(i)] = AttentionKind::Full;
  }
  spec.tokens.pad = r.token_id("pad_token_id", 0);
  spec.tokens.bos = r.token_id("bos_token_id", 2);
  const json eos = t.contains("eos_token_id") ? t["eos_token_id"]
                   : config.contains("eos_token_id") ? config["eos_token_id"] : json(1);
  spec.tokens.stop.clear();
  if (eos.is_array()) {
    for (const auto& e : eos) spec.tokens.stop.push_back(r.token_id(e, "eos_token_id"));
    spec.tokens.eos = spec.tokens.stop.empty() ? 1 : spec.tokens.stop[0];
  } else {
    spec.tokens.eos = eos.is_null() ? 1 : r.token_id(eos, "eos_token_id");
    spec.tokens.stop.push_back(spec.tokens.eos);
  }
  if (spec.vocab_size > 106) spec.tokens.stop.push_back(106);  // <end_of_turn> of Gemma 3's vocabulary
  spec.chat_template = "gemma3";
  for (int i = 0; i < n_layers; ++i)
    spec.layers.push_back(detail::gemma3_layer(kinds[size_t(i)], heads, kv_heads, head_dim, window, ffn, local_theta,
                                               global_theta, scaling));
  detail::validate_spec(spec);
  return spec;
}

}  // namespace lumen::spec

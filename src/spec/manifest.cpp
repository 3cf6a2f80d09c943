// ModelSpec from a doppler.execution/v1 manifest. The execution contract
// (runtime.manifestInference) is honoured as written; runtime.architecture gives the shapes;
// runtime.rawConfig (HF style) is only cross-checked: a contradiction is an error naming both
// fields, except for values the contract deliberately overrules, which become notes.
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "spec/model_spec.h"
#include "spec/spec_internal.h"

namespace lumen::spec {
namespace {

using detail::json;
using detail::ObjectReader;

std::string bq(const std::string& field) { return detail::tick(field); }

std::string num_text(double v) {
  // Integers print without a fraction so that messages read "47 contradicts 48".
  if (std::isfinite(v) && v == std::floor(v) && std::fabs(v) < 1e15) {
    return std::to_string(int64_t(v));
  }
  char buffer[64];
  std::snprintf(buffer, sizeof buffer, "%.9g", v);
  return buffer;
}

[[noreturn]] void contradiction(const std::string& source, const std::string& field_a,
                                const std::string& value_a, const std::string& field_b,
                                const std::string& value_b) {
  detail::fail(source, bq(field_a) + " " + value_a + " contradicts " + bq(field_b) + " " + value_b);
}

// The manifest's builder: holds the readers and the cross-check helpers.
class ManifestReader {
 public:
  ManifestReader(const json& manifest, const std::string& source)
      : root_(manifest, "", source), source_(source) {}

  ModelSpec build();

 private:
  // rawConfig's text part (rawConfig.text_config when present, else rawConfig itself).
  std::optional<ObjectReader> raw_;

  void check_int(const std::string& field, int value, const char* raw_key) const {
    if (!raw_) return;
    if (auto other = raw_->optional_integer(raw_key); other && *other != value) {
      contradiction(source_, field, std::to_string(value), raw_->field(raw_key),
                    std::to_string(*other));
    }
  }
  void check_number(const std::string& field, double value, const char* raw_key,
                    bool as_float = false) const {
    if (!raw_) return;
    if (auto other = raw_->optional_number(raw_key)) {
      const bool same = as_float ? float(*other) == float(value) : *other == value;
      if (!same) contradiction(source_, field, num_text(value), raw_->field(raw_key), num_text(*other));
    }
  }
  void check_bool(const std::string& field, bool value, const char* raw_key) const {
    if (!raw_) return;
    if (auto other = raw_->optional_boolean(raw_key); other && *other != value) {
      contradiction(source_, field, value ? "true" : "false", raw_->field(raw_key),
                    *other ? "true" : "false");
    }
  }
  // A field the engine cannot honour: it must hold `expected` (or be null/absent when
  // `allow_null`).
  static void require_false(const ObjectReader& r, const char* key, const std::string& why) {
    if (r.optional_boolean(key).value_or(false)) r.fail_field(key, "is true: " + why);
  }
  static void require_null(const ObjectReader& r, const char* key, const std::string& why) {
    if (r.has_value(key)) r.fail_field(key, "is " + detail::show(*r.find(key)) + ": " + why);
  }

  ObjectReader root_;
  std::string source_;
};

const char* kSchema = "doppler.execution/v1";

bool is_gemma4_type(const std::string& t) {
  return t == "gemma4" || t == "gemma4_text" || t == "gemma4_unified" ||
         t == "gemma4_unified_text";
}

// Layer-index list (queryKeyNormWeightLayers, layerScalarLayers, ...) as a per-layer mask;
// absent or null → nullopt (meaning "every layer").
std::optional<std::vector<bool>> layer_mask(const ObjectReader& r, const char* key, int num_layers) {
  auto list = r.optional_int_list(key);
  if (!list) return std::nullopt;
  std::vector<bool> mask(size_t(num_layers), false);
  for (int index : *list) {
    if (index < 0 || index >= num_layers) {
      r.fail_field(key, "lists layer " + std::to_string(index) + " but there are " +
                            std::to_string(num_layers) + " layers");
    }
    mask[size_t(index)] = true;
  }
  return mask;
}

ModelSpec ManifestReader::build() {
  ModelSpec spec;
  spec.source = source_;
  spec.source_kind = "manifest";
  spec.family = "gemma4";
  std::vector<std::string>& notes = spec.notes;

  if (!root_.has_value("runtime")) {
    if (root_.has("manifestInference")) {
      root_.fail_field("manifestInference",
                       "must sit under `runtime` (doppler.execution/v1 layout: "
                       "runtime.manifestInference)");
    }
    root_.fail_field("runtime", "is missing: not a doppler.execution/v1 manifest");
  }
  const ObjectReader runtime = root_.required_object("runtime");
  if (!runtime.has_value("manifestInference")) {
    runtime.fail_field("manifestInference", "is missing: not a doppler.execution/v1 manifest");
  }
  const ObjectReader mi = runtime.required_object("manifestInference");
  {
    const json* schema = mi.find("schema");
    if (schema == nullptr || !schema->is_string() || schema->get<std::string>() != kSchema) {
      mi.fail_field("schema", "is " + (schema ? detail::show(*schema) : std::string("missing")) +
                                  " (expected '" + kSchema + "')");
    }
  }
  mi.allow_only({"schema", "presetId", "unsupported", "attention", "normalization", "ffn", "rope",
                 "output", "layerPattern", "chatTemplate", "pipeline", "session",
                 "sessionDefaults", "execution", "defaultKernelPath", "kernelPath", "moe"});
  // Read elsewhere (kv cache, decode loop, kernels): session, sessionDefaults, kernel paths.
  require_null(mi, "pipeline", "custom layer pipelines are not supported");
  require_null(mi, "execution", "explicit execution graphs are not supported");
  // Doppler's `moe` block is a GPU kernel profile; the experts' shapes are in architecture.
  if (auto moe = mi.optional_object("moe")) {
    moe->allow_only({"kernelProfileId", "supportedActivationDtypes", "preferredActivationDtype", "shapeConstraints"});
    if (auto dtypes = moe->optional_string_list("supportedActivationDtypes");
        dtypes && std::find(dtypes->begin(), dtypes->end(), "f32") == dtypes->end()) {
      moe->fail_field("supportedActivationDtypes", "does not list f32: Lumen runs the experts on f32 activations");
    }
    if (auto pref = moe->optional_string("preferredActivationDtype"); pref && *pref != "f32") {
      notes.push_back(bq(moe->field("preferredActivationDtype")) + " '" + *pref +
                      "' ignored: activations are f32 on the CPU");
    }
  }

  // Model type.
  const std::string runtime_type = runtime.string("modelType", "");
  if (!runtime_type.empty() && !is_gemma4_type(runtime_type)) {
    runtime.fail_field("modelType", detail::squote(runtime_type) +
                                        " is not a Gemma 4 text model (expected one of gemma4, "
                                        "gemma4_text, gemma4_unified, gemma4_unified_text)");
  }
  std::optional<ObjectReader> raw_top = runtime.optional_object("rawConfig");
  if (raw_top) {
    raw_ = raw_top->has_value("text_config") ? raw_top->optional_object("text_config") : raw_top;
    for (const ObjectReader* r : {&*raw_top, &*raw_}) {
      if (auto t = r->optional_string("model_type"); t && !is_gemma4_type(*t)) {
        r->fail_field("model_type", detail::squote(*t) + " is not a Gemma 4 text model");
      }
    }
  }
  if (raw_ && raw_->has_value("model_type")) {
    spec.model_type = *raw_->optional_string("model_type");
  } else if (raw_top && raw_top->has_value("model_type")) {
    spec.model_type = *raw_top->optional_string("model_type") + "_text";
  } else if (!runtime_type.empty()) {
    spec.model_type = runtime_type;
  } else {
    runtime.fail_field("modelType", "is missing (and rawConfig has no model_type)");
  }

  // Architecture: the shapes.
  const ObjectReader arch = runtime.required_object("architecture");
  arch.allow_only({"vocabSize", "hiddenSize", "intermediateSize", "numLayers", "numAttentionHeads",
                   "numKeyValueHeads", "numGlobalKeyValueHeads", "headDim", "globalHeadDim",
                   "hiddenSizePerLayerInput", "vocabSizePerLayerInput", "numKvSharedLayers",
                   "attentionKeyEqualsValue", "maxSeqLen", "ropeTheta", "rmsNormEps", "numExperts",
                   "numExpertsPerToken", "moeIntermediateSize"});
  if (raw_) require_null(*raw_, "use_bidirectional_attention", "only causal attention is implemented");

  spec.vocab_size = arch.required_integer("vocabSize");
  spec.hidden_size = arch.required_integer("hiddenSize");
  const int ffn_dim = arch.required_integer("intermediateSize");
  const int num_layers = arch.required_integer("numLayers");
  const int num_heads = arch.required_integer("numAttentionHeads");
  const int num_kv_heads = arch.required_integer("numKeyValueHeads");
  const std::optional<int> num_global_kv = arch.optional_integer("numGlobalKeyValueHeads");
  const int head_dim = arch.required_integer("headDim");
  const int global_head_dim = arch.optional_integer("globalHeadDim").value_or(head_dim);
  const bool k_eq_v = arch.boolean("attentionKeyEqualsValue", false);
  for (const char* key : {"vocabSize", "hiddenSize", "intermediateSize", "numLayers",
                          "numAttentionHeads", "numKeyValueHeads", "headDim"}) {
    if (arch.integer(key, 0) <= 0) arch.fail_field(key, "must be positive");
  }
  if (global_head_dim <= 0) arch.fail_field("globalHeadDim", "must be positive");
  if (num_global_kv && *num_global_kv <= 0) {
    arch.fail_field("numGlobalKeyValueHeads", "must be positive");
  }
  check_int(arch.field("vocabSize"), spec.vocab_size, "vocab_size");
  check_int(arch.field("hiddenSize"), spec.hidden_size, "hidden_size");
  check_int(arch.field("intermediateSize"), ffn_dim, "intermediate_size");
  check_int(arch.field("numLayers"), num_layers, "num_hidden_layers");
  detail::check_layer_count(source_, arch.field("numLayers"), num_layers);
  check_int(arch.field("numAttentionHeads"), num_heads, "num_attention_heads");
  check_int(arch.field("numKeyValueHeads"), num_kv_heads, "num_key_value_heads");
  if (num_global_kv) {
    check_int(arch.field("numGlobalKeyValueHeads"), *num_global_kv, "num_global_key_value_heads");
  }
  check_int(arch.field("headDim"), head_dim, "head_dim");
  check_int(arch.field("globalHeadDim"), global_head_dim, "global_head_dim");
  check_bool(arch.field("attentionKeyEqualsValue"), k_eq_v, "attention_k_eq_v");
  if (auto v = arch.optional_integer("maxSeqLen")) {
    spec.max_positions = *v;
    check_int(arch.field("maxSeqLen"), *v, "max_position_embeddings");
  } else if (raw_ && raw_->has_value("max_position_embeddings")) {
    spec.max_positions = *raw_->optional_integer("max_position_embeddings");
  } else {
    arch.fail_field("maxSeqLen", "is missing");
  }

  // Per-layer input embeddings (E2B/E4B).
  spec.per_layer_input_dim = arch.integer("hiddenSizePerLayerInput", 0);
  if (spec.per_layer_input_dim < 0) arch.fail_field("hiddenSizePerLayerInput", "must not be negative");
  if (raw_) {
    // transformers' default is 256: a rawConfig without the key has them.
    if (auto v = raw_->optional_integer("hidden_size_per_layer_input"); v && *v != spec.per_layer_input_dim)
      contradiction(source_, arch.field("hiddenSizePerLayerInput"), std::to_string(spec.per_layer_input_dim),
                    raw_->field("hidden_size_per_layer_input"), std::to_string(*v));
  }
  if (spec.has_per_layer_inputs()) {
    spec.per_layer_vocab = arch.optional_integer("vocabSizePerLayerInput").value_or(spec.vocab_size);
    if (spec.per_layer_vocab <= 0) arch.fail_field("vocabSizePerLayerInput", "must be positive");
    check_int(arch.field("vocabSizePerLayerInput"), spec.per_layer_vocab, "vocab_size_per_layer_input");
  } else {
    arch.optional_integer("vocabSizePerLayerInput");  // sizes a table this model does not have
  }

  // Experts (26B-A4B): every layer has the block.
  const int num_experts = arch.integer("numExperts", 0);
  const int top_k = arch.integer("numExpertsPerToken", 0);
  const int expert_dim = arch.integer("moeIntermediateSize", 0);
  if (num_experts < 0) arch.fail_field("numExperts", "must not be negative");
  if (num_experts > 0) {
    if (top_k < 1 || top_k > num_experts)
      arch.fail_field("numExpertsPerToken", "must be in 1 .. numExperts (" + std::to_string(num_experts) + ")");
    if (expert_dim < 1) arch.fail_field("moeIntermediateSize", "must be positive with numExperts");
    check_int(arch.field("numExperts"), num_experts, "num_experts");
    check_int(arch.field("numExpertsPerToken"), top_k, "top_k_experts");
    check_int(arch.field("moeIntermediateSize"), expert_dim, "moe_intermediate_size");
  }
  if (raw_) check_bool(arch.field("numExperts") + " > 0", num_experts > 0, "enable_moe_block");

  // Layer pattern.
  const ObjectReader pattern = mi.required_object("layerPattern");
  pattern.allow_only({"type", "globalPattern", "period", "offset", "layerTypes", "attentionLayers"});
  const ObjectReader attention = mi.required_object("attention");
  std::vector<AttentionKind> kinds;
  if (auto types = pattern.optional_string_list("layerTypes")) {
    kinds = detail::parse_layer_types(pattern, "layerTypes", *types);
    if (int(kinds.size()) != num_layers) {
      contradiction(source_, arch.field("numLayers"), std::to_string(num_layers),
                    pattern.field("layerTypes"), "(" + std::to_string(kinds.size()) + " entries)");
    }
  } else {
    const std::string type = pattern.required_string("type");
    const bool sliding_default = attention.has_value("slidingWindow");
    for (int i = 0; i < num_layers; ++i) {
      bool full = false;
      if (type == "every_n") {
        const int period = pattern.required_integer("period");
        if (period <= 0) pattern.fail_field("period", "must be positive");
        full = i % period == pattern.optional_integer("offset").value_or(0);
      } else if (type == "alternating") {
        const std::string which = pattern.required_string("globalPattern");
        if (which != "even" && which != "odd") {
          pattern.fail_field("globalPattern", "must be 'even' or 'odd'");
        }
        full = (i % 2 == 0) == (which == "even");
      } else if (type == "uniform" || type == "all_attention") {
        full = !sliding_default;
      } else {
        pattern.fail_field("type", detail::squote(type) +
                                       " needs `layerTypes` (or use every_n/alternating)");
      }
      kinds.push_back(full ? AttentionKind::Full : AttentionKind::Sliding);
    }
  }
  if (raw_) {
    if (auto raw_types = raw_->optional_string_list("layer_types")) {
      bool same = int(raw_types->size()) == num_layers;
      for (size_t i = 0; same && i < raw_types->size(); ++i) {
        same = (*raw_types)[i] == detail::layer_type_name(kinds[i]);
      }
      if (!same) {
        contradiction(source_, pattern.field("layerTypes"),
                      "(" + std::to_string(num_layers) + " layers)", raw_->field("layer_types"),
                      "(" + std::to_string(raw_types->size()) + " entries, or another order)");
      }
    }
  }
  const bool any_sliding = std::find(kinds.begin(), kinds.end(), AttentionKind::Sliding) != kinds.end();

  // Attention.
  attention.allow_only({"queryPreAttnScalar", "attnLogitSoftcapping", "slidingWindow",
                        "queryKeyNorm", "queryKeyNormLayers", "queryKeyNormWeightLayers",
                        "valueNorm", "causal", "attentionBias", "attentionOutputGate",
                        "ropeScalingType", "ropeScalingFactor"});
  // Scale rule: q.k is multiplied by 1/sqrt(queryPreAttnScalar), the Gemma convention; Gemma 4
  // declares 1, i.e. exactly 1.0 (its q/k norms replace 1/sqrt(d)). A null scalar would mean
  // 1/sqrt(head_dim), ambiguous with 256/512 head dims: refused.
  attention.require_present("queryPreAttnScalar");
  if (!attention.has_value("queryPreAttnScalar")) {
    attention.fail_field("queryPreAttnScalar",
                         "is null: the attention scale must be declared (1 for Gemma 4)");
  }
  const double qpas = attention.required_number("queryPreAttnScalar");
  if (!(qpas > 0.0)) attention.fail_field("queryPreAttnScalar", "must be positive");
  spec.attention_scale = qpas == 1.0 ? 1.0f : float(1.0 / std::sqrt(qpas));
  if (raw_ && raw_->has_value("query_pre_attn_scalar")) {
    check_number(attention.field("queryPreAttnScalar"), qpas, "query_pre_attn_scalar");
  }
  attention.require_present("attnLogitSoftcapping");
  if (auto cap = attention.optional_number("attnLogitSoftcapping")) {
    if (!(*cap > 0.0)) attention.fail_field("attnLogitSoftcapping", "must be positive or null");
    spec.attn_logit_softcap = float(*cap);
  }
  int sliding_window = 0;
  if (auto w = attention.optional_integer("slidingWindow")) {
    sliding_window = *w;
    if (sliding_window <= 0) attention.fail_field("slidingWindow", "must be positive");
    check_int(attention.field("slidingWindow"), sliding_window, "sliding_window");
  } else if (any_sliding) {
    attention.fail_field("slidingWindow", "is missing or null but layerTypes has sliding layers");
  }
  const bool qk_norm = attention.required_boolean("queryKeyNorm");
  const bool v_norm = attention.required_boolean("valueNorm");
  const auto qk_norm_layers = layer_mask(attention, "queryKeyNormLayers", num_layers);
  const auto qk_weight_layers = layer_mask(attention, "queryKeyNormWeightLayers", num_layers);
  if (!attention.optional_boolean("causal").value_or(true)) {
    attention.fail_field("causal", "is false: only causal attention is implemented");
  }
  require_false(attention, "attentionBias", "attention projection biases are not implemented");
  check_bool(attention.field("attentionBias"), attention.boolean("attentionBias", false),
             "attention_bias");
  require_false(attention, "attentionOutputGate", "gated attention output is not implemented");

  // Normalization.
  const ObjectReader norm = mi.required_object("normalization");
  norm.allow_only({"rmsNormEps", "rmsNormWeightOffset", "postAttentionNorm", "preFeedforwardNorm",
                   "postFeedforwardNorm"});
  const double eps = norm.required_number("rmsNormEps");
  if (!(eps > 0.0)) norm.fail_field("rmsNormEps", "must be positive");
  spec.rms_eps = float(eps);
  check_number(norm.field("rmsNormEps"), eps, "rms_norm_eps", true);
  if (auto v = arch.optional_number("rmsNormEps"); v && float(*v) != spec.rms_eps) {
    contradiction(source_, arch.field("rmsNormEps"), num_text(*v), norm.field("rmsNormEps"),
                  num_text(eps));
  }
  spec.norm_weight_offset = norm.required_boolean("rmsNormWeightOffset");
  spec.post_attention_norm = norm.boolean("postAttentionNorm", true);
  spec.pre_ffn_norm = norm.boolean("preFeedforwardNorm", true);
  spec.post_ffn_norm = norm.boolean("postFeedforwardNorm", true);

  // FFN.
  const ObjectReader ffn = mi.required_object("ffn");
  ffn.allow_only({"activation", "gatedActivation", "branchMode", "useDoubleWideMlp", "swigluLimit"});
  const std::string activation = ffn.required_string("activation");
  // Doppler's "gelu" is the tanh approximation (the HF config says gelu_pytorch_tanh).
  if (activation != "gelu" && activation != "gelu_tanh" && activation != "gelu_pytorch_tanh" &&
      activation != "geglu") {
    ffn.fail_field("activation", detail::squote(activation) + " is not supported (expected gelu)");
  }
  if (!ffn.required_boolean("gatedActivation") && activation != "geglu") {
    ffn.fail_field("gatedActivation", "is false: only the gated FFN is implemented");
  }
  spec.activation = "gelu_tanh";
  if (raw_) {
    if (auto act = raw_->optional_string("hidden_activation");
        act && *act != "gelu_pytorch_tanh" && *act != "gelu_tanh") {
      contradiction(source_, ffn.field("activation"), detail::squote(activation),
                    raw_->field("hidden_activation"), detail::squote(*act));
    }
  }
  if (auto mode = ffn.optional_string("branchMode"); mode && *mode != "auto" && *mode != "dense") {
    ffn.fail_field("branchMode", detail::squote(*mode) + " is not supported (dense FFN only)");
  }
  const bool double_wide = ffn.boolean("useDoubleWideMlp", false);
  check_bool(ffn.field("useDoubleWideMlp"), double_wide, "use_double_wide_mlp");
  require_null(ffn, "swigluLimit", "SwiGLU clamping does not apply to a GELU FFN");

  // RoPE.
  const ObjectReader rope = mi.required_object("rope");
  rope.allow_only({"ropeTheta", "ropeLocalTheta", "ropeInterleaved", "mropeInterleaved",
                   "mropeSection", "partialRotaryFactor", "ropeLocalPartialRotaryFactor",
                   "ropeFrequencyBaseDim", "ropeLocalFrequencyBaseDim", "ropeScalingType",
                   "ropeScalingFactor", "ropeLocalScalingType", "ropeLocalScalingFactor",
                   "yarnBetaFast", "yarnBetaSlow", "yarnOriginalMaxPos", "ropeLocalYarnBetaFast",
                   "ropeLocalYarnBetaSlow", "ropeLocalYarnOriginalMaxPos"});
  require_false(rope, "ropeInterleaved", "only non-interleaved (rotate_half) RoPE is implemented");
  require_false(rope, "mropeInterleaved", "multimodal RoPE is not implemented");
  require_null(rope, "mropeSection", "multimodal RoPE is not implemented");
  for (const char* key : {"yarnBetaFast", "yarnBetaSlow", "yarnOriginalMaxPos",
                          "ropeLocalYarnBetaFast", "ropeLocalYarnBetaSlow",
                          "ropeLocalYarnOriginalMaxPos"}) {
    require_null(rope, key, "YaRN RoPE is not implemented");
  }
  const double theta = rope.required_number("ropeTheta");
  if (!(theta > 0.0)) rope.fail_field("ropeTheta", "must be positive");
  check_number(rope.field("ropeTheta"), theta, "rope_theta");
  if (auto v = arch.optional_number("ropeTheta"); v && *v != theta) {
    contradiction(source_, arch.field("ropeTheta"), num_text(*v), rope.field("ropeTheta"),
                  num_text(theta));
  }
  double local_theta = theta;  // Doppler: null local theta = same as ropeTheta
  if (auto v = rope.optional_number("ropeLocalTheta")) {
    local_theta = *v;
    if (!(local_theta > 0.0)) rope.fail_field("ropeLocalTheta", "must be positive");
    check_number(rope.field("ropeLocalTheta"), local_theta, "rope_local_base_freq");
  }
  auto partial = [&](const char* key) {
    const double p = rope.optional_number(key).value_or(1.0);
    if (!(p > 0.0 && p <= 1.0)) rope.fail_field(key, "must be in (0, 1], got " + num_text(p));
    return p;
  };
  const double full_partial = partial("partialRotaryFactor");
  const double local_partial = partial("ropeLocalPartialRotaryFactor");
  auto base_dim = [&](const char* key, int fallback) {
    const int d = rope.optional_integer(key).value_or(fallback);
    if (d <= 0) rope.fail_field(key, "must be positive");
    return d;
  };
  const int full_base = base_dim("ropeFrequencyBaseDim", global_head_dim);
  const int local_base = base_dim("ropeLocalFrequencyBaseDim", head_dim);
  // Scaling: only linear (inv_freq / factor) is implemented; no type means no scaling, so a
  // factor other than 1 without a type is an unresolved choice.
  auto scaling = [&](const char* type_key, const char* factor_key) {
    const double factor = rope.number(factor_key, 1.0);
    if (!(factor > 0.0)) rope.fail_field(factor_key, "must be positive");
    const auto type = rope.optional_string(type_key);
    if (type && *type != "linear") {
      rope.fail_field(type_key, detail::squote(*type) + " is not supported (null or linear)");
    }
    if (!type && factor != 1.0) {
      rope.fail_field(factor_key, "is " + num_text(factor) + " but `" + rope.field(type_key) +
                                      "` is null: set the type to 'linear' or the factor to 1");
    }
    return factor;
  };
  const double full_scaling = scaling("ropeScalingType", "ropeScalingFactor");
  const double local_scaling = scaling("ropeLocalScalingType", "ropeLocalScalingFactor");
  if (attention.has_value("ropeScalingFactor") &&
      attention.number("ropeScalingFactor", 1.0) != full_scaling) {
    contradiction(source_, attention.field("ropeScalingFactor"),
                  num_text(attention.number("ropeScalingFactor", 1.0)), rope.field("ropeScalingFactor"),
                  num_text(full_scaling));
  }
  if (auto deprecated = attention.optional_string("ropeScalingType");
      deprecated && deprecated != rope.optional_string("ropeScalingType")) {
    contradiction(source_, attention.field("ropeScalingType"), detail::squote(*deprecated),
                  rope.field("ropeScalingType"),
                  detail::show(rope.has("ropeScalingType") ? *rope.find("ropeScalingType") : json()));
  }
  if (raw_) {
    // The hand-written rawConfig carries a stray rope_scaling; the contract's factor wins.
    if (auto rs = raw_->optional_object("rope_scaling")) {
      if (auto f = rs->optional_number("factor"); f && *f != full_scaling) {
        notes.push_back(bq(rs->field("factor")) + " " + num_text(*f) + " ignored: " +
                        bq(rope.field("ropeScalingFactor")) + " is " + num_text(full_scaling) +
                        " (the official Gemma 4 config has no rope scaling)");
      }
    }
    check_bool(arch.field("attentionKeyEqualsValue"), k_eq_v, "attention_k_eq_v");
  }

  // Output.
  const ObjectReader output = mi.required_object("output");
  output.allow_only({"finalLogitSoftcapping", "tieWordEmbeddings", "scaleEmbeddings",
                     "embeddingTranspose", "embeddingVocabSize", "embeddingPostprocessor"});
  output.require_present("finalLogitSoftcapping");
  if (auto cap = output.optional_number("finalLogitSoftcapping")) {
    if (!(*cap > 0.0)) output.fail_field("finalLogitSoftcapping", "must be positive or null");
    spec.final_logit_softcap = float(*cap);
    check_number(output.field("finalLogitSoftcapping"), *cap, "final_logit_softcapping");
  }
  spec.tie_embeddings = output.required_boolean("tieWordEmbeddings");
  check_bool(output.field("tieWordEmbeddings"), spec.tie_embeddings, "tie_word_embeddings");
  spec.embedding_scale =
      output.required_boolean("scaleEmbeddings") ? std::sqrt(float(spec.hidden_size)) : 1.0f;
  require_false(output, "embeddingTranspose", "transposed embedding tables are not supported");
  if (auto v = output.optional_integer("embeddingVocabSize"); v && *v != spec.vocab_size) {
    contradiction(source_, output.field("embeddingVocabSize"), std::to_string(*v),
                  arch.field("vocabSize"), std::to_string(spec.vocab_size));
  }
  require_null(output, "embeddingPostprocessor", "embedding postprocessors are not supported");

  // Chat template.
  if (auto chat = mi.optional_object("chatTemplate")) {
    chat.value().allow_only({"type", "enabled", "custom"});
    require_null(*chat, "custom", "custom chat templates are not supported");
    const auto type = chat->optional_string("type");
    if (!type) {
      spec.chat_template = "";
    } else if (*type == "gemma4") {
      spec.chat_template = "gemma4";
    } else if (*type == "gemma" || *type == "gemma3") {
      spec.chat_template = "gemma3";
    } else {
      chat->fail_field("type", detail::squote(*type) + " is not supported (gemma4, gemma3 or null)");
    }
    if (!chat->boolean("enabled", true) && !spec.chat_template.empty()) {
      notes.push_back("chat template '" + spec.chat_template + "' disabled by " +
                      bq(chat->field("enabled")));
      spec.chat_template = "";
    }
  }

  // Tokens: the packaged tokenizer's ids; rawConfig's must agree.
  std::optional<ObjectReader> tok;
  for (const ObjectReader* holder : {&runtime, static_cast<const ObjectReader*>(&root_)}) {
    if (tok) break;
    if (auto t = holder->optional_object("tokenizer")) {
      tok = t->has_value("litertlm") ? t->optional_object("litertlm") : t;
    }
  }
  spec.tokens = SpecialTokens{};
  std::vector<int> stop;
  auto add_stop = [&](int id) {
    if (std::find(stop.begin(), stop.end(), id) == stop.end()) stop.push_back(id);
  };
  auto raw_eos = [&](const ObjectReader& r) -> std::vector<int> {
    const json* v = r.find("eos_token_id");
    int one = 0;
    if (v && detail::as_int(*v, one)) return {one};
    return r.optional_int_list("eos_token_id").value_or(std::vector<int>{});
  };
  auto pick = [&](const char* tok_key, const char* raw_key, int& out) {
    std::optional<int> from_tok = tok ? tok->optional_integer(tok_key) : std::nullopt;
    std::optional<int> from_raw = raw_ ? raw_->optional_integer(raw_key) : std::nullopt;
    if (from_tok && from_raw && *from_tok != *from_raw) {
      contradiction(source_, tok->field(tok_key), std::to_string(*from_tok), raw_->field(raw_key),
                    std::to_string(*from_raw));
    }
    if (from_tok) out = *from_tok;
    else if (from_raw) out = *from_raw;
  };
  pick("padTokenId", "pad_token_id", spec.tokens.pad);
  pick("bosTokenId", "bos_token_id", spec.tokens.bos);
  pick("unkTokenId", "unk_token_id", spec.tokens.unk);
  if (tok) {
    if (auto v = tok->optional_integer("vocabSize"); v && *v != spec.vocab_size) {
      contradiction(source_, tok->field("vocabSize"), std::to_string(*v), arch.field("vocabSize"),
                    std::to_string(spec.vocab_size));
    }
    if (auto list = tok->optional_int_list("eosTokens")) {
      for (int id : *list) add_stop(id);
    }
    if (auto eos = tok->optional_integer("eosTokenId")) {
      spec.tokens.eos = *eos;
      add_stop(*eos);
    } else if (!stop.empty()) {
      spec.tokens.eos = stop.front();
    }
  }
  if (stop.empty()) {
    // No tokenizer ids: rawConfig's eos ids (text config first, then the wrapper's).
    if (raw_) for (int id : raw_eos(*raw_)) add_stop(id);
    if (raw_top && raw_top->has("text_config")) for (int id : raw_eos(*raw_top)) add_stop(id);
    if (!stop.empty()) spec.tokens.eos = stop.front();
  } else {
    for (const ObjectReader* r : {raw_ ? &*raw_ : nullptr, raw_top ? &*raw_top : nullptr}) {
      if (r == nullptr) continue;
      for (int id : raw_eos(*r)) {
        if (std::find(stop.begin(), stop.end(), id) == stop.end()) {
          notes.push_back(bq(r->field("eos_token_id")) + " lists " + std::to_string(id) +
                          ", not among the tokenizer's eos tokens: not a stop id");
        }
      }
    }
  }
  if (stop.empty()) notes.push_back("no eos ids declared: generation stops only on the length limit");
  spec.tokens.stop = stop;

  // Package: which layers carry learned scalars; the unsupported block.
  std::optional<ObjectReader> litert;
  for (const ObjectReader* holder : {static_cast<const ObjectReader*>(&root_), &runtime}) {
    if (litert) break;
    if (auto package = holder->optional_object("package")) {
      litert = package->optional_object("litertlm");
    }
  }
  std::optional<std::vector<bool>> scalar_layers;
  float missing_scalar = 1.0f;
  if (litert) {
    scalar_layers = layer_mask(*litert, "layerScalarLayers", num_layers);
    missing_scalar = float(litert->number("missingLayerScalarValue", 1.0));
    if (!std::isfinite(missing_scalar)) litert->fail_field("missingLayerScalarValue", "must be finite");
  }
  auto read_unsupported = [&](const ObjectReader& holder) -> std::optional<Unsupported> {
    auto block = holder.optional_object("unsupported");
    if (!block) return std::nullopt;
    block->allow_only({"code", "message", "recommendation"});
    return Unsupported{block->required_string("code"), block->string("message", ""),
                       block->optional_string("recommendation").value_or("")};
  };
  spec.unsupported = read_unsupported(mi);
  if (litert) {
    if (auto from_package = read_unsupported(*litert)) {
      if (!spec.unsupported) {
        spec.unsupported = from_package;
      } else if (from_package->code != spec.unsupported->code) {
        notes.push_back(bq(litert->field("unsupported.code")) + " '" + from_package->code +
                        "' differs from " + bq(mi.field("unsupported.code")) + " '" +
                        spec.unsupported->code + "': reporting the latter");
      }
    }
  }

  // Layers.
  for (int i = 0; i < num_layers; ++i) {
    const AttentionKind kind = kinds[size_t(i)];
    const bool full = kind == AttentionKind::Full;
    LayerSpec l;
    l.kind = kind;
    l.num_q_heads = num_heads;
    l.head_dim = full ? global_head_dim : head_dim;
    // As Gemma4TextConfig: the global KV head count applies to full layers of k=v models.
    l.num_kv_heads = (full && k_eq_v && num_global_kv) ? *num_global_kv : num_kv_heads;
    if (num_heads % l.num_kv_heads != 0) {
      const bool global = full && k_eq_v && num_global_kv;
      const char* kv_key = global ? "numGlobalKeyValueHeads" : "numKeyValueHeads";
      detail::fail(source_, bq(arch.field("numAttentionHeads")) + " " + std::to_string(num_heads) +
                                " is not divisible by " + bq(arch.field(kv_key)) + " " +
                                std::to_string(l.num_kv_heads));
    }
    if (l.head_dim % 2 != 0) {
      arch.fail_field(full ? "globalHeadDim" : "headDim", "must be even");
    }
    l.window = full ? 0 : sliding_window;
    l.k_eq_v = k_eq_v && full;
    l.q_norm = l.k_norm = qk_norm && (!qk_norm_layers || (*qk_norm_layers)[size_t(i)]);
    const bool learned = !qk_weight_layers || (*qk_weight_layers)[size_t(i)];
    if (learned && qk_weight_layers && !l.q_norm) {
      attention.fail_field("queryKeyNormWeightLayers",
                           "lists layer " + std::to_string(i) + ", which has no q/k norm");
    }
    l.q_norm_weight = l.k_norm_weight = l.q_norm && learned;
    l.v_norm = v_norm;
    l.has_layer_scalar = !scalar_layers || (*scalar_layers)[size_t(i)];
    l.missing_layer_scalar = missing_scalar;
    l.ffn_dim = ffn_dim;
    l.rope.theta = full ? theta : local_theta;
    l.rope.partial_factor = full ? full_partial : local_partial;
    l.rope.freq_base_dim = full ? full_base : local_base;
    l.rope.scaling_factor = full ? full_scaling : local_scaling;
    l.rope.type = detail::rope_type_for(l.rope.partial_factor, l.rope.freq_base_dim, l.head_dim);
    l.num_experts = num_experts;
    l.top_k_experts = num_experts > 0 ? top_k : 0;
    l.expert_ffn_dim = num_experts > 0 ? expert_dim : 0;
    spec.layers.push_back(l);
  }
  const int num_shared = arch.integer("numKvSharedLayers", 0);
  check_int(arch.field("numKvSharedLayers"), num_shared, "num_kv_shared_layers");
  detail::assign_kv_sharing(spec, num_shared, double_wide, arch.field("numKvSharedLayers"));
  if (double_wide && num_shared == 0)
    notes.push_back(bq(ffn.field("useDoubleWideMlp")) + " true has no effect: only KV-shared layers are double-wide");

  detail::validate_spec(spec);
  return spec;
}

}  // namespace

ModelSpec spec_from_manifest(const nlohmann::json& manifest, const std::string& source) {
  return ManifestReader(manifest, source).build();
}

}  // namespace lumen::spec

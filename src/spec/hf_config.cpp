// ModelSpec from a Hugging Face config.json (Gemma4TextConfig, or the Gemma4Config wrapper
// with `text_config`). Absent fields take the defaults transformers' Gemma4TextConfig has;
// anything this engine does not implement, and any key it does not know, is refused.
#include <algorithm>
#include <cmath>
#include <map>

#include "spec/model_spec.h"
#include "spec/spec_internal.h"

namespace lumen::spec {
namespace {

using detail::json;
using detail::ObjectReader;
using KeySet = std::set<std::string, std::less<>>;

// Keys every PreTrainedConfig may write (transformers 4.x and 5.x, including the
// generation parameters older versions stored in config.json). Read by nothing here.
const KeySet& generic_keys() {
  static const KeySet keys = {
      "_name_or_path", "name_or_path", "_commit_hash", "_attn_implementation",
      "_attn_implementation_autoset", "attn_implementation", "_experts_implementation",
      "transformers_version", "architectures", "output_hidden_states", "output_attentions",
      "return_dict", "dtype", "torch_dtype", "chunk_size_feed_forward", "is_encoder_decoder",
      "id2label", "label2id", "num_labels", "problem_type", "use_cache", "initializer_range",
      "tie_last_hidden_states", "add_cross_attention", "cross_attention_hidden_size",
      "is_decoder", "tie_encoder_decoder", "decoder_start_token_id", "sep_token_id",
      "finetuning_task", "prefix", "pruned_heads", "task_specific_params", "tf_legacy_loss",
      "tokenizer_class", "torchscript", "use_bfloat16", "cache_implementation",
      // generation parameters (popped by PreTrainedConfig, stored by 4.x versions)
      "max_length", "min_length", "do_sample", "early_stopping", "num_beams", "temperature",
      "top_k", "top_p", "typical_p", "repetition_penalty", "length_penalty",
      "no_repeat_ngram_size", "encoder_no_repeat_ngram_size", "bad_words_ids",
      "num_return_sequences", "output_scores", "return_dict_in_generate", "forced_bos_token_id",
      "forced_eos_token_id", "remove_invalid_values", "exponential_decay_length_penalty",
      "suppress_tokens", "begin_suppress_tokens", "epsilon_cutoff", "eta_cutoff",
      "encoder_repetition_penalty", "num_assistant_tokens", "num_assistant_tokens_schedule",
      "assistant_confidence_threshold", "assistant_lookbehind", "target_lookbehind",
      "num_beam_groups", "diversity_penalty"};
  return keys;
}

// Gemma4TextConfig's fields, the kwargs its __post_init__ pops, and legacy Gemma 3 style
// keys found in hand-written configs.
const KeySet& text_keys() {
  static const KeySet keys = [] {
    KeySet k = generic_keys();
    for (const char* name :
         {"model_type", "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers",
          "num_attention_heads", "num_key_value_heads", "head_dim", "hidden_activation",
          "max_position_embeddings", "rms_norm_eps", "pad_token_id", "eos_token_id",
          "bos_token_id", "tie_word_embeddings", "rope_parameters", "attention_bias",
          "attention_dropout", "sliding_window", "layer_types", "final_logit_softcapping",
          "use_bidirectional_attention", "vocab_size_per_layer_input",
          "hidden_size_per_layer_input", "attention_k_eq_v", "num_kv_shared_layers",
          "enable_moe_block", "use_double_wide_mlp", "num_experts", "top_k_experts",
          "moe_intermediate_size", "global_head_dim", "num_global_key_value_heads",
          "per_layer_config", "rope_scaling", "rope_theta", "rope_local_base_freq",
          "query_pre_attn_scalar", "attn_logit_softcapping", "sliding_window_pattern",
          "quantization_config"}) {
      k.insert(name);
    }
    return k;
  }();
  return keys;
}

// Gemma4Config's own fields (the multimodal wrapper) plus the multimodal token ids real
// checkpoints carry. Vision and audio are not run by this engine and are not inspected.
const KeySet& wrapper_keys() {
  static const KeySet keys = [] {
    KeySet k = generic_keys();
    for (const char* name :
         {"model_type", "text_config", "vision_config", "audio_config", "boi_token_id",
          "eoi_token_id", "image_token_id", "video_token_id", "boa_token_id", "eoa_token_id",
          "eoa_token_index", "audio_token_id", "boi_token_index", "eoi_token_index",
          "image_token_index", "vision_soft_tokens_per_image", "mm_tokens_per_image",
          "tie_word_embeddings", "pad_token_id", "eos_token_id", "bos_token_id",
          "quantization_config"}) {
      k.insert(name);
    }
    return k;
  }();
  return keys;
}

const char* kExpectedTypes = "gemma4, gemma4_text, gemma4_unified, gemma4_unified_text";

// `eos_token_id` as an int, a list of ints, or null.
std::optional<std::vector<int>> read_eos(const ObjectReader& r) {
  const json* v = r.find("eos_token_id");
  if (v == nullptr || v->is_null()) return std::nullopt;
  int single = 0;
  if (detail::as_int(*v, single)) return std::vector<int>{single};
  if (!v->is_array()) r.fail_type("eos_token_id", "an integer or an array of integers");
  return r.optional_int_list("eos_token_id");
}

// Rope parameters for one layer type, resolved to this engine's RopeSpec.
struct RopeChoice {
  std::string type;  // "default" | "proportional"
  double theta = 10000.0;
  double partial_factor = 1.0;
  double factor = 1.0;
};

RopeChoice read_rope_entry(const ObjectReader& entry, std::vector<std::string>& notes) {
  entry.allow_only({"rope_type", "rope_theta", "partial_rotary_factor", "factor"});
  RopeChoice c;
  c.type = entry.string("rope_type", "default");
  // transformers falls back to its default_theta (10000) when rope_theta is omitted.
  c.theta = entry.number("rope_theta", 10000.0);
  const double partial = entry.number("partial_rotary_factor", 1.0);
  const double factor = entry.number("factor", 1.0);
  if (c.type == "default") {
    // transformers' default rope rotates every dim and never reads these two.
    if (partial != 1.0) {
      notes.push_back(detail::tick(entry.field("partial_rotary_factor")) + " " +
                      detail::show(*entry.find("partial_rotary_factor")) +
                      " ignored: rope_type 'default' rotates every dimension (as transformers)");
    }
    if (factor != 1.0) {
      notes.push_back(detail::tick(entry.field("factor")) + " " + detail::show(*entry.find("factor")) +
                      " ignored: rope_type 'default' applies no scaling (as transformers)");
    }
  } else if (c.type == "proportional") {
    if (!(partial > 0.0 && partial <= 1.0)) {
      entry.fail_field("partial_rotary_factor",
                       "must be in (0, 1], got " + detail::show(*entry.find("partial_rotary_factor")));
    }
    if (!(factor > 0.0)) entry.fail_field("factor", "must be positive");
    c.partial_factor = partial;
    c.factor = factor;
  } else {
    entry.fail_field("rope_type", detail::squote(c.type) +
                                      " is not supported (this engine implements 'default' and "
                                      "'proportional')");
  }
  if (!(c.theta > 0.0)) entry.fail_field("rope_theta", "must be positive");
  return c;
}

// Per-layer overrides from `per_layer_config`: keyed by layer index (save_pretrained writes
// zero-padded strings such as "05") or by layer type name.
struct LayerOverride {
  std::optional<int> head_dim;
  std::optional<int> num_kv_heads;
  std::string head_dim_field;
  std::string kv_field;
};

void read_override(const ObjectReader& entry, LayerOverride& out) {
  entry.allow_only({"head_dim", "num_key_value_heads"});
  if (auto v = entry.optional_integer("head_dim")) {
    out.head_dim = v;
    out.head_dim_field = entry.field("head_dim");
  }
  if (auto v = entry.optional_integer("num_key_value_heads")) {
    out.num_kv_heads = v;
    out.kv_field = entry.field("num_key_value_heads");
  }
}

bool parse_index(const std::string& key, int& index) {
  if (key.empty() || key.size() > 9) return false;
  index = 0;
  for (char c : key) {
    if (c < '0' || c > '9') return false;
    index = index * 10 + (c - '0');
  }
  return true;
}

ModelSpec build_from_text_config(const ObjectReader& t, const std::string& model_type,
                                 const std::optional<ObjectReader>& wrapper) {
  ModelSpec spec;
  spec.source = t.source();
  spec.source_kind = "hf-config";
  spec.model_type = model_type;
  spec.family = "gemma4";
  std::vector<std::string>& notes = spec.notes;

  t.allow_only(text_keys());

  // Refused first: features whose absence would make everything below wrong.
  if (t.has_value("quantization_config")) {
    t.fail_field("quantization_config", "is set: pre-quantized HF checkpoints are not supported");
  }
  if (auto v = t.find("use_bidirectional_attention"); v && !v->is_null()) {
    if (!v->is_string()) t.fail_type("use_bidirectional_attention", "null, 'all' or 'vision'");
    t.fail_field("use_bidirectional_attention",
                 "is " + detail::show(*v) + ": only causal attention is implemented");
  }
  if (t.boolean("attention_bias", false)) {
    t.fail_field("attention_bias", "is true: attention projection biases are not implemented");
  }
  // Type checks of fields read by nothing else, so that a malformed file is still refused.
  t.optional_number("attention_dropout");

  spec.vocab_size = t.integer("vocab_size", 262144);
  spec.hidden_size = t.integer("hidden_size", 2304);
  const int ffn_dim = t.integer("intermediate_size", 9216);
  const int num_layers = t.integer("num_hidden_layers", 30);
  const int num_heads = t.integer("num_attention_heads", 8);
  const int num_kv_heads = t.integer("num_key_value_heads", 4);
  const int head_dim = t.integer("head_dim", 256);
  const int sliding_window = t.integer("sliding_window", 512);
  spec.max_positions = t.integer("max_position_embeddings", 131072);
  spec.rms_eps = float(t.number("rms_norm_eps", 1e-6));
  const bool k_eq_v = t.boolean("attention_k_eq_v", false);
  const int global_head_dim = t.integer("global_head_dim", 512);
  const std::optional<int> num_global_kv = t.optional_integer("num_global_key_value_heads");

  auto positive = [&](const char* key, int value) {
    if (value <= 0) t.fail_field(key, "must be positive, got " + std::to_string(value));
  };
  positive("vocab_size", spec.vocab_size);
  positive("hidden_size", spec.hidden_size);
  positive("intermediate_size", ffn_dim);
  positive("num_hidden_layers", num_layers);
  detail::check_layer_count(t.source(), t.field("num_hidden_layers"), num_layers);
  positive("num_attention_heads", num_heads);
  positive("num_key_value_heads", num_kv_heads);
  positive("head_dim", head_dim);
  positive("sliding_window", sliding_window);
  positive("max_position_embeddings", spec.max_positions);
  if (!(spec.rms_eps > 0.0f)) t.fail_field("rms_norm_eps", "must be positive");

  const std::string activation = t.string("hidden_activation", "gelu_pytorch_tanh");
  if (activation != "gelu_pytorch_tanh" && activation != "gelu_tanh") {
    t.fail_field("hidden_activation", detail::squote(activation) +
                                          " is not supported (expected gelu_pytorch_tanh)");
  }
  spec.activation = "gelu_tanh";

  // Layer types: default 5 sliding : 1 full; transformers forces the last layer to full.
  std::vector<AttentionKind> kinds;
  if (auto types = t.optional_string_list("layer_types")) {
    if (int(types->size()) != num_layers) {
      t.fail_field("layer_types", "has " + std::to_string(types->size()) +
                                      " entries but num_hidden_layers is " +
                                      std::to_string(num_layers));
    }
    kinds = detail::parse_layer_types(t, "layer_types", *types);
  } else {
    for (int i = 0; i < num_layers; ++i) {
      kinds.push_back((i + 1) % 6 ? AttentionKind::Sliding : AttentionKind::Full);
    }
    if (auto pattern = t.optional_integer("sliding_window_pattern"); pattern && *pattern != 6) {
      notes.push_back("sliding_window_pattern " + std::to_string(*pattern) +
                      " ignored: without layer_types transformers uses 5 sliding : 1 full");
    }
  }
  if (kinds.back() != AttentionKind::Full) {
    kinds.back() = AttentionKind::Full;
    notes.push_back("layer " + std::to_string(num_layers - 1) +
                    " forced to full_attention: transformers' Gemma4TextConfig requires the "
                    "last layer to be full");
  }

  // Per-layer head dims and KV heads.
  std::vector<LayerOverride> overrides(static_cast<size_t>(num_layers));
  const bool has_per_layer = t.has_value("per_layer_config");
  if (has_per_layer) {
    const ObjectReader plc = *t.optional_object("per_layer_config");
    // Layer-type keys first, so that an index key for the same layer wins.
    for (int pass = 0; pass < 2; ++pass) {
      for (const auto& item : plc.raw().items()) {
        AttentionKind kind{};
        int index = 0;
        const bool by_type = detail::parse_layer_type(item.key(), kind);
        const bool by_index = !by_type && parse_index(item.key(), index);
        if (!by_type && !by_index) {
          plc.fail_field(item.key(), "is not a layer index or layer type");
        }
        if (by_index && index >= num_layers) {
          plc.fail_field(item.key(), "names layer " + std::to_string(index) + " but there are " +
                                         std::to_string(num_layers) + " layers");
        }
        if ((pass == 0) != by_type) continue;
        const auto entry = plc.optional_object(item.key());
        if (!entry) continue;
        for (int i = 0; i < num_layers; ++i) {
          const bool applies = by_type ? kinds[size_t(i)] == kind : i == index;
          if (applies) read_override(*entry, overrides[size_t(i)]);
        }
      }
    }
  }

  // RoPE per layer type.
  std::map<AttentionKind, RopeChoice> rope;
  if (auto params = t.optional_object("rope_parameters")) {
    if (params->has("rope_type") || params->has("rope_theta")) {
      t.fail_field("rope_parameters",
                   "must be keyed by layer type (sliding_attention, full_attention)");
    }
    params->allow_only({"sliding_attention", "full_attention"});
    for (AttentionKind kind : {AttentionKind::Sliding, AttentionKind::Full}) {
      if (std::find(kinds.begin(), kinds.end(), kind) == kinds.end()) continue;
      const char* name = detail::layer_type_name(kind);
      auto entry = params->optional_object(name);
      if (!entry) params->fail_field(name, "is missing: layers of this type need rope parameters");
      rope[kind] = read_rope_entry(*entry, notes);
    }
    if (t.has("rope_scaling")) notes.push_back("rope_scaling ignored: rope_parameters is present");
    for (const char* legacy : {"rope_theta", "rope_local_base_freq"}) {
      if (t.has(legacy)) notes.push_back(std::string(legacy) + " ignored: rope_parameters is present");
    }
  } else {
    // transformers' defaults, or the legacy flat fields of hand-written configs.
    rope[AttentionKind::Sliding] = {"default", 10000.0, 1.0, 1.0};
    rope[AttentionKind::Full] = {"proportional", 1000000.0, 0.25, 1.0};
    if (auto v = t.optional_number("rope_local_base_freq")) rope[AttentionKind::Sliding].theta = *v;
    if (auto v = t.optional_number("rope_theta")) rope[AttentionKind::Full].theta = *v;
    if (t.has("rope_theta") || t.has("rope_local_base_freq")) {
      notes.push_back("legacy rope_theta/rope_local_base_freq used for full/sliding layers "
                      "(no rope_parameters; transformers 5 would use its defaults 1e6/1e4)");
    }
    if (auto scaling = t.optional_object("rope_scaling")) {
      scaling->allow_only({"rope_type", "type", "factor"});
      const std::string type =
          scaling->string("rope_type", scaling->string("type", "default"));
      const double factor = scaling->number("factor", 1.0);
      if (type == "linear" || type == "proportional") {
        if (!(factor > 0.0)) scaling->fail_field("factor", "must be positive");
        rope[AttentionKind::Full].factor = factor;
      } else if (type == "default") {
        if (factor != 1.0) {
          notes.push_back("rope_scaling.factor " + detail::show(*scaling->find("factor")) +
                          " ignored: rope_scaling.rope_type is 'default' (no scaling)");
        }
      } else {
        scaling->fail_field("rope_type",
                            detail::squote(type) + " is not supported (default or linear)");
      }
    }
    for (auto& [kind, choice] : rope) {
      if (!(choice.theta > 0.0)) {
        t.fail_field(kind == AttentionKind::Full ? "rope_theta" : "rope_local_base_freq",
                     "must be positive");
      }
    }
  }

  // Fields Gemma 4's reference implementation does not read: recorded, not honoured.
  if (t.optional_number("query_pre_attn_scalar")) {
    notes.push_back("query_pre_attn_scalar " + detail::show(*t.find("query_pre_attn_scalar")) +
                    " ignored: Gemma 4 attention scale is 1.0 (q/k norms replace 1/sqrt(d))");
  }
  if (t.optional_number("attn_logit_softcapping")) {
    notes.push_back("attn_logit_softcapping " + detail::show(*t.find("attn_logit_softcapping")) +
                    " ignored: Gemma 4 applies no attention logit softcap");
  }

  if (auto cap = t.optional_number("final_logit_softcapping")) {
    if (!(*cap > 0.0)) t.fail_field("final_logit_softcapping", "must be positive or null");
    spec.final_logit_softcap = float(*cap);
  }
  spec.attention_scale = 1.0f;
  spec.attn_logit_softcap.reset();
  spec.norm_weight_offset = false;
  spec.embedding_scale = std::sqrt(float(spec.hidden_size));

  // Tied embeddings. Gemma4ForConditionalGeneration ties by the wrapper's own flag (default
  // true) and never reads text_config's; a disagreement is recorded.
  spec.tie_embeddings = t.boolean("tie_word_embeddings", true);
  if (wrapper) {
    const bool outer = wrapper->boolean("tie_word_embeddings", true);
    if (t.has("tie_word_embeddings") && outer != spec.tie_embeddings) {
      notes.push_back(std::string("`text_config.tie_word_embeddings` ") +
                      (spec.tie_embeddings ? "true" : "false") +
                      " ignored: the wrapper's `tie_word_embeddings` " + (outer ? "true" : "false") +
                      " decides (as transformers)");
    }
    spec.tie_embeddings = outer;
  }

  // Special tokens. The stop list merges the text config's eos ids with the wrapper's.
  auto read_id = [&](const ObjectReader& r, const char* key, int& out) {
    if (!r.has(key)) return;
    if (auto v = r.optional_integer(key)) {
      out = *v;
    } else {
      notes.push_back(detail::tick(r.field(key)) + " is null: keeping " + std::to_string(out));
    }
  };
  spec.tokens.pad = 0;
  spec.tokens.bos = 2;
  spec.tokens.eos = 1;
  if (wrapper) {
    read_id(*wrapper, "pad_token_id", spec.tokens.pad);
    read_id(*wrapper, "bos_token_id", spec.tokens.bos);
  }
  read_id(t, "pad_token_id", spec.tokens.pad);
  read_id(t, "bos_token_id", spec.tokens.bos);
  std::vector<int> stop;
  auto add_stop = [&](const std::vector<int>& ids) {
    for (int id : ids) {
      if (std::find(stop.begin(), stop.end(), id) == stop.end()) stop.push_back(id);
    }
  };
  const auto text_eos =
      t.has("eos_token_id") ? read_eos(t) : std::optional<std::vector<int>>(std::vector<int>{1});
  if (text_eos) add_stop(*text_eos);
  if (wrapper) {
    if (auto outer = read_eos(*wrapper)) add_stop(*outer);
  }
  if (stop.empty()) {
    notes.push_back("no eos_token_id: generation stops only on the length limit");
  } else {
    spec.tokens.eos = stop.front();
  }
  spec.tokens.stop = stop;
  spec.chat_template = "gemma4";

  // Layers.
  std::set<std::string> shadowed;
  for (int i = 0; i < num_layers; ++i) {
    const AttentionKind kind = kinds[size_t(i)];
    const bool full = kind == AttentionKind::Full;
    LayerSpec l;
    l.kind = kind;
    l.num_q_heads = num_heads;
    l.head_dim = head_dim;
    l.num_kv_heads = num_kv_heads;
    // Full dotted names of the fields the values came from, for errors.
    std::string hd_field = t.field("head_dim");
    std::string kv_field = t.field("num_key_value_heads");
    if (has_per_layer) {
      const LayerOverride& o = overrides[size_t(i)];
      if (o.head_dim) {
        l.head_dim = *o.head_dim;
        hd_field = o.head_dim_field;
      }
      if (o.num_kv_heads) {
        l.num_kv_heads = *o.num_kv_heads;
        kv_field = o.kv_field;
      }
    } else if (full) {
      l.head_dim = global_head_dim;
      hd_field = t.field("global_head_dim");
      // Gemma4TextConfig takes the global KV head count only for k=v models.
      if (k_eq_v && num_global_kv) {
        l.num_kv_heads = *num_global_kv;
        kv_field = t.field("num_global_key_value_heads");
      }
    }
    // transformers drops global_head_dim / num_global_key_value_heads when per_layer_config
    // is present; say so when they would have given another shape.
    if (has_per_layer && full) {
      if (t.has("global_head_dim") && l.head_dim != global_head_dim) {
        shadowed.insert("global_head_dim");
      }
      if (k_eq_v && num_global_kv && l.num_kv_heads != *num_global_kv) {
        shadowed.insert("num_global_key_value_heads");
      }
    }
    if (l.head_dim <= 0 || l.head_dim % 2 != 0) {
      detail::fail(t.source(), detail::tick(hd_field) + " must be positive and even, got " +
                                   std::to_string(l.head_dim) + " (layer " + std::to_string(i) + ")");
    }
    if (l.num_kv_heads <= 0 || num_heads % l.num_kv_heads != 0) {
      detail::fail(t.source(), detail::tick(t.field("num_attention_heads")) + " " +
                                   std::to_string(num_heads) + " is not divisible by " +
                                   detail::tick(kv_field) + " " + std::to_string(l.num_kv_heads) +
                                   " (layer " + std::to_string(i) + ")");
    }
    l.window = full ? 0 : sliding_window;
    l.k_eq_v = k_eq_v && full;
    // The HF checkpoint carries q/k norm gains and a layer scalar on every layer.
    l.q_norm = l.q_norm_weight = l.k_norm = l.k_norm_weight = l.v_norm = true;
    l.has_layer_scalar = true;
    l.missing_layer_scalar = 1.0f;
    l.ffn_dim = ffn_dim;
    const RopeChoice& r = rope.at(kind);
    l.rope.type = r.type;
    l.rope.theta = r.theta;
    l.rope.partial_factor = r.partial_factor;
    l.rope.freq_base_dim = l.head_dim;  // both rope types divide by the layer's own head dim
    l.rope.scaling_factor = r.factor;
    spec.layers.push_back(l);
  }

  // Per-layer input embeddings (E2B/E4B). transformers' default width is 256, so a config
  // that omits the key has them.
  spec.per_layer_input_dim = t.integer("hidden_size_per_layer_input", 256);
  if (spec.per_layer_input_dim < 0) t.fail_field("hidden_size_per_layer_input", "must not be negative");
  if (spec.has_per_layer_inputs()) {
    spec.per_layer_vocab = t.integer("vocab_size_per_layer_input", 262144);
    if (spec.per_layer_vocab <= 0) t.fail_field("vocab_size_per_layer_input", "must be positive");
    if (spec.per_layer_vocab < spec.vocab_size)
      notes.push_back("vocab_size_per_layer_input " + std::to_string(spec.per_layer_vocab) + " < vocab_size " +
                      std::to_string(spec.vocab_size) + ": ids past it have no per-layer input row (refused as input)");
  } else {
    t.optional_integer("vocab_size_per_layer_input");  // sizes a table this model does not have: type-checked only
  }

  // KV sharing and the double-wide MLP of the shared layers (E2B).
  const bool double_wide = t.boolean("use_double_wide_mlp", false);
  const int num_shared = t.integer("num_kv_shared_layers", 0);
  detail::assign_kv_sharing(spec, num_shared, double_wide, t.field("num_kv_shared_layers"));
  if (double_wide && num_shared == 0)
    notes.push_back("use_double_wide_mlp true has no effect: only KV-shared layers are double-wide (as transformers)");

  // Mixture of experts (26B-A4B): every layer gets the block.
  const auto num_experts = t.optional_integer("num_experts");
  const auto top_k = t.optional_integer("top_k_experts");
  const auto expert_dim = t.optional_integer("moe_intermediate_size");
  if (t.boolean("enable_moe_block", false)) {
    if (!num_experts) t.fail_field("num_experts", "is missing: enable_moe_block needs the number of experts");
    if (!top_k) t.fail_field("top_k_experts", "is missing: enable_moe_block needs the experts per token");
    if (!expert_dim) t.fail_field("moe_intermediate_size", "is missing: enable_moe_block needs the experts' width");
    if (*num_experts <= 0) t.fail_field("num_experts", "must be positive, got " + std::to_string(*num_experts));
    if (*top_k <= 0 || *top_k > *num_experts)
      t.fail_field("top_k_experts", "must be in 1 .. num_experts (" + std::to_string(*num_experts) + "), got " +
                                        std::to_string(*top_k));
    if (*expert_dim <= 0) t.fail_field("moe_intermediate_size", "must be positive, got " + std::to_string(*expert_dim));
    for (LayerSpec& l : spec.layers) {
      l.num_experts = *num_experts;
      l.top_k_experts = *top_k;
      l.expert_ffn_dim = *expert_dim;
    }
  }

  for (const std::string& key : shadowed) {
    notes.push_back(t.field(key) + " ignored: per_layer_config is present and decides the full "
                    "layers' shapes (as transformers)");
  }

  detail::validate_spec(spec);
  return spec;
}

}  // namespace

// hf_config_gemma3.cpp (declared here, not in model_spec.h: the Gemma 3 HF path is reached
// only through spec_from_hf_config).
ModelSpec spec_from_gemma3_hf_config(const nlohmann::json& config, const std::string& source);

ModelSpec spec_from_hf_config(const nlohmann::json& config, const std::string& source) {
  const ObjectReader top(config, "", source);
  if (!top.has("model_type")) {
    detail::fail(source, "`model_type` is missing (expected one of " +
                             std::string(kExpectedTypes) + ")");
  }
  const std::string model_type = top.required_string("model_type");
  if (model_type == "gemma3_text" || model_type == "gemma3") return spec_from_gemma3_hf_config(config, source);
  if (model_type == "gemma4_text" || model_type == "gemma4_unified_text") {
    return build_from_text_config(top, model_type, std::nullopt);
  }
  if (model_type == "gemma4" || model_type == "gemma4_unified") {
    top.allow_only(wrapper_keys());
    if (top.has_value("quantization_config")) {
      top.fail_field("quantization_config",
                     "is set: pre-quantized HF checkpoints are not supported");
    }
    if (!top.has_value("text_config")) {
      top.fail_field("text_config", "is missing: model_type '" + model_type +
                                        "' keeps the decoder in text_config");
    }
    const ObjectReader text = top.required_object("text_config");
    std::string text_type = model_type + "_text";
    if (text.has("model_type")) {
      text_type = text.required_string("model_type");
      if (text_type != "gemma4_text" && text_type != "gemma4_unified_text") {
        text.fail_field("model_type", detail::squote(text_type) +
                                          " is not a Gemma 4 text model (expected gemma4_text "
                                          "or gemma4_unified_text)");
      }
    }
    // Only ids and the tie flag are read from the wrapper; type-check its token ids anyway.
    for (const char* key : {"boi_token_id", "eoi_token_id", "image_token_id", "video_token_id",
                            "boa_token_id", "eoa_token_id", "eoa_token_index", "audio_token_id"}) {
      top.optional_integer(key);
    }
    return build_from_text_config(text, text_type, top);
  }
  detail::fail(source, "model_type '" + model_type + "' is not a Gemma 4 text model (expected one of " +
                           kExpectedTypes + ")");
}

}  // namespace lumen::spec

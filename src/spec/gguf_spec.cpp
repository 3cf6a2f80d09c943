// ModelSpec from the metadata of a GGUF file, for the two architectures llama.cpp's converter
// writes for Gemma text models: `gemma3` and `gemma4`. One ModelSpec, no second graph.
//
// gemma3: the converter writes only some hyperparameters; the rest are fixed by the
// architecture and llama.cpp (LLM_ARCH_GEMMA3) and transformers (Gemma3TextConfig defaults,
// which its GGUF loader keeps) agree on them:
//   - every 6th layer (index 5, 11, ...) is global, the others slide over
//     `attention.sliding_window` keys;
//   - sliding layers rotate with theta 10000 and no scaling; global layers with
//     `rope.freq_base` and the linear `rope.scaling.*` factor (4B and larger);
//   - q.k is scaled by query_pre_attn_scalar^-1/2, where query_pre_attn_scalar is the head
//     dim, except for the 62-layer 27B model (hidden / heads);
//   - the RMSNorm gains are stored with Gemma's "1 +" already added by the converter, so the
//     graph multiplies by the stored value (norm_weight_offset = false).
//
// gemma4 (llama.cpp's src/models/gemma4.cpp reads the same keys, and requires the same ones):
//   - `attention.sliding_window_pattern` is one BOOL per layer (true = sliding);
//   - sliding layers have `key_length_swa` wide heads rotated with `rope.freq_base_swa`; full
//     layers `key_length` wide heads rotated with `rope.freq_base` and the per-pair factors of
//     the `rope_freqs.weight` tensor, which is how the converter spells proportional RoPE: 1
//     for the rotated pairs, 1e30 (a frequency of ~0: pass-through) for the rest;
//   - `attention.head_count(_kv)` and `feed_forward_length` may be per-layer arrays;
//   - a block without `attn_v` uses its raw K projection as V (attention_k_eq_v), a block
//     without `layer_output_scale` has a layer scalar of 1 (both as llama.cpp);
//   - attention scale 1 (the q/k norms replace 1/sqrt(d)), weightless V norm, norm gains
//     used as stored (Gemma 4 has no "1 +");
//   - per-layer inputs (E2B/E4B): `embedding_length_per_layer_input` P > 0 and the
//     `per_layer_token_embd` table [rows, layers * P] (its rows: the per-layer vocabulary);
//   - KV sharing (E2B/E4B): the last `attention.shared_kv_layers` blocks read the keys and
//     values of the last earlier block of their attention kind (transformers' rule) and have
//     no attn_k / attn_v / attn_k_norm; the double-wide MLP is `feed_forward_length` per layer;
//   - experts (26B-A4B): a block is a mixture-of-experts block when it has a router
//     (`blk.N.ffn_gate_inp.weight`, as llama.cpp decides), with `expert_count` experts,
//     `expert_used_count` per token and `expert_feed_forward_length` wide (an integer or one
//     per layer).
//
// Every key of the architecture's namespace is either read or refused by name; so are values
// Lumen cannot run. Errors are one line naming the file and the key or tensor.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/tensor.h"
#include "quant/weight_matrix.h"
#include "spec/model_spec.h"
#include "spec/spec_internal.h"

namespace lumen::spec {
namespace {

using formats::GgufFile;
using formats::GgufValue;
using KeySet = std::set<std::string, std::less<>>;

constexpr int kGemma3SlidingPattern = 6;  // llama.cpp: hparams.set_swa_pattern(6)
constexpr double kGemma3LocalRopeTheta = 10000.0;
constexpr int kGemma3_27bLayers = 62;
// llama.cpp's defaults when the rope keys are absent (llama_hparams).
constexpr double kLlamaDefaultRopeTheta = 10000.0;
// A rope_freqs factor that keeps every angle of the context below this (radians) leaves its
// pair unrotated to f32 precision (cos rounds to 1, sin * x is below x's last bit): such a
// pair passes through, as the proportional RoPE of the checkpoint has it.
constexpr double kPassThroughAngle = 1e-9;

// Reads `<arch>.<name>` keys with one-line errors naming the file and key.
class ArchReader {
 public:
  ArchReader(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  const std::string& arch() const { return arch_; }
  std::string key(const std::string& name) const { return arch_ + "." + name; }
  const GgufValue* find(const std::string& name) const { return file_.find_metadata(key(name)); }
  bool has(const std::string& name) const { return find(name) != nullptr; }

  [[noreturn]] void fail(const std::string& name, const std::string& message) const {
    detail::fail(file_.path(), "metadata key '" + key(name) + "' " + message);
  }

  // Every `<arch>.*` key must be in `known` (refusing to ignore what Lumen does not read).
  void allow_only(const KeySet& known) const {
    const std::string prefix = arch_ + ".";
    for (const auto& [k, value] : file_.metadata()) {
      if (k.rfind(prefix, 0) != 0) continue;
      if (!known.count(std::string_view(k).substr(prefix.size())))
        detail::fail(file_.path(), "metadata key '" + printable(k) + "' is not one Lumen knows for " + arch_ +
                                       "; refusing to ignore it");
    }
  }

  int64_t required_int(const std::string& name, int64_t min_value = 1) const {
    const GgufValue* v = find(name);
    if (!v) fail(name, "is missing");
    return check_int(name, *v, min_value);
  }
  std::optional<int64_t> optional_int(const std::string& name, int64_t min_value = 1) const {
    const GgufValue* v = find(name);
    if (!v) return std::nullopt;
    return check_int(name, *v, min_value);
  }
  double required_float(const std::string& name) const {
    const GgufValue* v = find(name);
    if (!v) fail(name, "is missing");
    return check_float(name, *v);
  }
  std::optional<double> optional_float(const std::string& name) const {
    const GgufValue* v = find(name);
    if (!v) return std::nullopt;
    return check_float(name, *v);
  }

  // An integer, or one integer per layer (llama.cpp's get_key_or_arr): n_layers values.
  std::optional<std::vector<int64_t>> optional_per_layer_int(const std::string& name, int n_layers,
                                                             int64_t min_value = 1) const {
    const GgufValue* v = find(name);
    if (!v) return std::nullopt;
    if (const auto* a = v->array()) {
      if (a->size() != size_t(n_layers) || !formats::gguf_type_is_integer(a->element_type()))
        fail(name, "must be an integer or " + std::to_string(n_layers) + " integers (one per layer)");
      std::vector<int64_t> out;
      for (size_t i = 0; i < a->size(); ++i) {
        const GgufValue e = a->at(i);
        out.push_back(check_int(name + "[" + std::to_string(i) + "]", e, min_value));
      }
      return out;
    }
    return std::vector<int64_t>(size_t(n_layers), check_int(name, *v, min_value));
  }

  // One BOOL per layer.
  std::vector<bool> required_bool_per_layer(const std::string& name, int n_layers) const {
    const GgufValue* v = find(name);
    if (!v) fail(name, "is missing");
    const auto* a = v->array();
    if (!a || a->element_type() != formats::GgufType::BOOL || a->size() != size_t(n_layers))
      fail(name, "must be " + std::to_string(n_layers) + " BOOL values (one per layer), got " + v->summary());
    std::vector<bool> out;
    for (size_t i = 0; i < a->size(); ++i) out.push_back(*a->at(i).to_bool());
    return out;
  }

  // Optional string.
  std::optional<std::string> optional_string(const std::string& name) const {
    const GgufValue* v = find(name);
    if (!v) return std::nullopt;
    const auto s = v->to_string();
    if (!s) fail(name, std::string("is ") + formats::gguf_type_name(v->type()) + ", not a string");
    return std::string(*s);
  }

 private:
  int64_t check_int(const std::string& name, const GgufValue& v, int64_t min_value) const {
    const auto i = v.to_int();
    if (!i) fail(name, std::string("is ") + formats::gguf_type_name(v.type()) + ", not an integer");
    if (*i < min_value || *i > (int64_t(1) << 30))
      fail(name, "is " + std::to_string(*i) + ", outside [" + std::to_string(min_value) + ", 2^30]");
    return *i;
  }
  double check_float(const std::string& name, const GgufValue& v) const {
    const auto f = v.to_float();
    if (!f) fail(name, std::string("is ") + formats::gguf_type_name(v.type()) + ", not a number");
    if (!std::isfinite(*f)) fail(name, "is not finite");
    return *f;
  }

  const GgufFile& file_;
  std::string arch_;
};

// The `gemma3.*` keys the Gemma 3 builder reads (all others are refused).
const KeySet& known_gemma3_keys() {
  static const KeySet keys = {
      "context_length", "embedding_length", "block_count", "feed_forward_length",
      "attention.head_count", "attention.head_count_kv", "attention.key_length",
      "attention.value_length", "attention.layer_norm_rms_epsilon", "attention.sliding_window",
      "attention.sliding_window_pattern", "rope.freq_base", "rope.freq_base_swa",
      "rope.dimension_count", "rope.scaling.type", "rope.scaling.factor",
      "rope.scaling.original_context_length", "attn_logit_softcapping",
      "final_logit_softcapping", "vocab_size"};
  return keys;
}

// The `gemma4.*` keys: what llama.cpp's converter writes for Gemma4ForCausalLM /
// Gemma4ForConditionalGeneration (conversion/gemma.py Gemma4Model and TextModel's common
// keys) and llama.cpp reads for the architecture, E2B/E4B's and 26B-A4B's included.
const KeySet& known_gemma4_keys() {
  static const KeySet keys = {
      "context_length", "embedding_length", "block_count", "feed_forward_length",
      "attention.head_count", "attention.head_count_kv", "attention.key_length",
      "attention.value_length", "attention.key_length_swa", "attention.value_length_swa",
      "attention.layer_norm_rms_epsilon", "attention.sliding_window",
      "attention.sliding_window_pattern", "attention.shared_kv_layers", "rope.freq_base",
      "rope.freq_base_swa", "rope.dimension_count", "rope.dimension_count_swa", "rope.scaling.type",
      "rope.scaling.factor", "final_logit_softcapping", "embedding_length_per_layer_input",
      "expert_count", "expert_used_count", "expert_feed_forward_length", "vocab_size"};
  return keys;
}

// `general.architecture`, checked to be a string.
std::string architecture_of(const GgufFile& file) {
  const GgufValue* v = file.find_metadata("general.architecture");
  if (!v) detail::fail(file.path(), "metadata key 'general.architecture' is missing");
  const auto name = v->to_string();
  if (!name)
    detail::fail(file.path(), std::string("metadata key 'general.architecture' is ") + formats::gguf_type_name(v->type()) +
                                  ", not a string");
  return std::string(*name);
}

// Gemma 3 layer kinds from `attention.sliding_window_pattern` when present (an integer N:
// every Nth layer is global; or one BOOL per layer, true = sliding), else the fixed pattern.
std::vector<AttentionKind> gemma3_layer_kinds(const ArchReader& arch, int n_layers) {
  std::vector<AttentionKind> kinds(size_t(n_layers), AttentionKind::Sliding);
  int pattern = kGemma3SlidingPattern;
  if (const GgufValue* v = arch.find("attention.sliding_window_pattern")) {
    if (v->array()) {
      const std::vector<bool> sliding = arch.required_bool_per_layer("attention.sliding_window_pattern", n_layers);
      for (int i = 0; i < n_layers; ++i)
        kinds[size_t(i)] = sliding[size_t(i)] ? AttentionKind::Sliding : AttentionKind::Full;
      return kinds;
    }
    pattern = int(arch.required_int("attention.sliding_window_pattern"));
  }
  for (int i = 0; i < n_layers; ++i)
    if ((i + 1) % pattern == 0) kinds[size_t(i)] = AttentionKind::Full;
  return kinds;
}

// The linear RoPE scaling factor of the global (full) layers from `rope.scaling.*` (llama.cpp
// applies it to the non-sliding layers only), 1 when absent.
double global_rope_scaling(const ArchReader& arch) {
  double scaling = 1.0;
  if (const std::optional<std::string> type = arch.optional_string("rope.scaling.type")) {
    if (type.value() == "linear") {
      scaling = arch.required_float("rope.scaling.factor");
      if (!(scaling > 0.0)) arch.fail("rope.scaling.factor", "must be positive");
    } else if (type.value() != "none") {
      arch.fail("rope.scaling.type", "is '" + printable(type.value()) + "'; Lumen implements 'linear' and 'none'");
    }
  } else if (const auto factor = arch.optional_float("rope.scaling.factor")) {
    // llama.cpp's default scaling type is linear; transformers reads a bare factor so too.
    scaling = *factor;
    if (!(scaling > 0.0)) arch.fail("rope.scaling.factor", "must be positive");
  }
  return scaling;
}

// The vocabulary size (rows of token_embd.weight, which must be hidden wide) and whether the
// output projection is tied to it.
void read_embedding(const GgufFile& file, const ArchReader& arch, ModelSpec& spec) {
  const std::string& path = file.path();
  const formats::GgufTensor* embed = file.find("token_embd.weight");
  if (!embed) detail::fail(path, "missing tensor 'token_embd.weight' (the token embedding)");
  if (embed->shape.size() != 2 || embed->shape[1] != spec.hidden_size)
    detail::fail(path, "tensor 'token_embd.weight' has shape " + formats::shape_to_string(embed->shape) +
                           " but embedding_length is " + std::to_string(spec.hidden_size));
  if (embed->shape[0] < 1 || embed->shape[0] > (int64_t(1) << 30))
    detail::fail(path, "tensor 'token_embd.weight' has an implausible vocabulary of " +
                           std::to_string(embed->shape[0]) + " rows");
  spec.vocab_size = int(embed->shape[0]);
  if (const auto v = arch.optional_int("vocab_size"); v && *v != spec.vocab_size)
    arch.fail("vocab_size", "is " + std::to_string(*v) + " but 'token_embd.weight' has " +
                                std::to_string(spec.vocab_size) + " rows");
  spec.tie_embeddings = file.find("output.weight") == nullptr;
  spec.embedding_scale = std::sqrt(float(spec.hidden_size));
}

// The turn markup of a family's chat format.
struct TurnTokens {
  std::string_view start;  // "<start_of_turn>" / "<|turn>"
  std::string_view end;    // "<end_of_turn>" / "<turn|>": a stop token
  const char* chat_format;  // ModelSpec::chat_template value
  const char* format_name;  // for notes
};

// Special ids, stop ids and the chat format from the tokenizer metadata.
void read_tokens(const GgufFile& file, const TurnTokens& turns, ModelSpec& spec) {
  std::vector<std::string>& notes = spec.notes;
  spec.tokens.stop.clear();
  if (!file.has("tokenizer.ggml.tokens")) {
    spec.tokens.stop.push_back(spec.tokens.eos);
    notes.push_back("no tokenizer metadata in the file");
    return;
  }
  const formats::GgufTokenizerData tok = file.tokenizer();
  if (tok.tokens.size() != size_t(spec.vocab_size))
    detail::fail(file.path(), "tokenizer.ggml.tokens has " + std::to_string(tok.tokens.size()) +
                                  " entries but 'token_embd.weight' has " + std::to_string(spec.vocab_size) + " rows");
  if (tok.pad_id) spec.tokens.pad = int(*tok.pad_id);
  if (tok.bos_id) spec.tokens.bos = int(*tok.bos_id);
  if (tok.eos_id) spec.tokens.eos = int(*tok.eos_id);
  if (tok.unk_id) spec.tokens.unk = int(*tok.unk_id);
  spec.tokens.stop.push_back(spec.tokens.eos);
  const auto turn_end = std::find(tok.tokens.begin(), tok.tokens.end(), turns.end);
  if (turn_end != tok.tokens.end() && int(turn_end - tok.tokens.begin()) != spec.tokens.eos)
    spec.tokens.stop.push_back(int(turn_end - tok.tokens.begin()));
  const bool has_turns = std::find(tok.tokens.begin(), tok.tokens.end(), turns.start) != tok.tokens.end();
  if (has_turns) spec.chat_template = turns.chat_format;
  const std::string format = turns.format_name;
  if (!tok.chat_template) {
    notes.push_back(has_turns ? "no tokenizer.chat_template in the file: the " + format + " turn format is used"
                              : "no tokenizer.chat_template and no turn tokens: plain text only");
  } else if (has_turns && tok.chat_template->find(turns.start) != std::string_view::npos) {
    notes.push_back("tokenizer.chat_template uses the " + format + " turns: Lumen's built-in " + format +
                    " chat format renders them");
  } else if (has_turns) {
    notes.push_back("tokenizer.chat_template does not use " + std::string(turns.start) + ": ignored, the " + format +
                    " turn format is used");
  } else {
    notes.push_back("tokenizer.chat_template ignored: the vocabulary has no " + std::string(turns.start) +
                    " token; plain text only");
  }
}

ModelSpec gemma3_spec(const GgufFile& file) {
  const std::string& path = file.path();
  const ArchReader arch(file, "gemma3");
  arch.allow_only(known_gemma3_keys());

  ModelSpec spec;
  spec.source = path;
  spec.source_kind = "gguf";
  spec.model_type = "gemma3";
  spec.family = "gemma3";
  std::vector<std::string>& notes = spec.notes;

  spec.hidden_size = int(arch.required_int("embedding_length"));
  spec.max_positions = int(arch.required_int("context_length"));
  spec.rms_eps = float(arch.required_float("attention.layer_norm_rms_epsilon"));
  const int n_layers = int(arch.required_int("block_count"));
  detail::check_layer_count(path, "metadata key 'gemma3.block_count'", n_layers);
  const int n_heads = int(arch.required_int("attention.head_count"));
  const int n_kv_heads = int(arch.optional_int("attention.head_count_kv").value_or(n_heads));
  const int head_dim = int(arch.optional_int("attention.key_length").value_or(spec.hidden_size / n_heads));
  if (const auto v = arch.optional_int("attention.value_length"); v && *v != head_dim)
    arch.fail("attention.value_length", "is " + std::to_string(*v) + " but attention.key_length is " +
                                            std::to_string(head_dim) + "; Gemma 3 needs them equal");
  const int ffn = int(arch.required_int("feed_forward_length"));
  const int window = int(arch.required_int("attention.sliding_window"));
  if (const auto rot = arch.optional_int("rope.dimension_count"); rot && *rot != head_dim)
    arch.fail("rope.dimension_count", "is " + std::to_string(*rot) + " but the head dim is " +
                                          std::to_string(head_dim) + "; Gemma 3 rotates every dimension");

  // Global layers: rope.freq_base with the optional linear scaling; sliding layers: 10000.
  const double global_theta = arch.optional_float("rope.freq_base").value_or(kLlamaDefaultRopeTheta);
  const double local_theta = arch.optional_float("rope.freq_base_swa").value_or(kGemma3LocalRopeTheta);
  const double global_scaling = global_rope_scaling(arch);

  // query_pre_attn_scalar: the head dim, except the 27B model (hidden / heads).
  double query_pre_attn_scalar = head_dim;
  if (n_layers == kGemma3_27bLayers) {
    query_pre_attn_scalar = double(spec.hidden_size) / n_heads;
    notes.push_back("62 layers (Gemma 3 27B): attention scaled by (hidden / heads)^-1/2");
  }
  spec.attention_scale = float(1.0 / std::sqrt(query_pre_attn_scalar));
  if (const auto cap = arch.optional_float("attn_logit_softcapping"); cap && *cap > 0)
    spec.attn_logit_softcap = float(*cap);
  if (const auto cap = arch.optional_float("final_logit_softcapping"); cap && *cap > 0)
    spec.final_logit_softcap = float(*cap);

  spec.norm_weight_offset = false;
  notes.push_back("norm gains stored as 1 + w (llama.cpp's converter adds Gemma's offset): used as stored");

  read_embedding(file, arch, spec);
  spec.activation = "gelu_tanh";
  read_tokens(file, {"<start_of_turn>", "<end_of_turn>", "gemma3", "Gemma 3"}, spec);

  const std::vector<AttentionKind> kinds = gemma3_layer_kinds(arch, n_layers);
  for (int i = 0; i < n_layers; ++i)
    spec.layers.push_back(detail::gemma3_layer(kinds[size_t(i)], n_heads, n_kv_heads, head_dim, window, ffn, local_theta,
                                               global_theta, global_scaling));
  detail::validate_spec(spec);
  return spec;
}

// Per-layer inputs (E2B/E4B): width P from `embedding_length_per_layer_input` (0: none), the
// per-layer vocabulary from the rows of `per_layer_token_embd.weight` ([rows, layers * P]).
void read_per_layer_inputs(const GgufFile& file, const ArchReader& arch, ModelSpec& spec) {
  const std::string& path = file.path();
  const int64_t P = arch.required_int("embedding_length_per_layer_input", 0);
  if (P == 0) return;
  const char* name = "per_layer_token_embd.weight";
  const formats::GgufTensor* t = file.find(name);
  const int64_t width = P * spec.num_layers();
  if (!t)
    detail::fail(path, std::string("missing tensor '") + name + "' (the per-layer input table [rows, " +
                           std::to_string(width) + "] that embedding_length_per_layer_input " + std::to_string(P) +
                           " announces)");
  if (t->shape.size() != 2 || t->shape[1] != width || t->shape[0] < 1 || t->shape[0] > (int64_t(1) << 30))
    detail::fail(path, std::string("tensor '") + name + "' has shape " + formats::shape_to_string(t->shape) +
                           " but " + std::to_string(spec.num_layers()) + " layers of per-layer inputs " +
                           std::to_string(P) + " wide need [rows, " + std::to_string(width) + "]");
  spec.per_layer_input_dim = int(P);
  spec.per_layer_vocab = int(t->shape[0]);
  spec.notes.push_back("per-layer inputs: " + std::to_string(P) + " per layer, a table of " +
                       std::to_string(spec.per_layer_vocab) + " rows");
  if (spec.per_layer_vocab < spec.vocab_size)
    spec.notes.push_back("per_layer_token_embd has " + std::to_string(spec.per_layer_vocab) + " rows < vocabulary " +
                         std::to_string(spec.vocab_size) + ": ids past it have no per-layer input row (refused as input)");
}

// KV sharing (E2B/E4B): the last `attention.shared_kv_layers` layers store no keys and values
// and read those of the last earlier layer of their attention kind (transformers' rule; the
// model's own K = V choice is that layer's).
void read_kv_sharing(const ArchReader& arch, ModelSpec& spec) {
  const int n_layers = spec.num_layers();
  const int64_t shared = arch.optional_int("attention.shared_kv_layers", 0).value_or(0);
  if (shared == 0) return;
  if (shared >= n_layers)
    arch.fail("attention.shared_kv_layers", "is " + std::to_string(shared) + " but there are " +
                                                std::to_string(n_layers) +
                                                " blocks (block 0 computes its own keys and values)");
  const int first = n_layers - int(shared);
  for (int i = first; i < n_layers; ++i) {
    const AttentionKind kind = spec.layers[size_t(i)].kind;
    bool source = false;
    for (int j = 0; j < first && !source; ++j) source = spec.layers[size_t(j)].kind == kind;
    if (!source) {
      const char* k = kind == AttentionKind::Sliding ? "sliding" : "full";
      arch.fail("attention.shared_kv_layers", "is " + std::to_string(shared) + ": shared block " + std::to_string(i) +
                                                  " (" + k + ") has no earlier " + k +
                                                  " block to take keys and values from");
    }
  }
  detail::assign_kv_sharing(spec, int(shared), /*double_wide_mlp=*/false, arch.key("attention.shared_kv_layers"));
  for (LayerSpec& l : spec.layers)
    if (!l.stores_kv()) l.k_eq_v = spec.layers[size_t(l.kv_source)].k_eq_v;
  spec.notes.push_back("KV sharing: blocks " + std::to_string(n_layers - shared) + ".." + std::to_string(n_layers - 1) +
                       " read the keys and values of an earlier block of their kind");
}

// Experts (26B-A4B): a block with a router tensor is a mixture-of-experts block, as llama.cpp
// decides; the router needs the experts' keys, and keys announcing experts need routers.
void read_experts(const GgufFile& file, const ArchReader& arch, ModelSpec& spec) {
  const std::string& path = file.path();
  const int n_layers = spec.num_layers();
  std::vector<int> moe_layers;
  for (int i = 0; i < n_layers; ++i)
    if (file.find("blk." + std::to_string(i) + ".ffn_gate_inp.weight")) moe_layers.push_back(i);
  const int64_t experts = arch.optional_int("expert_count", 0).value_or(0);
  if (moe_layers.empty()) {
    if (experts > 0)
      arch.fail("expert_count", "is " + std::to_string(experts) +
                                    " but no block has a router ('blk.N.ffn_gate_inp.weight'): the experts are missing");
    return;
  }
  const std::string router = "tensor 'blk." + std::to_string(moe_layers.front()) + ".ffn_gate_inp.weight'";
  if (experts == 0)
    detail::fail(path, router + " is a mixture-of-experts router but metadata key '" + arch.key("expert_count") +
                           "' is " + (arch.has("expert_count") ? "0" : "missing") + " (the number of experts)");
  if (!arch.has("expert_used_count"))
    detail::fail(path, router + " is a mixture-of-experts router but metadata key '" + arch.key("expert_used_count") +
                           "' is missing (the experts per token)");
  const int64_t used = arch.required_int("expert_used_count");
  if (used > experts)
    arch.fail("expert_used_count", "is " + std::to_string(used) + " but there are " + std::to_string(experts) +
                                       " experts (expert_count)");
  const auto widths = arch.optional_per_layer_int("expert_feed_forward_length", n_layers, 0);
  if (!widths)
    detail::fail(path, router + " is a mixture-of-experts router but metadata key '" +
                           arch.key("expert_feed_forward_length") + "' is missing (the experts' width)");
  for (int i : moe_layers) {
    LayerSpec& l = spec.layers[size_t(i)];
    l.num_experts = int(experts);
    l.top_k_experts = int(used);
    l.expert_ffn_dim = int((*widths)[size_t(i)]);
    if (l.expert_ffn_dim == 0)
      arch.fail("expert_feed_forward_length", "is 0 for block " + std::to_string(i) + ", which has a router");
  }
  spec.notes.push_back("experts: " + std::to_string(moe_layers.size()) + " of " + std::to_string(n_layers) +
                       " blocks route each token to " + std::to_string(used) + " of " + std::to_string(experts) +
                       " experts");
}

// The full layers' RoPE from the `rope_freqs.weight` factors (llama.cpp divides pair i's
// frequency by factor i): the leading pairs whose factor leaves a real rotation are rotated,
// with their factors; the pass-through tail becomes the unrotated part of a proportional RoPE.
void apply_rope_freqs(const GgufFile& file, int head_dim, int max_positions, RopeSpec& rope,
                      std::vector<std::string>& notes) {
  const std::string& path = file.path();
  const char* name = "rope_freqs.weight";
  const formats::GgufTensor* t = file.find(name);
  if (!t)
    detail::fail(path, std::string("missing tensor '") + name + "' (the full layers' RoPE frequency factors, [" +
                           std::to_string(head_dim / 2) + "])");
  if (t->shape != std::vector<int64_t>{head_dim / 2})
    detail::fail(path, std::string("tensor '") + name + "' has shape " + formats::shape_to_string(t->shape) +
                           " but the full layers need [" + std::to_string(head_dim / 2) + "] (key_length / 2)");
  quant::WeightFormat format;
  switch (t->type) {
    case formats::GgmlType::F32: format = quant::WeightFormat::F32; break;
    case formats::GgmlType::F16: format = quant::WeightFormat::F16; break;
    case formats::GgmlType::BF16: format = quant::WeightFormat::BF16; break;
    default:
      detail::fail(path, std::string("tensor '") + name + "' has type " + formats::ggml_type_name(t->type) +
                             "; Lumen reads it as F32, F16 or BF16");
  }
  std::vector<float> factors(size_t(head_dim / 2));
  quant::to_f32(format, t->data, head_dim / 2, factors.data());
  auto passes_through = [&](float f) { return double(max_positions) / double(f) < kPassThroughAngle; };
  for (size_t i = 0; i < factors.size(); ++i)
    if (!(std::isfinite(factors[i]) && factors[i] > 0.0f))
      detail::fail(path, std::string("tensor '") + name + "' element " + std::to_string(i) + " is " +
                             std::to_string(factors[i]) + "; RoPE frequency factors must be positive and finite");
  // Rotated pairs: up to the last factor that does not pass through.
  size_t pairs = factors.size();
  while (pairs > 0 && passes_through(factors[pairs - 1])) --pairs;
  if (pairs == 0)
    detail::fail(path, std::string("tensor '") + name + "' leaves every pair unrotated (all factors >= " +
                           std::to_string(double(max_positions) / kPassThroughAngle) + ")");
  const double half = head_dim / 2.0;
  rope.partial_factor = double(pairs) / half;
  if (rope.rotated_pairs(head_dim) != int(pairs)) rope.partial_factor = std::nextafter(rope.partial_factor, 2.0);
  const size_t all_pairs = factors.size();
  factors.resize(pairs);
  if (std::any_of(factors.begin(), factors.end(), [](float f) { return f != 1.0f; })) rope.freq_factors = factors;
  rope.type = detail::rope_type_for(rope.partial_factor, rope.freq_base_dim, head_dim);
  notes.push_back(std::string(name) + ": full layers rotate " + std::to_string(pairs) + " of " +
                  std::to_string(all_pairs) + " pairs" +
                  (rope.freq_factors.empty() ? std::string(" (factor 1)") : std::string(" with their factors")) +
                  (pairs < all_pairs ? "; the other pairs' factors pass them through unrotated" : ""));
}

ModelSpec gemma4_spec(const GgufFile& file) {
  const std::string& path = file.path();
  const ArchReader arch(file, "gemma4");
  arch.allow_only(known_gemma4_keys());

  ModelSpec spec;
  spec.source = path;
  spec.source_kind = "gguf";
  spec.model_type = "gemma4";
  spec.family = "gemma4";
  std::vector<std::string>& notes = spec.notes;

  // Required as llama.cpp requires them (absent there: the load fails).
  spec.hidden_size = int(arch.required_int("embedding_length"));
  spec.max_positions = int(arch.required_int("context_length"));
  spec.rms_eps = float(arch.required_float("attention.layer_norm_rms_epsilon"));
  const int n_layers = int(arch.required_int("block_count"));
  const int window = int(arch.required_int("attention.sliding_window"));
  const std::vector<bool> sliding = arch.required_bool_per_layer("attention.sliding_window_pattern", n_layers);

  const std::vector<int64_t> heads = *[&] {
    auto v = arch.optional_per_layer_int("attention.head_count", n_layers);
    if (!v) arch.fail("attention.head_count", "is missing");
    return v;
  }();
  const std::vector<int64_t> kv_heads = arch.optional_per_layer_int("attention.head_count_kv", n_layers).value_or(heads);
  const auto ffn = arch.optional_per_layer_int("feed_forward_length", n_layers);
  if (!ffn) arch.fail("feed_forward_length", "is missing");

  // Head dims: full layers key_length (default hidden / heads, as llama.cpp), sliding
  // layers key_length_swa (required); values must match keys (llama.cpp refuses otherwise).
  const int head_dim_full =
      int(arch.optional_int("attention.key_length").value_or(spec.hidden_size / std::max<int64_t>(heads[0], 1)));
  const int head_dim_swa = int(arch.required_int("attention.key_length_swa"));
  auto check_value_length = [&](const char* value_key, std::optional<int64_t> value, const char* key, int dim) {
    if (value && *value != dim)
      arch.fail(value_key, "is " + std::to_string(*value) + " but " + key + " is " + std::to_string(dim) +
                               "; Gemma 4 needs them equal");
  };
  check_value_length("attention.value_length", arch.optional_int("attention.value_length"), "attention.key_length",
                     head_dim_full);
  check_value_length("attention.value_length_swa", arch.required_int("attention.value_length_swa"),
                     "attention.key_length_swa", head_dim_swa);
  // RoPE: NeoX-style pairs (i, i + n_rot / 2) over the first n_rot dims. Lumen pairs i with
  // i + head_dim / 2, so n_rot must be the whole head; the full layers' partial rotation
  // comes from rope_freqs.
  const int rot_full = int(arch.optional_int("rope.dimension_count").value_or(head_dim_full));
  const int rot_swa = int(arch.optional_int("rope.dimension_count_swa").value_or(rot_full));
  if (rot_full != head_dim_full)
    arch.fail("rope.dimension_count", "is " + std::to_string(rot_full) + " but attention.key_length is " +
                                          std::to_string(head_dim_full) +
                                          "; Gemma 4 full layers rotate over the whole head (rope_freqs selects the pairs)");
  if (rot_swa != head_dim_swa)
    arch.fail(arch.has("rope.dimension_count_swa") ? "rope.dimension_count_swa" : "rope.dimension_count",
              "gives the sliding layers " + std::to_string(rot_swa) + " rotated dims but attention.key_length_swa is " +
                  std::to_string(head_dim_swa) + "; Gemma 4 sliding layers rotate every dimension");
  const double theta_full = arch.optional_float("rope.freq_base").value_or(kLlamaDefaultRopeTheta);
  const double theta_swa = arch.optional_float("rope.freq_base_swa").value_or(kLlamaDefaultRopeTheta);
  const double scaling_full = global_rope_scaling(arch);

  if (const auto cap = arch.optional_float("final_logit_softcapping"); cap && *cap > 0)
    spec.final_logit_softcap = float(*cap);
  spec.attention_scale = 1.0f;
  spec.norm_weight_offset = false;
  spec.activation = "gelu_tanh";
  read_embedding(file, arch, spec);
  read_tokens(file, {"<|turn>", "<turn|>", "gemma4", "Gemma 4"}, spec);

  RopeSpec full_rope;
  full_rope.theta = theta_full;
  full_rope.freq_base_dim = head_dim_full;
  full_rope.scaling_factor = scaling_full;
  const bool any_full = std::find(sliding.begin(), sliding.end(), false) != sliding.end();
  if (any_full) apply_rope_freqs(file, head_dim_full, spec.max_positions, full_rope, notes);

  int k_eq_v_layers = 0, unit_scalar_layers = 0;
  for (int i = 0; i < n_layers; ++i) {
    const bool swa = sliding[size_t(i)];
    const std::string p = "blk." + std::to_string(i) + ".";
    LayerSpec l;
    l.kind = swa ? AttentionKind::Sliding : AttentionKind::Full;
    l.num_q_heads = int(heads[size_t(i)]);
    l.num_kv_heads = int(kv_heads[size_t(i)]);
    l.head_dim = swa ? head_dim_swa : head_dim_full;
    l.window = swa ? window : 0;
    // No V projection (separate or fused): V is the raw K projection (llama.cpp: Vcur = Kcur).
    l.k_eq_v = !file.find(p + "attn_v.weight") && !file.find(p + "attn_qkv.weight");
    l.q_norm = l.q_norm_weight = l.k_norm = l.k_norm_weight = l.v_norm = true;
    l.has_layer_scalar = file.find(p + "layer_output_scale.weight") != nullptr;
    l.missing_layer_scalar = 1.0f;
    l.ffn_dim = int((*ffn)[size_t(i)]);
    if (swa) {
      l.rope.theta = theta_swa;
      l.rope.freq_base_dim = head_dim_swa;
      l.rope.type = "default";
    } else {
      l.rope = full_rope;
    }
    unit_scalar_layers += !l.has_layer_scalar;
    spec.layers.push_back(l);
  }
  read_kv_sharing(arch, spec);
  for (const LayerSpec& l : spec.layers) k_eq_v_layers += l.stores_kv() && l.k_eq_v;
  if (k_eq_v_layers > 0)
    notes.push_back(std::to_string(k_eq_v_layers) + " layer(s) without attn_v: V is the raw K projection (k = v)");
  if (unit_scalar_layers > 0)
    notes.push_back(std::to_string(unit_scalar_layers) + " layer(s) without layer_output_scale: layer scalar 1");
  read_per_layer_inputs(file, arch, spec);
  read_experts(file, arch, spec);
  detail::validate_spec(spec);
  return spec;
}

}  // namespace

ModelSpec spec_from_gguf(const GgufFile& file) {
  const std::string arch = architecture_of(file);
  if (arch == "gemma3") return gemma3_spec(file);
  if (arch == "gemma4") return gemma4_spec(file);
  detail::fail(file.path(), "general.architecture is '" + printable(arch) +
                                "'; Lumen runs GGUF files of the 'gemma3' and 'gemma4' architectures");
}

}  // namespace lumen::spec

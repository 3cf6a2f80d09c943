// ModelSpec from the metadata of a GGUF file (llama.cpp's `gemma3` architecture).
//
// llama.cpp's converter writes only some of Gemma 3's hyperparameters; the rest are fixed by
// the architecture and llama.cpp (src/llama-model.cpp, LLM_ARCH_GEMMA3) and transformers
// (Gemma3TextConfig defaults, which its GGUF loader keeps) agree on them:
//   - every 6th layer (index 5, 11, ...) is global, the others slide over
//     `attention.sliding_window` keys;
//   - sliding layers rotate with theta 10000 and no scaling; global layers with
//     `rope.freq_base` and the linear `rope.scaling.*` factor (4B and larger);
//   - q.k is scaled by query_pre_attn_scalar^-1/2, where query_pre_attn_scalar is the head
//     dim, except for the 62-layer 27B model (hidden / heads);
//   - the RMSNorm gains are stored with Gemma's "1 +" already added by the converter, so the
//     graph multiplies by the stored value (norm_weight_offset = false).
// Keys of the architecture this file does not know are refused, as are values it cannot run.
#include <algorithm>
#include <cmath>
#include <set>
#include <string>

#include "base/error.h"
#include "formats/gguf.h"
#include "formats/tensor.h"
#include "spec/model_spec.h"
#include "spec/spec_internal.h"

namespace lumen::spec {
namespace {

using formats::GgufFile;
using formats::GgufValue;

constexpr int kGemma3SlidingPattern = 6;  // llama.cpp: hparams.set_swa_pattern(6)
constexpr double kGemma3LocalRopeTheta = 10000.0;
constexpr int kGemma3_27bLayers = 62;

// Reads `<arch>.<name>` keys with one-line errors naming the file and key.
class ArchReader {
 public:
  ArchReader(const GgufFile& file, std::string arch) : file_(file), arch_(std::move(arch)) {}

  std::string key(const std::string& name) const { return arch_ + "." + name; }
  const GgufValue* find(const std::string& name) const { return file_.find_metadata(key(name)); }

  [[noreturn]] void fail(const std::string& name, const std::string& message) const {
    detail::fail(file_.path(), "metadata key '" + key(name) + "' " + message);
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

// The `gemma3.*` keys this builder reads (all others are refused).
const std::set<std::string, std::less<>>& known_gemma3_keys() {
  static const std::set<std::string, std::less<>> keys = {
      "context_length", "embedding_length", "block_count", "feed_forward_length",
      "attention.head_count", "attention.head_count_kv", "attention.key_length",
      "attention.value_length", "attention.layer_norm_rms_epsilon", "attention.sliding_window",
      "attention.sliding_window_pattern", "rope.freq_base", "rope.freq_base_swa",
      "rope.dimension_count", "rope.scaling.type", "rope.scaling.factor",
      "rope.scaling.original_context_length", "attn_logit_softcapping",
      "final_logit_softcapping", "vocab_size"};
  return keys;
}

// Layer kinds from `attention.sliding_window_pattern` when present (an integer N: every Nth
// layer is global; or one BOOL per layer, true = sliding), else Gemma 3's fixed pattern.
std::vector<AttentionKind> layer_kinds(const ArchReader& arch, int n_layers) {
  std::vector<AttentionKind> kinds(size_t(n_layers), AttentionKind::Sliding);
  int pattern = kGemma3SlidingPattern;
  if (const GgufValue* v = arch.find("attention.sliding_window_pattern")) {
    if (const auto* a = v->array()) {
      if (a->element_type() != formats::GgufType::BOOL || a->size() != size_t(n_layers))
        arch.fail("attention.sliding_window_pattern",
                  "must be an integer or " + std::to_string(n_layers) + " BOOL values (one per layer)");
      for (int i = 0; i < n_layers; ++i)
        kinds[size_t(i)] = *a->at(size_t(i)).to_bool() ? AttentionKind::Sliding : AttentionKind::Full;
      return kinds;
    }
    pattern = int(arch.required_int("attention.sliding_window_pattern"));
  }
  for (int i = 0; i < n_layers; ++i)
    if ((i + 1) % pattern == 0) kinds[size_t(i)] = AttentionKind::Full;
  return kinds;
}

}  // namespace

ModelSpec spec_from_gguf(const GgufFile& file) {
  const std::string& path = file.path();
  const GgufValue* arch_value = file.find_metadata("general.architecture");
  if (!arch_value) detail::fail(path, "metadata key 'general.architecture' is missing");
  const auto arch_name = arch_value->to_string();
  if (!arch_name)
    detail::fail(path, std::string("metadata key 'general.architecture' is ") +
                           formats::gguf_type_name(arch_value->type()) + ", not a string");
  if (*arch_name != "gemma3")
    detail::fail(path, "general.architecture is '" + printable(*arch_name) +
                           "'; Lumen runs GGUF files of the 'gemma3' architecture");

  const ArchReader arch(file, "gemma3");
  for (const auto& [key, value] : file.metadata()) {
    if (key.rfind("gemma3.", 0) != 0) continue;
    if (!known_gemma3_keys().count(std::string_view(key).substr(7)))
      detail::fail(path, "metadata key '" + printable(key) +
                             "' is not one Lumen knows for gemma3; refusing to ignore it");
  }

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
  const double global_theta = arch.optional_float("rope.freq_base").value_or(10000.0);
  const double local_theta = arch.optional_float("rope.freq_base_swa").value_or(kGemma3LocalRopeTheta);
  double global_scaling = 1.0;
  if (const GgufValue* t = arch.find("rope.scaling.type")) {
    const auto type = t->to_string();
    if (!type) arch.fail("rope.scaling.type", "is not a string");
    if (*type == "linear") {
      global_scaling = arch.required_float("rope.scaling.factor");
      if (!(global_scaling > 0.0)) arch.fail("rope.scaling.factor", "must be positive");
    } else if (*type != "none") {
      arch.fail("rope.scaling.type", "is '" + printable(*type) + "'; Lumen implements 'linear' and 'none'");
    }
  } else if (const auto factor = arch.optional_float("rope.scaling.factor")) {
    // transformers' Gemma 3 reads a bare factor as linear scaling of the global layers.
    global_scaling = *factor;
    if (!(global_scaling > 0.0)) arch.fail("rope.scaling.factor", "must be positive");
  }

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

  // Vocabulary: the embedding's rows, which the tokenizer (when present) must match.
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
  spec.activation = "gelu_tanh";

  // Special tokens and the chat format, from the tokenizer metadata.
  spec.tokens.stop.clear();
  if (file.has("tokenizer.ggml.tokens")) {
    const formats::GgufTokenizerData tok = file.tokenizer();
    if (tok.tokens.size() != size_t(spec.vocab_size))
      detail::fail(path, "tokenizer.ggml.tokens has " + std::to_string(tok.tokens.size()) +
                             " entries but 'token_embd.weight' has " + std::to_string(spec.vocab_size) + " rows");
    if (tok.pad_id) spec.tokens.pad = int(*tok.pad_id);
    if (tok.bos_id) spec.tokens.bos = int(*tok.bos_id);
    if (tok.eos_id) spec.tokens.eos = int(*tok.eos_id);
    if (tok.unk_id) spec.tokens.unk = int(*tok.unk_id);
    spec.tokens.stop.push_back(spec.tokens.eos);
    const auto turn_end = std::find(tok.tokens.begin(), tok.tokens.end(), std::string_view("<end_of_turn>"));
    if (turn_end != tok.tokens.end()) spec.tokens.stop.push_back(int(turn_end - tok.tokens.begin()));
    const bool has_turns =
        std::find(tok.tokens.begin(), tok.tokens.end(), std::string_view("<start_of_turn>")) != tok.tokens.end();
    if (has_turns) spec.chat_template = "gemma3";
    if (!tok.chat_template)
      notes.push_back(has_turns ? "no tokenizer.chat_template in the file: the Gemma 3 turn format is used"
                                : "no tokenizer.chat_template and no turn tokens: plain text only");
  } else {
    spec.tokens.stop.push_back(spec.tokens.eos);
    notes.push_back("no tokenizer metadata in the file");
  }

  const std::vector<AttentionKind> kinds = layer_kinds(arch, n_layers);
  for (int i = 0; i < n_layers; ++i)
    spec.layers.push_back(detail::gemma3_layer(kinds[size_t(i)], n_heads, n_kv_heads, head_dim, window, ffn, local_theta,
                                               global_theta, global_scaling));
  detail::validate_spec(spec);
  return spec;
}

}  // namespace lumen::spec

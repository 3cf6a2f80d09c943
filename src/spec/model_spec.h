// ModelSpec: one typed description of every layer of a Gemma-family decoder. Built from a
// Hugging Face config.json or from a doppler.execution/v1 manifest; the graph (model/)
// reads nothing else, so every behaviour difference between sources is a field here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lumen::formats {
class GgufFile;
}

namespace lumen::spec {

enum class AttentionKind { Sliding, Full };

struct RopeSpec {
  std::string type = "default";  // "default" (all dims) or "proportional" (partial, zero tail)
  double theta = 10000.0;
  // Fraction of head_dim rotated. The rotated pairs are (i, i + head_dim/2) for
  // i < rotated_pairs(); other dimensions pass through unchanged.
  double partial_factor = 1.0;
  // Denominator of the frequency exponent: inv_freq[i] = theta^(-2i / freq_base_dim).
  // Gemma 4 full layers use the FULL head dim (512), not the rotated width.
  int freq_base_dim = 0;
  // Linear position scaling: inv_freq /= scaling_factor. 1 = none.
  double scaling_factor = 1.0;
  // Per rotated pair i, a further divisor of inv_freq[i] (llama.cpp's `rope_freqs` tensor);
  // empty = 1 for every pair.
  std::vector<float> freq_factors;

  int rotated_pairs(int head_dim) const { return int(partial_factor * head_dim / 2.0); }
};

struct LayerSpec {
  AttentionKind kind = AttentionKind::Sliding;
  int num_q_heads = 0;
  int num_kv_heads = 0;
  int head_dim = 0;
  int window = 0;             // keys q-window+1 .. q are visible; 0 = unbounded (full)
  bool k_eq_v = false;        // no v_proj: v is the raw k projection (before k-norm, RoPE)
  bool q_norm = true;         // RMSNorm over each q head
  bool q_norm_weight = true;  // ... with a learned gain (else unit gain)
  bool k_norm = true;
  bool k_norm_weight = true;
  bool v_norm = true;         // weightless RMSNorm over each v head
  bool has_layer_scalar = true;       // a learned `layer_scalar` tensor
  float missing_layer_scalar = 1.0f;  // value used when has_layer_scalar is false
  int ffn_dim = 0;  // the dense MLP's width (twice intermediate_size on double-wide layers)
  RopeSpec rope;
  // KV sharing (Gemma 4 E2B/E4B): a layer with kv_source >= 0 has no k/v projections and
  // stores nothing; it attends over the keys and values of layer kv_source (the last
  // non-shared layer of its attention kind). -1: the layer computes and stores its own.
  int kv_source = -1;
  // Mixture of experts (Gemma 4 26B-A4B): besides the dense MLP, a router picks
  // top_k_experts of num_experts gated-GELU experts of width expert_ffn_dim. 0: no MoE block.
  int num_experts = 0;
  int top_k_experts = 0;
  int expert_ffn_dim = 0;

  bool stores_kv() const { return kv_source < 0; }
  // The layer whose cache holds this layer's keys and values.
  int kv_layer(int self) const { return kv_source < 0 ? self : kv_source; }
  bool moe() const { return num_experts > 0; }
};

struct SpecialTokens {
  int pad = 0;
  int bos = 2;
  int eos = 1;
  int unk = 3;
  std::vector<int> stop;  // generation stops on any of these
};

// The `unsupported` block of a manifest: the artifact is known not to run correctly.
struct Unsupported {
  std::string code;
  std::string message;
  std::string recommendation;
};

struct ModelSpec {
  std::string source;       // path it was built from
  std::string source_kind;  // "hf-config" | "manifest" | "gguf"
  std::string model_type;   // e.g. "gemma4_unified_text"
  std::string family = "gemma4";  // "gemma4" | "gemma3"

  int vocab_size = 0;
  int hidden_size = 0;
  int max_positions = 0;
  float rms_eps = 1e-6f;
  // Gemma 2/3 RMSNorm multiplies by (1 + w); Gemma 4 by w.
  bool norm_weight_offset = false;
  float attention_scale = 1.0f;            // multiplies q.k
  std::optional<float> attn_logit_softcap;  // tanh cap on attention scores
  std::optional<float> final_logit_softcap;
  bool tie_embeddings = true;
  // Multiplier of the embedding rows: sqrt(hidden_size) computed in f32 (llama.cpp's choice;
  // HF rounds it to the weight dtype, which matters only when computing in bf16).
  float embedding_scale = 1.0f;
  std::string activation = "gelu_tanh";
  bool post_attention_norm = true;
  bool pre_ffn_norm = true;
  bool post_ffn_norm = true;
  // Per-layer input embeddings (Gemma 4 E2B/E4B): every layer adds a gated projection of a
  // per_layer_input_dim-wide slice of a per-token input, built from a table of
  // per_layer_vocab rows of num_layers * per_layer_input_dim values and a projection of the
  // token embedding. 0: none.
  int per_layer_input_dim = 0;
  int per_layer_vocab = 0;

  SpecialTokens tokens;
  std::string chat_template;  // "gemma4" | "gemma3" | ""
  std::vector<LayerSpec> layers;
  std::optional<Unsupported> unsupported;
  // Reconciliations made while building the spec (a stray value overruled, a field ignored as
  // the reference implementation ignores it, a layer type forced): shown by `lumen inspect`.
  std::vector<std::string> notes;

  int num_layers() const { return int(layers.size()); }
  bool has_per_layer_inputs() const { return per_layer_input_dim > 0; }
  // Index of the first KV-shared layer (num_layers() when none).
  int first_kv_shared_layer() const;
};

// Builds the spec from a parsed HF config.json (`model_type` gemma4, gemma4_text,
// gemma4_unified, gemma4_unified_text; nested `text_config`). `source` names the file in
// errors. Throws lumen::Error naming the field on unknown or contradictory input.
ModelSpec spec_from_hf_config(const nlohmann::json& config, const std::string& source);

// Builds the spec from a doppler.execution/v1 manifest (`runtime.architecture`,
// `runtime.rawConfig`, `runtime.manifestInference`).
ModelSpec spec_from_manifest(const nlohmann::json& manifest, const std::string& source);

// Builds the spec from a GGUF file's metadata (`general.architecture` gemma3; see
// gguf_spec.cpp for what llama.cpp's converter leaves implicit). Also needs the file's
// token_embd.weight (the vocabulary size) and tokenizer metadata (special ids, stop ids).
ModelSpec spec_from_gguf(const formats::GgufFile& file);

// `path`: a model directory (its config.json), a config.json, a manifest .json, or a GGUF
// file (recognized by its "GGUF" magic).
ModelSpec load_spec(const std::string& path);

// True when `path` is a regular file starting with the GGUF magic.
bool is_gguf_file(const std::string& path);

nlohmann::json spec_to_json(const ModelSpec& spec);
std::string spec_to_text(const ModelSpec& spec);

// Tensor names and shapes the spec requires in a checkpoint, without the name prefix
// ("layers.0.self_attn.q_proj.weight", "embed_tokens.weight", ...). Shapes are
// PyTorch's [out, in] for projections; the stacked experts are [experts, out, in].
struct ExpectedTensor {
  std::string name;
  std::vector<int64_t> shape;
};
std::vector<ExpectedTensor> expected_tensors(const ModelSpec& spec);

// The manifest's `unsupported` gate: a spec whose manifest declares the artifact known not to
// run correctly is refused with one lumen::Error line that names the source and carries the
// block's code, message and recommendation, unless `allow_unverified` (the user forces it).
// A spec without the block passes.
void require_supported(const ModelSpec& spec, bool allow_unverified);

// A manifest's spec run on weights that carry their own description (config.json, GGUF
// metadata, a packed file's config): every shape must agree, or one lumen::Error line names
// the manifest field, both values and both sources ("M: runtime.architecture.numLayers 47
// does not match the weights' 48 layers (W)"). Behaviour fields that differ (RoPE, softcaps,
// windows ...) are the manifest's to decide: they are returned as notes.
std::vector<std::string> check_manifest_matches_weights(const ModelSpec& manifest, const ModelSpec& weights);

}  // namespace lumen::spec

// Session settings of a run: how the KV cache is kept (dtype, layout, pages, tiering), how a
// prompt is prefilled (chunk rows), how many sequences decode together, which ids stop a
// generation and how the tokenizer frames a prompt. Filled from a doppler.execution/v1
// manifest's `session` and `tokenizer` blocks, then from command-line flags (flags win).
// Session, Engine and Scheduler build their caches from it through kv::make_cache.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kv/kv_config.h"
#include "model/per_layer_input_config.h"
#include "spec/model_spec.h"

namespace lumen::tokenizer {
class Tokenizer;
}

namespace lumen::runtime {

struct RunConfig {
  // Default: the engine's paged f32 cache (lossless against the contiguous f32 reference).
  kv::KvConfig kv;
  int prefill_chunk = 256;  // prompt rows per batched forward step
  // Sequences decoding together (the server's default --parallel); nullopt: the server's own.
  std::optional<int> decode_batch;
  // Extra ids that end a generation (the manifest's eosTokens), on top of the spec's.
  std::vector<int32_t> stop_tokens;
  // Whether a plain prompt starts with BOS (the manifest's addBosToken); nullopt: the
  // tokenizer's own rule.
  std::optional<bool> add_bos;
  // Per-layer input table settings (the manifest's session.perLayerInputs; models without
  // per-layer inputs ignore them).
  model::PerLayerInputConfig per_layer_inputs;

  // What the manifest says the tokenizer is, checked against the tokenizer that is loaded
  // (check_tokenizer). Unset members are not checked.
  struct TokenizerExpectation {
    std::string type;  // "sentencepiece", "bpe", ...
    std::optional<int> vocab_size, bos, eos, pad;
    std::string where;  // dotted path of the block, for errors
  } tokenizer;

  std::string manifest;  // the manifest it came from ("" when none)
};

// One line: "paged f16, pages of 256, tiering off; prefill chunks of 256; ...".
std::string run_config_to_text(const RunConfig& config);
nlohmann::json run_config_to_json(const RunConfig& config);

// The settings a manifest declares. `source` names the file in errors, which are one line
// naming the field (`SOURCE: runtime.manifestInference.session.compute.defaults.mathDtype:
// ...`). Fields it does not know in `session` are refused, as the spec refuses unknown ones.
RunConfig run_config_from_manifest(const nlohmann::json& manifest, const std::string& source);

// Command-line overrides, as text so that a bad value is one error line naming the flag.
struct RunFlags {
  std::optional<std::string> kv_dtype;      // f32 f16 bf16
  std::optional<std::string> kv_layout;     // contiguous paged tiered
  std::optional<std::string> page_size;     // positions per page
  std::optional<std::string> kv_cold;       // off f32 f16 bf16 int8 int4
  std::optional<std::string> hot_window;    // positions of full layers kept hot
  std::optional<std::string> prefill_chunk; // prompt rows per step
  // Per-layer input table (E2B/E4B).
  std::optional<std::string> ple_table;            // mapped resident
  std::optional<std::string> ple_row_cache;        // off, or the LRU's rows
  std::optional<std::string> ple_row_cache_bytes;  // bytes (K/M/G suffixes)
  std::optional<std::string> ple_row_dtype;        // f32 f16 bf16
  std::optional<std::string> ple_prefetch;         // off, or rows ahead
  std::optional<std::string> ple_hot_cache;        // off, or prepared tokens kept
  std::optional<std::string> ple_hot_bytes;        // bytes
  bool any() const {
    return kv_dtype || kv_layout || page_size || kv_cold || hot_window || prefill_chunk || ple_table || ple_row_cache ||
           ple_row_cache_bytes || ple_row_dtype || ple_prefetch || ple_hot_cache || ple_hot_bytes;
  }
};

// A `session.perLayerInputs` object (`where`: its dotted path, for errors). Values meant for a
// GPU (materialization gpu_resident / gpu_split_tables, gpuUpload) are checked, and the table
// stays mapped on the CPU; unknown keys and values are refused.
model::PerLayerInputConfig per_layer_inputs_from_json(const nlohmann::json& block, const std::string& source,
                                                      const std::string& where);

// Applies the flags over `config` (flags win). Throws lumen::Error("--FLAG: ...").
void apply_run_flags(RunConfig& config, const RunFlags& flags);

// Checks the config against the model (block sizes dividing head dims, ...). Throws
// lumen::Error naming the setting.
void validate_run_config(const RunConfig& config, const spec::ModelSpec& spec);

// Checks the loaded tokenizer against the manifest's tokenizer block (type, vocabulary
// size, special ids). Throws lumen::Error naming the manifest field and the tokenizer value.
void check_tokenizer(const RunConfig& config, const tokenizer::Tokenizer& tokenizer);

// The manifest at `path` as JSON (one error line when it cannot be read or parsed).
nlohmann::json read_manifest_json(const std::string& path);

}  // namespace lumen::runtime

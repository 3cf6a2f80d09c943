// The other direction of gguf_spec.cpp: a Gemma 4 model's description written as the gemma4.*
// metadata and tensor names llama.cpp's converter (convert_hf_to_gguf.py, Gemma4Model) gives
// a GGUF of it, so that `lumen quantize` can turn a checkpoint straight into a file llama.cpp,
// ollama and LM Studio load.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "formats/gguf_writer.h"
#include "spec/model_spec.h"

namespace lumen::spec {

// Sets general.architecture and every gemma4.* key the converter writes for `spec` (block
// count, lengths, head counts per layer, RoPE bases and dimensions, softcap, window and its
// per-layer pattern, shared KV layers, per-layer input width). `config` is the checkpoint's
// config.json (its text_config when nested): where the converter writes a key as a scalar or
// as a per-layer array depending on which fields the config has, it decides the same way.
// Throws lumen::Error naming `source` for a model the converter does not write (experts,
// a Gemma 3 spec, no full-attention layer).
void add_gemma4_gguf_metadata(const ModelSpec& spec, const nlohmann::json& config, const std::string& source,
                              formats::GgufMetadata& md);

// The converter's `rope_freqs` tensor: per rotated pair of the full layers' head, 1, then
// 1e30 for every pair proportional RoPE leaves unrotated.
std::vector<float> gemma4_rope_freqs(const ModelSpec& spec);

// llama.cpp's name for a checkpoint tensor of a Gemma 4 text model, given without the
// checkpoint's prefix ("layers.3.self_attn.q_proj.weight" -> "blk.3.attn_q.weight",
// "embed_tokens.weight" -> "token_embd.weight"); nullopt for a name the converter has no
// name for. `lm_head.weight` is given as it is stored (it has no prefix).
std::optional<std::string> gemma4_gguf_tensor_name(const std::string& name);

}  // namespace lumen::spec

// LiteRT-LM's LlmMetadata protobuf (runtime/proto/llm_metadata.proto, with token.proto,
// sampler_params.proto and llm_model_type.proto), decoded by hand from the wire format.
// Field numbers:
//   LlmMetadata: 1 start_token, 2 stop_tokens (repeated), 3 prompt_templates,
//     4 sampler_params, 5 max_num_tokens, 6 llm_model_type, 7 jinja_prompt_template,
//     8 channels (repeated), 9 suppress_tokens, 10 kv_cache_init_value, 11 supports_thinking,
//     12 supports_function_calling, 13 pad_token, 14 min_runtime_version
//   TokenUnion: 1 token_ids (TokenIds), 2 token_str;  TokenIds: 1 ids (repeated int32)
//   PromptTemplates: 1 user, 2 model, 3 system;  PromptAffixes: 1 prefix, 2 suffix
//   SamplerParameters: 1 type, 2 k, 3 p, 4 temperature, 5 seed, 6 backend
//   LlmModelType (oneof): 1 generic_model, 2 gemma3n, 3 function_gemma, 4 gemma3, 5 qwen3,
//     7 qwen2p5, 8 gemma4, 9 fast_vlm, 11 lfm2, 12 minicpm5, 13 gemma3270m
//   Channel: 1 channel_name, 2 start, 3 end, 4 is_reasoning_channel
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

namespace lumen::formats {

// A token given either as ids or as its text.
struct TokenUnion {
  std::vector<int32_t> ids;
  std::optional<std::string> text;
};

struct PromptAffixes {
  std::string prefix, suffix;
};

struct SamplerDefaults {
  std::string type;  // "TYPE_UNSPECIFIED", "TOP_K", "TOP_P", "GREEDY" (or "TYPE_<n>")
  int32_t k = 0;
  float p = 0, temperature = 0;
  std::optional<int32_t> seed;
  std::string backend;  // "UNSPECIFIED", "CPU", "GPU"
};

struct ResponseChannel {
  std::string name, start, end;
  std::optional<bool> is_reasoning;
};

struct LlmMetadata {
  std::optional<TokenUnion> start_token;
  std::vector<TokenUnion> stop_tokens;
  bool has_prompt_templates = false;
  std::optional<PromptAffixes> user_template, model_template, system_template;
  std::optional<SamplerDefaults> sampler;
  int32_t max_num_tokens = 0;
  std::string model_type;  // "gemma4", "gemma3", ... ("" when unset; "field_<n>" if unknown)
  std::optional<std::string> jinja_prompt_template;
  std::vector<ResponseChannel> channels;
  std::vector<int32_t> suppress_token_ids;
  std::optional<int64_t> kv_cache_init_value;
  std::optional<bool> supports_thinking, supports_function_calling;
  std::optional<TokenUnion> pad_token;
  std::optional<std::string> min_runtime_version;
};

// Throws lumen::Error naming `where` and the field on malformed input. Unknown fields are
// skipped, as protobuf readers do.
LlmMetadata decode_llm_metadata(std::string_view bytes, const std::string& where);

nlohmann::json llm_metadata_to_json(const LlmMetadata& m);

// The number of pieces (field 1) of a serialized SentencePiece ModelProto; throws on a
// malformed message.
size_t count_sentencepiece_pieces(std::string_view bytes, const std::string& where);

}  // namespace lumen::formats

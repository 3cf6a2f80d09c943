// The OpenAI wire format, without the HTTP: request bodies parsed and validated into plain
// structs, and the JSON objects the server answers with. Every defect in a request becomes an
// ApiError naming the field at fault, which the server turns into a 4xx with an OpenAI-style
// error object ({"error": {"message", "type", "param", "code"}}).
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/sampler.h"
#include "tokenizer/chat_format.h"

namespace lumen::server {

class ApiError : public std::runtime_error {
 public:
  ApiError(int status, std::string message, std::string param = {}, std::string code = {},
           std::string type = "invalid_request_error")
      : std::runtime_error(message), status(status), type(std::move(type)), param(std::move(param)),
        code(std::move(code)) {}
  int status;
  std::string type, param, code;
};

// {"error": {"message", "type", "param", "code"}}; empty param/code become null.
nlohmann::json error_body(const std::string& message, const std::string& type, const std::string& param,
                          const std::string& code);
nlohmann::json error_body(const ApiError& error);

struct ApiRequest {
  bool chat = true;
  std::string model;                               // as sent (informational)
  std::vector<tokenizer::ChatMessage> messages;    // chat
  std::string prompt_text;                         // completions, text prompt
  std::vector<int32_t> prompt_ids;                 // completions, token prompt
  bool prompt_is_ids = false;
  runtime::SamplingParams sampling;
  bool seed_given = false;
  std::optional<int> max_tokens;                   // max_tokens or max_completion_tokens
  std::vector<std::string> stop;
  bool stream = false;
  bool include_usage = false;                      // stream_options.include_usage
  int n = 1;                                       // choices
  int top_logprobs = -1;                           // -1: no logprobs; chat top_logprobs / completions logprobs
  // Structured output (at most one): response_format json_schema / json_object, or GBNF.
  std::optional<nlohmann::ordered_json> json_schema;  // key order as sent
  bool json_object = false;
  std::string grammar;
  // Tools: declarations (key order as sent), tool_choice "auto" | "none" | "required" |
  // "function" (then tool_choice_name), parallel_tool_calls.
  std::vector<nlohmann::ordered_json> tools;
  std::string tool_choice = "auto";
  std::string tool_choice_name;
  bool parallel_tool_calls = true;
};

// Parse and validate a body. `defaults` are the model's sampling defaults; fields present in
// the request override them. Throws ApiError (400) for malformed JSON, a wrong type, a value
// out of range, an unknown role or an unsupported option (n != 1).
ApiRequest parse_chat_request(const std::string& body, const runtime::SamplingParams& defaults);
ApiRequest parse_completion_request(const std::string& body, const runtime::SamplingParams& defaults);

struct Usage {
  int prompt_tokens = 0;
  int completion_tokens = 0;
};
nlohmann::json usage_json(const Usage& usage);

// Response objects. `finish_reason` empty means null (a stream chunk before the end).
nlohmann::json chat_completion(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const std::string& finish_reason, const Usage& usage);
// One choice of a chat completion: the message (content, tool_calls), logprobs, finish.
nlohmann::json chat_choice(int index, const nlohmann::json& message, const nlohmann::json& logprobs,
                           const std::string& finish_reason);
// OpenAI's logprob shapes: chat {"content": [{token, logprob, bytes, top_logprobs}]};
// completions {"tokens", "token_logprobs", "top_logprobs", "text_offset"}.
nlohmann::json chat_logprobs(const std::vector<std::pair<std::string, float>>& tokens,
                             const std::vector<std::vector<std::pair<std::string, float>>>& top);
nlohmann::json completion_logprobs(const std::vector<std::pair<std::string, float>>& tokens,
                                   const std::vector<std::vector<std::pair<std::string, float>>>& top, size_t text_offset);
nlohmann::json chat_chunk(const std::string& id, int64_t created, const std::string& model,
                          const nlohmann::json& delta, const std::string& finish_reason);
nlohmann::json text_completion(const std::string& id, int64_t created, const std::string& model,
                               const std::string& text, const std::string& finish_reason, const Usage& usage);
nlohmann::json text_chunk(const std::string& id, int64_t created, const std::string& model,
                          const std::string& text, const std::string& finish_reason);
// The last chunk of a stream with stream_options.include_usage: no choices, only usage.
nlohmann::json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat,
                           const Usage& usage);

// "data: <json>\n\n"
std::string sse_event(const nlohmann::json& payload);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace lumen::server

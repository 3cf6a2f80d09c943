// CONTRACT (interface agreed before implementation; the tokenizer work implements it).
//
// Chat formats of the Gemma family, rendered to the exact prompt text the models were
// trained on (../shared/docs/GEMMA4.md for Gemma 4; <start_of_turn>/<end_of_turn> for
// Gemma 2/3). The text includes "<bos>" and is meant for Tokenizer::encode(parse_special).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lumen::spec {
struct ModelSpec;
}

namespace lumen::tokenizer {

class Tokenizer;

enum class ChatFormat { Gemma4, Gemma3 };

// A call the assistant made: arguments as a JSON object (or, as some clients send them, a
// string, which Gemma 4's template writes verbatim).
struct ToolCall {
  std::string id;
  std::string name;
  nlohmann::json arguments = nlohmann::json::object();
};

struct ChatMessage {
  ChatMessage() = default;
  ChatMessage(std::string role_, std::string content_) : role(std::move(role_)), content(std::move(content_)) {}
  std::string role;  // "system", "user", "assistant" ("model" accepted as assistant), "tool"
  std::string content;
  std::vector<ToolCall> tool_calls;  // assistant
  std::string tool_call_id;          // tool: the call it answers
  std::string name;                  // tool: the function's name (when no id matches)
  std::string reasoning;             // assistant: its thought (Gemma 4 renders it before tool calls)
};

struct ChatOptions {
  bool add_generation_prompt = true;  // end with the model turn opener
  bool thinking = false;              // Gemma 4: enable thinking (system turn starts "<|think|>")
  // OpenAI-style tool declarations ({"type": "function", "function": {name, description,
  // parameters}}), declared in the system turn.
  std::vector<nlohmann::json> tools;
};

// Throws lumen::Error for an unknown role or a message sequence the format cannot express
// (e.g. a system message that is not first).
std::string render_chat(ChatFormat format, std::span<const ChatMessage> messages, const ChatOptions& options = {});

// Which format a model uses: from the spec's chat_template field when set, else from the
// tokenizer's special tokens ("<|turn>" -> Gemma4, "<start_of_turn>" -> Gemma3).
ChatFormat detect_chat_format(const spec::ModelSpec& spec, const Tokenizer& tokenizer);

// Token ids that end a model turn for this format and tokenizer (Gemma 4: eos 1 and
// "<turn|>" 106; Gemma 3: eos and "<end_of_turn>"), merged with spec.tokens.stop.
std::vector<int32_t> chat_stop_tokens(ChatFormat format, const spec::ModelSpec& spec, const Tokenizer& tokenizer);

// ---------------------------------------------------------------------------- tool calls
//
// Gemma 4 (its chat template): declarations "<|tool>declaration:NAME{...}<tool|>" in the
// system turn; the model calls with "<|tool_call>call:NAME{key:value,...}<tool_call|>"
// (bare keys, strings between <|"|> tokens) and stops at "<|tool_response>"; results come
// back as "<|tool_response>response:NAME{value:...}<tool_response|>" in the same model turn.
// Gemma 3 (its template has no tools; Lumen's convention, in the spirit of Google's
// function-calling guide): declarations as JSON in the system text, each call a fenced
// block "```tool_call\n{\"name\": ..., \"arguments\": {...}}\n```", results in a user
// turn as "```tool_response\n...\n```".

// A Gemma 4 tool-call argument text ("{city:<|\"|>Paris<|\"|>,n:3}") as JSON. Throws
// lumen::Error when it is not one.
nlohmann::json gemma4_arguments_to_json(std::string_view text);
// The Gemma 4 spelling of a JSON value (format_argument of the template).
std::string gemma4_argument(const nlohmann::json& value, bool escape_keys = true);

// The text of a model turn split into content and tool calls, fed piece by piece as it
// streams. Text that could still be the start of a call is held back until it is decided.
class ToolCallParser {
 public:
  explicit ToolCallParser(ChatFormat format);
  struct Event {
    std::string content;                 // text for the user
    std::optional<ToolCall> call;        // a complete call (arguments as JSON)
  };
  std::vector<Event> feed(std::string_view text);
  // The end of the text: whatever is held back becomes content (or a call, if complete).
  std::vector<Event> finish();

 private:
  std::vector<Event> drain(bool at_end);
  ChatFormat format_;
  std::string buffer_;
};

// The tokens that end a model turn with tools on (Gemma 4 adds <|tool_response>).
std::vector<int32_t> tool_stop_tokens(ChatFormat format, const Tokenizer& tokenizer);

}  // namespace lumen::tokenizer

// CONTRACT (interface agreed before implementation; the tokenizer work implements it).
//
// Chat formats of the Gemma family, rendered to the exact prompt text the models were
// trained on (../shared/docs/GEMMA4.md for Gemma 4; <start_of_turn>/<end_of_turn> for
// Gemma 2/3). The text includes "<bos>" and is meant for Tokenizer::encode(parse_special).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace lumen::spec {
struct ModelSpec;
}

namespace lumen::tokenizer {

class Tokenizer;

enum class ChatFormat { Gemma4, Gemma3 };

struct ChatMessage {
  std::string role;  // "system", "user", "assistant" ("model" accepted as assistant)
  std::string content;
};

struct ChatOptions {
  bool add_generation_prompt = true;  // end with the model turn opener
  bool thinking = false;              // Gemma 4: enable thinking (system turn starts "<|think|>")
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

}  // namespace lumen::tokenizer

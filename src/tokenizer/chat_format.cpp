// The Gemma chat templates, written out in C++ so that the run path needs no Jinja. Each
// function reproduces its template byte for byte (tests/parity/test_chat_format.py renders
// the real templates with Jinja and compares):
//  - Gemma 3 (the tokenizer_config.json template): the system message is folded into the
//    first user turn as "SYSTEM\n\n", roles must alternate user/model, contents are trimmed.
//  - Gemma 4 (../shared/docs/GEMMA4.md): a system turn when there is a system message or
//    thinking is on ("<|think|>\n" first), contents trimmed, and with thinking off the
//    generation prompt carries an empty thought channel.
#include "tokenizer/chat_format.h"

#include <algorithm>

#include "base/error.h"
#include "spec/model_spec.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/utf8.h"

namespace lumen::tokenizer {
namespace {

enum class Role { System, User, Model };

Role parse_role(const ChatMessage& message, size_t index) {
  if (message.role == "system" || message.role == "developer") return Role::System;
  if (message.role == "user") return Role::User;
  if (message.role == "assistant" || message.role == "model") return Role::Model;
  throw Error("chat message " + std::to_string(index) + ": unknown role " + in_quotes(message.role) +
              " (expected system, user, assistant or model)");
}

void check_text(const ChatMessage& message, size_t index) {
  utf8::require_valid(message.content, "chat message " + std::to_string(index) + " content");
}

std::string render_gemma4(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out = "<bos>";
  size_t first = 0;
  const bool has_system = !messages.empty() && parse_role(messages[0], 0) == Role::System;
  if (options.thinking || has_system) {
    out += "<|turn>system\n";
    if (options.thinking) out += "<|think|>\n";
    if (has_system) {
      check_text(messages[0], 0);
      out += utf8::python_strip(messages[0].content);
      first = 1;
    }
    out += "<turn|>\n";
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const Role role = parse_role(messages[i], i);
    if (role == Role::System)
      throw Error("chat message " + std::to_string(i) + ": a system message must be the first message");
    check_text(messages[i], i);
    out += role == Role::User ? "<|turn>user\n" : "<|turn>model\n";
    out += utf8::python_strip(messages[i].content);
    out += "<turn|>\n";
  }
  if (options.add_generation_prompt) {
    out += "<|turn>model\n";
    if (!options.thinking) out += "<|channel>thought\n<channel|>";
  }
  return out;
}

std::string render_gemma3(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out = "<bos>";
  std::string first_user_prefix;
  size_t first = 0;
  if (!messages.empty() && parse_role(messages[0], 0) == Role::System) {
    check_text(messages[0], 0);
    first_user_prefix = messages[0].content + "\n\n";  // not trimmed, as the template does
    first = 1;
  }
  for (size_t i = first; i < messages.size(); ++i) {
    const Role role = parse_role(messages[i], i);
    const bool user_turn = (i - first) % 2 == 0;
    if (role == Role::System)
      throw Error("chat message " + std::to_string(i) + ": a system message must be the first message");
    if ((role == Role::User) != user_turn)
      throw Error("chat message " + std::to_string(i) + ": Gemma 3 conversations must alternate user/assistant, "
                  "starting with user");
    check_text(messages[i], i);
    out += role == Role::User ? "<start_of_turn>user\n" : "<start_of_turn>model\n";
    if (i == first) out += first_user_prefix;
    out += utf8::python_strip(messages[i].content);
    out += "<end_of_turn>\n";
  }
  if (options.add_generation_prompt) out += "<start_of_turn>model\n";
  return out;
}

}  // namespace

std::string render_chat(ChatFormat format, std::span<const ChatMessage> messages, const ChatOptions& options) {
  return format == ChatFormat::Gemma4 ? render_gemma4(messages, options) : render_gemma3(messages, options);
}

ChatFormat detect_chat_format(const spec::ModelSpec& spec, const Tokenizer& tokenizer) {
  if (spec.chat_template == "gemma4") return ChatFormat::Gemma4;
  if (spec.chat_template == "gemma3") return ChatFormat::Gemma3;
  if (!spec.chat_template.empty())
    throw Error(spec.source + ": chat template " + in_quotes(spec.chat_template) + " is not one Lumen knows (gemma4, gemma3)");
  if (tokenizer.piece_id("<|turn>")) return ChatFormat::Gemma4;
  if (tokenizer.piece_id("<start_of_turn>")) return ChatFormat::Gemma3;
  throw Error(spec.source + ": cannot tell the chat format: the vocabulary has neither <|turn> nor <start_of_turn>");
}

std::vector<int32_t> chat_stop_tokens(ChatFormat format, const spec::ModelSpec& spec, const Tokenizer& tokenizer) {
  std::vector<int32_t> stops;
  const auto add = [&](int64_t id) {
    if (id >= 0 && id < tokenizer.vocab_size() && std::find(stops.begin(), stops.end(), int32_t(id)) == stops.end())
      stops.push_back(int32_t(id));
  };
  add(tokenizer.eos_id() >= 0 ? tokenizer.eos_id() : spec.tokens.eos);
  const char* end_of_turn = format == ChatFormat::Gemma4 ? "<turn|>" : "<end_of_turn>";
  if (auto id = tokenizer.piece_id(end_of_turn)) add(*id);
  for (int id : spec.tokens.stop) add(id);
  return stops;
}

}  // namespace lumen::tokenizer

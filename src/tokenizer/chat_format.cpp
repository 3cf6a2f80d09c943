// The Gemma chat templates, written out in C++ so that the run path needs no Jinja. Each
// function reproduces its template byte for byte (tests/parity/test_chat_format.py and
// test_chat_tools.py render the real templates with Jinja and compare):
//  - Gemma 3 (the tokenizer_config.json template): the system message is folded into the
//    first user turn as "SYSTEM\n\n", roles must alternate user/model, contents are trimmed.
//  - Gemma 4 (Google's template, as llama.cpp ships it for gemma-4-31B-it): a system turn
//    when there is a system message, tools or thinking ("<|think|>\n" first), contents
//    trimmed (model turns also lose their thoughts), with thinking off the generation prompt
//    carries an empty thought channel; tool calls and results as in chat_format.h.
#include "tokenizer/chat_format.h"

#include <algorithm>

#include "base/error.h"
#include "spec/model_spec.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/chat_tools.h"
#include "tokenizer/utf8.h"

namespace lumen::tokenizer {
namespace {

enum class Role { System, User, Model, Tool };

Role parse_role(const ChatMessage& message, size_t index) {
  if (message.role == "system" || message.role == "developer") return Role::System;
  if (message.role == "user") return Role::User;
  if (message.role == "assistant" || message.role == "model") return Role::Model;
  if (message.role == "tool") return Role::Tool;
  throw Error("chat message " + std::to_string(index) + ": unknown role " + in_quotes(message.role) +
              " (expected system, user, assistant, model or tool)");
}

void check_text(const ChatMessage& message, size_t index) {
  utf8::require_valid(message.content, "chat message " + std::to_string(index) + " content");
}

std::string trimmed(std::string_view text) { return std::string(utf8::python_strip(text)); }

// The template's strip_thinking: drop every "<|channel>...<channel|>" thought, then trim.
std::string strip_thinking(const std::string& text) {
  std::string out;
  size_t pos = 0;
  for (;;) {
    const size_t close = text.find("<channel|>", pos);
    const std::string part = text.substr(pos, close == std::string::npos ? std::string::npos : close - pos);
    const size_t open = part.find("<|channel>");
    out += open == std::string::npos ? part : part.substr(0, open);
    if (close == std::string::npos) break;
    pos = close + 10;
  }
  return trimmed(out);
}

// The Gemma 4 template (the official one that handles OpenAI-style role "tool" messages),
// step by step. Tool declarations and arguments: chat_tools.cpp.
std::string render_gemma4(std::span<const ChatMessage> messages, const ChatOptions& options) {
  std::string out = "<bos>";
  enum class Prev { None, Think, Tool, ToolCall, ToolResponse } prev = Prev::None;
  size_t first = 0;
  const bool has_system = !messages.empty() && parse_role(messages[0], 0) == Role::System;
  if (options.thinking || !options.tools.empty() || has_system) {
    out += "<|turn>system\n";
    if (options.thinking) {
      out += "<|think|>\n";
      prev = Prev::Think;
    }
    if (has_system) {
      check_text(messages[0], 0);
      out += trimmed(messages[0].content);
      first = 1;
    }
    for (const auto& tool : options.tools) out += "<|tool>" + trimmed(gemma4_declaration(tool)) + "<tool|>";
    if (!options.tools.empty()) prev = Prev::Tool;
    out += "<turn|>\n";
  }
  const auto loop = messages.subspan(first);
  size_t last_user = size_t(-1);
  for (size_t i = 0; i < loop.size(); ++i)
    if (loop[i].role == "user") last_user = i;
  for (size_t i = 0; i < loop.size(); ++i) {
    const ChatMessage& m = loop[i];
    const Role role = parse_role(m, first + i);
    if (role == Role::Tool) continue;  // rendered with the assistant message that called it
    check_text(m, first + i);
    prev = Prev::None;
    const std::string turn_role = role == Role::Model ? "model" : m.role;
    // An assistant message right after an assistant message (tool results between them)
    // continues the same model turn.
    const ChatMessage* previous = nullptr;
    for (size_t j = i; j-- > 0;)
      if (loop[j].role != "tool") {
        previous = &loop[j];
        break;
      }
    const bool continues = role == Role::Model && previous && previous->role == "assistant";
    if (!continues) out += "<|turn>" + turn_role + "\n";
    if (!m.reasoning.empty() && (last_user == size_t(-1) || i > last_user) && !m.tool_calls.empty())
      out += "<|channel>thought\n" + m.reasoning + "\n<channel|>";
    for (const auto& call : m.tool_calls) {
      out += "<|tool_call>call:" + call.name + "{";
      if (call.arguments.is_object()) {
        bool comma = false;
        for (const auto& [key, value] : gemma4_sorted_items(call.arguments)) {
          if (comma) out += ",";
          comma = true;
          out += key + ":" + gemma4_argument(*value, false);
        }
      } else if (call.arguments.is_string()) {
        out += call.arguments.get<std::string>();
      }
      out += "}<tool_call|>";
    }
    if (!m.tool_calls.empty()) prev = Prev::ToolCall;
    bool responded = false;
    if (!m.tool_calls.empty()) {
      for (size_t k = i + 1; k < loop.size() && loop[k].role == "tool"; ++k) {
        const ChatMessage& follow = loop[k];
        std::string name = follow.name;
        for (const auto& call : m.tool_calls)
          if (!call.id.empty() && call.id == follow.tool_call_id) name = call.name;
        if (name.empty())
          throw Error("chat message " + std::to_string(first + k) + ": a tool result needs a tool_call_id that matches "
                      "a call, or a name");
        utf8::require_valid(follow.content, "chat message " + std::to_string(first + k) + " content");
        out += "<|tool_response>response:" + name + "{value:" + gemma4_argument(nlohmann::json(follow.content), false) +
               "}<tool_response|>";
        responded = true;
        prev = Prev::ToolResponse;
      }
    }
    out += role == Role::Model ? strip_thinking(m.content) : trimmed(m.content);
    if (prev == Prev::ToolCall && !responded) out += "<|tool_response>";
    else if (!(responded && m.content.empty())) out += "<turn|>\n";
  }
  if (options.add_generation_prompt && prev != Prev::ToolResponse && prev != Prev::ToolCall) {
    out += "<|turn>model\n";
    if (!options.thinking) out += "<|channel>thought\n<channel|>";
  }
  return out;
}

std::string render_gemma3(std::span<const ChatMessage> messages, const ChatOptions& options) {
  // Tool calls and results become text turns (see chat_format.h); consecutive tool results
  // share one user turn, so the user/model alternation holds.
  std::vector<ChatMessage> folded;
  for (size_t i = 0; i < messages.size(); ++i) {
    const ChatMessage& m = messages[i];
    const Role role = parse_role(m, i);
    if (role == Role::Tool) {
      check_text(m, i);
      const std::string block = "```tool_response\n" + m.content + "\n```";
      if (!folded.empty() && folded.back().role == "tool") folded.back().content += "\n" + block;
      else folded.push_back(ChatMessage("tool", block));
      continue;
    }
    ChatMessage copy = m;
    for (const auto& call : m.tool_calls) {
      const nlohmann::json arguments = call.arguments.is_string() ? nlohmann::json::parse(call.arguments.get<std::string>(), nullptr, false)
                                                                  : call.arguments;
      nlohmann::ordered_json c;
      c["name"] = call.name;
      c["arguments"] = arguments.is_discarded() ? call.arguments : arguments;
      copy.content += (copy.content.empty() ? "" : "\n") + std::string("```tool_call\n") + c.dump() + "\n```";
    }
    copy.tool_calls.clear();
    folded.push_back(std::move(copy));
  }
  for (auto& m : folded)
    if (m.role == "tool") m.role = "user";
  std::string out = "<bos>";
  std::string first_user_prefix;
  size_t first = 0;
  if (!options.tools.empty()) first_user_prefix = gemma3_tool_preamble(options.tools);
  if (!folded.empty() && parse_role(folded[0], 0) == Role::System) {
    check_text(folded[0], 0);
    first_user_prefix = folded[0].content + "\n\n" + first_user_prefix;  // not trimmed, as the template does
    first = 1;
  }
  for (size_t i = first; i < folded.size(); ++i) {
    const Role role = parse_role(folded[i], i);
    const bool user_turn = (i - first) % 2 == 0;
    if (role == Role::System)
      throw Error("chat message " + std::to_string(i) + ": a system message must be the first message");
    if ((role == Role::User) != user_turn)
      throw Error("chat message " + std::to_string(i) + ": Gemma 3 conversations must alternate user/assistant, "
                  "starting with user");
    check_text(folded[i], i);
    out += role == Role::User ? "<start_of_turn>user\n" : "<start_of_turn>model\n";
    if (i == first) out += first_user_prefix;
    out += utf8::python_strip(folded[i].content);
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

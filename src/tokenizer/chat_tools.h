// Pieces of the chat formats' tool conventions shared by the renderer and the parser
// (chat_format.h has the public API).
#pragma once

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

namespace lumen::tokenizer {

// An object's items in Jinja's dictsort order (case-insensitive keys).
std::vector<std::pair<std::string, const nlohmann::json*>> gemma4_sorted_items(const nlohmann::json& object);
// "declaration:NAME{description:...,parameters:{...}}" of one OpenAI-style tool.
std::string gemma4_declaration(const nlohmann::json& tool);
// The Gemma 3 system text that declares the tools and the call convention.
std::string gemma3_tool_preamble(const std::vector<nlohmann::json>& tools);

}  // namespace lumen::tokenizer

// The grammar of a model turn that calls tools, in the model's chat format, with each
// call's arguments constrained by that tool's parameter schema (json_schema.h).
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "runtime/grammar.h"
#include "tokenizer/chat_format.h"

namespace lumen::runtime {

struct ToolGrammar {
  GrammarSource source;
  int32_t trigger = -1;  // >= 0: the grammar starts when the model samples this token
};

// `only`: restrict to the function of that name (tool_choice naming one); `parallel`: one
// or more calls (else exactly one). `required`: the turn must be calls (else, for Gemma 4,
// the grammar waits for <|tool_call>). Throws SchemaError (path "tools[i].function.parameters#...")
// for a parameter schema that cannot be compiled, lumen::Error for a format without the
// tokens it needs. Returns an empty source when nothing constrains the turn (Gemma 3, auto).
ToolGrammar tool_call_grammar(tokenizer::ChatFormat format, const std::vector<nlohmann::ordered_json>& tools,
                              const std::string& only, bool parallel, bool required, const tokenizer::Tokenizer& tokenizer);

}  // namespace lumen::runtime

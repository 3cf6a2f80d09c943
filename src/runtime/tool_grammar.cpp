#include "runtime/tool_grammar.h"

#include "base/error.h"
#include "runtime/json_schema.h"
#include "tokenizer/tokenizer.h"

namespace lumen::runtime {

using nlohmann::ordered_json;

ToolGrammar tool_call_grammar(tokenizer::ChatFormat format, const std::vector<ordered_json>& tools, const std::string& only,
                              bool parallel, bool required, const tokenizer::Tokenizer& tokenizer) {
  ToolGrammar out;
  const bool gemma4 = format == tokenizer::ChatFormat::Gemma4;
  if (!gemma4 && !required) return out;
  auto token_id = [&](const char* piece) {
    auto id = tokenizer.piece_id(piece);
    if (!id) throw Error(std::string("tool calls: the vocabulary has no ") + piece + " token");
    return *id;
  };
  JsonGrammarOptions options;
  if (gemma4) {
    options.dialect = JsonDialect::Gemma4Args;
    options.quote_token = token_id("<|\"|>");
    options.sort_properties = true;
  }
  std::vector<ExprPtr> calls;
  for (size_t i = 0; i < tools.size(); ++i) {
    const ordered_json& fn = tools[i].at("function");
    const std::string name = fn.at("name").get<std::string>();
    if (!only.empty() && name != only) continue;
    const std::string where = "tools[" + std::to_string(i) + "].function.parameters";
    ExprPtr args;
    try {
      const ordered_json params = fn.contains("parameters") && !fn["parameters"].is_null() ? fn["parameters"] : ordered_json::object();
      args = add_json_schema(out.source, params.empty() ? ordered_json{{"type", "object"}} : params, "t" + std::to_string(i) + "-", options);
    } catch (const SchemaError& e) {
      throw SchemaError(where + e.path, std::string(e.what()).substr(std::string("schema at " + e.path + ": ").size()));
    }
    if (gemma4)
      calls.push_back(seq({literal("call:" + name), args}));
    else
      calls.push_back(seq({literal("{\"name\": " + ordered_json(name).dump() + ", \"arguments\": "), args, literal("}")}));
  }
  if (calls.empty()) throw Error("tool calls: no tool named '" + printable(only) + "'");
  ExprPtr call;
  if (gemma4) {
    call = seq({token(token_id("<|tool_call>")), alt(calls), token(token_id("<tool_call|>"))});
    if (!required) out.trigger = token_id("<|tool_call>");
  } else {
    call = seq({literal("```tool_call\n"), alt(calls), literal("\n```")});
  }
  out.source.add("root", parallel ? seq({call, repeat(seq({gemma4 ? empty() : literal("\n"), call}), 0, -1)}) : call);
  return out;
}

}  // namespace lumen::runtime

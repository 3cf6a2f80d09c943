// JSON Schema -> grammar (grammar.h), for response_format json_schema and tool arguments.
//
// Supported: type (one or a list), properties / required (in the schema's order; optional
// ones may be left out), additionalProperties (false; true or absent = the declared
// properties only; a schema with no properties = a map), enum, const, items with minItems /
// maxItems, nested objects, anyOf, allOf of one schema, $ref into #/$defs or #/definitions
// (recursion allowed), strings with minLength / maxLength and the formats date, time,
// date-time, uuid, ipv4, email. Annotations (title, description, default, examples, ...) are
// ignored. Anything that would let an output violate the schema (pattern, minimum, oneOf,
// uniqueItems, ...) is refused: SchemaError names the schema path ("#/properties/age").
//
// Two spellings of the same values: standard JSON, and Gemma 4's tool-call arguments
// (`{key:value}` with bare keys, strings between <|"|> tokens, no whitespace).
#pragma once

#include <cstdint>
#include <string>

#include <nlohmann/json_fwd.hpp>

#include "base/error.h"
#include "runtime/grammar.h"

namespace lumen::runtime {

class SchemaError : public Error {
 public:
  SchemaError(std::string path, const std::string& message)
      : Error("schema at " + path + ": " + message), path(std::move(path)) {}
  std::string path;  // JSON pointer style, "#" for the root
};

enum class JsonDialect { Json, Gemma4Args };

struct JsonGrammarOptions {
  JsonDialect dialect = JsonDialect::Json;
  int32_t quote_token = -1;  // Gemma4Args: the id of <|"|>
  // Properties in Jinja's dictsort order (how Gemma 4's template writes arguments) instead
  // of the schema's order.
  bool sort_properties = false;
};

// Adds the rules of `schema` to `out` (names prefixed by `prefix`) and returns the expression
// of one value. Throws SchemaError.
ExprPtr add_json_schema(GrammarSource& out, const nlohmann::ordered_json& schema, const std::string& prefix,
                        const JsonGrammarOptions& options = {});

// A whole grammar: root ::= value (Json: optional single spaces around it).
GrammarSource json_schema_grammar(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options = {});
// Any JSON object (response_format json_object).
GrammarSource json_object_grammar();

}  // namespace lumen::runtime

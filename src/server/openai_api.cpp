#include "server/openai_api.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <limits>

#include "base/error.h"
#include "base/json.h"

namespace lumen::server {

using nlohmann::json;

json error_body(const std::string& message, const std::string& type, const std::string& param,
                const std::string& code) {
  json e = {{"message", message}, {"type", type}, {"param", nullptr}, {"code", nullptr}};
  if (!param.empty()) e["param"] = param;
  if (!code.empty()) e["code"] = code;
  return json{{"error", e}};
}

json error_body(const ApiError& error) { return error_body(error.what(), error.type, error.param, error.code); }

namespace {

// Names used in error messages come from the request: keep them printable and short.
std::string shown(const std::string& name) {
  return printable(name.size() > 64 ? name.substr(0, 64) + "..." : name);
}

[[noreturn]] void bad(const std::string& param, const std::string& message, const std::string& code = "invalid_value") {
  throw ApiError(400, message, param, code);
}

const char* type_name(const json& v) {
  switch (v.type()) {
    case json::value_t::null: return "null";
    case json::value_t::boolean: return "boolean";
    case json::value_t::string: return "string";
    case json::value_t::array: return "array";
    case json::value_t::object: return "object";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned: return "integer";
    case json::value_t::number_float: return "number";
    default: return "value";
  }
}

[[noreturn]] void wrong_type(const std::string& param, const char* want, const json& got) {
  bad(param, "'" + param + "' must be " + want + ", not " + type_name(got), "invalid_type");
}

json parse_body(const std::string& body) {
  json root;
  try {
    root = parse_json(body);
  } catch (const json::parse_error& e) {
    // nlohmann's message carries the byte position; keep only that much of it.
    throw ApiError(400, "request body is not valid JSON (" + printable(e.what()) + ")", "", "invalid_json");
  }
  if (!root.is_object()) throw ApiError(400, std::string("request body must be a JSON object, not ") + type_name(root), "", "invalid_json");
  return root;
}

// A present, non-null field.
const json* field(const json& root, const char* name) {
  auto it = root.find(name);
  if (it == root.end() || it->is_null()) return nullptr;
  return &*it;
}

double number_in(const json& root, const char* name, double lo, double hi) {
  const json& v = *field(root, name);
  if (!v.is_number()) wrong_type(name, "a number", v);
  const double x = v.get<double>();
  if (!std::isfinite(x) || x < lo || x > hi)
    bad(name, "'" + std::string(name) + "' must be between " + json(lo).dump() + " and " + json(hi).dump() +
                  ", got " + v.dump());
  return x;
}

int64_t integer_in(const json& root, const char* name, int64_t lo, int64_t hi) {
  const json& v = *field(root, name);
  if (!v.is_number_integer() && !v.is_number_unsigned()) wrong_type(name, "an integer", v);
  if (v.is_number_unsigned() && v.get<uint64_t>() > uint64_t(std::numeric_limits<int64_t>::max()))
    bad(name, "'" + std::string(name) + "' is too large");
  const int64_t x = v.get<int64_t>();
  if (x < lo || x > hi)
    bad(name, "'" + std::string(name) + "' must be between " + std::to_string(lo) + " and " + std::to_string(hi) +
                  ", got " + std::to_string(x));
  return x;
}

bool boolean(const json& root, const char* name) {
  const json& v = *field(root, name);
  if (!v.is_boolean()) wrong_type(name, "a boolean", v);
  return v.get<bool>();
}

// The fields chat and completions share.
void parse_common(const json& root, ApiRequest& r) {
  if (auto* v = field(root, "model")) {
    if (!v->is_string()) wrong_type("model", "a string", *v);
    r.model = v->get<std::string>();
  }
  if (field(root, "n")) r.n = int(integer_in(root, "n", 1, 16));
  if (field(root, "stream")) r.stream = boolean(root, "stream");
  if (auto* so = field(root, "stream_options")) {
    if (!so->is_object()) wrong_type("stream_options", "an object", *so);
    if (auto* iu = field(*so, "include_usage")) {
      if (!iu->is_boolean()) wrong_type("stream_options.include_usage", "a boolean", *iu);
      r.include_usage = iu->get<bool>();
    }
  }
  for (const char* name : {"max_completion_tokens", "max_tokens"})
    if (field(root, name)) r.max_tokens = int(integer_in(root, name, 1, std::numeric_limits<int32_t>::max()));
  auto& s = r.sampling;
  if (field(root, "temperature")) s.temperature = float(number_in(root, "temperature", 0.0, 2.0));
  if (field(root, "top_p")) s.top_p = float(number_in(root, "top_p", 0.0, 1.0));
  if (field(root, "top_p") && s.top_p <= 0.0f) bad("top_p", "'top_p' must be greater than 0");
  if (field(root, "top_k")) s.top_k = int(integer_in(root, "top_k", 0, std::numeric_limits<int32_t>::max()));
  if (field(root, "min_p")) s.min_p = float(number_in(root, "min_p", 0.0, 1.0));
  if (field(root, "presence_penalty")) s.presence_penalty = float(number_in(root, "presence_penalty", -2.0, 2.0));
  if (field(root, "frequency_penalty")) s.frequency_penalty = float(number_in(root, "frequency_penalty", -2.0, 2.0));
  if (field(root, "repetition_penalty"))
    s.repetition_penalty = float(number_in(root, "repetition_penalty", 0.01, 100.0));
  if (auto* v = field(root, "seed")) {
    if (!v->is_number_integer() && !v->is_number_unsigned()) wrong_type("seed", "an integer", *v);
    s.seed = v->is_number_unsigned() ? v->get<uint64_t>() : uint64_t(v->get<int64_t>());
    r.seed_given = true;
  }
  if (auto* v = field(root, "logit_bias")) {
    if (!v->is_object()) wrong_type("logit_bias", "an object of token id -> bias", *v);
    s.logit_bias.clear();
    for (auto it = v->begin(); it != v->end(); ++it) {
      const std::string& key = it.key();
      size_t used = 0;
      long long id = -1;
      try {
        id = std::stoll(key, &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used != key.size() || key.empty() || id < 0 || id > std::numeric_limits<int32_t>::max())
        bad("logit_bias", "'logit_bias' key '" + shown(key) + "' is not a token id");
      if (!it->is_number()) wrong_type("logit_bias", "an object of token id -> number", *it);
      const double bias = it->get<double>();
      if (!std::isfinite(bias) || bias < -100.0 || bias > 100.0)
        bad("logit_bias", "'logit_bias' values must be between -100 and 100, got " + it->dump());
      s.logit_bias[int32_t(id)] = float(bias);
    }
  }
  if (auto* v = field(root, "stop")) {
    if (v->is_string()) {
      r.stop.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > 4) bad("stop", "'stop' takes at most 4 strings");
      for (const auto& item : *v) {
        if (!item.is_string()) wrong_type("stop", "a string or an array of strings", item);
        r.stop.push_back(item.get<std::string>());
      }
    } else {
      wrong_type("stop", "a string or an array of strings", *v);
    }
    for (const auto& s : r.stop)
      if (s.empty()) bad("stop", "'stop' strings must not be empty");
  }
}

std::string message_content(const json& content, const std::string& where) {
  if (content.is_string()) return content.get<std::string>();
  if (content.is_array()) {  // [{"type": "text", "text": "..."}]
    std::string text;
    for (const auto& part : content) {
      if (!part.is_object()) wrong_type(where, "a string or an array of text parts", part);
      auto type = part.find("type");
      if (type == part.end() || !type->is_string() || type->get<std::string>() != "text")
        bad(where, "'" + where + "': only text content parts are supported", "unsupported_value");
      auto t = part.find("text");
      if (t == part.end() || !t->is_string()) bad(where, "'" + where + "': a text part needs a string 'text'");
      text += t->get<std::string>();
    }
    return text;
  }
  wrong_type(where, "a string or an array of text parts", content);
}

}  // namespace

ApiRequest parse_chat_request(const std::string& body, const runtime::SamplingParams& defaults) {
  const json root = parse_body(body);
  ApiRequest r;
  r.chat = true;
  r.sampling = defaults;
  const json* messages = field(root, "messages");
  if (!messages) bad("messages", "'messages' is required", "missing_required_parameter");
  if (!messages->is_array()) wrong_type("messages", "an array", *messages);
  if (messages->empty()) bad("messages", "'messages' must not be empty");
  for (size_t i = 0; i < messages->size(); ++i) {
    const json& m = (*messages)[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) wrong_type(where, "an object", m);
    auto role = m.find("role");
    if (role == m.end() || !role->is_string()) bad(where + ".role", "'" + where + ".role' must be a string");
    std::string name = role->get<std::string>();
    if (name == "developer") name = "system";  // OpenAI's newer name for the system role
    if (name != "system" && name != "user" && name != "assistant" && name != "tool")
      bad(where + ".role", "'" + where + ".role': unknown role '" + shown(name) +
                               "' (expected system, user, assistant or tool)");
    tokenizer::ChatMessage msg;
    msg.role = name;
    auto content = m.find("content");
    const bool has_calls = name == "assistant" && m.contains("tool_calls") && !m["tool_calls"].is_null();
    if (content == m.end() || content->is_null()) {
      if (!has_calls) bad(where + ".content", "'" + where + ".content' is required");
    } else {
      msg.content = message_content(*content, where + ".content");
    }
    if (has_calls) {
      const json& calls = m["tool_calls"];
      if (!calls.is_array()) wrong_type(where + ".tool_calls", "an array", calls);
      for (size_t k = 0; k < calls.size(); ++k) {
        const std::string cw = where + ".tool_calls[" + std::to_string(k) + "]";
        const json& c = calls[k];
        if (!c.is_object() || !c.contains("function") || !c["function"].is_object())
          bad(cw, "'" + cw + "' must be an object with a 'function'");
        const json& f = c["function"];
        if (!f.contains("name") || !f["name"].is_string()) bad(cw + ".function.name", "'" + cw + ".function.name' must be a string");
        tokenizer::ToolCall call;
        call.name = f["name"].get<std::string>();
        if (c.contains("id") && c["id"].is_string()) call.id = c["id"].get<std::string>();
        if (f.contains("arguments") && !f["arguments"].is_null()) {
          const json& a = f["arguments"];
          if (a.is_string()) {
            call.arguments = json::parse(a.get<std::string>(), nullptr, false);
            if (call.arguments.is_discarded() || !call.arguments.is_object())
              bad(cw + ".function.arguments", "'" + cw + ".function.arguments' must be a JSON object (as a string)");
          } else if (a.is_object()) {
            call.arguments = a;
          } else {
            wrong_type(cw + ".function.arguments", "a string", a);
          }
        }
        msg.tool_calls.push_back(std::move(call));
      }
    }
    if (name == "tool") {
      if (auto id = m.find("tool_call_id"); id != m.end() && id->is_string()) msg.tool_call_id = id->get<std::string>();
      if (auto n = m.find("name"); n != m.end() && n->is_string()) msg.name = n->get<std::string>();
    }
    r.messages.push_back(std::move(msg));
  }
  // Structured output and tools. Schemas keep their key order (properties are generated in
  // the order they are declared), so those parts are read again as ordered JSON.
  const auto ordered = nlohmann::ordered_json::parse(body);
  if (auto* rf = field(root, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      bad("response_format", "'response_format' must be an object with a string 'type'");
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      r.json_object = true;
    } else if (type == "json_schema") {
      const auto& js = ordered["response_format"];
      if (!js.contains("json_schema") || !js["json_schema"].is_object())
        bad("response_format.json_schema", "'response_format.json_schema' must be an object");
      const auto& inner = js["json_schema"];
      if (!inner.contains("schema") || !(inner["schema"].is_object() || inner["schema"].is_boolean()))
        bad("response_format.json_schema.schema", "'response_format.json_schema.schema' must be a JSON Schema object");
      r.json_schema = inner["schema"];
    } else if (type != "text") {
      bad("response_format.type", "'response_format.type' must be text, json_object or json_schema, not '" + shown(type) + "'");
    }
  }
  if (auto* g = field(root, "grammar")) {
    if (!g->is_string()) wrong_type("grammar", "a string (GBNF)", *g);
    r.grammar = g->get<std::string>();
    if (r.json_object || r.json_schema) bad("grammar", "'grammar' and 'response_format' cannot be used together");
  }
  if (auto* t = field(root, "tools")) {
    if (!t->is_array()) wrong_type("tools", "an array", *t);
    for (size_t i = 0; i < t->size(); ++i) {
      const std::string tw = "tools[" + std::to_string(i) + "]";
      const auto& tool = ordered["tools"][i];
      if (!tool.is_object() || (tool.contains("type") && tool["type"] != "function") || !tool.contains("function") ||
          !tool["function"].is_object())
        bad(tw, "'" + tw + "' must be {\"type\": \"function\", \"function\": {...}}");
      const auto& fn = tool["function"];
      if (!fn.contains("name") || !fn["name"].is_string() || fn["name"].get<std::string>().empty())
        bad(tw + ".function.name", "'" + tw + ".function.name' must be a non-empty string");
      for (char c : fn["name"].get<std::string>())
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-'))
          bad(tw + ".function.name", "'" + tw + ".function.name' may hold only letters, digits, _ and -");
      if (fn.contains("parameters") && !fn["parameters"].is_null() && !fn["parameters"].is_object())
        bad(tw + ".function.parameters", "'" + tw + ".function.parameters' must be a JSON Schema object");
      r.tools.push_back(tool);
    }
  }
  if (auto* tc = field(root, "tool_choice")) {
    if (tc->is_string()) {
      r.tool_choice = tc->get<std::string>();
      if (r.tool_choice != "auto" && r.tool_choice != "none" && r.tool_choice != "required")
        bad("tool_choice", "'tool_choice' must be auto, none, required or {\"type\": \"function\", ...}");
    } else if (tc->is_object() && tc->contains("function") && (*tc)["function"].is_object() &&
               (*tc)["function"].contains("name") && (*tc)["function"]["name"].is_string()) {
      r.tool_choice = "function";
      r.tool_choice_name = (*tc)["function"]["name"].get<std::string>();
      const bool known = std::any_of(r.tools.begin(), r.tools.end(), [&](const auto& t) {
        return t["function"]["name"] == r.tool_choice_name;
      });
      if (!known) bad("tool_choice", "'tool_choice' names '" + shown(r.tool_choice_name) + "', which is not in 'tools'");
    } else {
      wrong_type("tool_choice", "a string or {\"type\": \"function\", \"function\": {\"name\": ...}}", *tc);
    }
    if (r.tools.empty() && r.tool_choice != "none" && r.tool_choice != "auto")
      bad("tool_choice", "'tool_choice' needs 'tools'");
  }
  if (field(root, "parallel_tool_calls")) r.parallel_tool_calls = boolean(root, "parallel_tool_calls");
  if (!r.tools.empty() && r.tool_choice != "none" && (r.json_object || r.json_schema || !r.grammar.empty()))
    bad("response_format", "'response_format' or 'grammar' together with tools needs tool_choice 'none'");
  if (field(root, "logprobs") && boolean(root, "logprobs")) r.top_logprobs = 0;
  if (field(root, "top_logprobs")) {
    const int k = int(integer_in(root, "top_logprobs", 0, 20));
    if (r.top_logprobs < 0) bad("top_logprobs", "'top_logprobs' needs 'logprobs': true");
    r.top_logprobs = k;
  }
  parse_common(root, r);
  return r;
}

ApiRequest parse_completion_request(const std::string& body, const runtime::SamplingParams& defaults) {
  const json root = parse_body(body);
  ApiRequest r;
  r.chat = false;
  r.sampling = defaults;
  const json* prompt = field(root, "prompt");
  if (!prompt) bad("prompt", "'prompt' is required", "missing_required_parameter");
  // A string, a one-element array of a string, or an array of token ids.
  const json* p = prompt;
  if (p->is_array() && p->size() == 1 && (*p)[0].is_string()) p = &(*p)[0];
  if (p->is_string()) {
    r.prompt_text = p->get<std::string>();
  } else if (p->is_array() && !p->empty() && std::all_of(p->begin(), p->end(), [](const json& x) {
               return x.is_number_integer() || x.is_number_unsigned();
             })) {
    for (const auto& x : *p) {
      const int64_t id = x.get<int64_t>();
      if (id < 0 || id > std::numeric_limits<int32_t>::max()) bad("prompt", "'prompt' token id " + x.dump() + " is out of range");
      r.prompt_ids.push_back(int32_t(id));
    }
    r.prompt_is_ids = true;
  } else {
    wrong_type("prompt", "a string or an array of token ids (one prompt)", *prompt);
  }
  if (field(root, "logprobs")) r.top_logprobs = int(integer_in(root, "logprobs", 0, 20));
  if (auto* g = field(root, "grammar")) {
    if (!g->is_string()) wrong_type("grammar", "a string (GBNF)", *g);
    r.grammar = g->get<std::string>();
  }
  if (auto* rf = field(root, "response_format")) {
    const auto ordered = nlohmann::ordered_json::parse(body);
    const auto& js = ordered["response_format"];
    if (!rf->is_object() || !js.contains("type") || !js["type"].is_string())
      bad("response_format", "'response_format' must be an object with a string 'type'");
    if (js["type"] == "json_object") r.json_object = true;
    else if (js["type"] == "json_schema" && js.contains("json_schema") && js["json_schema"].is_object() &&
             js["json_schema"].contains("schema"))
      r.json_schema = js["json_schema"]["schema"];
    else if (js["type"] != "text")
      bad("response_format", "'response_format' must be text, json_object or json_schema with a schema");
  }
  for (const char* unsupported : {"suffix", "best_of"})
    if (field(root, unsupported) && !(std::string(unsupported) == "best_of" && root["best_of"] == 1))
      bad(unsupported, "'" + std::string(unsupported) + "' is not supported", "unsupported_value");
  if (field(root, "echo") && boolean(root, "echo")) bad("echo", "'echo' is not supported", "unsupported_value");
  parse_common(root, r);
  return r;
}

json usage_json(const Usage& u) {
  return {{"prompt_tokens", u.prompt_tokens},
          {"completion_tokens", u.completion_tokens},
          {"total_tokens", u.prompt_tokens + u.completion_tokens}};
}

namespace {
json finish_json(const std::string& reason) { return reason.empty() ? json(nullptr) : json(reason); }
}  // namespace

json chat_completion(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                     const std::string& finish_reason, const Usage& usage) {
  return {{"id", id},
          {"object", "chat.completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"message", {{"role", "assistant"}, {"content", text}}},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_json(finish_reason)}}})},
          {"usage", usage_json(usage)}};
}

json chat_choice(int index, const json& message, const json& logprobs, const std::string& finish_reason) {
  return {{"index", index}, {"message", message}, {"logprobs", logprobs}, {"finish_reason", finish_json(finish_reason)}};
}

namespace {
json token_entry(const std::string& token, float logprob) {
  json bytes = json::array();
  for (unsigned char c : token) bytes.push_back(int(c));
  return {{"token", token}, {"logprob", logprob}, {"bytes", bytes}};
}
}  // namespace

json chat_logprobs(const std::vector<std::pair<std::string, float>>& tokens,
                   const std::vector<std::vector<std::pair<std::string, float>>>& top) {
  json content = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    json e = token_entry(tokens[i].first, tokens[i].second);
    json alts = json::array();
    for (const auto& [t, lp] : top[i]) alts.push_back(token_entry(t, lp));
    e["top_logprobs"] = alts;
    content.push_back(e);
  }
  return {{"content", content}, {"refusal", nullptr}};
}

json completion_logprobs(const std::vector<std::pair<std::string, float>>& tokens,
                         const std::vector<std::vector<std::pair<std::string, float>>>& top, size_t text_offset) {
  json toks = json::array(), lps = json::array(), tops = json::array(), offsets = json::array();
  for (size_t i = 0; i < tokens.size(); ++i) {
    toks.push_back(tokens[i].first);
    lps.push_back(tokens[i].second);
    json alts = json::object();
    for (const auto& [t, lp] : top[i]) alts[t] = lp;
    tops.push_back(alts);
    offsets.push_back(text_offset);
    text_offset += tokens[i].first.size();
  }
  return {{"tokens", toks}, {"token_logprobs", lps}, {"top_logprobs", tops}, {"text_offset", offsets}};
}

json chat_chunk(const std::string& id, int64_t created, const std::string& model, const json& delta,
                const std::string& finish_reason) {
  return {{"id", id},
          {"object", "chat.completion.chunk"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"delta", delta},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_json(finish_reason)}}})}};
}

json text_completion(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                     const std::string& finish_reason, const Usage& usage) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"text", text},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_json(finish_reason)}}})},
          {"usage", usage_json(usage)}};
}

json text_chunk(const std::string& id, int64_t created, const std::string& model, const std::string& text,
                const std::string& finish_reason) {
  return {{"id", id},
          {"object", "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array({{{"index", 0},
                                    {"text", text},
                                    {"logprobs", nullptr},
                                    {"finish_reason", finish_json(finish_reason)}}})}};
}

json usage_chunk(const std::string& id, int64_t created, const std::string& model, bool chat, const Usage& usage) {
  return {{"id", id},
          {"object", chat ? "chat.completion.chunk" : "text_completion"},
          {"created", created},
          {"model", model},
          {"choices", json::array()},
          {"usage", usage_json(usage)}};
}

std::string sse_event(const json& payload) {
  // Invalid UTF-8 in generated text must not make dump() throw mid-stream.
  return "data: " + payload.dump(-1, ' ', false, json::error_handler_t::replace) + "\n\n";
}

}  // namespace lumen::server

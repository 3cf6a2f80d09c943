// Tool declarations, calls and results in the Gemma chat formats: the Gemma 4 template's
// macros (format_function_declaration, format_parameters, format_argument) transcribed, the
// Gemma 3 convention, and the parser that turns a model turn back into content and calls.
#include "tokenizer/chat_tools.h"

#include <algorithm>
#include <cctype>

#include "base/error.h"
#include "tokenizer/chat_format.h"
#include "tokenizer/tokenizer.h"

namespace lumen::tokenizer {

using nlohmann::json;

namespace {

constexpr const char* kQuote = "<|\"|>";

const json* get(const json& object, const char* key) {
  if (!object.is_object()) return nullptr;
  auto it = object.find(key);
  return it == object.end() ? nullptr : &*it;
}

// Jinja truthiness of a value that may be undefined (nullptr).
bool truthy(const json* v) {
  if (!v || v->is_null()) return false;
  if (v->is_boolean()) return v->get<bool>();
  if (v->is_number()) return v->get<double>() != 0;
  if (v->is_string() || v->is_array() || v->is_object()) return !v->empty();
  return true;
}

// What {{ value }} prints (Python's str; undefined prints nothing).
std::string text_of(const json* v) {
  if (!v) return "";
  if (v->is_string()) return v->get<std::string>();
  if (v->is_null()) return "None";
  if (v->is_boolean()) return v->get<bool>() ? "True" : "False";
  return v->dump();
}

std::string upper(std::string s) {
  for (char& c : s) c = char(std::toupper(static_cast<unsigned char>(c)));
  return s;
}

std::string lower(std::string s) {
  for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

std::string quoted(const std::string& s) { return kQuote + s + kQuote; }

std::string name_list(const json& names) {
  std::string out = "[";
  if (names.is_array())
    for (size_t i = 0; i < names.size(); ++i) out += (i ? "," : "") + quoted(text_of(&names[i]));
  return out + "]";
}

std::string format_parameters(const json& properties) {
  static const std::vector<std::string> kStandard = {"description", "type", "properties", "required", "nullable"};
  std::string out;
  bool found_first = false;
  for (const auto& [key, vp] : gemma4_sorted_items(properties)) {
    if (std::find(kStandard.begin(), kStandard.end(), key) != kStandard.end()) continue;
    const json& value = *vp;
    bool add_comma = false;
    const auto comma = [&] {
      if (add_comma) out += ",";
      else add_comma = true;
    };
    if (found_first) out += ",";
    found_first = true;
    out += key + ":{";
    if (truthy(get(value, "description"))) {
      out += "description:" + quoted(text_of(get(value, "description")));
      add_comma = true;
    }
    const std::string type = upper(text_of(get(value, "type")));
    if (type == "STRING") {
      if (truthy(get(value, "enum"))) {
        comma();
        out += "enum:" + gemma4_argument(*get(value, "enum"));
      }
    } else if (type == "ARRAY") {
      const json* items = get(value, "items");
      if (items && items->is_object() && !items->empty()) {
        comma();
        out += "items:{";
        bool first_item = true;
        for (const auto& [item_key, item_value] : gemma4_sorted_items(*items)) {
          if (item_value->is_null()) continue;
          if (!first_item) out += ",";
          first_item = false;
          if (item_key == "properties") {
            out += "properties:{";
            if (item_value->is_object()) out += format_parameters(*item_value);
            out += "}";
          } else if (item_key == "required") {
            out += "required:" + name_list(*item_value);
          } else if (item_key == "type") {
            if (item_value->is_string()) {
              out += "type:" + gemma4_argument(json(upper(item_value->get<std::string>())));
            } else {
              json list = json::array();
              if (item_value->is_array())
                for (const auto& t : *item_value) list.push_back(upper(text_of(&t)));
              out += "type:" + gemma4_argument(list);
            }
          } else {
            out += item_key + ":" + gemma4_argument(*item_value);
          }
        }
        out += "}";
      }
    }
    if (truthy(get(value, "nullable"))) {
      comma();
      out += "nullable:true";
    }
    if (type == "OBJECT") {
      const json* props = get(value, "properties");
      if (props && props->is_object()) {
        comma();
        out += "properties:{" + format_parameters(*props) + "}";
      } else if (value.is_object()) {
        comma();
        out += "properties:{" + format_parameters(value) + "}";
      }
      if (truthy(get(value, "required"))) {
        comma();
        out += "required:" + name_list(*get(value, "required"));
      }
    }
    comma();
    out += "type:" + quoted(type) + "}";
  }
  return out;
}

}  // namespace

std::vector<std::pair<std::string, const json*>> gemma4_sorted_items(const json& object) {
  std::vector<std::pair<std::string, const json*>> items;
  if (!object.is_object()) return items;
  for (auto it = object.begin(); it != object.end(); ++it) items.push_back({it.key(), &it.value()});
  std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return lower(a.first) < lower(b.first); });
  return items;
}

std::string gemma4_argument(const json& value, bool escape_keys) {
  if (value.is_string()) return quoted(value.get<std::string>());
  if (value.is_boolean()) return value.get<bool>() ? "true" : "false";
  if (value.is_object()) {
    std::string out = "{";
    bool first = true;
    for (const auto& [key, v] : gemma4_sorted_items(value)) {
      if (!first) out += ",";
      first = false;
      out += (escape_keys ? quoted(key) : key) + ":" + gemma4_argument(*v, escape_keys);
    }
    return out + "}";
  }
  if (value.is_array()) {
    std::string out = "[";
    for (size_t i = 0; i < value.size(); ++i) out += (i ? "," : "") + gemma4_argument(value[i], escape_keys);
    return out + "]";
  }
  return text_of(&value);
}

std::string gemma4_declaration(const json& tool) {
  const json* fn = get(tool, "function");
  static const json kEmpty = json::object();
  const json& f = fn ? *fn : kEmpty;
  std::string out = "declaration:" + text_of(get(f, "name")) + "{description:" + quoted(text_of(get(f, "description")));
  const json* params = get(f, "parameters");
  if (truthy(params)) {
    out += ",parameters:{";
    if (truthy(get(*params, "properties"))) out += "properties:{" + format_parameters(*get(*params, "properties")) + "},";
    if (truthy(get(*params, "required"))) out += "required:" + name_list(*get(*params, "required")) + ",";
    if (truthy(get(*params, "type"))) out += "type:" + quoted(upper(text_of(get(*params, "type")))) + "}";
  }
  if (const json* response = get(f, "response")) {
    out += ",response:{";
    if (truthy(get(*response, "description"))) out += "description:" + quoted(text_of(get(*response, "description"))) + ",";
    if (upper(text_of(get(*response, "type"))) == "OBJECT") out += "type:" + quoted(upper(text_of(get(*response, "type")))) + "}";
  }
  return out + "}";
}

std::string gemma3_tool_preamble(const std::vector<json>& tools) {
  std::string out =
      "You can call these functions. To call one, answer with only a block like this (one block per call):\n"
      "```tool_call\n{\"name\": \"FUNCTION\", \"arguments\": {...}}\n```\nFunctions:\n";
  for (const auto& t : tools) {
    const json* fn = get(t, "function");
    out += (fn ? *fn : t).dump() + "\n";
  }
  return out + "\n";
}

// ------------------------------------------------------------------------ argument parser

namespace {

class ArgumentReader {
 public:
  explicit ArgumentReader(std::string_view text) : t_(text) {}
  json read_all() {
    json v = value();
    if (pos_ != t_.size()) fail("unexpected text after the value");
    return v;
  }

 private:
  std::string_view t_;
  size_t pos_ = 0;

  [[noreturn]] void fail(const std::string& what) const {
    throw Error("tool call arguments: " + what + " at byte " + std::to_string(pos_));
  }
  bool starts(std::string_view s) const { return t_.substr(pos_, s.size()) == s; }
  void skip_space() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\n' || t_[pos_] == '\t' || t_[pos_] == '\r')) ++pos_;
  }

  json value() {
    skip_space();
    if (starts(kQuote)) {
      pos_ += 5;
      const size_t end = t_.find(kQuote, pos_);
      if (end == std::string_view::npos) fail("unterminated string");
      std::string s(t_.substr(pos_, end - pos_));
      pos_ = end + 5;
      return s;
    }
    if (pos_ < t_.size() && t_[pos_] == '"') {  // a JSON string, as a model may write one
      size_t end = pos_ + 1;
      while (end < t_.size() && t_[end] != '"') end += t_[end] == '\\' ? 2 : 1;
      if (end >= t_.size()) fail("unterminated string");
      json s = json::parse(t_.substr(pos_, end + 1 - pos_), nullptr, false);
      if (s.is_discarded()) fail("bad string");
      pos_ = end + 1;
      return s;
    }
    if (pos_ < t_.size() && t_[pos_] == '{') {
      ++pos_;
      json obj = json::object();
      skip_space();
      if (pos_ < t_.size() && t_[pos_] == '}') {
        ++pos_;
        return obj;
      }
      for (;;) {
        skip_space();
        std::string key;
        if (starts(kQuote) || (pos_ < t_.size() && t_[pos_] == '"')) {
          key = value().get<std::string>();
        } else {
          const size_t start = pos_;
          while (pos_ < t_.size() && t_[pos_] != ':' && t_[pos_] != ',' && t_[pos_] != '}') ++pos_;
          key = std::string(t_.substr(start, pos_ - start));
          while (!key.empty() && key.back() == ' ') key.pop_back();
          if (key.empty()) fail("missing key");
        }
        skip_space();
        if (pos_ >= t_.size() || t_[pos_] != ':') fail("expected ':'");
        ++pos_;
        obj[key] = value();
        skip_space();
        if (pos_ < t_.size() && t_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < t_.size() && t_[pos_] == '}') {
          ++pos_;
          return obj;
        }
        fail("expected ',' or '}'");
      }
    }
    if (pos_ < t_.size() && t_[pos_] == '[') {
      ++pos_;
      json arr = json::array();
      skip_space();
      if (pos_ < t_.size() && t_[pos_] == ']') {
        ++pos_;
        return arr;
      }
      for (;;) {
        arr.push_back(value());
        skip_space();
        if (pos_ < t_.size() && t_[pos_] == ',') {
          ++pos_;
          continue;
        }
        if (pos_ < t_.size() && t_[pos_] == ']') {
          ++pos_;
          return arr;
        }
        fail("expected ',' or ']'");
      }
    }
    for (const auto& [word, v] : {std::pair<const char*, json>{"true", true}, {"false", false}, {"null", nullptr},
                                  {"None", nullptr}, {"True", true}, {"False", false}})
      if (starts(word)) {
        pos_ += std::string_view(word).size();
        return v;
      }
    const size_t start = pos_;
    while (pos_ < t_.size() && std::string_view("+-.0123456789eE").find(t_[pos_]) != std::string_view::npos) ++pos_;
    if (pos_ == start) fail("expected a value");
    json n = json::parse(t_.substr(start, pos_ - start), nullptr, false);
    if (n.is_discarded() || !n.is_number()) fail("bad number");
    return n;
  }
};

}  // namespace

json gemma4_arguments_to_json(std::string_view text) { return ArgumentReader(text).read_all(); }

// --------------------------------------------------------------------------- call parser

ToolCallParser::ToolCallParser(ChatFormat format) : format_(format) {}

std::vector<ToolCallParser::Event> ToolCallParser::feed(std::string_view text) {
  buffer_ += text;
  return drain(false);
}

std::vector<ToolCallParser::Event> ToolCallParser::finish() { return drain(true); }

std::vector<ToolCallParser::Event> ToolCallParser::drain(bool at_end) {
  const std::string open = format_ == ChatFormat::Gemma4 ? "<|tool_call>" : "```tool_call";
  const std::string close = format_ == ChatFormat::Gemma4 ? "<tool_call|>" : "```";
  std::vector<Event> events;
  for (;;) {
    const size_t start = buffer_.find(open);
    if (start == std::string::npos) {
      // Hold back a tail that could be the start of `open`.
      size_t keep = 0;
      if (!at_end)
        for (size_t k = std::min(buffer_.size(), open.size() - 1); k > 0; --k)
          if (buffer_.compare(buffer_.size() - k, k, open, 0, k) == 0) {
            keep = k;
            break;
          }
      if (buffer_.size() > keep) events.push_back({buffer_.substr(0, buffer_.size() - keep), std::nullopt});
      buffer_.erase(0, buffer_.size() - keep);
      return events;
    }
    if (start > 0) events.push_back({buffer_.substr(0, start), std::nullopt});
    buffer_.erase(0, start);
    const size_t end = buffer_.find(close, open.size());
    if (end == std::string::npos) {
      if (at_end) {  // a call cut off (max_tokens): it stays text
        events.push_back({buffer_, std::nullopt});
        buffer_.clear();
      }
      return events;
    }
    const std::string body = buffer_.substr(open.size(), end - open.size());
    const std::string whole = buffer_.substr(0, end + close.size());
    buffer_.erase(0, end + close.size());
    ToolCall call;
    try {
      if (format_ == ChatFormat::Gemma4) {
        // call:NAME{...}
        if (body.rfind("call:", 0) != 0) throw Error("no 'call:'");
        const size_t brace = body.find('{');
        if (brace == std::string::npos) throw Error("no arguments");
        call.name = body.substr(5, brace - 5);
        call.arguments = gemma4_arguments_to_json(body.substr(brace));
      } else {
        const json j = json::parse(body);
        call.name = j.at("name").get<std::string>();
        call.arguments = j.contains("arguments") ? j.at("arguments") : json::object();
      }
      if (call.name.empty()) throw Error("no name");
      events.push_back({"", std::move(call)});
    } catch (const std::exception&) {
      events.push_back({whole, std::nullopt});  // not a well-formed call: leave it as text
    }
  }
}

std::vector<int32_t> tool_stop_tokens(ChatFormat format, const Tokenizer& tokenizer) {
  std::vector<int32_t> out;
  if (format == ChatFormat::Gemma4)
    if (auto id = tokenizer.piece_id("<|tool_response>")) out.push_back(*id);
  return out;
}

}  // namespace lumen::tokenizer

#include "runtime/json_schema.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <map>
#include <set>

#include <nlohmann/json.hpp>

namespace lumen::runtime {

using nlohmann::ordered_json;

namespace {

std::string escape_pointer(const std::string& key) {
  std::string out;
  for (char c : key) {
    if (c == '~') out += "~0";
    else if (c == '/') out += "~1";
    else out += c;
  }
  return out;
}

ExprPtr digits(int min, int max) { return repeat(char_class({{'0', '9'}}), min, max); }

class Compiler {
 public:
  Compiler(GrammarSource& out, const ordered_json& root, std::string prefix, JsonGrammarOptions options)
      : out_(out), root_(root), prefix_(std::move(prefix)), o_(options) {
    if (o_.dialect == JsonDialect::Gemma4Args && o_.quote_token < 0)
      throw Error("json schema grammar: the Gemma 4 dialect needs the id of <|\"|>");
  }

  ExprPtr value(const ordered_json& s, const std::string& path) {
    if (s.is_boolean()) {
      if (s.get<bool>()) return any_value();
      throw SchemaError(path, "the schema 'false' matches nothing");
    }
    if (!s.is_object()) throw SchemaError(path, "a schema must be an object or a boolean");
    static const std::set<std::string> kIgnored = {"title", "description", "default", "examples", "$schema", "$id",
                                                   "$comment", "readOnly", "writeOnly", "deprecated", "$defs",
                                                   "definitions", "discriminator", "strict", "name", "nullable"};
    static const std::set<std::string> kHandled = {"type", "properties", "required", "additionalProperties", "enum",
                                                   "const", "items", "minItems", "maxItems", "anyOf", "allOf",
                                                   "$ref", "minLength", "maxLength", "format"};
    for (auto it = s.begin(); it != s.end(); ++it)
      if (!kIgnored.count(it.key()) && !kHandled.count(it.key()))
        throw SchemaError(path + "/" + escape_pointer(it.key()), "'" + printable(it.key()) + "' is not supported");

    if (auto r = s.find("$ref"); r != s.end()) {
      if (s.size() > 1) {
        for (auto it = s.begin(); it != s.end(); ++it)
          if (kHandled.count(it.key()) && it.key() != "$ref")
            throw SchemaError(path, "'$ref' next to other constraints is not supported");
      }
      return reference(*r, path + "/$ref");
    }
    if (auto a = s.find("allOf"); a != s.end()) {
      if (!a->is_array() || a->size() != 1) throw SchemaError(path + "/allOf", "only an allOf of one schema is supported");
      return value((*a)[0], path + "/allOf/0");
    }
    if (auto a = s.find("anyOf"); a != s.end()) {
      if (!a->is_array() || a->empty()) throw SchemaError(path + "/anyOf", "anyOf must be a non-empty array");
      std::vector<ExprPtr> options;
      for (size_t i = 0; i < a->size(); ++i) options.push_back(value((*a)[i], path + "/anyOf/" + std::to_string(i)));
      return alt(std::move(options));
    }
    if (auto c = s.find("const"); c != s.end()) return constant(*c);
    if (auto e = s.find("enum"); e != s.end()) {
      if (!e->is_array() || e->empty()) throw SchemaError(path + "/enum", "enum must be a non-empty array");
      std::vector<ExprPtr> options;
      for (const auto& v : *e) options.push_back(constant(v));
      return alt(std::move(options));
    }
    std::vector<std::string> types;
    if (auto t = s.find("type"); t != s.end()) {
      if (t->is_string()) {
        types.push_back(t->get<std::string>());
      } else if (t->is_array() && !t->empty()) {
        for (const auto& x : *t) {
          if (!x.is_string()) throw SchemaError(path + "/type", "type names must be strings");
          types.push_back(x.get<std::string>());
        }
      } else {
        throw SchemaError(path + "/type", "type must be a string or a non-empty array of strings");
      }
    } else if (s.contains("properties") || s.contains("additionalProperties") || s.contains("required")) {
      types = {"object"};
    } else if (s.contains("items") || s.contains("minItems") || s.contains("maxItems")) {
      types = {"array"};
    } else if (s.contains("minLength") || s.contains("maxLength") || s.contains("format")) {
      types = {"string"};
    } else {
      return any_value();
    }
    std::vector<ExprPtr> options;
    for (const auto& t : types) {
      if (t == "string") options.push_back(string(s, path));
      else if (t == "integer") options.push_back(integer());
      else if (t == "number") options.push_back(number());
      else if (t == "boolean") options.push_back(alt({literal("true"), literal("false")}));
      else if (t == "null") options.push_back(literal("null"));
      else if (t == "object") options.push_back(object(s, path));
      else if (t == "array") options.push_back(array(s, path));
      else throw SchemaError(path + "/type", "unknown type '" + printable(t) + "'");
    }
    return alt(std::move(options));
  }

 private:
  GrammarSource& out_;
  const ordered_json& root_;
  std::string prefix_;
  JsonGrammarOptions o_;
  std::map<std::string, std::string> refs_;  // pointer -> rule name
  std::set<std::string> shared_;             // shared rules already added
  int counter_ = 0;

  bool gemma() const { return o_.dialect == JsonDialect::Gemma4Args; }
  ExprPtr ws() { return gemma() ? empty() : optional(literal(" ")); }

  std::string rule_name(const std::string& hint) { return prefix_ + hint + "-" + std::to_string(counter_++); }

  // A rule defined once per grammar (names are prefixed so two schemas can share a grammar).
  ExprPtr shared(const std::string& name, const std::function<ExprPtr()>& body) {
    const std::string full = prefix_ + name;
    if (!shared_.count(full)) {
      shared_.insert(full);
      out_.add(full, body());
    }
    return ref(full);
  }

  ExprPtr reference(const ordered_json& r, const std::string& path) {
    if (!r.is_string()) throw SchemaError(path, "$ref must be a string");
    const std::string target = r.get<std::string>();
    if (target.rfind("#", 0) != 0) throw SchemaError(path, "only local references (#/...) are supported");
    auto it = refs_.find(target);
    if (it != refs_.end()) return ref(it->second);
    const ordered_json* node = &root_;
    try {
      node = &root_.at(ordered_json::json_pointer(target.substr(1)));
    } catch (const std::exception&) {
      throw SchemaError(path, "reference '" + printable(target) + "' does not resolve");
    }
    const std::string name = rule_name("ref");
    refs_[target] = name;
    out_.add(name, value(*node, target));
    return ref(name);
  }

  ExprPtr any_value() {
    return shared("any-value", [this] {
      std::vector<ExprPtr> kv_items;
      const ExprPtr v = ref(prefix_ + "any-value");
      const ExprPtr key = gemma() ? bare_key() : plain_string();
      const ExprPtr kv = seq({key, ws(), literal(":"), ws(), v});
      const ExprPtr obj = seq({literal("{"), ws(), optional(seq({kv, repeat(seq({ws(), literal(","), ws(), kv}), 0, -1)})),
                               ws(), literal("}")});
      const ExprPtr arr = seq({literal("["), ws(), optional(seq({v, repeat(seq({ws(), literal(","), ws(), v}), 0, -1)})),
                               ws(), literal("]")});
      return alt({obj, arr, plain_string(), number(), literal("true"), literal("false"), literal("null")});
    });
  }

  ExprPtr string_char() {
    if (gemma()) return shared("char", [] { return any_char(); });
    return shared("char", [] {
      const ExprPtr hex = char_class({{'0', '9'}, {'a', 'f'}, {'A', 'F'}});
      // \u escapes of surrogates are left out (a lone one is no character; a pair would
      // count as two against maxLength).
      const ExprPtr first_hex = char_class({{'0', '9'}, {'a', 'c'}, {'e', 'f'}, {'A', 'C'}, {'E', 'F'}});
      return alt({char_class({{'"', '"'}, {'\\', '\\'}, {0, 0x1F}}, true),
                  seq({literal("\\"), alt({char_class({{'"', '"'}, {'\\', '\\'}, {'/', '/'}, {'b', 'b'}, {'f', 'f'},
                                                      {'n', 'n'}, {'r', 'r'}, {'t', 't'}}),
                                          seq({literal("u"), first_hex, hex, hex, hex})})})});
    });
  }

  ExprPtr quoted(ExprPtr body) {
    if (gemma()) return seq({token(o_.quote_token), body, token(o_.quote_token)});
    return seq({literal("\""), body, literal("\"")});
  }

  ExprPtr plain_string() {
    return shared("string", [this] { return quoted(repeat(string_char(), 0, -1)); });
  }

  ExprPtr bare_key() {
    return shared("key", [] {
      return seq({char_class({{'a', 'z'}, {'A', 'Z'}, {'_', '_'}}),
                  repeat(char_class({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'_', '_'}}), 0, 63)});
    });
  }

  static int count(const ordered_json& s, const char* key, const std::string& path, int fallback) {
    auto it = s.find(key);
    if (it == s.end()) return fallback;
    if (!it->is_number_integer() && !it->is_number_unsigned())
      throw SchemaError(path + "/" + key, std::string(key) + " must be a non-negative integer");
    const int64_t v = it->get<int64_t>();
    if (v < 0) throw SchemaError(path + "/" + key, std::string(key) + " must be a non-negative integer");
    if (v > 10000) throw SchemaError(path + "/" + key, std::string(key) + " above 10000 is not supported");
    return int(v);
  }

  ExprPtr string(const ordered_json& s, const std::string& path) {
    if (auto f = s.find("format"); f != s.end()) {
      if (!f->is_string()) throw SchemaError(path + "/format", "format must be a string");
      if (s.contains("minLength") || s.contains("maxLength"))
        throw SchemaError(path, "minLength/maxLength together with format is not supported");
      return quoted(format(f->get<std::string>(), path + "/format"));
    }
    const int min = count(s, "minLength", path, 0);
    const int max = count(s, "maxLength", path, -1);
    if (max >= 0 && max < min) throw SchemaError(path, "maxLength is below minLength");
    if (min == 0 && max < 0) return plain_string();
    return quoted(repeat(string_char(), min, max));
  }

  ExprPtr format(const std::string& f, const std::string& path) {
    const auto d = [](char lo, char hi) { return char_class({{char32_t(lo), char32_t(hi)}}); };
    const ExprPtr hex = char_class({{'0', '9'}, {'a', 'f'}});
    if (f == "date" || f == "date-time") {
      const ExprPtr date = shared("date", [&] {
        const ExprPtr day28 = alt({seq({literal("0"), d('1', '9')}), seq({literal("1"), d('0', '9')}),
                                   seq({literal("2"), d('0', '8')})});
        const ExprPtr day30 = alt({day28, literal("29"), literal("30")});
        const ExprPtr day31 = alt({day30, literal("31")});
        const ExprPtr md = alt({seq({alt({literal("01"), literal("03"), literal("05"), literal("07"), literal("08"),
                                          literal("10"), literal("12")}),
                                     literal("-"), day31}),
                                seq({alt({literal("04"), literal("06"), literal("09"), literal("11")}), literal("-"), day30}),
                                seq({literal("02-"), day28})});
        return seq({d('1', '9'), digits(3, 3), literal("-"), md});
      });
      if (f == "date") return date;
      return seq({date, literal("T"), time()});
    }
    if (f == "time") return time();
    if (f == "uuid")
      return seq({repeat(hex, 8, 8), literal("-"), repeat(hex, 4, 4), literal("-"), repeat(hex, 4, 4), literal("-"),
                  repeat(hex, 4, 4), literal("-"), repeat(hex, 12, 12)});
    if (f == "ipv4") {
      const ExprPtr octet = shared("octet", [&] {
        return alt({seq({literal("25"), d('0', '5')}), seq({literal("2"), d('0', '4'), d('0', '9')}),
                    seq({literal("1"), d('0', '9'), d('0', '9')}), seq({d('1', '9'), d('0', '9')}), d('0', '9')});
      });
      return seq({octet, literal("."), octet, literal("."), octet, literal("."), octet});
    }
    if (f == "email") {
      const ExprPtr local = char_class({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'.', '.'}, {'_', '_'}, {'+', '+'}, {'-', '-'}});
      const ExprPtr label = char_class({{'a', 'z'}, {'A', 'Z'}, {'0', '9'}, {'-', '-'}});
      return seq({repeat(local, 1, 32), literal("@"), repeat(label, 1, 32), literal("."),
                  repeat(char_class({{'a', 'z'}}), 2, 8)});
    }
    throw SchemaError(path, "string format '" + printable(f) + "' is not supported (date, time, date-time, uuid, ipv4, email are)");
  }

  ExprPtr time() {
    return shared("time", [] {
      const auto d = [](char lo, char hi) { return char_class({{char32_t(lo), char32_t(hi)}}); };
      const ExprPtr hh = alt({seq({d('0', '1'), d('0', '9')}), seq({literal("2"), d('0', '3')})});
      const ExprPtr mm = seq({d('0', '5'), d('0', '9')});
      return seq({hh, literal(":"), mm, literal(":"), mm, optional(seq({literal("."), digits(1, 6)})),
                  alt({literal("Z"), seq({char_class({{'+', '+'}, {'-', '-'}}), hh, literal(":"), mm})})});
    });
  }

  // At most 16 digits: JSON numbers past 2^53 lose precision anyway, and a bound keeps a
  // model that babbles digits from running to max_tokens.
  ExprPtr integer() {
    return shared("integer", [] {
      return seq({optional(literal("-")), alt({literal("0"), seq({char_class({{'1', '9'}}), digits(0, 15)})})});
    });
  }

  ExprPtr number() {
    return shared("number", [this] {
      return seq({integer(), optional(seq({literal("."), digits(1, 16)})),
                  optional(seq({char_class({{'e', 'e'}, {'E', 'E'}}), optional(char_class({{'+', '+'}, {'-', '-'}})),
                                digits(1, 2)}))});
    });
  }

  // The exact spelling of a JSON value in this dialect.
  std::string spell(const ordered_json& v) {
    if (!gemma()) return v.dump();
    if (v.is_object()) {
      std::string out = "{";
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        if (!first) out += ",";
        first = false;
        out += it.key() + ":" + spell(it.value());
      }
      return out + "}";
    }
    if (v.is_array()) {
      std::string out = "[";
      for (size_t i = 0; i < v.size(); ++i) out += (i ? "," : "") + spell(v[i]);
      return out + "]";
    }
    return v.dump();
  }

  ExprPtr constant(const ordered_json& v) {
    if (gemma() && v.is_string()) return quoted(v.get<std::string>().empty() ? empty() : literal(v.get<std::string>()));
    if (gemma() && (v.is_object() || v.is_array())) {
      // Strings inside need the quote token: build the expression piece by piece.
      if (v.is_object()) {
        std::vector<ExprPtr> items{literal("{")};
        bool first = true;
        for (auto it = v.begin(); it != v.end(); ++it) {
          if (!first) items.push_back(literal(","));
          first = false;
          items.push_back(literal(it.key() + ":"));
          items.push_back(constant(it.value()));
        }
        items.push_back(literal("}"));
        return seq(std::move(items));
      }
      std::vector<ExprPtr> items{literal("[")};
      for (size_t i = 0; i < v.size(); ++i) {
        if (i) items.push_back(literal(","));
        items.push_back(constant(v[i]));
      }
      items.push_back(literal("]"));
      return seq(std::move(items));
    }
    return literal(spell(v));
  }

  ExprPtr array(const ordered_json& s, const std::string& path) {
    ExprPtr item = any_value();
    if (auto it = s.find("items"); it != s.end()) item = value(*it, path + "/items");
    const int min = count(s, "minItems", path, 0);
    const int max = count(s, "maxItems", path, -1);
    if (max >= 0 && max < min) throw SchemaError(path, "maxItems is below minItems");
    const std::string name = rule_name("item");
    out_.add(name, item);
    const ExprPtr one = ref(name);
    const ExprPtr more = seq({ws(), literal(","), ws(), one});
    ExprPtr body;
    if (max == 0) body = empty();
    else if (min == 0) body = optional(seq({one, repeat(more, 0, max < 0 ? -1 : max - 1)}));
    else body = seq({one, repeat(more, min - 1, max < 0 ? -1 : max - 1)});
    return seq({literal("["), ws(), body, ws(), literal("]")});
  }

  ExprPtr object(const ordered_json& s, const std::string& path) {
    const ordered_json* props = nullptr;
    if (auto p = s.find("properties"); p != s.end()) {
      if (!p->is_object()) throw SchemaError(path + "/properties", "properties must be an object");
      props = &*p;
    }
    std::set<std::string> required;
    if (auto r = s.find("required"); r != s.end()) {
      if (!r->is_array()) throw SchemaError(path + "/required", "required must be an array of names");
      for (const auto& n : *r) {
        if (!n.is_string()) throw SchemaError(path + "/required", "required must be an array of names");
        required.insert(n.get<std::string>());
      }
    }
    const ordered_json* extra = nullptr;
    if (auto a = s.find("additionalProperties"); a != s.end()) {
      if (!a->is_boolean() && !a->is_object())
        throw SchemaError(path + "/additionalProperties", "additionalProperties must be a boolean or a schema");
      if (a->is_object()) extra = &*a;
    }
    const auto key_expr = [&](const std::string& name) {
      if (!gemma()) return literal(ordered_json(name).dump());
      for (char c : name)
        if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_'))
          throw SchemaError(path + "/properties/" + escape_pointer(name),
                            "Gemma 4 tool arguments need plain names (letters, digits, _)");
      return literal(name);
    };
    if (!props || props->empty()) {
      if (!required.empty())
        throw SchemaError(path + "/required", "required properties without 'properties' are not supported");
      if (!extra && s.contains("additionalProperties") && !s["additionalProperties"].get<bool>())
        return seq({literal("{"), ws(), literal("}")});
      if (!extra) return any_object();
      // A map: any keys, values of one schema.
      const std::string name = rule_name("map-value");
      out_.add(name, value(*extra, path + "/additionalProperties"));
      const ExprPtr key = gemma() ? bare_key() : plain_string();
      const ExprPtr kv = seq({key, ws(), literal(":"), ws(), ref(name)});
      return seq({literal("{"), ws(), optional(seq({kv, repeat(seq({ws(), literal(","), ws(), kv}), 0, -1)})), ws(),
                  literal("}")});
    }
    std::vector<std::pair<std::string, bool>> order;  // name, required
    std::vector<ExprPtr> kvs;
    std::vector<std::pair<std::string, const ordered_json*>> items;
    for (auto it = props->begin(); it != props->end(); ++it) items.push_back({it.key(), &it.value()});
    if (o_.sort_properties)
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) {
        auto lower = [](std::string s) {
          for (char& c : s) c = char(std::tolower(static_cast<unsigned char>(c)));
          return s;
        };
        return lower(a.first) < lower(b.first);
      });
    for (const auto& [key, schema] : items) {
      const std::string name = rule_name("prop");
      out_.add(name, value(*schema, path + "/properties/" + escape_pointer(key)));
      kvs.push_back(seq({key_expr(key), ws(), literal(":"), ws(), ref(name)}));
      order.push_back({key, required.count(key) > 0});
    }
    for (const auto& r : required)
      if (!props->contains(r))
        throw SchemaError(path + "/required", "required property '" + printable(r) + "' is not in properties");
    // Declared order; an optional property may be left out. first[k]: properties k.. with
    // none written yet; more[k]: the same after at least one (each is preceded by a comma).
    const size_t n = order.size();
    std::vector<std::string> first(n + 1), more(n + 1);
    for (size_t k = 0; k <= n; ++k) {
      first[k] = rule_name("props-first");
      more[k] = rule_name("props-more");
    }
    for (size_t k = n + 1; k-- > 0;) {
      if (k == n) {
        out_.add(first[k], empty());
        out_.add(more[k], empty());
        continue;
      }
      const ExprPtr comma = seq({ws(), literal(","), ws()});
      const ExprPtr take_first = seq({kvs[k], ref(more[k + 1])});
      const ExprPtr take_more = seq({comma, kvs[k], ref(more[k + 1])});
      if (order[k].second) {
        out_.add(first[k], take_first);
        out_.add(more[k], take_more);
      } else {
        out_.add(first[k], alt({take_first, ref(first[k + 1])}));
        out_.add(more[k], alt({take_more, ref(more[k + 1])}));
      }
    }
    return seq({literal("{"), ws(), ref(first[0]), ws(), literal("}")});
  }

  ExprPtr any_object() {
    any_value();
    return shared("any-object", [this] {
      const ExprPtr v = ref(prefix_ + "any-value");
      const ExprPtr key = gemma() ? bare_key() : plain_string();
      const ExprPtr kv = seq({key, ws(), literal(":"), ws(), v});
      return seq({literal("{"), ws(), optional(seq({kv, repeat(seq({ws(), literal(","), ws(), kv}), 0, -1)})), ws(),
                  literal("}")});
    });
  }


 public:
  ExprPtr object_value() { return any_object(); }
};

}  // namespace

ExprPtr add_json_schema(GrammarSource& out, const ordered_json& schema, const std::string& prefix, const JsonGrammarOptions& options) {
  Compiler c(out, schema, prefix, options);
  return c.value(schema, "#");
}

GrammarSource json_schema_grammar(const ordered_json& schema, const JsonGrammarOptions& options) {
  GrammarSource g;
  const ExprPtr v = add_json_schema(g, schema, "", options);
  const ExprPtr space = options.dialect == JsonDialect::Json ? optional(literal(" ")) : empty();
  g.add("root", seq({space, v}));
  return g;
}

GrammarSource json_object_grammar() {
  GrammarSource g;
  const ordered_json none = ordered_json::object();
  Compiler c(g, none, "", {});
  g.add("root", seq({optional(literal(" ")), c.object_value()}));
  return g;
}

}  // namespace lumen::runtime

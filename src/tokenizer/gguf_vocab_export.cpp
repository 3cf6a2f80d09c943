#include "tokenizer/gguf_vocab_export.h"

#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json.h"

namespace lumen::tokenizer {

namespace {

namespace fs = std::filesystem;
using nlohmann::json;

// ggml's token types (llama.cpp's llama_token_type).
constexpr int32_t kNormal = 1, kControl = 3, kUserDefined = 4, kByte = 6;

std::optional<json> read_json_file(const fs::path& path, bool required) {
  std::error_code ec;
  if (!fs::is_regular_file(path, ec)) {
    if (required) throw Error(path.string() + ": no such file (a GGUF needs the model's vocabulary)");
    return std::nullopt;
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path.string() + ": cannot open for reading");
  try {
    return parse_json(in);
  } catch (const json::exception&) {
    throw Error(path.string() + ": not valid JSON");
  }
}

// A tokenizer_config entry: "<bos>" or {"content": "<bos>", ...}.
std::optional<std::string> token_content(const json& entry) {
  if (entry.is_string()) return entry.get<std::string>();
  if (entry.is_object() && entry.contains("content") && entry["content"].is_string()) return entry["content"].get<std::string>();
  return std::nullopt;
}

std::optional<std::string> special_token_id_of(const json& item) {
  if (!item.is_object() || !item.contains("SpecialToken")) return std::nullopt;
  const json& s = item["SpecialToken"];
  if (s.is_object() && s.contains("id") && s["id"].is_string()) return s["id"].get<std::string>();
  return std::nullopt;
}

std::optional<std::string> sequence_id_of(const json& item) {
  if (!item.is_object() || !item.contains("Sequence")) return std::nullopt;
  const json& s = item["Sequence"];
  if (s.is_object() && s.contains("id") && s["id"].is_string()) return s["id"].get<std::string>();
  return std::nullopt;
}

}  // namespace

int64_t add_gemma4_vocab_to_gguf(const std::string& dir, formats::GgufMetadata& md) {
  const fs::path tj_path = fs::path(dir) / "tokenizer.json";
  const std::string tj_name = tj_path.string();
  const json tj = *read_json_file(tj_path, true);
  const std::optional<json> tc = read_json_file(fs::path(dir) / "tokenizer_config.json", false);
  const std::optional<json> config = read_json_file(fs::path(dir) / "config.json", false);

  // LlamaHfVocab's checks: a byte-fallback BPE with a decoder sequence.
  if (!tj.is_object() || !tj.contains("model") || !tj["model"].is_object())
    throw Error(tj_name + ": no 'model' object");
  const json& model = tj["model"];
  auto is = [](const json& object, const char* key, const json& want) {
    return object.contains(key) && object[key] == want;
  };
  if (!is(model, "type", "BPE") || !is(model, "byte_fallback", true))
    throw Error(tj_name + ": model.type is not a byte-fallback BPE; llama.cpp's gemma4 vocabulary needs one");
  if (!tj.contains("decoder") || !tj["decoder"].is_object() || !is(tj["decoder"], "type", "Sequence"))
    throw Error(tj_name + ": decoder.type is not 'Sequence' (not a Llama-style BPE tokenizer)");
  if (!model.contains("vocab") || !model["vocab"].is_object()) throw Error(tj_name + ": model.vocab is not an object");

  const int64_t base = int64_t(model["vocab"].size());
  std::vector<std::string> pieces(static_cast<size_t>(base));
  std::vector<bool> seen(static_cast<size_t>(base), false);
  std::map<std::string, int64_t> id_of;
  for (const auto& [text, id] : model["vocab"].items()) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0 || id.get<int64_t>() >= base)
      throw Error(tj_name + ": model.vocab['" + printable(text) + "'] is not an id below the vocabulary size " + std::to_string(base));
    const int64_t i = id.get<int64_t>();
    if (seen[size_t(i)]) throw Error(tj_name + ": model.vocab gives id " + std::to_string(i) + " twice");
    seen[size_t(i)] = true;
    pieces[size_t(i)] = text;
    id_of[text] = i;
  }
  // Added tokens: those inside the base vocabulary keep their place; the rest follow in id order.
  const json added = tj.contains("added_tokens") && tj["added_tokens"].is_array() ? tj["added_tokens"] : json::array();
  std::map<int64_t, std::string> extra;
  for (const auto& a : added) {
    if (!a.is_object() || !a.contains("id") || !a["id"].is_number_integer() || !a.contains("content") || !a["content"].is_string())
      throw Error(tj_name + ": an added_tokens entry without an integer id and a string content");
    const int64_t id = a["id"].get<int64_t>();
    const std::string content = a["content"].get<std::string>();
    if (id < 0) throw Error(tj_name + ": added token '" + printable(content) + "' has a negative id");
    if (id >= base) extra[id] = content;
    id_of.emplace(content, id);
  }
  int64_t next = base;
  for (const auto& [id, content] : extra) {
    if (id != next)
      throw Error(tj_name + ": added token '" + printable(content) + "' has id " + std::to_string(id) + ", expected " +
                  std::to_string(next) + " (added tokens past the vocabulary must follow it without gaps)");
    ++next;
  }

  // The special tokens: the named ones of tokenizer_config.json (then config.json's *_token_id),
  // and the extra ones it lists; their ids are CONTROL tokens.
  static const std::vector<std::string> kTypes = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
  json cfg = tc.value_or(json::object());
  std::map<std::string, bool> add_special;
  std::vector<std::string> add_order;
  auto set_add = [&](const std::string& typ, bool v) {
    if (!add_special.count(typ)) add_order.push_back(typ);
    add_special[typ] = v;
  };
  if (tc && cfg.is_object()) {
    // The crude reading of a TemplateProcessing post-processor that SpecialVocab does.
    auto name_of = [&](const char* key) { return cfg.contains(key) ? token_content(cfg[key]) : std::nullopt; };
    std::optional<std::string> bos = name_of("bos_token"), eos = name_of("eos_token"), cls = name_of("cls_token"),
                               sep = name_of("sep_token");
    if (tj.contains("post_processor") && tj["post_processor"].is_object()) {
      const json& pp = tj["post_processor"];
      const json procs = pp.contains("processors") && pp["processors"].is_array() ? pp["processors"] : json::array({pp});
      for (const auto& proc : procs) {
        if (!proc.is_object() || proc.value("type", "") != "TemplateProcessing") continue;
        const json single = proc.contains("single") && proc["single"].is_array() ? proc["single"] : json::array();
        json pair = proc.contains("pair") && proc["pair"].is_array() ? proc["pair"] : json::array();
        std::optional<std::string> first, last;
        if (single.size() > 1) {
          first = special_token_id_of(single.front());
          if (first) set_add("bos", first == bos || first == cls);
          last = special_token_id_of(single.back());
          if (last) set_add("eos", last == eos);
        }
        if (!pair.empty()) {
          size_t start = first && special_token_id_of(pair.front()) == first ? 1 : 0;
          size_t stop = pair.size() - (last && special_token_id_of(pair.back()) == last ? 1 : 0);
          if (start < stop) {
            const std::optional<std::string> a = sequence_id_of(pair[start]), b = sequence_id_of(pair[stop - 1]);
            if (a == "A" && b == "B" && stop - start > 2) {
              bool add_sep = false;
              const std::optional<std::string> m1 = special_token_id_of(pair[start + 1]);
              if (m1 && (m1 == sep || m1 == eos) && !last) add_sep = true;
              if (stop - start == 4) {
                const std::optional<std::string> m2 = special_token_id_of(pair[start + 2]);
                if (m2 && (m2 == sep || m2 == eos)) add_sep = true;
              }
              set_add("sep", add_sep);
            }
          }
        }
      }
    }
  }
  std::map<std::string, int64_t> special_ids;
  std::vector<std::string> special_order;
  auto set_special = [&](const std::string& typ, const json& v, const std::string& where) {
    if (!v.is_number_integer()) return;
    const int64_t id = v.get<int64_t>();
    if (id < 0) throw Error(where + ": a negative " + typ + " token id");
    if (special_ids.count(typ)) return;
    special_ids[typ] = id;
    special_order.push_back(typ);
  };
  std::set<int64_t> control;
  auto mark_control = [&](const std::string& content) {
    if (auto it = id_of.find(content); it != id_of.end()) control.insert(it->second);
  };
  if (tc && cfg.is_object()) {
    for (const auto& typ : kTypes) {
      const std::string add_key = "add_" + typ + "_token";
      if (cfg.contains(add_key) && cfg[add_key].is_boolean()) set_add(typ, cfg[add_key].get<bool>());
      if (!cfg.contains(typ + "_token")) continue;
      const std::optional<std::string> content = token_content(cfg[typ + "_token"]);
      if (!content) continue;
      mark_control(*content);
      for (const auto& a : added)
        if (a["content"] == *content) {
          set_special(typ, a["id"], "tokenizer_config.json");
          break;
        }
    }
    for (const char* key : {"extra_special_tokens", "additional_special_tokens"}) {
      if (!cfg.contains(key)) continue;
      const json& list = cfg[key];
      if (list.is_array())
        for (const auto& e : list) {
          if (auto c = token_content(e)) mark_control(*c);
        }
      else if (list.is_object())
        for (const auto& [k, e] : list.items()) {
          if (auto c = token_content(e)) mark_control(*c);
        }
    }
  }
  if (config && config->is_object()) {
    for (const auto& typ : kTypes) {
      const std::string key = typ + "_token_id";
      if (config->contains(key)) set_special(typ, (*config)[key], "config.json");
      else if (config->contains("text_config") && (*config)["text_config"].is_object() && (*config)["text_config"].contains(key))
        set_special(typ, (*config)["text_config"][key], "config.json");
    }
  }

  // Tokens, scores (the converter's placeholder -1000) and types.
  static const std::set<std::string> kVisible = {"<|channel>", "<channel|>", "<|tool_call>", "<tool_call|>",
                                                 "<|tool_response>", "<tool_response|>", "<|\"|>"};
  static const std::regex kByteToken("<0x[0-9A-Fa-f]{2}>");
  std::vector<std::string> tokens;
  std::vector<float> scores;
  std::vector<int32_t> types;
  for (int64_t i = 0; i < base + int64_t(extra.size()); ++i) {
    std::string text;
    if (i < base) {
      if (!seen[size_t(i)]) {
        // An id the BPE vocabulary skips is an added token's.
        bool found = false;
        for (const auto& a : added)
          if (a["id"].get<int64_t>() == i) {
            text = a["content"].get<std::string>();
            found = true;
            break;
          }
        if (!found) throw Error(tj_name + ": no token has id " + std::to_string(i));
      } else {
        text = pieces[size_t(i)];
      }
    } else {
      text = extra[i];
    }
    int32_t type = kNormal;
    if (i < base && std::regex_match(text, kByteToken)) type = kByte;
    else if (control.count(i)) type = kControl;
    else if (i >= base) type = kUserDefined;
    if (kVisible.count(text)) type = kUserDefined;
    tokens.push_back(std::move(text));
    scores.push_back(-1000.0f);
    types.push_back(type);
  }
  md.set_string("tokenizer.ggml.model", "gemma4");
  md.set_string_array("tokenizer.ggml.tokens", tokens);
  md.set_f32_array("tokenizer.ggml.scores", scores);
  md.set_i32_array("tokenizer.ggml.token_type", types);

  // Merges: "a b", spaces inside a part written as U+0120 (the pair form of newer tokenizers).
  if (model.contains("merges") && model["merges"].is_array() && !model["merges"].empty()) {
    std::vector<std::string> merges;
    for (const auto& m : model["merges"]) {
      if (m.is_string()) {
        merges.push_back(m.get<std::string>());
      } else if (m.is_array() && m.size() == 2 && m[0].is_string() && m[1].is_string()) {
        auto part = [](const std::string& s) {
          std::string out;
          for (char c : s) out += c == ' ' ? std::string("\xC4\xA0") : std::string(1, c);
          return out;
        };
        merges.push_back(part(m[0].get<std::string>()) + " " + part(m[1].get<std::string>()));
      } else {
        throw Error(tj_name + ": model.merges holds an entry that is neither \"a b\" nor [a, b]");
      }
    }
    md.set_string_array("tokenizer.ggml.merges", merges);
  }
  static const std::map<std::string, std::string> kIdKeys = {
      {"bos", "tokenizer.ggml.bos_token_id"},       {"eos", "tokenizer.ggml.eos_token_id"},
      {"unk", "tokenizer.ggml.unknown_token_id"},   {"sep", "tokenizer.ggml.seperator_token_id"},
      {"pad", "tokenizer.ggml.padding_token_id"},   {"mask", "tokenizer.ggml.mask_token_id"}};
  for (const auto& typ : special_order)
    if (auto it = kIdKeys.find(typ); it != kIdKeys.end()) md.set_u32(it->second, uint32_t(special_ids[typ]));
  for (const auto& typ : add_order)
    if (typ == "bos" || typ == "eos" || typ == "sep") md.set_bool("tokenizer.ggml.add_" + typ + "_token", add_special[typ]);

  // The chat template: tokenizer_config.json's, else chat_template.jinja, else chat_template.json's.
  std::optional<json> template_value;
  if (tc && cfg.is_object() && cfg.contains("chat_template")) {
    template_value = cfg["chat_template"];
  } else if (tc) {
    const fs::path jinja = fs::path(dir) / "chat_template.jinja";
    std::error_code ec;
    if (fs::is_regular_file(jinja, ec)) {
      std::ifstream in(jinja, std::ios::binary);
      std::ostringstream s;
      s << in.rdbuf();
      template_value = s.str();
    } else if (auto ct = read_json_file(fs::path(dir) / "chat_template.json", false); ct && ct->is_object() && ct->contains("chat_template")) {
      template_value = (*ct)["chat_template"];
    }
  }
  if (template_value && template_value->is_string()) {
    md.set_string("tokenizer.chat_template", template_value->get<std::string>());
  } else if (template_value && template_value->is_array()) {
    std::vector<std::string> names;
    for (const auto& choice : *template_value) {
      if (!choice.is_object() || !choice.contains("template") || !choice["template"].is_string()) continue;
      std::string name = choice.value("name", "");
      for (char& c : name)
        if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
      if (name.empty()) continue;
      if (name == "default") md.set_string("tokenizer.chat_template", choice["template"].get<std::string>());
      else {
        md.set_string("tokenizer.chat_template." + name, choice["template"].get<std::string>());
        names.push_back(name);
      }
    }
    if (!names.empty()) md.set_string_array("tokenizer.chat_templates", names);
  }
  md.set_bool("tokenizer.ggml.add_space_prefix", false);
  md.set_bool("tokenizer.ggml.add_bos_token", true);
  return base + int64_t(added.size());
}

}  // namespace lumen::tokenizer

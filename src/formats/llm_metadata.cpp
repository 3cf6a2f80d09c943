#include "formats/llm_metadata.h"

#include "formats/protobuf_wire.h"

namespace lumen::formats {

namespace {

using pb::Field;
using pb::Reader;
using pb::WireType;

void expect(const Reader& r, const Field& f, WireType type, const char* name) {
  if (f.type != type) {
    r.fail(std::string(name) + " (field " + std::to_string(f.number) + ") has wire type " +
           std::to_string(int(f.type)) + ", expected " + std::to_string(int(type)));
  }
}

std::string sub(const Reader& r, const char* name) { return r.where() + "." + name; }

// Repeated int32: packed (one Len field) or one varint per element.
void read_int32s(const Reader& r, const Field& f, std::vector<int32_t>& out, const char* name) {
  if (f.type == WireType::Varint) {
    out.push_back(int32_t(uint32_t(f.varint)));
    return;
  }
  expect(r, f, WireType::Len, name);
  const Reader packed(f.bytes, sub(r, name));  // for errors only: a packed run is bare varints
  size_t pos = 0;
  while (pos < f.bytes.size()) {
    uint64_t v = 0;
    int shift = 0;
    for (;;) {
      if (pos >= f.bytes.size()) packed.fail("truncated packed varint");
      const auto byte = static_cast<uint8_t>(f.bytes[pos++]);
      v |= uint64_t(byte & 0x7f) << shift;
      if ((byte & 0x80) == 0) break;
      shift += 7;
      if (shift >= 70) packed.fail("overlong packed varint");
    }
    out.push_back(int32_t(uint32_t(v)));
  }
}

TokenUnion decode_token(const Field& f, const Reader& parent, const char* name) {
  expect(parent, f, WireType::Len, name);
  Reader r(f.bytes, sub(parent, name));
  TokenUnion t;
  while (!r.done()) {
    const Field g = r.next();
    if (g.number == 1) {
      expect(r, g, WireType::Len, "token_ids");
      Reader ids(g.bytes, sub(r, "token_ids"));
      while (!ids.done()) {
        const Field h = ids.next();
        if (h.number == 1) read_int32s(ids, h, t.ids, "ids");
      }
    } else if (g.number == 2) {
      expect(r, g, WireType::Len, "token_str");
      t.text = std::string(g.bytes);
    }
  }
  return t;
}

PromptAffixes decode_affixes(const Field& f, const Reader& parent, const char* name) {
  expect(parent, f, WireType::Len, name);
  Reader r(f.bytes, sub(parent, name));
  PromptAffixes a;
  while (!r.done()) {
    const Field g = r.next();
    if (g.number == 1 || g.number == 2) {
      expect(r, g, WireType::Len, g.number == 1 ? "prefix" : "suffix");
      (g.number == 1 ? a.prefix : a.suffix) = std::string(g.bytes);
    }
  }
  return a;
}

SamplerDefaults decode_sampler(const Field& f, const Reader& parent) {
  expect(parent, f, WireType::Len, "sampler_params");
  Reader r(f.bytes, sub(parent, "sampler_params"));
  SamplerDefaults s;
  s.type = "TYPE_UNSPECIFIED";
  s.backend = "UNSPECIFIED";
  static const char* kTypes[] = {"TYPE_UNSPECIFIED", "TOP_K", "TOP_P", "GREEDY"};
  static const char* kBackends[] = {"UNSPECIFIED", "CPU", "GPU"};
  while (!r.done()) {
    const Field g = r.next();
    switch (g.number) {
      case 1:
        expect(r, g, WireType::Varint, "type");
        s.type = g.varint < 4 ? kTypes[g.varint] : "TYPE_" + std::to_string(int32_t(g.varint));
        break;
      case 2: expect(r, g, WireType::Varint, "k"); s.k = int32_t(uint32_t(g.varint)); break;
      case 3: expect(r, g, WireType::Fixed32, "p"); s.p = pb::as_float(g); break;
      case 4: expect(r, g, WireType::Fixed32, "temperature"); s.temperature = pb::as_float(g); break;
      case 5: expect(r, g, WireType::Varint, "seed"); s.seed = int32_t(uint32_t(g.varint)); break;
      case 6:
        expect(r, g, WireType::Varint, "backend");
        s.backend = g.varint < 3 ? kBackends[g.varint] : "BACKEND_" + std::to_string(int32_t(g.varint));
        break;
      default: break;
    }
  }
  return s;
}

std::string model_type_name(uint32_t field) {
  switch (field) {
    case 1: return "generic_model";
    case 2: return "gemma3n";
    case 3: return "function_gemma";
    case 4: return "gemma3";
    case 5: return "qwen3";
    case 7: return "qwen2p5";
    case 8: return "gemma4";
    case 9: return "fast_vlm";
    case 11: return "lfm2";
    case 12: return "minicpm5";
    case 13: return "gemma3270m";
    default: return "field_" + std::to_string(field);
  }
}

nlohmann::json token_to_json(const TokenUnion& t) {
  nlohmann::json j = nlohmann::json::object();
  if (t.text) j["token_str"] = *t.text;
  else j["token_ids"] = {{"ids", t.ids}};
  return j;
}

nlohmann::json affixes_to_json(const PromptAffixes& a) {
  nlohmann::json j = nlohmann::json::object();
  if (!a.prefix.empty()) j["prefix"] = a.prefix;
  if (!a.suffix.empty()) j["suffix"] = a.suffix;
  return j;
}

}  // namespace

LlmMetadata decode_llm_metadata(std::string_view bytes, const std::string& where) {
  Reader r(bytes, where);
  LlmMetadata m;
  while (!r.done()) {
    const Field f = r.next();
    switch (f.number) {
      case 1: m.start_token = decode_token(f, r, "start_token"); break;
      case 2: m.stop_tokens.push_back(decode_token(f, r, "stop_tokens")); break;
      case 3: {
        expect(r, f, WireType::Len, "prompt_templates");
        Reader t(f.bytes, sub(r, "prompt_templates"));
        while (!t.done()) {
          const Field g = t.next();
          if (g.number == 1) m.user_template = decode_affixes(g, t, "user");
          else if (g.number == 2) m.model_template = decode_affixes(g, t, "model");
          else if (g.number == 3) m.system_template = decode_affixes(g, t, "system");
        }
        m.has_prompt_templates = true;
        break;
      }
      case 4: m.sampler = decode_sampler(f, r); break;
      case 5:
        expect(r, f, WireType::Varint, "max_num_tokens");
        m.max_num_tokens = int32_t(uint32_t(f.varint));
        break;
      case 6: {
        expect(r, f, WireType::Len, "llm_model_type");
        Reader t(f.bytes, sub(r, "llm_model_type"));
        while (!t.done()) {
          const Field g = t.next();
          m.model_type = model_type_name(g.number);  // a oneof: the last one wins
        }
        break;
      }
      case 7:
        expect(r, f, WireType::Len, "jinja_prompt_template");
        m.jinja_prompt_template = std::string(f.bytes);
        break;
      case 8: {
        expect(r, f, WireType::Len, "channels");
        Reader c(f.bytes, sub(r, "channels"));
        ResponseChannel ch;
        while (!c.done()) {
          const Field g = c.next();
          if (g.number >= 1 && g.number <= 3) {
            expect(c, g, WireType::Len, "channel string");
            (g.number == 1 ? ch.name : g.number == 2 ? ch.start : ch.end) = std::string(g.bytes);
          } else if (g.number == 4) {
            expect(c, g, WireType::Varint, "is_reasoning_channel");
            ch.is_reasoning = g.varint != 0;
          }
        }
        m.channels.push_back(std::move(ch));
        break;
      }
      case 9: {
        expect(r, f, WireType::Len, "suppress_tokens");
        Reader t(f.bytes, sub(r, "suppress_tokens"));
        while (!t.done()) {
          const Field g = t.next();
          if (g.number == 1) read_int32s(t, g, m.suppress_token_ids, "ids");
        }
        break;
      }
      case 10:
        expect(r, f, WireType::Varint, "kv_cache_init_value");
        m.kv_cache_init_value = int64_t(f.varint);
        break;
      case 11:
        expect(r, f, WireType::Varint, "supports_thinking");
        m.supports_thinking = f.varint != 0;
        break;
      case 12:
        expect(r, f, WireType::Varint, "supports_function_calling");
        m.supports_function_calling = f.varint != 0;
        break;
      case 13: m.pad_token = decode_token(f, r, "pad_token"); break;
      case 14:
        expect(r, f, WireType::Len, "min_runtime_version");
        m.min_runtime_version = std::string(f.bytes);
        break;
      default: break;  // a field newer than this reader
    }
  }
  return m;
}

nlohmann::json llm_metadata_to_json(const LlmMetadata& m) {
  nlohmann::json j = nlohmann::json::object();
  if (m.start_token) j["start_token"] = token_to_json(*m.start_token);
  if (!m.stop_tokens.empty()) {
    j["stop_tokens"] = nlohmann::json::array();
    for (const auto& t : m.stop_tokens) j["stop_tokens"].push_back(token_to_json(t));
  }
  if (m.has_prompt_templates) {
    nlohmann::json t = nlohmann::json::object();
    if (m.user_template) t["user"] = affixes_to_json(*m.user_template);
    if (m.model_template) t["model"] = affixes_to_json(*m.model_template);
    if (m.system_template) t["system"] = affixes_to_json(*m.system_template);
    j["prompt_templates"] = t;
  }
  if (m.sampler) {
    nlohmann::json s = {{"type", m.sampler->type}, {"k", m.sampler->k}, {"p", m.sampler->p},
                        {"temperature", m.sampler->temperature}, {"backend", m.sampler->backend}};
    if (m.sampler->seed) s["seed"] = *m.sampler->seed;
    j["sampler_params"] = s;
  }
  if (m.max_num_tokens != 0) j["max_num_tokens"] = m.max_num_tokens;
  if (!m.model_type.empty()) j["llm_model_type"] = m.model_type;
  if (m.jinja_prompt_template) j["jinja_prompt_template"] = *m.jinja_prompt_template;
  if (!m.channels.empty()) {
    j["channels"] = nlohmann::json::array();
    for (const auto& c : m.channels) {
      nlohmann::json cj = {{"channel_name", c.name}, {"start", c.start}, {"end", c.end}};
      if (c.is_reasoning) cj["is_reasoning_channel"] = *c.is_reasoning;
      j["channels"].push_back(cj);
    }
  }
  if (!m.suppress_token_ids.empty()) j["suppress_tokens"] = {{"ids", m.suppress_token_ids}};
  if (m.kv_cache_init_value) j["kv_cache_init_value"] = *m.kv_cache_init_value;
  if (m.supports_thinking) j["supports_thinking"] = *m.supports_thinking;
  if (m.supports_function_calling) j["supports_function_calling"] = *m.supports_function_calling;
  if (m.pad_token) j["pad_token"] = token_to_json(*m.pad_token);
  if (m.min_runtime_version) j["min_runtime_version"] = *m.min_runtime_version;
  return j;
}

size_t count_sentencepiece_pieces(std::string_view bytes, const std::string& where) {
  Reader r(bytes, where);
  size_t pieces = 0;
  while (!r.done()) {
    const Field f = r.next();
    if (f.number == 1) {
      expect(r, f, WireType::Len, "pieces");
      ++pieces;
    }
  }
  return pieces;
}

}  // namespace lumen::formats

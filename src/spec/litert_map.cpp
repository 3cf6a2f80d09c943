#include "spec/litert_map.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "base/error.h"
#include "base/json.h"
#include "formats/sha256.h"
#include "formats/tensor.h"

namespace lumen::spec {
namespace {

const std::set<std::string, std::less<>>& layer_roles() {
  static const std::set<std::string, std::less<>> roles = {
      "input_layernorm", "self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
      "self_attn.q_norm", "self_attn.k_norm", "post_attention_layernorm", "pre_feedforward_layernorm",
      "post_feedforward_layernorm", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj", "layer_scalar",
      "self_attn.qkv_proj",
      // per-layer inputs (E2B/E4B)
      "per_layer_input_gate", "per_layer_projection", "post_per_layer_input_norm"};
  return roles;
}

const std::set<std::string, std::less<>>& global_roles() {
  static const std::set<std::string, std::less<>> roles = {"embed_tokens", "norm", "lm_head", "embed_tokens_per_layer",
                                                            "per_layer_model_projection", "per_layer_projection_norm"};
  return roles;
}

MapTransform default_transform(std::string_view role) {
  return role == "self_attn.qkv_proj" ? MapTransform::SplitQkv : MapTransform::None;
}

std::string line_of(const nlohmann::json& j) {
  std::string s = j.dump();
  return s.size() > 120 ? s.substr(0, 117) + "..." : s;
}

}  // namespace

std::string PackageConstant::shape_text() const {
  std::vector<int64_t> s(shape.begin(), shape.end());
  return formats::shape_to_string(s);
}

std::string PackageConstant::describe() const {
  const char* t = formats::tflite_type_name(type);
  return "constant " + std::to_string(index) + " " + in_quotes(printable(name)) + " (" + (t ? t : "?") + " " +
         shape_text() + ")";
}

PackageConstants collect_package_constants(const formats::LitertlmFile& package) {
  PackageConstants out;
  out.package = package.path();
  std::set<std::tuple<size_t, int, uint32_t>> seen;  // (section, external?, buffer or id)
  std::map<std::tuple<size_t, int, uint32_t>, size_t> index_of;
  auto add_name = [&](const std::tuple<size_t, int, uint32_t>& key, const std::string& name) {
    auto it = index_of.find(key);
    if (it == index_of.end()) return;
    auto& names = out.constants[it->second].names;
    if (std::find(names.begin(), names.end(), name) == names.end()) names.push_back(name);
  };
  for (const formats::Section& s : package.sections) {
    if (s.type != formats::SectionType::TFLiteModel) continue;
    const formats::TfliteModel model = package.tflite(s);
    for (const auto& sg : model.subgraphs) {
      // Scale tensors of blockwise-quantized weights belong to their weight, not the table.
      std::set<size_t> scale_tensors;
      for (const auto& t : sg.tensors)
        if (t.quantization && t.quantization->details_type == 2) {
          const int32_t si = t.quantization->block_scales;
          if (si < 0 || size_t(si) >= sg.tensors.size())
            throw Error(package.section_name(s) + ": tensor " + in_quotes(printable(t.name)) + ": blockwise scales tensor " +
                        std::to_string(si) + " is not a tensor of its subgraph");
          scale_tensors.insert(size_t(si));
        }
      for (size_t ti = 0; ti < sg.tensors.size(); ++ti) {
        const auto& t = sg.tensors[ti];
        if (scale_tensors.count(ti)) continue;
        std::string_view bytes;
        std::tuple<size_t, int, uint32_t> key;
        if (t.external_buffer != 0) {
          key = {s.index, 1, t.external_buffer};
          if (seen.count(key)) {
            add_name(key, t.name);
            continue;
          }
          bytes = package.external_tensor_bytes(s, model, t);
        } else {
          key = {s.index, 0, t.buffer};
          if (t.buffer == 0) continue;
          if (seen.count(key)) {
            add_name(key, t.name);
            continue;
          }
          bytes = model.tensor_bytes(t);
        }
        if (bytes.empty()) continue;
        seen.insert(key);
        index_of[key] = out.constants.size();
        PackageConstant c;
        c.index = out.constants.size();
        c.names.push_back(t.name);
        c.name = t.name;
        c.type = t.type;
        c.shape = t.shape;
        c.quantization = t.quantization;
        c.bytes = bytes;
        c.section = s.index;
        if (t.quantization && t.quantization->details_type == 2) {
          const auto& q = *t.quantization;
          const formats::TfliteTensor& st = sg.tensors[size_t(q.block_scales)];
          PackageConstant::BlockScales b;
          b.type = st.type;
          b.shape = st.shape;
          b.bytes = st.external_buffer != 0 ? package.external_tensor_bytes(s, model, st) : model.tensor_bytes(st);
          b.block_size = q.block_size;
          b.has_zero_points = q.block_zero_points >= 0;
          c.block = b;
        }
        out.constants.push_back(std::move(c));
      }
    }
  }
  formats::Sha256 h;
  for (const auto& c : out.constants) {
    std::string line = std::to_string(c.index) + "\t" + c.name + "\t";
    const char* t = formats::tflite_type_name(c.type);
    line += t ? t : std::to_string(int(c.type));
    line += "\t";
    for (size_t i = 0; i < c.shape.size(); ++i) line += (i ? "," : "") + std::to_string(c.shape[i]);
    line += "\n";
    h.update(line);
  }
  out.table_sha256 = h.hex();
  return out;
}

const char* transform_name(MapTransform t) {
  switch (t) {
    case MapTransform::None: return "none";
    case MapTransform::SplitQkv: return "split_qkv";
    case MapTransform::GainPlusOne: return "gain_plus_1";
    case MapTransform::GainMinusOne: return "gain_minus_1";
    case MapTransform::GainAsApplied: return "gain_as_applied";
  }
  return "?";
}

bool is_layer_role(std::string_view role) { return layer_roles().count(role) > 0; }
bool is_global_role(std::string_view role) { return global_roles().count(role) > 0; }

NamedRole role_of_tensor_name(const std::string& name) {
  NamedRole out;
  out.role = name;
  if (name.rfind("layers.", 0) == 0) {
    const size_t dot = name.find('.', 7);
    out.layer = std::stoi(name.substr(7, dot - 7));
    out.role = name.substr(dot + 1);
  }
  const std::string_view suffix = ".weight";
  if (out.role.size() > suffix.size() && out.role.ends_with(suffix)) out.role.resize(out.role.size() - suffix.size());
  return out;
}

std::string layer_role_text(int layer, const std::string& role) {
  return layer >= 0 ? "layer " + std::to_string(layer) + " " + role : role;
}

std::optional<NamedRole> role_from_name(std::string_view full) {
  // ';'-joined names (several module paths fused into one constant): the first part that is a
  // recognised tensor name decides.
  static const std::regex layer_re(R"(^(?:model\.)?(?:language_model\.)?(?:model\.)?layers\.(\d+)\.(.+?)(?:\.weight)?$)");
  // litert-torch: ".../<pkg>.DecoderBlock_3/<pkg>.CausalSelfAttention_atten_func/<pkg>.Linear_qkv_projection"
  static const std::regex litert_torch_re(R"(DecoderBlock_(\d+)/(.+)$)");
  static const std::regex litert_torch_final_re(R"(Decoder_module/(?:[a-z_0-9]+\.)*RMSNorm_final_norm$)");
  static const std::regex global_re(
      R"(^(?:model\.)?(?:language_model\.)?(?:model\.)?(embed_tokens|norm|lm_head|embed_tokens_per_layer|per_layer_model_projection|per_layer_projection_norm)(?:\.weight)?$)");
  size_t start = 0;
  while (start <= full.size()) {
    size_t end = full.find(';', start);
    if (end == std::string_view::npos) end = full.size();
    const std::string part(full.substr(start, end - start));
    std::smatch m;
    if (std::regex_match(part, m, layer_re) && is_layer_role(m[2].str()) && m[1].str().size() < 7)
      return NamedRole{std::stoi(m[1].str()), m[2].str(), default_transform(m[2].str())};
    if (std::regex_match(part, m, global_re)) return NamedRole{-1, m[1].str(), MapTransform::None};
    if (std::regex_search(part, m, litert_torch_re) && m[1].str().size() < 7) {
      static const std::map<std::string, std::string> roles = {
          {"CausalSelfAttention_atten_func/Linear_qkv_projection", "self_attn.qkv_proj"},
          {"CausalSelfAttention_atten_func/Linear_output_projection", "self_attn.o_proj"},
          {"CausalSelfAttention_atten_func/RMSNorm_query_norm", "self_attn.q_norm"},
          {"CausalSelfAttention_atten_func/RMSNorm_key_norm", "self_attn.k_norm"},
          {"GatedFeedForward_ff/Linear_w1", "mlp.gate_proj"},
          {"GatedFeedForward_ff/Linear_w3", "mlp.up_proj"},
          {"GatedFeedForward_ff/Linear_w2", "mlp.down_proj"},
          {"GatedFeedForward_ff/RMSNorm_pre_ff_norm", "pre_feedforward_layernorm"},
          {"GatedFeedForward_ff/RMSNorm_post_ff_norm", "post_feedforward_layernorm"},
          {"RMSNorm_pre_atten_norm", "input_layernorm"},
          {"RMSNorm_post_atten_norm", "post_attention_layernorm"}};
      // The module path after the block, without its python package prefixes.
      std::string tail = m[2].str();
      tail = std::regex_replace(tail, std::regex(R"((^|/)(?:[a-z_0-9]+\.)+)"), "$1");
      auto it = roles.find(tail);
      if (it != roles.end()) {
        const bool norm = tail.find("RMSNorm_") != std::string::npos;
        return NamedRole{std::stoi(m[1].str()), it->second,
                         norm ? MapTransform::GainAsApplied : default_transform(it->second)};
      }
    }
    if (std::regex_search(part, m, litert_torch_final_re)) return NamedRole{-1, "norm", MapTransform::GainAsApplied};
    start = end + 1;
  }
  return std::nullopt;
}

namespace {

void check_duplicates(const std::vector<MapEntry>& entries, const PackageConstants& pc, const std::string& where) {
  std::map<std::pair<int, std::string>, size_t> owner;
  for (const MapEntry& e : entries) {
    const auto key = std::make_pair(e.layer, e.role);
    auto [it, fresh] = owner.emplace(key, e.constant);
    if (!fresh)
      throw Error(where + ": " + pc.constants[e.constant].describe() + " and " + pc.constants[it->second].describe() +
                  " both map to " + (e.layer >= 0 ? "layer " + std::to_string(e.layer) + " " : std::string()) + e.role);
  }
}

}  // namespace

LitertMap map_by_names(const PackageConstants& pc) {
  LitertMap map;
  map.kind = "name-rules";
  for (const PackageConstant& c : pc.constants) {
    // Only weight types: shape and index constants (INT32, ...) borrow module names too.
    using formats::TfliteType;
    if (c.type != TfliteType::FLOAT32 && c.type != TfliteType::FLOAT16 && c.type != TfliteType::BFLOAT16 &&
        c.type != TfliteType::INT8 && c.type != TfliteType::INT4)
      continue;
    std::set<std::pair<int, std::string>> roles;
    for (const std::string& name : c.names.empty() ? std::vector<std::string>{c.name} : c.names) {
      auto r = role_from_name(name);
      if (!r) continue;
      // Scalars (epsilons, scales) borrow their norm's or projection's module name.
      int64_t numel = 1;
      for (int32_t d : c.shape) numel *= d;
      if (r->role != "layer_scalar" && numel <= 1) continue;
      if (!roles.insert({r->layer, r->role}).second) continue;
      map.entries.push_back({c.index, r->layer, r->role, r->transform});
    }
  }
  check_duplicates(map.entries, pc, pc.package);
  return map;
}

LitertMap load_map_file(const std::string& path, const PackageConstants& pc) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw Error(path + ": cannot read the map file");
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string text = ss.str();
  nlohmann::json j;
  try {
    j = parse_json(text);
  } catch (const std::exception& e) {
    std::string what = e.what();
    throw Error(path + ": not valid JSON (" + what.substr(0, 160) + ")");
  }
  if (!j.is_object()) throw Error(path + ": a map file is a JSON object");
  const auto schema = j.value("schema", nlohmann::json());
  if (!schema.is_string() || schema.get<std::string>() != "lumen.litert-map/v1")
    throw Error(path + ": `schema` is " + line_of(schema) + ", expected \"lumen.litert-map/v1\"");
  const auto table = j.value("package_tensor_table_sha256", nlohmann::json());
  if (!table.is_string()) throw Error(path + ": `package_tensor_table_sha256` is missing or not a string");
  if (table.get<std::string>() != pc.table_sha256)
    throw Error(path + ": written for another package: its tensor table hash " + table.get<std::string>().substr(0, 16) +
                "... is not " + pc.package + "'s " + pc.table_sha256.substr(0, 16) + "...");
  LitertMap map;
  map.kind = "file";
  map.path = path;
  map.sha256 = formats::sha256_hex(text);
  if (j.contains("fixed_int4")) {
    const auto& f = j["fixed_int4"];
    if (!f.is_object() || !f.contains("scale") || !f["scale"].is_number() || !(f["scale"].get<double>() > 0) ||
        !(f["scale"].get<double>() <= 65504.0))  // an f16-range scale
      throw Error(path + ": `fixed_int4.scale` must be a positive number (at most 65504)");
    if (f.contains("storage") && !f["storage"].is_string())
      throw Error(path + ": `fixed_int4.storage` is not a string (offset_binary or twos_complement)");
    const std::string storage = f.contains("storage") ? f["storage"].get<std::string>() : "offset_binary";
    if (storage != "offset_binary" && storage != "twos_complement")
      throw Error(path + ": `fixed_int4.storage` is \"" + printable(storage) + "\" (offset_binary or twos_complement)");
    map.fixed_int4 = FixedInt4{f["scale"].get<float>(), storage == "offset_binary"};
  }
  if (!j.contains("entries") || !j["entries"].is_array()) throw Error(path + ": `entries` is missing or not an array");
  if (j.contains("name_rules")) {
    if (!j["name_rules"].is_boolean()) throw Error(path + ": `name_rules` must be true or false");
    if (j["name_rules"].get<bool>()) map.entries = map_by_names(pc).entries;
  }
  std::map<std::string, size_t> by_name;
  for (const auto& c : pc.constants)
    for (const auto& n : c.names.empty() ? std::vector<std::string>{c.name} : c.names) by_name.emplace(n, c.index);
  std::set<std::tuple<size_t, int, std::string>> used;
  size_t i = 0;
  for (const auto& e : j["entries"]) {
    const std::string at = path + ": entries[" + std::to_string(i++) + "]";
    if (!e.is_object()) throw Error(at + " is not an object");
    MapEntry me;
    if (e.contains("constant")) {
      const auto& c = e["constant"];
      if (!c.is_number_unsigned() || c.get<uint64_t>() >= pc.constants.size())
        throw Error(at + ": `constant` " + line_of(c) + " is not a constant of " + pc.package + " (it has " +
                    std::to_string(pc.constants.size()) + ")");
      me.constant = c.get<size_t>();
    } else if (e.contains("name") && e["name"].is_string()) {
      auto it = by_name.find(e["name"].get<std::string>());
      if (it == by_name.end())
        throw Error(at + ": no constant of " + pc.package + " is named " + in_quotes(printable(e["name"].get<std::string>())));
      me.constant = it->second;
    } else {
      throw Error(at + ": needs `constant` (an index) or `name`");
    }
    if (!e.contains("role") || !e["role"].is_string()) throw Error(at + ": `role` is missing or not a string");
    me.role = e["role"].get<std::string>();
    const auto layer = e.value("layer", nlohmann::json(-1));
    if (!layer.is_number_integer() || layer.get<int64_t>() < -1 || layer.get<int64_t>() > (int64_t(1) << 20))
      throw Error(at + ": `layer` is not -1 or a layer index");
    me.layer = int(layer.get<int64_t>());
    if (is_global_role(me.role)) {
      if (me.layer != -1) throw Error(at + ": role " + me.role + " is not a layer tensor (layer must be -1 or absent)");
    } else if (is_layer_role(me.role)) {
      if (me.layer < 0) throw Error(at + ": role " + me.role + " needs a `layer` >= 0");
    } else {
      throw Error(at + ": unknown role " + in_quotes(printable(me.role)) + " (for " + pc.constants[me.constant].describe() + ")");
    }
    me.transform = default_transform(me.role);
    if (e.contains("transform")) {
      const std::string t = e["transform"].is_string() ? e["transform"].get<std::string>() : "";
      if (t == "split_qkv" && me.role == "self_attn.qkv_proj") me.transform = MapTransform::SplitQkv;
      else if (t == "gain_plus_1") me.transform = MapTransform::GainPlusOne;
      else if (t == "gain_minus_1") me.transform = MapTransform::GainMinusOne;
      else if (t == "gain_as_applied") me.transform = MapTransform::GainAsApplied;
      else if (t == "none" && me.role != "self_attn.qkv_proj") me.transform = MapTransform::None;
      else throw Error(at + ": transform " + line_of(e["transform"]) + " does not apply to role " + me.role);
    }
    if (!used.insert({me.constant, me.layer, me.role}).second)
      throw Error(at + ": " + pc.constants[me.constant].describe() + " is listed twice for " + me.role);
    map.entries.push_back(me);
  }
  check_duplicates(map.entries, pc, path);
  return map;
}

std::string checkpoint_name(int layer, const std::string& role) {
  if (layer < 0) return role + ".weight";
  if (role == "layer_scalar") return "layers." + std::to_string(layer) + ".layer_scalar";
  return "layers." + std::to_string(layer) + "." + role + ".weight";
}

}  // namespace lumen::spec
